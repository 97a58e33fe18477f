//! OpenAI chat's tool calling: parsing `tools` / `tool_choice` into the core's [`Tools`],
//! writing a call as `message.tool_calls`, and streaming one as `delta.tool_calls` — the first
//! delta carrying `index`, `id`, `type` and the name, the later ones argument fragments that
//! concatenate to exactly the non-streamed `arguments`, no call text ever in `content`.
//!
//! In an `auto` answer the stream cannot know at once whether text or a call comes: the first
//! characters are held while they could still be the start of the call marker, then either
//! released as `content` or read as a call.

use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::ids::random_id;
use crate::core::tools::{CallPiece, CallStream, Tool, ToolCall, ToolChoice, Tools, CALL_MARKER};
use crate::http::params::{kind, Fields};

/// `tools` and `tool_choice` (and the accepted `parallel_tool_calls`); `None` without tools
/// or with `tool_choice: none`.
pub fn parse_tools(f: &mut Fields) -> Result<Option<Tools>, ApiError> {
    f.take::<bool>("parallel_tool_calls")?;
    let tools = match f.take_raw("tools") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, t)| tool(t, &format!("tools[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid(
                "tools",
                format!("expected an array, got {}", kind(&other)),
            ))
        }
    };
    let choice = match f.take_raw("tool_choice") {
        None if tools.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                    "{other:?} is not one of \"none\", \"auto\", \"required\" or a named function"
                ),
                ))
            }
        },
        Some(v) => {
            let mut c = Fields::nested(v, "tool_choice")?;
            let ty: String = c.require("type")?;
            if ty != "function" {
                return Err(ApiError::invalid(c.path("type"), "must be \"function\""));
            }
            let func = c
                .take_raw("function")
                .ok_or_else(|| ApiError::MissingParameter {
                    param: "tool_choice.function".into(),
                })?;
            let mut fc = Fields::nested(func, "tool_choice.function")?;
            let name: String = fc.require("name")?;
            fc.finish()?;
            c.finish()?;
            ToolChoice::Named(name)
        }
    };
    if choice != ToolChoice::None && tools.is_empty() {
        return Err(ApiError::invalid(
            "tool_choice",
            "a tool_choice other than \"none\" needs tools",
        ));
    }
    if let ToolChoice::Named(n) = &choice {
        if !tools.iter().any(|t| &t.name == n) {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("no tool named {n:?} is in tools"),
            ));
        }
    }
    Ok((choice != ToolChoice::None).then_some(Tools { tools, choice }))
}

fn tool(value: Value, path: &str) -> Result<Tool, ApiError> {
    let mut t = Fields::nested(value, path)?;
    let ty: String = t.require("type")?;
    if ty != "function" {
        return Err(ApiError::invalid(
            t.path("type"),
            format!("tools of type {ty:?} are not supported; only \"function\""),
        ));
    }
    let fpath = t.path("function");
    let func = t
        .take_raw("function")
        .ok_or_else(|| ApiError::MissingParameter {
            param: fpath.clone(),
        })?;
    t.finish()?;
    let mut f = Fields::nested(func, &fpath)?;
    let name: String = f.require("name")?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ApiError::invalid(
            f.path("name"),
            "must be a non-empty name of letters, digits, _ and -",
        ));
    }
    let description = f.take::<String>("description")?;
    let parameters = f.take_raw("parameters").unwrap_or_else(
        || json!({"type": "object", "properties": {}, "additionalProperties": false}),
    );
    if !parameters.is_object() {
        return Err(ApiError::invalid(
            f.path("parameters"),
            "must be a JSON schema object",
        ));
    }
    f.take::<bool>("strict")?;
    f.finish()?;
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// `message.tool_calls` for one call.
pub fn tool_calls_json(call: &ToolCall) -> Value {
    json!([{
        "id": random_id("call_"),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }])
}

/// What one choice's stream is doing.
#[derive(Debug)]
enum Mode {
    /// `auto`: the leading text, held while it could still begin the call marker.
    Undecided(String),
    Text,
    Call {
        id: String,
        stream: CallStream,
    },
}

/// A choice's streaming state: turns the answer's text into content or tool-call deltas.
#[derive(Debug)]
pub struct StreamedCall {
    mode: Mode,
}

impl StreamedCall {
    pub fn new(tools: &Tools) -> Self {
        let mode = match tools.choice {
            ToolChoice::Auto => Mode::Undecided(String::new()),
            _ => Mode::Call {
                id: random_id("call_"),
                stream: CallStream::default(),
            },
        };
        StreamedCall { mode }
    }

    /// The delta for `text`, if it has anything to send.
    pub fn push(&mut self, text: &str) -> Option<Value> {
        match &mut self.mode {
            Mode::Text => (!text.is_empty()).then(|| json!({"content": text})),
            Mode::Call { id, stream } => {
                let id = id.clone();
                call_delta(&id, stream.push(text))
            }
            Mode::Undecided(held) => {
                held.push_str(text);
                let lead = held.trim_start();
                if let Some(rest) = lead.strip_prefix(CALL_MARKER) {
                    let (id, mut stream) = (random_id("call_"), CallStream::default());
                    let delta = call_delta(&id, stream.push(rest));
                    self.mode = Mode::Call { id, stream };
                    delta
                } else if CALL_MARKER.starts_with(lead) {
                    None
                } else {
                    let all = std::mem::take(held);
                    self.mode = Mode::Text;
                    Some(json!({"content": all}))
                }
            }
        }
    }

    /// The last delta of the choice (held text or the rest of the arguments) and its finish
    /// reason, `tool_calls` when it made a call.
    pub fn finish(&mut self) -> (Option<Value>, bool) {
        match &mut self.mode {
            Mode::Undecided(held) => {
                let held = std::mem::take(held);
                ((!held.is_empty()).then(|| json!({"content": held})), false)
            }
            Mode::Text => (None, false),
            Mode::Call { id, stream } => {
                let id = id.clone();
                (call_delta(&id, stream.finish().into_iter().collect()), true)
            }
        }
    }
}

/// A `tool_calls` delta of the pieces, if any.
fn call_delta(id: &str, pieces: Vec<CallPiece>) -> Option<Value> {
    let mut entry = json!({"index": 0});
    let mut args = String::new();
    for p in pieces {
        match p {
            CallPiece::Start(name) => {
                entry["id"] = json!(id);
                entry["type"] = json!("function");
                entry["function"] = json!({"name": name, "arguments": ""});
            }
            CallPiece::Arguments(a) => args.push_str(&a),
        }
    }
    if entry.get("function").is_none() && args.is_empty() {
        return None;
    }
    if !args.is_empty() || entry.get("function").is_none() {
        entry["function"]["arguments"] = json!(args);
    }
    Some(json!({"tool_calls": [entry]}))
}
