//! `POST /completion` and `POST /infill`: llama-server's native completion, encoded as
//! llama-server encodes it.
//!
//! Reply: `content`, `tokens` (the generated ids with `return_tokens`, else empty), `stop:
//! true`, `model`, `tokens_predicted`, `tokens_evaluated` (the prompt), `tokens_cached`
//! (prompt and output now in the KV, llama-server's `n_past`), `stop_type` (`eos`, `limit`,
//! `word`), `stopping_word`, `truncated` (always false: a prompt that does not fit is
//! refused, never cut), `has_new_line`, `generation_settings`, `timings` and, with
//! `n_probs`, `completion_probabilities` (each token's id, text, bytes and logprob with its
//! best alternatives).
//!
//! `timings` as this server sees them: `prompt_ms` runs from submission to the first token
//! (queueing included), `predicted_ms` from the first token to the last; `prompt_n` counts
//! the prompt tokens computed and `cache_n` those the prefix cache supplied.
//!
//! Streaming is `data:` lines only, no event names and no `[DONE]`: one per token (`stop:
//! false`, its `content` and `tokens: [id]`), then the final object with `stop: true`,
//! whose `content` is only what the end released, so the concatenated `content` of every
//! line equals the non-streamed `content`.
//!
//! `/infill` lays out `[BOS] <FIM_PRE> input_prefix <FIM_SUF> input_suffix <FIM_MID>
//! prompt`, each `input_extra` chunk before it as `<FIM_SEP> filename \n text`; a model
//! without prefix, suffix and middle tokens gets a 501, as from llama-server.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Value};

use super::parse::{parse_completion, parse_infill, NativeOptions};
use crate::core::error::ApiError;
use crate::core::generate::{generate, Finish, Generation};
use crate::core::request::{Input, Prompt};
use crate::core::served::ServedModel;
use crate::core::stream::{drive, Encoder};
use crate::http::sse::{sse_response, Frame, Ping};
use crate::models::Pinned;

pub async fn completion(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let (prompt, native) = parse_completion(body)?;
    serve(served, prompt, native).await
}

pub async fn infill(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let (infill, native) = parse_infill(body)?;
    let prompt = infill.prompt(&served, "input_extra")?;
    serve(served, prompt, native).await
}

async fn serve(
    served: Arc<ServedModel>,
    prompt: Prompt,
    mut native: NativeOptions,
) -> Result<Response, ApiError> {
    // Text keys of `logit_bias`: every token of the text gets the bias.
    let tokenizer = served.model.tokenizer();
    for (text, bias) in std::mem::take(&mut native.bias_texts) {
        for id in tokenizer.encode(&text, false, false) {
            native.options.sampling.logit_bias.push((id, bias));
        }
    }
    let generation = generate(served, Input::Completion(prompt), &native.options).await?;
    let stream = native.options.stream;
    let encoder = Native {
        native,
        predicted: 0,
    };
    if stream {
        return Ok(sse_response(drive(generation, encoder), Ping::Comment));
    }
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let out = &outputs[0];
    let text = &out.completion.text;
    let mut body = encoder.final_object(&generation, &out.completion, &out.finish, text);
    if encoder.native.options.logprobs.is_some() {
        let g = &generation.served;
        let probs: Vec<Value> = out.tokens.iter().map(|t| probability(g, t)).collect();
        body["completion_probabilities"] = json!(probs);
    }
    Ok(Json(body).into_response())
}

/// One token's `completion_probabilities` entry.
fn probability(g: &ServedModel, t: &TokenEvent) -> Value {
    let entry = |id: u32, logprob: Option<f32>| {
        let (token, bytes) = g.token_piece(id);
        json!({"id": id, "token": token, "bytes": bytes, "logprob": logprob})
    };
    let mut e = entry(t.id, t.logprob);
    let top: Vec<Value> = t
        .top_logprobs
        .iter()
        .map(|&(id, lp)| entry(id, Some(lp)))
        .collect();
    e["top_logprobs"] = json!(top);
    e
}

/// The encoder, and the final object both paths send.
struct Native {
    native: NativeOptions,
    /// Tokens streamed so far.
    predicted: usize,
}

impl Native {
    fn final_object(&self, g: &Generation, c: &Completion, f: &Finish, content: &str) -> Value {
        let o = &self.native.options;
        let u = g.usage();
        let t = g.timings();
        let (stop_type, word) = match f {
            Finish::EndOfTurn => ("eos", String::new()),
            Finish::StopSequence(s) => ("word", s.clone()),
            Finish::Length => ("limit", String::new()),
        };
        let prompt_n = u.prompt_tokens - u.cached_tokens;
        let prompt_ms = t.prompt.as_secs_f64() * 1e3;
        let predicted_ms = t.generation.as_secs_f64() * 1e3;
        let per_second = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        let per_token = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
        let tokens: &[u32] = if self.native.return_tokens {
            &c.token_ids
        } else {
            &[]
        };
        json!({
            "index": 0,
            "content": content,
            "tokens": tokens,
            "id_slot": -1,
            "stop": true,
            "model": g.served.model_id,
            "tokens_predicted": u.completion_tokens,
            "tokens_evaluated": u.prompt_tokens,
            "tokens_cached": u.prompt_tokens + u.completion_tokens,
            "generation_settings": {
                "n_predict": self.native.n_predict,
                "seed": o.seed.unwrap_or(u64::from(u32::MAX)),
                "temperature": o.sampling.temperature,
                "top_k": o.sampling.top_k,
                "top_p": o.sampling.top_p,
                "min_p": o.sampling.min_p,
                "repeat_penalty": o.sampling.repetition_penalty,
                "presence_penalty": o.sampling.presence_penalty,
                "frequency_penalty": o.sampling.frequency_penalty,
                "stop": o.stop,
                "ignore_eos": o.ignore_eos,
                "n_probs": o.logprobs.unwrap_or(0),
                "stream": o.stream,
                "cache_prompt": o.reuse_cached_prompt,
                "speculative": o.speculation.enabled,
                "speculative.n_max": o.speculation.n_max,
                "speculative.n_min": o.speculation.n_min,
                "speculative.p_min": o.speculation.p_min,
            },
            "prompt": "",
            "has_new_line": c.text.contains('\n'),
            "truncated": false,
            "stop_type": stop_type,
            "stopping_word": word,
            "timings": {
                "cache_n": u.cached_tokens,
                "prompt_n": prompt_n,
                "prompt_ms": prompt_ms,
                "prompt_per_token_ms": per_token(prompt_n, prompt_ms),
                "prompt_per_second": per_second(prompt_n, prompt_ms),
                "predicted_n": u.completion_tokens,
                "predicted_ms": predicted_ms,
                "predicted_per_token_ms": per_token(u.completion_tokens, predicted_ms),
                "predicted_per_second": per_second(u.completion_tokens, predicted_ms),
                "draft_n": u.draft_tokens,
                "draft_n_accepted": u.draft_accepted,
            },
        })
    }
}

impl Encoder for Native {
    type Chunk = Frame;

    fn token(&mut self, g: &Generation, _: usize, token: &TokenEvent) -> Vec<Frame> {
        self.predicted += 1;
        let mut chunk = json!({
            "index": 0,
            "content": token.text,
            "tokens": [token.id],
            "stop": false,
            "id_slot": -1,
            "tokens_predicted": self.predicted,
            "tokens_evaluated": g.usage().prompt_tokens,
        });
        if self.native.options.logprobs.is_some() {
            chunk["completion_probabilities"] = json!([probability(&g.served, token)]);
        }
        vec![Frame::data(&chunk)]
    }

    fn text(&mut self, _: &Generation, _: usize, _: &str) -> Vec<Frame> {
        // Sent as the final object's `content` instead (see `finish`).
        Vec::new()
    }

    fn finish(&mut self, g: &Generation, _: usize, f: &Finish, c: &Completion) -> Vec<Frame> {
        vec![Frame::data(&self.final_object(g, c, f, &c.flushed_text))]
    }

    fn close(&mut self, _: &Generation) -> Vec<Frame> {
        Vec::new()
    }

    fn fail(&mut self, _: &Generation, e: &ApiError) -> Vec<Frame> {
        let status = crate::http::errors::status(e);
        vec![Frame::data(&super::error_body(e, status))]
    }
}
