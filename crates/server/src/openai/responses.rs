//! `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`: OpenAI's Responses API, for
//! Codex and other Responses clients.
//!
//! The request: `input` (a string, or message items whose content is a string or
//! `input_text` / `output_text` parts), `instructions` (a system message, not inherited by a
//! continuation, as OpenAI does), `max_output_tokens`, `temperature`, `top_p`, `stream`,
//! `store` (default true), `previous_response_id`, `metadata` (returned as given), `user`.
//! What the SDKs and Codex send with values that mean what this server does anyway is
//! accepted (`include: []`, `truncation: "disabled"`, `include: []`,
//! `reasoning` without an effort, `background: false`, `service_tier`, `prompt_cache_key`);
//! any other value of them is refused by name. `text.format` constrains the output:
//! `json_object`, or `json_schema` (always enforced). Function `tools` and `tool_choice`
//! work as on chat (`core/tools.rs`): a call is a `function_call` output item with its
//! `call_id`, and `function_call` / `function_call_output` input items carry the history.
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

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::{ChatMessage, ChatToolCall};

use serde_json::{json, Map, Value};

use super::parse::{cache_salt, json_schema_fields, message_fields, user};
use super::random_id;
use super::responses_stream::Events;
use super::store::{ResponseStore, Stored};
use super::tool_calls::tool_choice;
use crate::core::answer::Answer;
use crate::core::error::ApiError;
use crate::core::generate::{generate, Finish, RequestUsage};
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::ids::unix_now;
use crate::core::reasoning::Thinking;
use crate::core::request::{GenerationOptions, Input};
use crate::core::stream::drive;
use crate::core::tool_syntax::ToolFormat;
use crate::core::tools::{Parallel, Tool, ToolChoice, Tools};
use crate::http::params::{kind, Fields};
use crate::http::sse::{sse_response, Ping};
use crate::models::Pinned;

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
    let tools = parse_tools(&mut f)?;
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
        max_tokens_param: "max_output_tokens",
        sampling,
        seed: f.seed("seed")?,
        stream: f.take("stream")?.unwrap_or(false),
        cache_salt: cache_salt(&mut f)?,
        ..GenerationOptions::default()
    };
    let (grammar, text_format) = text_format(&mut f)?;
    if grammar.is_some() && tools.is_some() {
        return Err(ApiError::invalid(
            "text.format",
            "a JSON text format cannot be combined with tools",
        ));
    }
    let options = GenerationOptions {
        grammar,
        tools,
        ..options
    };
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
    let checks: [Check; 5] = [
        ("include", &empty),
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

/// `tools` (function tools: `name`, `description`, `parameters`, `strict`; other types
/// refused by name), `tool_choice` (`none`, `auto`, `required`, `{"type": "function",
/// "name"}`) and `parallel_tool_calls` (false unless sent, as on chat).
fn parse_tools(f: &mut Fields) -> Result<Option<Tools>, ApiError> {
    let parallel = match f.take::<bool>("parallel_tool_calls")? {
        Some(true) => Parallel::Asked,
        _ => Parallel::Off,
    };
    let mut tools = Vec::new();
    if let Some(v) = f.take_raw("tools") {
        let Value::Array(items) = v else {
            return Err(ApiError::invalid("tools", "expected an array"));
        };
        for (i, item) in items.into_iter().enumerate() {
            let mut t = Fields::nested(item, &format!("tools[{i}]"))?;
            let ty: String = t.require("type")?;
            if ty != "function" {
                return Err(ApiError::invalid(
                    t.path("type"),
                    format!("tools of type {ty:?} are not supported; only \"function\""),
                ));
            }
            let name: String = t.require("name")?;
            let description = t.take::<String>("description")?;
            let parameters = t.take_raw("parameters").unwrap_or_else(
                || json!({"type": "object", "properties": {}, "additionalProperties": false}),
            );
            t.take::<bool>("strict")?;
            t.finish()?;
            tools.push(Tool {
                name,
                description,
                parameters,
            });
        }
    }
    let choice = tool_choice(f, !tools.is_empty(), |c| c.require("name"))?;
    Tools::checked(tools, choice, parallel, "tool_choice")
}

fn parse_input(value: Option<Value>) -> Result<Vec<ChatMessage>, ApiError> {
    match value {
        None => Err(ApiError::MissingParameter {
            param: "input".into(),
        }),
        Some(Value::String(s)) => Ok(vec![ChatMessage::new("user", s)]),
        Some(Value::Array(items)) => {
            let mut out: Vec<ChatMessage> = Vec::new();
            for (i, item) in items.into_iter().enumerate() {
                match input_item(item, &format!("input[{i}]"))? {
                    // Calls one after another are one assistant turn's (parallel calls).
                    InputItem::Call(call) => match out.last_mut() {
                        Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                        _ => {
                            let mut m = ChatMessage::new("assistant", "");
                            m.tool_calls.push(call);
                            out.push(m);
                        }
                    },
                    InputItem::Message(m) => out.push(m),
                }
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::invalid(
            "input",
            format!(
                "expected a string or an array of items, got {}",
                kind(&other)
            ),
        )),
    }
}

/// One input item, as a message or a past call.
enum InputItem {
    Message(ChatMessage),
    Call(ChatToolCall),
}

/// A message item: `role`, `content` (a string or text parts), and the optional `type:
/// "message"`, `id` and `status` of an output item sent back as input; or a past
/// `function_call` and its `function_call_output` (a `tool` message).
fn input_item(item: Value, path: &str) -> Result<InputItem, ApiError> {
    let mut m = Fields::nested(item, path)?;
    m.accept("id");
    m.accept("status");
    match m.take::<String>("type")?.as_deref() {
        None | Some("message") => {}
        Some("function_call") => {
            let call_id: String = m.require("call_id")?;
            let name: String = m.require("name")?;
            let arguments: String = m.require("arguments")?;
            m.finish()?;
            return Ok(InputItem::Call(ChatToolCall::from_text(call_id, name, &arguments)));
        }
        Some("function_call_output") => {
            let call_id: String = m.require("call_id")?;
            let output: String = m.require("output")?;
            m.finish()?;
            return Ok(InputItem::Message(ChatMessage::tool_result(call_id, output)));
        }
        Some(ty) => {
            return Err(ApiError::invalid(
                m.path("type"),
                format!("input items of type {ty:?} are not supported by this server yet; only \"message\", \"function_call\" and \"function_call_output\""),
            ))
        }
    }
    let message = message_fields(&mut m, &["input_text", "output_text"])?;
    m.finish()?;
    Ok(InputItem::Message(message))
}

pub async fn create(
    Extension(responses): Extension<Arc<ResponseStore>>,
    Pinned { served, body }: Pinned,
) -> Result<Response, ApiError> {
    let request = parse_request(body)?;
    let mut history = match &request.previous_response_id {
        None => Vec::new(),
        Some(id) => responses
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
    let thinking = served.thinking_for(
        request.options.tools.is_some(),
        request.options.grammar.is_some(),
    );
    let tool_format = served.tool_format;
    let generation = generate(served, Input::Chat(prompt), &request.options).await?;
    let draft = Draft {
        id: random_id("resp_"),
        item_id: random_id("msg_"),
        reasoning_item_id: random_id("rs_"),
        thinking,
        tool_format,
        call_item_id: random_id("fc_"),
        call_id: random_id("call_"),
        created_at: unix_now(),
        model: generation.served.model_id.clone(),
        request,
        history,
        store: responses,
    };
    if draft.request.options.stream {
        let encoder = Events::new(draft);
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
    Extension(responses): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match responses.get(&id) {
        Some(stored) => Ok(Json(stored.response.clone())),
        None => Err(ApiError::ObjectNotFound {
            what: "response",
            id,
        }),
    }
}

pub async fn delete(
    Extension(responses): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match responses.delete(&id) {
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
pub(super) struct Draft {
    pub(super) id: String,
    /// The id of its message item, or of its function call item (and the call's own id).
    pub(super) item_id: String,
    /// The id of a thinking model's reasoning item, and how its answers begin.
    pub(super) reasoning_item_id: String,
    pub(super) thinking: Option<Thinking>,
    /// How the model writes calls.
    pub(super) tool_format: ToolFormat,
    /// The ids of the first function call item and its call; call *i* > 0 adds `_i`.
    call_item_id: String,
    call_id: String,
    created_at: u64,
    model: String,
    pub(super) request: ResponsesRequest,
    /// The conversation so far, this request's input included.
    history: Vec<ChatMessage>,
    store: Arc<ResponseStore>,
}

impl Draft {
    /// The response object; `output` and `usage` filled in when they are known.
    pub(super) fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<RequestUsage>,
    ) -> Value {
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
            "parallel_tool_calls": o.tools.as_ref().is_some_and(|t| t.parallel == Parallel::Asked),
            "previous_response_id": self.request.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.request.store,
            "temperature": o.sampling.temperature,
            "text": {"format": self.request.text_format},
            "tool_choice": self.tool_choice_json(),
            "tools": self.tools_json(),
            "top_p": o.sampling.top_p,
            "truncation": "disabled",
            "usage": usage.map(usage_json),
            "user": null,
            "metadata": self.request.metadata,
        })
    }

    fn tools_json(&self) -> Value {
        let tools = self
            .request
            .options
            .tools
            .as_ref()
            .map_or(&[][..], |t| &t.tools[..]);
        json!(tools
            .iter()
            .map(
                |t| json!({"type": "function", "name": t.name, "description": t.description,
                            "parameters": t.parameters, "strict": true})
            )
            .collect::<Vec<_>>())
    }

    fn tool_choice_json(&self) -> Value {
        match self.request.options.tools.as_ref().map(|t| &t.choice) {
            None | Some(ToolChoice::None) => json!("none"),
            Some(ToolChoice::Auto) => json!("auto"),
            Some(ToolChoice::Required) => json!("required"),
            Some(ToolChoice::Named(n)) => json!({"type": "function", "name": n}),
        }
    }

    pub(super) fn item(&self, status: &str, content: Vec<Value>) -> Value {
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    /// A reasoning item, its text as one `reasoning_text` part.
    pub(super) fn reasoning_item(&self, status: &str, text: Option<&str>) -> Value {
        let content: Vec<Value> = text
            .map(|t| json!({"type": "reasoning_text", "text": t}))
            .into_iter()
            .collect();
        json!({
            "type": "reasoning",
            "id": self.reasoning_item_id,
            "summary": [],
            "content": content,
            "status": status,
        })
    }

    /// The item id and call id of the answer's call `i`.
    pub(super) fn call_ids(&self, i: usize) -> (String, String) {
        match i {
            0 => (self.call_item_id.clone(), self.call_id.clone()),
            i => (
                format!("{}_{i}", self.call_item_id),
                format!("{}_{i}", self.call_id),
            ),
        }
    }

    /// The answer's call `i`, as a function call item.
    pub(super) fn call_item(&self, i: usize, status: &str, name: &str, arguments: &str) -> Value {
        let (id, call_id) = self.call_ids(i);
        json!({
            "type": "function_call",
            "id": id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        })
    }

    /// The finished response, stored if asked.
    /// A thinking model's reasoning comes first, as its own item; the history keeps only the
    /// answer (thinking templates drop past reasoning too).
    pub(super) fn finished(&self, text: &str, finish: &Finish, usage: RequestUsage) -> Value {
        let complete = *finish != Finish::Length;
        let status = if complete { "completed" } else { "incomplete" };
        let Answer {
            reasoning,
            text,
            calls,
        } = Answer::read(
            text,
            self.request.options.tools.as_ref(),
            self.tool_format,
            self.thinking,
        );
        let text = text.as_str();
        let items: Vec<Value> = match &calls {
            Some(calls) => calls
                .iter()
                .enumerate()
                .map(|(i, c)| self.call_item(i, "completed", &c.name, &c.arguments))
                .collect(),
            None => vec![self.item(status, vec![text_part_json(text)])],
        };
        let mut output: Vec<Value> = reasoning
            .as_deref()
            .map(|r| self.reasoning_item("completed", Some(r)))
            .into_iter()
            .collect();
        output.extend(items);
        let mut response = self.object(status, output, Some(usage));
        if !complete {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if self.request.store {
            let mut history = self.history.clone();
            let mut said = ChatMessage::new("assistant", "");
            match calls {
                None => said.content = text.to_string(),
                Some(calls) => {
                    said.tool_calls = calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            ChatToolCall::from_text(self.call_ids(i).1, &c.name, &c.arguments)
                        })
                        .collect()
                }
            }
            history.push(said);
            let stored = Stored {
                response: response.clone(),
                history,
            };
            self.store.insert(self.id.clone(), stored);
        }
        response
    }
}

pub(super) fn text_part_json(text: &str) -> Value {
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
