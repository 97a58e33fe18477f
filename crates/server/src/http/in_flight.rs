//! The requests a graceful shutdown waits for, and only those.
//!
//! hyper's own graceful shutdown waits for every connection that has started a request,
//! and a connection that sent half its headers, or its headers and half a body, has started
//! one: a slow or stalled client would hold every restart for the whole grace with nothing
//! running. So the server counts requests itself. A request counts from the moment it is
//! whole — its body read ([`crate::http::params::JsonBody`] says so), or at once when it has
//! none — until its response's body has been sent or dropped; `server.rs` stops waiting
//! when the count is zero, and what is left (connections that never became a request) is
//! dropped with the runtime.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http_body::Body as _;
use tokio::sync::Notify;

/// How many whole requests are being answered.
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    /// Requests being answered now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Resolves once no request is being answered.
    pub async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One request's place in the count: taken when the request is whole, given back when its
/// response is done (this is dropped with the response body).
#[derive(Debug)]
pub struct Ticket {
    in_flight: Arc<InFlight>,
    counted: AtomicBool,
}

impl Ticket {
    /// The request is whole: from now on shutdown waits for it.
    pub fn start(&self) {
        if !self.counted.swap(true, Ordering::AcqRel) {
            self.in_flight.count.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.counted.load(Ordering::Acquire)
            && self.in_flight.count.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.in_flight.idle.notify_waiters();
        }
    }
}

/// The middleware: gives each request a [`Ticket`] (in its extensions, for the body reader),
/// starts it at once for a request without a body, and keeps it alive in the response body.
pub async fn track(
    State(in_flight): State<Arc<InFlight>>,
    mut req: Request,
    next: Next,
) -> Response {
    let ticket = Arc::new(Ticket {
        in_flight,
        counted: AtomicBool::new(false),
    });
    if req.body().is_end_stream() {
        ticket.start();
    }
    req.extensions_mut().insert(Arc::clone(&ticket));
    let response = next.run(req).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Holding {
            body,
            _ticket: ticket,
        }),
    )
}

/// A response body that holds its request's ticket until hyper drops it (sent, or the
/// connection gone).
struct Holding {
    body: Body,
    _ticket: Arc<Ticket>,
}

impl http_body::Body for Holding {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
