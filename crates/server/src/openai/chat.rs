//! `POST /v1/chat/completions`: OpenAI's chat protocol, encoded.
//!
//! Reply: `chat.completion` with one `message` per choice and `usage`; streaming:
//! `chat.completion.chunk`s whose first delta per choice carries the role, then `content`
//! deltas, then an empty delta with the `finish_reason`. Logprobs (`logprobs: true`,
//! `top_logprobs: k`) are OpenAI's `{"content": [{"token", "logprob", "bytes",
//! "top_logprobs"}]}`, reporting the model's own distribution (before sampling filters).

use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::TokenEvent;
use serde_json::{json, Value};

use super::Envelope;
use crate::error::ApiError;
use crate::generate::{finish_reason, generate, Generation, Input, RequestUsage};
use crate::params::JsonBody;
use crate::sse::{stream_response, ChunkEncoder};
use crate::state::{Generator, Ready};
use crate::validation::parse_chat;

pub async fn handle(
    Ready(generator): Ready,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = parse_chat(body)?;
    let options = request.options;
    let generation = generate(generator, Input::Chat(request.messages), &options).await?;
    let envelope = Envelope::new("chatcmpl", &generation.generator.model_id);
    let logprobs = options.logprobs.is_some();
    if options.stream {
        let encoder = ChatChunks { envelope, logprobs };
        return Ok(stream_response(generation, encoder, options.include_usage));
    }
    let generator = std::sync::Arc::clone(&generation.generator);
    let (outputs, usage) = generation.collect().await?;
    let mut choices = Vec::with_capacity(outputs.len());
    for (index, out) in outputs.iter().enumerate() {
        choices.push(json!({
            "index": index,
            "message": {"role": "assistant", "content": out.completion.text, "refusal": null},
            "logprobs": logprobs.then(|| json!({
                "content": out.tokens.iter().map(|t| logprob_entry(&generator, t)).collect::<Vec<_>>(),
                "refusal": null,
            })),
            "finish_reason": finish_reason(&out.completion.finish_reason)?,
        }));
    }
    let mut body = envelope.wrap("chat.completion", choices);
    body["usage"] = usage.to_json();
    Ok(Json(body).into_response())
}

/// One token's logprob entry: its text, logprob, bytes and best alternatives.
fn logprob_entry(g: &Generator, t: &TokenEvent) -> Value {
    let (token, bytes) = g.token_piece(t.id);
    let top: Vec<Value> = t
        .top_logprobs
        .iter()
        .map(|&(id, logprob)| {
            let (token, bytes) = g.token_piece(id);
            json!({"token": token, "logprob": logprob, "bytes": bytes})
        })
        .collect();
    json!({"token": token, "logprob": t.logprob, "bytes": bytes, "top_logprobs": top})
}

struct ChatChunks {
    envelope: Envelope,
    logprobs: bool,
}

impl ChatChunks {
    fn chunk(&self, index: usize, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        let choice = json!({
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish,
        });
        self.envelope.wrap("chat.completion.chunk", vec![choice])
    }
}

impl ChunkEncoder for ChatChunks {
    fn opening(&self, choices: usize) -> Vec<Value> {
        (0..choices)
            .map(|i| {
                self.chunk(
                    i,
                    json!({"role": "assistant", "content": ""}),
                    Value::Null,
                    None,
                )
            })
            .collect()
    }

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
            json!({"content": [logprob_entry(&generation.generator, token)], "refusal": null})
        } else {
            Value::Null
        };
        Some(self.chunk(index, json!({"content": token.text}), logprobs, None))
    }

    fn text(&self, index: usize, text: &str) -> Value {
        self.chunk(index, json!({"content": text}), Value::Null, None)
    }

    fn finish(&self, index: usize, finish_reason: &str) -> Value {
        self.chunk(index, json!({}), Value::Null, Some(finish_reason))
    }

    fn usage(&self, usage: RequestUsage) -> Value {
        let mut chunk = self.envelope.wrap("chat.completion.chunk", Vec::new());
        chunk["usage"] = usage.to_json();
        chunk
    }
}
