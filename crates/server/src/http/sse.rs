//! Server-sent events framing, and nothing else: a [`Frame`] is one event (an optional
//! `event:` name and its `data:`), [`sse_response`] sends a stream of them with keep-alives.
//!
//! Keep-alives every [`KEEP_ALIVE`] make a client that left while its request waited in the
//! queue show up as a failed write, not only when its first token arrives. Most protocols
//! send an SSE comment; Anthropic's sends a `ping` event, which its SDKs expect.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{Stream, StreamExt};
use serde_json::Value;

pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub event: Option<&'static str>,
    pub data: String,
}

impl Frame {
    /// A `data:` line with `value`.
    pub fn data(value: &Value) -> Frame {
        Frame {
            event: None,
            data: value.to_string(),
        }
    }

    /// `event: name` with `value` as data.
    pub fn named(name: &'static str, value: &Value) -> Frame {
        Frame {
            event: Some(name),
            data: value.to_string(),
        }
    }

    /// A `data:` line with literal text (OpenAI's `[DONE]`).
    pub fn text(text: &str) -> Frame {
        Frame {
            event: None,
            data: text.to_string(),
        }
    }

    fn into_event(self) -> Event {
        // `event:` first, as the protocols' own servers write it.
        let event = match self.event {
            Some(name) => Event::default().event(name),
            None => Event::default(),
        };
        event.data(self.data)
    }
}

/// How idle time is filled.
pub enum Ping {
    /// An SSE comment, which clients ignore.
    Comment,
    /// A named event.
    Event(Frame),
}

/// The SSE response for `frames`.
pub fn sse_response(frames: impl Stream<Item = Frame> + Send + 'static, ping: Ping) -> Response {
    let events = frames.map(|f| Ok::<_, Infallible>(f.into_event()));
    let keep_alive = match ping {
        Ping::Comment => KeepAlive::new(),
        Ping::Event(frame) => KeepAlive::new().event(frame.into_event()),
    };
    Sse::new(events)
        .keep_alive(keep_alive.interval(KEEP_ALIVE))
        .into_response()
}
