//! `POST /v1/completions`: OpenAI's (legacy) completions protocol, encoded.
//!
//! Reply: `text_completion` with one `text` per choice and `usage`; streaming: chunks of the
//! same object with `text` deltas, the last one per choice carrying `finish_reason`.
//! Logprobs (`logprobs: k`) are the legacy shape: parallel `tokens`, `token_logprobs`,
//! `top_logprobs` (a map of the `k` best token texts to their logprobs) and `text_offset`
//! (the character offset of each token in the choice's text).

use axum::response::Response;
use ferrox_sched::TokenEvent;
use serde_json::{json, Map, Value};

use super::{finish_reason, serve, Shape};
use crate::core::error::ApiError;
use crate::core::generate::{ChoiceOutput, Finish};
use crate::core::request::Input;
use crate::core::served::ServedModel;
use crate::models::Pinned;
use crate::openai::parse::parse_completion;

pub async fn handle(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let request = parse_completion(body)?;
    let shape = Completions {
        logprobs: request.options.logprobs.is_some(),
        text_offset: vec![0; request.options.n],
    };
    let input = Input::Completion(request.prompt);
    serve(
        served,
        input,
        &request.options,
        request.include_usage,
        shape,
    )
    .await
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
    fn push(&mut self, g: &ServedModel, t: &TokenEvent, offset: &mut usize) {
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

struct Completions {
    logprobs: bool,
    /// Characters streamed so far per choice, for `text_offset`.
    text_offset: Vec<usize>,
}

fn choice(index: usize, text: &str, logprobs: Value, finish: Option<&str>) -> Value {
    json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
}

impl Shape for Completions {
    const OBJECT: &'static str = "text_completion";
    const CHUNK_OBJECT: &'static str = "text_completion";
    const ID_PREFIX: &'static str = "cmpl";

    fn choice(&self, g: &ServedModel, index: usize, out: &ChoiceOutput) -> Value {
        let logprobs = self.logprobs.then(|| {
            let mut acc = LegacyLogprobs::default();
            let mut offset = 0;
            for t in &out.tokens {
                acc.push(g, t, &mut offset);
            }
            acc.to_json()
        });
        let reason = finish_reason(&out.finish);
        choice(index, &out.completion.text, json!(logprobs), Some(reason))
    }

    fn token(&mut self, g: &ServedModel, index: usize, token: &TokenEvent) -> Option<Value> {
        if token.text.is_empty() && !self.logprobs {
            return None;
        }
        let logprobs = if self.logprobs {
            let mut acc = LegacyLogprobs::default();
            acc.push(g, token, &mut self.text_offset[index]);
            acc.to_json()
        } else {
            Value::Null
        };
        Some(choice(index, &token.text, logprobs, None))
    }

    fn text(&mut self, index: usize, text: &str) -> Value {
        choice(index, text, Value::Null, None)
    }

    fn finish(&mut self, index: usize, finish: &Finish) -> Value {
        choice(index, "", Value::Null, Some(finish_reason(finish)))
    }
}
