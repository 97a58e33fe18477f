//! OpenAI chat's tool calling: parsing `tools` / `tool_choice` / `parallel_tool_calls` into
//! the core's [`Tools`], writing calls as `message.tool_calls`, and streaming them as
//! `delta.tool_calls` — the first delta of call *i* carrying `index: i`, `id`, `type` and the
//! name, the later ones argument fragments that concatenate to exactly the non-streamed
//! `arguments`, no call text ever in `content`.
//!
//! Whether an `auto` answer is text or a call is the core's `AnswerStream` to tell; this
//! module only writes its pieces as OpenAI's deltas.

use serde_json::{json, Value};

use crate::core::answer::{AnswerPiece, AnswerStream};
use crate::core::error::ApiError;
use crate::core::ids::random_id;
use crate::core::reasoning::Thinking;
use crate::core::tool_syntax::ToolFormat;
use crate::core::tools::{Parallel, Tool, ToolCall, ToolChoice, Tools};
use crate::http::params::Fields;

/// `tools`, `tool_choice` and `parallel_tool_calls` (false unless sent, as in
/// llama-server); `None` without tools or with `tool_choice: none`.
pub fn parse_tools(f: &mut Fields) -> Result<Option<Tools>, ApiError> {
    let parallel = match f.take::<bool>("parallel_tool_calls")? {
        Some(true) => Parallel::Asked,
        _ => Parallel::Off,
    };
    let tools = Tool::from_functions(f.take_raw("tools"))?;
    let choice = tool_choice(f, !tools.is_empty(), |c| {
        let func = c.require_raw("function")?;
        let mut fc = Fields::nested(func, "tool_choice.function")?;
        let name: String = fc.require("name")?;
        fc.finish()?;
        Ok(name)
    })?;
    Tools::checked(tools, choice, parallel, "tool_choice")
}

/// OpenAI's `tool_choice` (chat and the Responses API): `none`, `auto` (the default with
/// tools), `required`, or `{"type": "function", ...}` whose name `named` reads — under
/// `function.name` on chat, beside the type on Responses.
pub fn tool_choice(
    f: &mut Fields,
    has_tools: bool,
    named: impl FnOnce(&mut Fields) -> Result<String, ApiError>,
) -> Result<ToolChoice, ApiError> {
    Ok(match f.take_raw("tool_choice") {
        None if has_tools => ToolChoice::Auto,
        None => ToolChoice::None,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "{other:?} is not one of \"none\", \"auto\", \"required\" or a named \
                         function"
                    ),
                ))
            }
        },
        Some(v) => {
            let mut c = Fields::nested(v, "tool_choice")?;
            if c.require::<String>("type")? != "function" {
                return Err(ApiError::invalid(c.path("type"), "must be \"function\""));
            }
            let name = named(&mut c)?;
            c.finish()?;
            ToolChoice::Named(name)
        }
    })
}

/// `message.tool_calls` for an answer's calls.
pub fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|call| {
            json!({
                "id": random_id("call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            })
        })
        .collect()
}

/// A choice's streaming state: turns the answer's text into content, reasoning or
/// tool-call deltas.
#[derive(Debug)]
pub struct StreamedCall {
    answer: AnswerStream,
    /// Calls begun so far.
    calls: usize,
}

impl StreamedCall {
    pub fn new(tools: Option<&Tools>, format: ToolFormat, thinking: Option<Thinking>) -> Self {
        StreamedCall {
            answer: AnswerStream::for_request(tools, format, thinking),
            calls: 0,
        }
    }

    /// The delta for `text`, if it has anything to send.
    pub fn push(&mut self, text: &str) -> Option<Value> {
        let pieces = self.answer.push(text);
        self.delta(pieces)
    }

    /// The last delta of the choice (a thinking model's held text), and whether it made a
    /// call (`finish_reason: tool_calls`).
    pub fn finish(&mut self) -> (Option<Value>, bool) {
        let (pieces, called) = self.answer.finish();
        (self.delta(pieces), called)
    }

    /// One delta of the pieces: `content`, `reasoning_content` and `tool_calls` entries
    /// (with `id`, `type` and the name where a call starts), if there is anything to send.
    fn delta(&mut self, pieces: Vec<AnswerPiece>) -> Option<Value> {
        let mut content = String::new();
        let mut reasoning = String::new();
        let mut entries: Vec<Value> = Vec::new();
        for p in pieces {
            match p {
                AnswerPiece::Text(t) => content.push_str(&t),
                AnswerPiece::Reasoning(r) => reasoning.push_str(&r),
                AnswerPiece::CallStart(name) => {
                    entries.push(json!({
                        "index": self.calls,
                        "id": random_id("call_"),
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }));
                    self.calls += 1;
                }
                AnswerPiece::Arguments(a) => {
                    let index = self.calls.saturating_sub(1);
                    match entries.last_mut() {
                        Some(e) if e["index"] == json!(index) => {
                            let args =
                                format!("{}{a}", e["function"]["arguments"].as_str().unwrap_or(""));
                            e["function"]["arguments"] = json!(args);
                        }
                        _ => entries.push(json!({"index": index, "function": {"arguments": a}})),
                    }
                }
            }
        }
        let mut d = json!({});
        if !entries.is_empty() {
            d["tool_calls"] = json!(entries);
        }
        if !reasoning.is_empty() {
            d["reasoning_content"] = json!(reasoning);
        }
        if !content.is_empty() {
            d["content"] = json!(content);
        }
        (d != json!({})).then_some(d)
    }
}
