//! The OpenAI protocol adapters: `/v1/chat/completions` ([`chat`]), `/v1/completions`
//! ([`completions`]) and `/v1/responses` ([`responses`]). Each parses its body ([`parse`]),
//! calls the one generation path (`core/generate.rs`) and encodes what comes out. Nothing
//! here schedules, samples or counts tokens.
//!
//! Chat and completions differ only in how a choice and a chunk look, so they share one
//! skeleton, [`serve`], parameterised by a [`Shape`]: the envelope (`id`, `object`,
//! `created`, `model`), `usage`, streaming with `"usage": null` on every chunk when
//! `include_usage` is asked for and `data: [DONE]` at the end, and OpenAI's error shape
//! ([`error_body`]).

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod parse;
pub mod responses;
pub mod tool_calls;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::generate::{generate, ChoiceOutput, Finish, Generation, RequestUsage};
pub use crate::core::ids::random_id;
use crate::core::ids::unix_now;
use crate::core::request::{GenerationOptions, Input};
use crate::core::served::ServedModel;
use crate::core::stream::{drive, Encoder};
use crate::http::sse::{sse_response, Frame, Ping};

/// The fields every reply and chunk of one request carries.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    /// A fresh envelope: `id` is `prefix-` and 24 random hex digits.
    pub fn new(prefix: &str, model: &str) -> Envelope {
        Envelope {
            id: random_id(&format!("{prefix}-")),
            created: unix_now(),
            model: model.to_string(),
        }
    }

    /// `{"id", "object", "created", "model", "system_fingerprint": null, "choices"}`.
    pub fn wrap(&self, object: &str, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }
}

/// OpenAI's `finish_reason`.
pub fn finish_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::EndOfTurn | Finish::StopSequence(_) => "stop",
        Finish::Length => "length",
    }
}

/// Chat's and completions' `usage`. Speculative decoding's drafted tokens are reported the
/// way OpenAI reports Predicted Outputs (a guess at the output, verified by the model):
/// `completion_tokens_details.accepted_prediction_tokens` / `rejected_prediction_tokens`.
pub fn usage_json(u: RequestUsage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": u.draft_accepted,
            "rejected_prediction_tokens": u.draft_tokens - u.draft_accepted,
        },
    })
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}` plus the numbers
/// of a capacity refusal.
pub fn error_body(e: &ApiError, status: StatusCode) -> Value {
    let error_type = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    json!({ "error": error_object(e, error_type) })
}

fn error_object(e: &ApiError, error_type: &str) -> Value {
    let mut obj = e.details();
    obj.insert("message".into(), json!(e.to_string()));
    obj.insert("type".into(), json!(error_type));
    obj.insert("param".into(), json!(e.param()));
    obj.insert("code".into(), json!(e.code()));
    Value::Object(obj)
}

/// How chat and completions differ: what a choice and a chunk's choice look like.
pub trait Shape: Send + 'static {
    /// The reply's `object`, and the id prefix.
    const OBJECT: &'static str;
    const CHUNK_OBJECT: &'static str;
    const ID_PREFIX: &'static str;
    /// One choice of the whole reply.
    fn choice(&self, g: &ServedModel, index: usize, out: &ChoiceOutput) -> Value;
    /// The choice of a chunk's opening (chat's role delta), if any.
    fn opening(&self, _index: usize) -> Option<Value> {
        None
    }
    /// A token's chunk choice, or `None` when it carries nothing to send.
    fn token(&mut self, g: &ServedModel, index: usize, token: &TokenEvent) -> Option<Value>;
    /// The chunk choice for text a choice's end released.
    fn text(&mut self, index: usize, text: &str) -> Value;
    /// The last chunk choice of a choice.
    fn finish(&mut self, index: usize, finish: &Finish) -> Value;
}

/// The whole request for chat and completions: generate, then reply or stream.
pub async fn serve<S: Shape>(
    served: Arc<ServedModel>,
    input: Input,
    options: &GenerationOptions,
    include_usage: bool,
    shape: S,
) -> Result<Response, ApiError> {
    let generation = generate(served, input, options).await?;
    let envelope = Envelope::new(S::ID_PREFIX, &generation.served.model_id);
    if options.stream {
        let encoder = Chunks {
            envelope,
            shape,
            include_usage,
        };
        return Ok(sse_response(drive(generation, encoder), Ping::Comment));
    }
    let served = Arc::clone(&generation.served);
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let usage = generation.usage();
    let choices = outputs
        .iter()
        .enumerate()
        .map(|(index, out)| shape.choice(&served, index, out))
        .collect();
    let mut body = envelope.wrap(S::OBJECT, choices);
    body["usage"] = usage_json(usage);
    Ok(Json(body).into_response())
}

/// The stream encoder of chat and completions.
struct Chunks<S> {
    envelope: Envelope,
    shape: S,
    include_usage: bool,
}

impl<S: Shape> Chunks<S> {
    fn frame(&self, choices: Vec<Value>) -> Frame {
        let mut chunk = self.envelope.wrap(S::CHUNK_OBJECT, choices);
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        Frame::data(&chunk)
    }
}

impl<S: Shape> Encoder for Chunks<S> {
    type Chunk = Frame;

    fn open(&mut self, g: &Generation) -> Vec<Frame> {
        (0..g.choices())
            .filter_map(|i| self.shape.opening(i))
            .map(|c| self.frame(vec![c]))
            .collect()
    }

    fn token(&mut self, g: &Generation, index: usize, token: &TokenEvent) -> Vec<Frame> {
        let choice = self.shape.token(&g.served, index, token);
        choice.map(|c| self.frame(vec![c])).into_iter().collect()
    }

    fn text(&mut self, _: &Generation, index: usize, text: &str) -> Vec<Frame> {
        let choice = self.shape.text(index, text);
        vec![self.frame(vec![choice])]
    }

    fn finish(&mut self, _: &Generation, index: usize, f: &Finish, _: &Completion) -> Vec<Frame> {
        let choice = self.shape.finish(index, f);
        vec![self.frame(vec![choice])]
    }

    fn close(&mut self, g: &Generation) -> Vec<Frame> {
        let mut frames = Vec::new();
        if self.include_usage {
            let mut chunk = self.envelope.wrap(S::CHUNK_OBJECT, Vec::new());
            chunk["usage"] = usage_json(g.usage());
            frames.push(Frame::data(&chunk));
        }
        frames.push(Frame::text("[DONE]"));
        frames
    }

    fn fail(&mut self, _: &Generation, e: &ApiError) -> Vec<Frame> {
        let error = json!({ "error": error_object(e, "server_error") });
        vec![Frame::data(&error), Frame::text("[DONE]")]
    }
}
