//! Running the router on a socket, and stopping it gracefully.
//!
//! On the shutdown signal (SIGINT or SIGTERM in the binary; any future in tests) the
//! listener closes at once and idle connections are closed; in-flight requests get
//! `grace` to finish. After that every stream still running sends its protocol's error event
//! and terminator, and [`run`] returns: the runtime drops what is still running, each
//! dropped generation cancels its requests, and the process exits 0.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::routes::app;
use crate::state::AppState;

/// How long streams cut at the end of the grace get to send their last event.
const STREAM_FLUSH: Duration = Duration::from_millis(200);

/// How long in-flight requests may run on after the shutdown signal, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `state` on `listener` until `shutdown` resolves and in-flight requests finish
/// (or `grace` passes).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let stopping = Arc::new(Notify::new());
    let signal = {
        let stopping = Arc::clone(&stopping);
        async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections; waiting for in-flight requests");
            stopping.notify_one();
        }
    };
    let streams = state.clone();
    let server = axum::serve(listener, app(state))
        .tcp_nodelay(true)
        .with_graceful_shutdown(signal);
    tokio::select! {
        result = server => result,
        () = async {
            stopping.notified().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!("grace period of {grace:?} over: cancelling the requests still running");
            // Streams end with their protocol's error event; give them a moment to send it.
            if let Ok(g) = streams.generator() {
                g.stop_streams();
                tokio::time::sleep(STREAM_FLUSH).await;
            }
            Ok(())
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}
