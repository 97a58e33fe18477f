//! `POST /v1/chat/completions`: OpenAI's chat protocol, encoded.
//!
//! Reply: `chat.completion` with one `message` per choice and `usage`; streaming:
//! `chat.completion.chunk`s whose first delta per choice carries the role, then `content`
//! deltas, then an empty delta with the `finish_reason`. Logprobs (`logprobs: true`,
//! `top_logprobs: k`) are OpenAI's `{"content": [{"token", "logprob", "bytes",
//! "top_logprobs"}]}`, reporting the model's own distribution (before sampling filters).

use axum::response::Response;
use ferrox_sched::TokenEvent;
use serde_json::{json, Value};

use super::{finish_reason, serve, Shape};
use crate::core::error::ApiError;
use crate::core::generate::ChoiceOutput;
use crate::core::request::Input;
use crate::http::params::JsonBody;
use crate::openai::parse::parse_chat;
use crate::state::{Generator, Ready};

pub async fn handle(
    Ready(generator): Ready,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = parse_chat(body)?;
    let shape = Chat {
        logprobs: request.options.logprobs.is_some(),
    };
    let input = Input::Chat(request.messages);
    serve(
        generator,
        input,
        &request.options,
        request.include_usage,
        shape,
    )
    .await
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

struct Chat {
    logprobs: bool,
}

impl Chat {
    fn delta(index: usize, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
    }
}

impl Shape for Chat {
    const OBJECT: &'static str = "chat.completion";
    const CHUNK_OBJECT: &'static str = "chat.completion.chunk";
    const ID_PREFIX: &'static str = "chatcmpl";

    fn choice(&self, g: &Generator, index: usize, out: &ChoiceOutput) -> Value {
        json!({
            "index": index,
            "message": {"role": "assistant", "content": out.completion.text, "refusal": null},
            "logprobs": self.logprobs.then(|| json!({
                "content": out.tokens.iter().map(|t| logprob_entry(g, t)).collect::<Vec<_>>(),
                "refusal": null,
            })),
            "finish_reason": finish_reason(&out.finish),
        })
    }

    fn opening(&self, index: usize) -> Option<Value> {
        let delta = json!({"role": "assistant", "content": ""});
        Some(Self::delta(index, delta, Value::Null, None))
    }

    fn token(&mut self, g: &Generator, index: usize, token: &TokenEvent) -> Option<Value> {
        if token.text.is_empty() && !self.logprobs {
            return None;
        }
        let logprobs = match self.logprobs {
            true => json!({"content": [logprob_entry(g, token)], "refusal": null}),
            false => Value::Null,
        };
        let delta = json!({"content": token.text});
        Some(Self::delta(index, delta, logprobs, None))
    }

    fn text(&self, index: usize, text: &str) -> Value {
        Self::delta(index, json!({"content": text}), Value::Null, None)
    }

    fn finish(&self, index: usize, finish_reason: &str) -> Value {
        Self::delta(index, json!({}), Value::Null, Some(finish_reason))
    }
}
