//! Running the router on a socket, and stopping it gracefully.
//!
//! Our own accept loop over hyper's HTTP/1 connection (rather than `axum::serve`, which runs
//! hyper without a timer, so no timeout can fire) for three reasons of connection hygiene:
//! - **header timeout**: a connection must send a request's headers within
//!   `ServerConfig::header_timeout` of opening, or of the end of its previous response, or it
//!   is closed: slowloris connections (headers dribbled a byte at a time) and keep-alive
//!   connections left idle hold nothing for long. Each is counted
//!   (`ferrox_connections_timed_out_total`);
//! - **body timeout**: a body not whole within `ServerConfig::body_timeout` gets a 408 and the
//!   connection closes (`http::params`);
//! - **TLS** (`ServerConfig::tls`, `tls.rs`): the handshake runs in the connection's own task,
//!   within the header timeout, so a slow handshake holds neither the loop nor anyone else;
//! - **connection cap**: at most `ServerConfig::max_connections` are served at once; past it
//!   the loop stops accepting and new connections wait in the kernel's backlog, so a flood of
//!   sockets cannot take every file descriptor from the clients already being served.
//!
//! On the shutdown signal (SIGINT or SIGTERM in the binary; any future in tests) the
//! listener closes at once and idle connections are closed; in-flight requests get
//! `grace` to finish. A request is in flight once it is whole (`http/in_flight.rs`): a
//! connection still sending its headers or body is not waited for. After that every stream still running sends its protocol's error event
//! and terminator, and [`run`] returns: the runtime drops what is still running (a
//! connection stuck mid-headers or mid-body included), each dropped generation cancels its
//! requests, and the process exits 0.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::http::metrics::Metrics;
use crate::routes::app;
use crate::state::AppState;
use crate::tls::TlsConfig;

/// How long streams cut at the end of the grace get to send their last event.
const STREAM_FLUSH: Duration = Duration::from_millis(200);

/// How long the last responses get to leave once no request is in flight: hyper lets go of a
/// response body when its last bytes are in the connection's write buffer, before they are
/// flushed, so they get this long to reach the client (a buffer's worth, a few hundred KB).
const RESPONSE_FLUSH: Duration = Duration::from_secs(1);

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
    let config = Arc::clone(&state.config);
    let metrics = Arc::clone(&state.metrics);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    let service = TowerToHyperService::new(app(state.clone()));
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let tls = config.tls.as_ref().map(TlsConfig::acceptor);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.expect("never closed"),
            () = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was
                    // accepted: wait a moment rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let conn = Conn {
            builder: builder.clone(),
            service: service.clone(),
            watcher: graceful.watcher(),
            metrics: Arc::clone(&metrics),
            tls: tls.clone(),
            handshake_timeout: config.header_timeout,
        };
        tokio::spawn(async move {
            conn.metrics
                .connections_open
                .fetch_add(1, Ordering::Relaxed);
            let metrics = Arc::clone(&conn.metrics);
            conn.serve(tcp).await;
            metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    state.start_draining();
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => {}
        // hyper would also wait for connections that never sent a whole request (a stalled
        // client mid-headers or mid-body); once every whole request is answered, the last
        // responses get a moment to leave and the rest is dropped (`http/in_flight.rs`).
        () = async {
            // Quiet for a whole flush window: a request that became whole meanwhile (its
            // body arrived during the grace) is waited for too.
            loop {
                state.in_flight.idle().await;
                tokio::time::sleep(RESPONSE_FLUSH).await;
                if state.in_flight.count() == 0 {
                    break;
                }
            }
        } => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!("grace period of {grace:?} over: cancelling the requests still running");
            // Streams end with their protocol's error event; give them a moment to send it.
            state.models.stop_streams();
            tokio::time::sleep(STREAM_FLUSH).await;
        }
    }
    Ok(())
}

/// What serving one accepted connection takes.
struct Conn {
    builder: http1::Builder,
    service: TowerToHyperService<axum::Router>,
    watcher: Watcher,
    metrics: Arc<Metrics>,
    tls: Option<TlsAcceptor>,
    /// A TLS handshake must finish within the header timeout too.
    handshake_timeout: Duration,
}

impl Conn {
    async fn serve(self, tcp: TcpStream) {
        let Some(acceptor) = &self.tls else {
            let conn = self
                .builder
                .serve_connection(TokioIo::new(tcp), self.service);
            return count(self.watcher.watch(conn).await, &self.metrics);
        };
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => {
                let conn = self
                    .builder
                    .serve_connection(TokioIo::new(stream), self.service);
                count(self.watcher.watch(conn).await, &self.metrics);
            }
            Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
            Err(_) => {
                self.metrics.header_timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Counts a connection closed by the header timeout.
fn count(result: Result<(), hyper::Error>, metrics: &Metrics) {
    if result.is_err_and(|e| e.is_timeout()) {
        metrics.header_timeouts.fetch_add(1, Ordering::Relaxed);
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
