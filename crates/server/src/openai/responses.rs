//! `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`: OpenAI's Responses API, for
//! Codex and other Responses clients.
//!
//! The request: `input` (a string, or message items whose content is a string or
//! `input_text` / `output_text` parts), `instructions` (a system message, not inherited by a
//! continuation, as OpenAI does), `max_output_tokens`, `temperature`, `top_p`, `stream`,
//! `store` (default true), `previous_response_id`, `metadata` (returned as given), `user`.
//! What the SDKs and Codex send with values that mean what this server does anyway is
//! accepted (`tools: []`, `tool_choice: "auto"|"none"` without tools, `parallel_tool_calls`,
//! `truncation: "disabled"`, `include: []`,
//! `reasoning` without an effort, `background: false`, `service_tier`, `prompt_cache_key`);
//! any other value of them is refused by name. `text.format` constrains the output:
//! `json_object`, or `json_schema` (always enforced).
//!
//! The reply is a `response` object with one `message` output item holding one
//! `output_text` part; `status` is `completed`, or `incomplete` with
//! `incomplete_details.reason: "max_output_tokens"` when the budget ran out. Streaming sends
//! OpenAI's event sequence (see `Events`), every event with a gap-free `sequence_number`,
//! and the ids it streams are the final ones.
//!
//! `previous_response_id` continues a stored response: its conversation (inputs and output)
//! is the prefix of this one, which the prefix cache makes cheap. An unknown or evicted id is
//! a 404, never ignored.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::ChatMessage;
use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Map, Value};

use super::parse::{cache_salt, json_schema_fields, message_fields, user};
use super::random_id;
use super::store::{ResponseStore, Stored};
use crate::core::error::ApiError;
use crate::core::generate::{generate, Finish, Generation, RequestUsage};
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::{GenerationOptions, Input};
use crate::core::stream::{drive, Encoder};
use crate::http::params::{kind, Fields, JsonBody};
use crate::http::sse::{sse_response, Frame, Ping};
use crate::state::{unix_now, AppState, Ready};

/// A parsed `/v1/responses` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    /// `text.format` as given (`{"type": "text"}` by default), echoed in the response.
    pub text_format: Value,
    pub instructions: Option<String>,
    /// This request's own input messages.
    pub input: Vec<ChatMessage>,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub metadata: Map<String, Value>,
    pub options: GenerationOptions,
}

/// A `/v1/responses` body.
pub fn parse_request(body: Value) -> Result<ResponsesRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    accept_defaults(&mut f)?;
    let input = parse_input(f.take_raw("input"))?;
    let instructions = f.take::<String>("instructions")?;
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: f.take("temperature")?.unwrap_or(defaults.temperature),
        top_p: f.take("top_p")?.unwrap_or(defaults.top_p),
        ..defaults
    };
    let options = GenerationOptions {
        model: f.take("model")?,
        max_tokens: f.max_tokens("max_output_tokens")?,
        sampling,
        seed: f.seed("seed")?,
        stream: f.take("stream")?.unwrap_or(false),
        cache_salt: cache_salt(&mut f)?,
        ..GenerationOptions::default()
    };
    let (grammar, text_format) = text_format(&mut f)?;
    let options = GenerationOptions { grammar, ..options };
    let metadata = f.take("metadata")?.unwrap_or_default();
    let request = ResponsesRequest {
        text_format,
        instructions,
        input,
        previous_response_id: f.take("previous_response_id")?,
        store: f.take("store")?.unwrap_or(true),
        metadata,
        options,
    };
    user(&mut f)?;
    f.finish()?;
    Ok(request)
}

/// `text: {"format": ...}`: `text` (no constraint), `json_object`, or `json_schema` with
/// `name`, `schema`, `strict`, `description` beside the type.
fn text_format(f: &mut Fields) -> Result<(Option<GrammarRequest>, Value), ApiError> {
    let plain = json!({"type": "text"});
    let Some(v) = f.take_raw("text") else {
        return Ok((None, plain));
    };
    let mut text = Fields::nested(v, "text")?;
    text.accept("verbosity");
    let Some(format) = text.take_raw("format") else {
        text.finish()?;
        return Ok((None, plain));
    };
    let echo = format.clone();
    let mut fm = Fields::nested(format, "text.format")?;
    let spec = match fm.require::<String>("type")?.as_str() {
        "text" => None,
        "json_object" => Some(GrammarSpec::JsonObject),
        "json_schema" => Some(json_schema_fields(&mut fm)?),
        other => {
            return Err(ApiError::invalid(
                fm.path("type"),
                format!("{other:?} is not one of \"text\", \"json_object\", \"json_schema\""),
            ))
        }
    };
    fm.finish()?;
    text.finish()?;
    let grammar = spec.map(|spec| GrammarRequest {
        spec,
        param: "text.format".into(),
    });
    Ok((grammar, echo))
}

/// Parameters accepted when their value is what this server does anyway; refused by name
/// otherwise.
fn accept_defaults(f: &mut Fields) -> Result<(), ApiError> {
    let empty = |v: &Value| v.as_array().is_some_and(|a| a.is_empty());
    type Check<'a> = (&'a str, &'a dyn Fn(&Value) -> bool);
    let checks: [Check; 8] = [
        ("tools", &empty),
        ("include", &empty),
        ("tool_choice", &|v| v == "auto" || v == "none"),
        ("parallel_tool_calls", &|v| v.is_boolean()),
        ("truncation", &|v| v == "disabled"),
        ("background", &|v| v == false),
        ("service_tier", &|v| v.is_string()),
        ("prompt_cache_key", &|v| v.is_string()),
    ];
    for (name, ok) in checks {
        if let Some(v) = f.take_raw(name) {
            if !ok(&v) {
                return Err(ApiError::UnsupportedParameter { param: name.into() });
            }
        }
    }
    if let Some(v) = f.take_raw("reasoning") {
        if v.get("effort").is_some_and(|e| !e.is_null()) {
            return Err(ApiError::unsupported("reasoning.effort"));
        }
    }
    f.refuse_unsupported(&["top_logprobs", "prompt", "conversation", "max_tool_calls"])
}

fn parse_input(value: Option<Value>) -> Result<Vec<ChatMessage>, ApiError> {
    match value {
        None => Err(ApiError::MissingParameter {
            param: "input".into(),
        }),
        Some(Value::String(s)) => Ok(vec![ChatMessage::new("user", s)]),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| input_item(item, &format!("input[{i}]")))
            .collect(),
        Some(other) => Err(ApiError::invalid(
            "input",
            format!(
                "expected a string or an array of items, got {}",
                kind(&other)
            ),
        )),
    }
}

/// A message item: `role`, `content` (a string or text parts), and the optional `type:
/// "message"`, `id` and `status` of an output item sent back as input.
fn input_item(item: Value, path: &str) -> Result<ChatMessage, ApiError> {
    let mut m = Fields::nested(item, path)?;
    if let Some(ty) = m.take::<String>("type")? {
        if ty != "message" {
            return Err(ApiError::invalid(
                m.path("type"),
                format!("input items of type {ty:?} are not supported by this server yet; only \"message\""),
            ));
        }
    }
    m.accept("id");
    m.accept("status");
    let message = message_fields(&mut m, &["input_text", "output_text"])?;
    m.finish()?;
    Ok(message)
}

pub async fn create(
    State(state): State<AppState>,
    Ready(generator): Ready,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let request = parse_request(body)?;
    let mut history = match &request.previous_response_id {
        None => Vec::new(),
        Some(id) => state
            .responses
            .get(id)
            .ok_or_else(|| ApiError::ObjectNotFound {
                what: "response",
                id: id.clone(),
            })?
            .history
            .clone(),
    };
    history.extend(request.input.iter().cloned());
    let mut prompt = Vec::with_capacity(history.len() + 1);
    if let Some(instructions) = &request.instructions {
        prompt.push(ChatMessage::new("system", instructions.clone()));
    }
    prompt.extend(history.iter().cloned());
    let generation = generate(generator, Input::Chat(prompt), &request.options).await?;
    let draft = Draft {
        id: random_id("resp_"),
        item_id: random_id("msg_"),
        created_at: unix_now(),
        model: generation.generator.model_id.clone(),
        request,
        history,
        store: Arc::clone(&state.responses),
    };
    if draft.request.options.stream {
        let encoder = Events {
            draft,
            sequence: 0,
            text: String::new(),
        };
        return Ok(sse_response(drive(generation, encoder), Ping::Comment));
    }
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let usage = generation.usage();
    let out = &outputs[0];
    let response = draft.finished(&out.completion.text, &out.finish, usage);
    Ok(Json(response).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.responses.get(&id) {
        Some(stored) => Ok(Json(stored.response.clone())),
        None => Err(ApiError::ObjectNotFound {
            what: "response",
            id,
        }),
    }
}

pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.responses.delete(&id) {
        true => Ok(Json(
            json!({"id": id, "object": "response", "deleted": true}),
        )),
        false => Err(ApiError::ObjectNotFound {
            what: "response",
            id,
        }),
    }
}

/// A response being made: its ids and what it will be stored with.
struct Draft {
    id: String,
    item_id: String,
    created_at: u64,
    model: String,
    request: ResponsesRequest,
    /// The conversation so far, this request's input included.
    history: Vec<ChatMessage>,
    store: Arc<ResponseStore>,
}

impl Draft {
    /// The response object; `output` and `usage` filled in when they are known.
    fn object(&self, status: &str, output: Vec<Value>, usage: Option<RequestUsage>) -> Value {
        let o = &self.request.options;
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": self.request.instructions,
            "max_output_tokens": o.max_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": false,
            "previous_response_id": self.request.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.request.store,
            "temperature": o.sampling.temperature,
            "text": {"format": self.request.text_format},
            "tool_choice": "none",
            "tools": [],
            "top_p": o.sampling.top_p,
            "truncation": "disabled",
            "usage": usage.map(usage_json),
            "user": null,
            "metadata": self.request.metadata,
        })
    }

    fn item(&self, status: &str, content: Vec<Value>) -> Value {
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    /// The finished response, stored if asked.
    fn finished(&self, text: &str, finish: &Finish, usage: RequestUsage) -> Value {
        let complete = *finish != Finish::Length;
        let status = if complete { "completed" } else { "incomplete" };
        let item = self.item(status, vec![text_part_json(text)]);
        let mut response = self.object(status, vec![item], Some(usage));
        if !complete {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if self.request.store {
            let mut history = self.history.clone();
            history.push(ChatMessage::new("assistant", text));
            let stored = Stored {
                response: response.clone(),
                history,
            };
            self.store.insert(self.id.clone(), stored);
        }
        response
    }
}

fn text_part_json(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn usage_json(u: RequestUsage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The stream encoder: `response.created`, `response.in_progress`,
/// `response.output_item.added`, `response.content_part.added`,
/// `response.output_text.delta`…, then at the end `response.output_text.done`,
/// `response.content_part.done`, `response.output_item.done` and one of
/// `response.completed` / `response.incomplete` / `response.failed`.
struct Events {
    draft: Draft,
    sequence: u64,
    /// The text streamed so far.
    text: String,
}

impl Events {
    fn event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Frame::named(name, &data)
    }

    fn part_event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["item_id"] = json!(self.draft.item_id);
        data["output_index"] = json!(0);
        data["content_index"] = json!(0);
        self.event(name, data)
    }

    fn delta(&mut self, text: &str) -> Vec<Frame> {
        if text.is_empty() {
            return Vec::new();
        }
        self.text.push_str(text);
        let delta = json!({"delta": text, "logprobs": []});
        vec![self.part_event("response.output_text.delta", delta)]
    }
}

impl Encoder for Events {
    type Chunk = Frame;

    fn open(&mut self, _: &Generation) -> Vec<Frame> {
        let response = self.draft.object("in_progress", Vec::new(), None);
        let item = self.draft.item("in_progress", Vec::new());
        vec![
            self.event("response.created", json!({"response": response.clone()})),
            self.event("response.in_progress", json!({"response": response})),
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ),
            self.part_event(
                "response.content_part.added",
                json!({"part": text_part_json("")}),
            ),
        ]
    }

    fn token(&mut self, _: &Generation, _: usize, token: &TokenEvent) -> Vec<Frame> {
        self.delta(&token.text)
    }

    fn text(&mut self, _: &Generation, _: usize, text: &str) -> Vec<Frame> {
        self.delta(text)
    }

    fn finish(&mut self, g: &Generation, _: usize, f: &Finish, c: &Completion) -> Vec<Frame> {
        debug_assert_eq!(self.text, c.text, "streamed text differs from the whole");
        let text = c.text.clone();
        let response = self.draft.finished(&text, f, g.usage());
        let item = response["output"][0].clone();
        let status = response["status"]
            .as_str()
            .unwrap_or("completed")
            .to_string();
        let done = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        vec![
            self.part_event(
                "response.output_text.done",
                json!({"text": text, "logprobs": []}),
            ),
            self.part_event(
                "response.content_part.done",
                json!({"part": text_part_json(&text)}),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            ),
            self.event(done, json!({"response": response})),
        ]
    }

    fn close(&mut self, _: &Generation) -> Vec<Frame> {
        Vec::new()
    }

    fn fail(&mut self, g: &Generation, e: &ApiError) -> Vec<Frame> {
        let mut response = self.draft.object("failed", Vec::new(), Some(g.usage()));
        response["error"] = json!({"code": "server_error", "message": e.to_string()});
        vec![self.event("response.failed", json!({"response": response}))]
    }
}
