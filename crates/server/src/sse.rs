//! Streaming replies: one driver, [`stream_response`], turns a [`Generation`] into
//! server-sent events; a protocol supplies a [`ChunkEncoder`] that only says what each chunk
//! looks like.
//!
//! The order of events, for every protocol: the encoder's opening chunks; a chunk per token
//! that releases text (or carries logprobs); per choice, any text its end released, then its
//! finish chunk; with `include_usage`, a last chunk with the usage (and `"usage": null` on
//! every other chunk, as OpenAI does); then `data: [DONE]`. A choice that fails after the
//! headers went out sends `data: {"error": {...}}` and ends the stream (then `[DONE]`), since
//! the status code can no longer change.
//!
//! The body stream owns the generation: when the client goes away, hyper drops the body,
//! which drops the generation and cancels its requests. Keep-alive comments every
//! [`KEEP_ALIVE`] make a client that left while its request waited in the queue show up as a
//! failed write, not only when its first token arrives.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ferrox_sched::{Event, TokenEvent};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

use crate::generate::{finish_reason, ChoiceEvent, Generation, RequestUsage};

pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What a protocol's stream chunks look like.
pub trait ChunkEncoder: Send + 'static {
    /// Chunks before any token (chat's `role` deltas); none by default.
    fn opening(&self, _choices: usize) -> Vec<Value> {
        Vec::new()
    }
    /// The chunk for a token, or `None` if it carries nothing to send (no text released
    /// and no logprobs asked for).
    fn token(&mut self, generation: &Generation, index: usize, token: &TokenEvent)
        -> Option<Value>;
    /// Text released by a choice's end (a held-back tail that never became a stop string).
    fn text(&self, index: usize, text: &str) -> Value;
    fn finish(&self, index: usize, finish_reason: &str) -> Value;
    /// The usage chunk (`choices: []`).
    fn usage(&self, usage: RequestUsage) -> Value;
}

struct Driver<E> {
    generation: Generation,
    encoder: E,
    include_usage: bool,
    opened: bool,
    ended: bool,
}

impl<E: ChunkEncoder> Driver<E> {
    /// The next chunks to send; `None` when the stream is over.
    async fn next_chunks(&mut self) -> Option<Vec<Value>> {
        if self.ended {
            return None;
        }
        if !self.opened {
            self.opened = true;
            return Some(self.encoder.opening(self.generation.choices()));
        }
        let Some(ChoiceEvent { index, event }) = self.generation.next().await else {
            self.ended = true;
            let usage = self.generation.usage();
            return Some(if self.include_usage {
                vec![self.encoder.usage(usage)]
            } else {
                Vec::new()
            });
        };
        Some(match event {
            Event::Token(t) => self
                .encoder
                .token(&self.generation, index, &t)
                .into_iter()
                .collect(),
            Event::Done(c) => match finish_reason(&c.finish_reason) {
                Ok(reason) => {
                    let mut chunks = Vec::new();
                    if !c.flushed_text.is_empty() {
                        chunks.push(self.encoder.text(index, &c.flushed_text));
                    }
                    chunks.push(self.encoder.finish(index, reason));
                    chunks
                }
                Err(e) => {
                    self.ended = true;
                    tracing::error!(code = e.code(), "{e}");
                    vec![e.stream_event()]
                }
            },
        })
    }
}

/// The SSE response for `generation`.
pub fn stream_response<E: ChunkEncoder>(
    generation: Generation,
    encoder: E,
    include_usage: bool,
) -> Response {
    let driver = Driver {
        generation,
        encoder,
        include_usage,
        opened: false,
        ended: false,
    };
    let chunks = stream::unfold(driver, |mut d| async move {
        let chunks = d.next_chunks().await?;
        let include_usage = d.include_usage;
        let events: Vec<Result<SseEvent, Infallible>> = chunks
            .into_iter()
            .map(|mut chunk| {
                if include_usage && chunk.get("error").is_none() {
                    if let Some(obj) = chunk.as_object_mut() {
                        obj.entry("usage").or_insert(Value::Null);
                    }
                }
                Ok(SseEvent::default().data(chunk.to_string()))
            })
            .collect();
        Some((stream::iter(events), d))
    })
    .flatten()
    .chain(stream::once(async {
        Ok(SseEvent::default().data("[DONE]"))
    }));
    Sse::new(chunks)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}
