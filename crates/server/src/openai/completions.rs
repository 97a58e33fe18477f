//! `POST /v1/completions`: OpenAI's (legacy) completions protocol, encoded.
//!
//! Reply: `text_completion` with one `text` per choice and `usage`; streaming: chunks of the
//! same object with `text` deltas, the last one per choice carrying `finish_reason`.
//! Logprobs (`logprobs: k`) are the legacy shape: parallel `tokens`, `token_logprobs`,
//! `top_logprobs` (a map of the `k` best token texts to their logprobs) and `text_offset`
//! (the character offset of each token in the choice's text).

use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::TokenEvent;
use serde_json::{json, Map, Value};

use super::Envelope;
use crate::error::ApiError;
use crate::generate::{finish_reason, generate, Generation, Input, RequestUsage};
use crate::params::JsonBody;
use crate::sse::{stream_response, ChunkEncoder};
use crate::state::{Generator, Ready};
use crate::validation::parse_completion;

pub async fn handle(
    Ready(generator): Ready,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = parse_completion(body)?;
    let options = request.options;
    let generation = generate(generator, Input::Completion(request.prompt), &options).await?;
    let envelope = Envelope::new("cmpl", &generation.generator.model_id);
    let logprobs = options.logprobs.is_some();
    if options.stream {
        let encoder = CompletionChunks {
            envelope,
            logprobs,
            text_offset: vec![0; generation.choices()],
        };
        return Ok(stream_response(generation, encoder, options.include_usage));
    }
    let generator = std::sync::Arc::clone(&generation.generator);
    let (outputs, usage) = generation.collect().await?;
    let mut choices = Vec::with_capacity(outputs.len());
    for (index, out) in outputs.iter().enumerate() {
        let logprobs = logprobs.then(|| {
            let mut acc = LegacyLogprobs::default();
            let mut offset = 0;
            for t in &out.tokens {
                acc.push(&generator, t, &mut offset);
            }
            acc.to_json()
        });
        choices.push(json!({
            "index": index,
            "text": out.completion.text,
            "logprobs": logprobs,
            "finish_reason": finish_reason(&out.completion.finish_reason)?,
        }));
    }
    let mut body = envelope.wrap("text_completion", choices);
    body["usage"] = usage.to_json();
    Ok(Json(body).into_response())
}

/// The legacy logprobs object, built token by token.
#[derive(Default)]
struct LegacyLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<Option<f32>>,
    top_logprobs: Vec<Map<String, Value>>,
    text_offset: Vec<usize>,
}

impl LegacyLogprobs {
    /// Adds token `t`, whose text starts at character `offset` of the choice's text.
    fn push(&mut self, g: &Generator, t: &TokenEvent, offset: &mut usize) {
        let (token, _) = g.token_piece(t.id);
        let mut top = Map::new();
        for &(id, logprob) in &t.top_logprobs {
            top.entry(g.token_piece(id).0).or_insert(json!(logprob));
        }
        self.tokens.push(token);
        self.token_logprobs.push(t.logprob);
        self.top_logprobs.push(top);
        self.text_offset.push(*offset);
        *offset += t.text.chars().count();
    }

    fn to_json(&self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}

struct CompletionChunks {
    envelope: Envelope,
    logprobs: bool,
    /// Characters sent so far per choice, for `text_offset`.
    text_offset: Vec<usize>,
}

impl CompletionChunks {
    fn chunk(&self, index: usize, text: &str, logprobs: Value, finish: Option<&str>) -> Value {
        let choice = json!({
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish,
        });
        self.envelope.wrap("text_completion", vec![choice])
    }
}

impl ChunkEncoder for CompletionChunks {
    fn token(
        &mut self,
        generation: &Generation,
        index: usize,
        token: &TokenEvent,
    ) -> Option<Value> {
        if token.text.is_empty() && !self.logprobs {
            return None;
        }
        let logprobs = if self.logprobs {
            let mut acc = LegacyLogprobs::default();
            acc.push(&generation.generator, token, &mut self.text_offset[index]);
            acc.to_json()
        } else {
            Value::Null
        };
        Some(self.chunk(index, &token.text, logprobs, None))
    }

    fn text(&self, index: usize, text: &str) -> Value {
        self.chunk(index, text, Value::Null, None)
    }

    fn finish(&self, index: usize, finish_reason: &str) -> Value {
        self.chunk(index, "", Value::Null, Some(finish_reason))
    }

    fn usage(&self, usage: RequestUsage) -> Value {
        let mut chunk = self.envelope.wrap("text_completion", Vec::new());
        chunk["usage"] = usage.to_json();
        chunk
    }
}
