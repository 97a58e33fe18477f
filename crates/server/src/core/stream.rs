//! Streaming, protocol-free: one driver, [`drive`], walks a [`Generation`]'s events and asks
//! a protocol's [`Encoder`] what to send for each; `http/sse.rs` frames what it returns.
//!
//! The order of calls, for every protocol: [`Encoder::open`] once; [`Encoder::token`] per
//! token; per choice as it ends, [`Encoder::text`] with any text its end released (a
//! held-back tail that never became a stop string), then [`Encoder::finish`]; when every
//! choice is done, [`Encoder::close`] (usage is complete then). A choice that fails after the
//! headers went out calls [`Encoder::fail`] instead, and the stream ends there, since the
//! status code can no longer change. So does a stream still running when the server's
//! shutdown grace is over (`ApiError::ShuttingDown`): the client gets its protocol's error
//! event and terminator, never a body cut off mid-event.
//!
//! The stream owns the generation: when the client goes away, hyper drops the body, which
//! drops the stream and the generation, which cancels its requests.

use ferrox_sched::{Completion, Event, TokenEvent};
use futures_util::stream::{self, Stream, StreamExt};

use crate::core::error::ApiError;
use crate::core::generate::{ChoiceEvent, Finish, Generation};

/// What a protocol sends as a generation streams. Every method returns the chunks to send,
/// possibly none.
pub trait Encoder: Send + 'static {
    type Chunk: Send + 'static;
    /// Before any token.
    fn open(&mut self, _generation: &Generation) -> Vec<Self::Chunk> {
        Vec::new()
    }
    fn token(
        &mut self,
        generation: &Generation,
        index: usize,
        token: &TokenEvent,
    ) -> Vec<Self::Chunk>;
    /// Text released by a choice's end.
    fn text(&mut self, generation: &Generation, index: usize, text: &str) -> Vec<Self::Chunk>;
    fn finish(
        &mut self,
        generation: &Generation,
        index: usize,
        finish: &Finish,
        completion: &Completion,
    ) -> Vec<Self::Chunk>;
    /// After every choice finished.
    fn close(&mut self, generation: &Generation) -> Vec<Self::Chunk>;
    /// A choice failed; nothing is sent after these chunks.
    fn fail(&mut self, generation: &Generation, error: &ApiError) -> Vec<Self::Chunk>;
}

struct Driver<E> {
    generation: Generation,
    encoder: E,
    opened: bool,
    ended: bool,
    /// Turns true when the server's shutdown grace is over.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl<E: Encoder> Driver<E> {
    /// The next chunks to send; `None` when the stream is over.
    async fn next_chunks(&mut self) -> Option<Vec<E::Chunk>> {
        if self.ended {
            return None;
        }
        let (g, enc) = (&mut self.generation, &mut self.encoder);
        if !self.opened {
            self.opened = true;
            return Some(enc.open(g));
        }
        let stop = &mut self.stop;
        let next = tokio::select! {
            ev = g.next() => Some(ev),
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(next) = next else {
            self.ended = true;
            let e = ApiError::ShuttingDown;
            e.log();
            return Some(enc.fail(g, &e));
        };
        let Some(ChoiceEvent { index, event }) = next else {
            self.ended = true;
            return Some(enc.close(g));
        };
        Some(match event {
            Event::Token(t) => enc.token(g, index, &t),
            Event::Done(c) => match g.finish(&c) {
                Ok(finish) => {
                    let mut chunks = Vec::new();
                    if !c.flushed_text.is_empty() {
                        chunks.extend(enc.text(g, index, &c.flushed_text));
                    }
                    chunks.extend(enc.finish(g, index, &finish, &c));
                    chunks
                }
                Err(e) => {
                    self.ended = true;
                    e.log();
                    enc.fail(g, &e)
                }
            },
        })
    }
}

/// The chunks `encoder` makes of `generation`, in order.
pub fn drive<E: Encoder>(generation: Generation, encoder: E) -> impl Stream<Item = E::Chunk> {
    let stop = generation.served.streams_stopped();
    let driver = Driver {
        generation,
        encoder,
        opened: false,
        ended: false,
        stop,
    };
    stream::unfold(driver, |mut d| async move {
        let chunks = d.next_chunks().await?;
        Some((stream::iter(chunks), d))
    })
    .flatten()
}
