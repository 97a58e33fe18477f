//! A `/v1/responses` body parsed once into a [`ResponsesRequest`]: the input as chat
//! messages (items and their parts), the options the core takes, `text.format` as a
//! grammar, tools as on chat.

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::{ChatMessage, ChatToolCall};

use serde_json::{json, Map, Value};

use crate::core::error::ApiError;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::GenerationOptions;
use crate::core::tools::{Parallel, Tool, Tools};
use crate::http::params::{kind, Fields};
use crate::openai::parse::{cache_salt, json_schema_fields, message_fields, user};
use crate::openai::tool_calls::tool_choice;

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
        speculation: f.speculative()?,
        ..GenerationOptions::default()
    };
    let (grammar, text_format) = text_format(&mut f)?;
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
