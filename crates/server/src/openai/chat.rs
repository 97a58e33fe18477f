//! `POST /v1/chat/completions`: OpenAI's chat protocol, encoded.
//!
//! Reply: `chat.completion` with one `message` per choice and `usage`; streaming:
//! `chat.completion.chunk`s whose first delta per choice carries the role, then `content`
//! deltas, then an empty delta with the `finish_reason`. A thinking model's reasoning goes
//! to `message.reasoning_content` (deltas: `reasoning_content`), as vLLM and llama-server
//! send it. Logprobs (`logprobs: true`,
//! `top_logprobs: k`) are OpenAI's `{"content": [{"token", "logprob", "bytes",
//! "top_logprobs"}]}`, reporting the model's own distribution (before sampling filters).

use axum::response::Response;
use ferrox_sched::TokenEvent;
use serde_json::{json, Value};

use super::{finish_reason, serve, Shape};
use crate::core::answer::Answer;
use crate::core::error::ApiError;
use crate::core::generate::{ChoiceOutput, Finish};
use crate::core::reasoning::Thinking;
use crate::core::request::Input;
use crate::core::served::ServedModel;
use crate::core::tools::Tools;
use crate::models::Pinned;
use crate::openai::parse::parse_chat;
use crate::openai::tool_calls::{tool_calls_json, StreamedCall};

pub async fn handle(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let request = parse_chat(body)?;
    let tools = request.options.tools.as_ref();
    let thinking = served.thinking_for(tools.is_some(), request.options.grammar.is_some());
    let calls = match (tools, thinking) {
        (None, None) => Vec::new(),
        _ => (0..request.options.n)
            .map(|_| StreamedCall::new(tools, served.tool_format, thinking))
            .collect(),
    };
    let shape = Chat {
        logprobs: request.options.logprobs.is_some(),
        tools: request.options.tools.clone(),
        thinking,
        calls,
    };
    let input = Input::Chat(request.messages);
    serve(
        served,
        input,
        &request.options,
        request.include_usage,
        shape,
    )
    .await
}

/// One token's logprob entry: its text, logprob, bytes and best alternatives.
fn logprob_entry(g: &ServedModel, t: &TokenEvent) -> Value {
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
    tools: Option<Tools>,
    /// A thinking model's split (`core/reasoning.rs`), when it applies.
    thinking: Option<Thinking>,
    /// Per choice, with tools or thinking: what its stream is doing.
    calls: Vec<StreamedCall>,
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

    fn choice(&self, g: &ServedModel, index: usize, out: &ChoiceOutput) -> Value {
        let answer = Answer::read(
            &out.completion.text,
            self.tools.as_ref(),
            g.tool_format,
            self.thinking,
        );
        let mut message = json!({"role": "assistant", "refusal": null});
        if let Some(r) = &answer.reasoning {
            message["reasoning_content"] = json!(r);
        }
        let reason = match &answer.calls {
            Some(calls) => {
                // A harmony model may say something to the user before it calls.
                message["content"] = match answer.text.as_str() {
                    "" => Value::Null,
                    text => json!(text),
                };
                if !calls.is_empty() {
                    message["tool_calls"] = tool_calls_json(calls);
                }
                match (answer.called(), &out.finish) {
                    (true, Finish::EndOfTurn) => "tool_calls",
                    (_, finish) => finish_reason(finish),
                }
            }
            None => {
                message["content"] = json!(answer.text);
                finish_reason(&out.finish)
            }
        };
        json!({
            "index": index,
            "message": message,
            "logprobs": self.logprobs.then(|| json!({
                "content": out.tokens.iter().map(|t| logprob_entry(g, t)).collect::<Vec<_>>(),
                "refusal": null,
            })),
            "finish_reason": reason,
        })
    }

    fn opening(&self, index: usize) -> Option<Value> {
        let delta = json!({"role": "assistant", "content": ""});
        Some(Self::delta(index, delta, Value::Null, None))
    }

    fn token(&mut self, g: &ServedModel, index: usize, token: &TokenEvent) -> Option<Value> {
        if token.text.is_empty() && !self.logprobs {
            return None;
        }
        let logprobs = match self.logprobs {
            true => json!({"content": [logprob_entry(g, token)], "refusal": null}),
            false => Value::Null,
        };
        let delta = match self.calls.get_mut(index) {
            Some(call) => match call.push(&token.text) {
                Some(d) => d,
                None if self.logprobs => json!({}),
                None => return None,
            },
            None => json!({"content": token.text}),
        };
        Some(Self::delta(index, delta, logprobs, None))
    }

    fn text(&mut self, index: usize, text: &str) -> Value {
        let delta = match self.calls.get_mut(index) {
            Some(call) => call.push(text).unwrap_or_else(|| json!({})),
            None => json!({"content": text}),
        };
        Self::delta(index, delta, Value::Null, None)
    }

    fn finish(&mut self, index: usize, finish: &Finish) -> Value {
        let (delta, called) = match self.calls.get_mut(index) {
            Some(call) => call.finish(),
            None => (None, false),
        };
        let reason = match (called, finish) {
            (true, Finish::EndOfTurn) => "tool_calls",
            _ => finish_reason(finish),
        };
        Self::delta(
            index,
            delta.unwrap_or_else(|| json!({})),
            Value::Null,
            Some(reason),
        )
    }
}
