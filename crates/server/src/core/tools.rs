//! Tool calling, protocol-free: the tools a request offers, how the model is told about them,
//! the grammar that makes its calls well-formed, and reading the calls back out of its text.
//!
//! The layout, for chat templates without tool support of their own (Gemma 3, the default
//! model): the tool descriptions go into the system text, and a call is one JSON object
//! `{"name": <a tool's name>, "arguments": <its parameters>}`. The grammar enforces it:
//! - `required` or a named tool: the whole output is such an object (an `anyOf` over the
//!   tools, each with its own parameter schema), so even a 270M model emits a call whose
//!   arguments validate;
//! - `auto`: either free text that does not begin with `<`, or the marker `<tool_call>`
//!   followed by such an object, after which the output ends. The model chooses.
//! - `none`: no grammar, and the tools are not described.
//!
//! One call per answer: `parallel_tool_calls` is accepted, and a model that wants another
//! call makes it in its next turn. A call in the history (an assistant turn) is rendered as
//! the same JSON object, and a tool's result as a user turn naming the tool, so the model
//! reads its past calls in the form it writes them.

use ferrox_engine::template::ChatMessage;
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::reasoning::{Part, Splitter, Thinking};

/// The marker an `auto` answer starts a call with.
pub const CALL_MARKER: &str = "<tool_call>";

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema for the arguments (an object schema; `{}` when the tool takes none).
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text, exactly as generated.
    pub arguments: String,
}

/// A request's tools and its choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
}

impl Tools {
    /// A protocol's parsed tools and choice, checked: a named choice must name one of the
    /// tools, and `required` or a named choice needs tools (`param` is where the choice came
    /// in). `None` when nothing is callable: no tools, or `tool_choice: none`.
    pub fn checked(
        tools: Vec<Tool>,
        choice: ToolChoice,
        param: &str,
    ) -> Result<Option<Tools>, ApiError> {
        if let ToolChoice::Named(n) = &choice {
            if !tools.iter().any(|t| &t.name == n) {
                return Err(ApiError::invalid(
                    param,
                    format!("no tool named {n:?} is in tools"),
                ));
            }
        }
        match choice {
            ToolChoice::None => Ok(None),
            // What SDKs send by default, with or without tools.
            ToolChoice::Auto if tools.is_empty() => Ok(None),
            ToolChoice::Required if tools.is_empty() => {
                Err(ApiError::invalid(param, "\"required\" needs tools"))
            }
            choice => Ok(Some(Tools { tools, choice })),
        }
    }

    /// Writes the tool descriptions into the system turn (a new one if there is none).
    pub fn describe_in(&self, messages: &mut Vec<ChatMessage>) {
        let Some(text) = self.system_text() else {
            return;
        };
        match messages.first_mut().filter(|m| m.role == "system") {
            Some(system) => system.content = format!("{}\n\n{text}", system.content),
            None => messages.insert(0, ChatMessage::new("system", text)),
        }
    }

    /// The tools the choice leaves callable.
    fn callable(&self) -> Vec<&Tool> {
        match &self.choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            _ => self.tools.iter().collect(),
        }
    }

    /// The text that tells the model about its tools, for the system turn; `None` with
    /// `tool_choice: none`.
    pub fn system_text(&self) -> Option<String> {
        let tools = self.callable();
        if tools.is_empty() {
            return None;
        }
        let how = match self.choice {
            ToolChoice::Auto => format!(
                "To call a tool, answer with {CALL_MARKER} followed by only a JSON object \
                 {{\"name\": <tool name>, \"arguments\": <arguments object>}}; otherwise answer \
                 normally."
            ),
            _ => "Answer with only a JSON object {\"name\": <tool name>, \"arguments\": \
                  <arguments object>} that calls one of them."
                .to_string(),
        };
        let mut text = format!("You can call these tools. {how}\nTools:");
        for t in tools {
            text.push_str(&format!("\n- {}", t.name));
            if let Some(d) = &t.description {
                text.push_str(&format!(": {d}"));
            }
            text.push_str(&format!(" Parameters: {}", t.parameters));
        }
        Some(text)
    }

    /// The grammar the answer must follow, if any.
    pub fn grammar(&self) -> Option<GrammarRequest> {
        let tools = self.callable();
        if tools.is_empty() {
            return None;
        }
        let calls: Vec<Value> = tools.iter().map(|t| call_schema(t)).collect();
        let call = if calls.len() == 1 {
            calls.into_iter().next().unwrap_or_default()
        } else {
            json!({"anyOf": calls})
        };
        let spec = match self.choice {
            ToolChoice::Auto => GrammarSpec::Lark(format!(
                "start: text | call\ntext: /[^<][\\s\\S]*/\ncall: \"{CALL_MARKER}\" json_call\n\
                 json_call: %json {call}\n"
            )),
            _ => GrammarSpec::JsonSchema(call),
        };
        Some(GrammarRequest {
            spec,
            param: "tools".into(),
        })
    }

    /// The call in an answer, if it made one: the whole answer (`required`, named) or what
    /// follows the marker (`auto`).
    pub fn parse(&self, text: &str) -> Option<ToolCall> {
        let body = match self.choice {
            ToolChoice::None => return None,
            ToolChoice::Auto => text.trim_start().strip_prefix(CALL_MARKER)?,
            _ => text,
        };
        let body = body.trim();
        let v: Value = serde_json::from_str(body).ok()?;
        let name = v.get("name")?.as_str()?.to_string();
        v.get("arguments")?;
        // The arguments as written (what a stream sends), not re-serialized.
        let at = body.find(ARGS_KEY)? + ARGS_KEY.len();
        let arguments = body[at..].strip_suffix('}')?.trim_end().to_string();
        Some(ToolCall { name, arguments })
    }
}

/// One tool's call object: its name as a constant and its parameters as the arguments.
fn call_schema(t: &Tool) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, "arguments": t.parameters},
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// How a past call is written in the history: as the model writes one.
pub fn render_call(call: &ToolCall, choice_auto: bool) -> String {
    let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let obj = json!({"name": call.name, "arguments": args});
    let text = serde_json::to_string(&obj).unwrap_or_default();
    if choice_auto {
        format!("{CALL_MARKER}{text}")
    } else {
        text
    }
}

/// How a tool's result is written in the history: a user turn naming the tool.
pub fn render_result(name: Option<&str>, content: &str) -> String {
    match name {
        Some(n) => format!("Result of the tool {n}: {content}"),
        None => format!("Tool result: {content}"),
    }
}

/// What a stream of an answer sends as it grows: the call's name once it is known, then
/// pieces of its arguments — exactly the argument text, never the wrapper around it.
#[derive(Debug, Default)]
pub struct CallStream {
    text: String,
    /// Bytes of `text` already sent as arguments; `None` before the name was announced.
    sent: Option<usize>,
}

/// One piece of a streamed call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallPiece {
    /// The call begins: its name.
    Start(String),
    /// More argument text.
    Arguments(String),
}

const ARGS_KEY: &str = "\"arguments\": ";

impl CallStream {
    /// Adds `text` of the answer (for `auto`, what follows the marker); returns what can be
    /// sent. The last character is held back: it may be the wrapper's closing brace.
    pub fn push(&mut self, text: &str) -> Vec<CallPiece> {
        self.text.push_str(text);
        let mut out = Vec::new();
        if self.sent.is_none() {
            let Some(at) = self.text.find(ARGS_KEY) else {
                return out;
            };
            let head: Value = match serde_json::from_str(&format!(
                "{}}}",
                &self.text[..at].trim_end().trim_end_matches(',')
            )) {
                Ok(v) => v,
                Err(_) => return out,
            };
            let Some(name) = head.get("name").and_then(Value::as_str) else {
                return out;
            };
            out.push(CallPiece::Start(name.to_string()));
            self.sent = Some(at + ARGS_KEY.len());
        }
        let start = self.sent.unwrap_or(0);
        let end = self.text.len().saturating_sub(1).max(start);
        let end = (start..=end)
            .rev()
            .find(|&i| self.text.is_char_boundary(i))
            .unwrap_or(start);
        if end > start {
            out.push(CallPiece::Arguments(self.text[start..end].to_string()));
            self.sent = Some(end);
        }
        out
    }

    /// At the end: the rest of the arguments (the held-back text minus the closing brace).
    pub fn finish(&mut self) -> Option<CallPiece> {
        let start = self.sent?;
        let rest = self.text[start..].trim_end();
        let rest = rest.strip_suffix('}').unwrap_or(rest);
        (!rest.is_empty()).then(|| CallPiece::Arguments(rest.to_string()))
    }
}

/// What an answer streams as, protocol-free.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerPiece {
    /// Ordinary text.
    Text(String),
    /// A thinking model's reasoning (`core/reasoning.rs`).
    Reasoning(String),
    /// A call begins: its name.
    CallStart(String),
    /// More of the call's argument text.
    Arguments(String),
}

#[derive(Debug)]
enum Mode {
    /// `auto`: the leading text, held while it could still begin the call marker.
    Undecided(String),
    Text,
    Call(CallStream),
    /// A thinking model's answer without tools: reasoning, then text.
    Thinking(Splitter),
}

/// Turns the text of an answer, as it streams, into text or call pieces: a `required` or
/// named answer is a call from its first character; an `auto` one holds its first
/// characters while they could still be the marker, then goes one way for good.
#[derive(Debug)]
pub struct AnswerStream {
    mode: Mode,
}

impl AnswerStream {
    pub fn new(tools: &Tools) -> Self {
        let mode = match tools.choice {
            ToolChoice::Auto => Mode::Undecided(String::new()),
            _ => Mode::Call(CallStream::default()),
        };
        AnswerStream { mode }
    }

    /// The stream of a request's answer: with tools as [`Self::new`]; without them, a
    /// thinking model's reasoning then text, or plain text from the start.
    pub fn for_request(tools: Option<&Tools>, thinking: Option<Thinking>) -> Self {
        match (tools, thinking) {
            (Some(t), _) => Self::new(t),
            (None, Some(t)) => AnswerStream {
                mode: Mode::Thinking(Splitter::new(t)),
            },
            (None, None) => AnswerStream { mode: Mode::Text },
        }
    }

    /// Known to be text (a request without tools, or an `auto` answer that began as text).
    pub fn is_text(&self) -> bool {
        matches!(self.mode, Mode::Text)
    }

    pub fn push(&mut self, text: &str) -> Vec<AnswerPiece> {
        match &mut self.mode {
            Mode::Text if text.is_empty() => Vec::new(),
            Mode::Text => vec![AnswerPiece::Text(text.to_string())],
            Mode::Call(stream) => stream.push(text).into_iter().map(Into::into).collect(),
            Mode::Thinking(split) => split.push(text).into_iter().map(Into::into).collect(),
            Mode::Undecided(held) => {
                held.push_str(text);
                let lead = held.trim_start();
                if let Some(rest) = lead.strip_prefix(CALL_MARKER) {
                    let mut stream = CallStream::default();
                    let pieces = stream.push(rest).into_iter().map(Into::into).collect();
                    self.mode = Mode::Call(stream);
                    pieces
                } else if CALL_MARKER.starts_with(lead) {
                    Vec::new()
                } else {
                    let all = std::mem::take(held);
                    self.mode = Mode::Text;
                    vec![AnswerPiece::Text(all)]
                }
            }
        }
    }

    /// The last pieces (held text, or the rest of the arguments), and whether the answer
    /// was a call.
    pub fn finish(&mut self) -> (Vec<AnswerPiece>, bool) {
        match &mut self.mode {
            Mode::Undecided(held) if held.is_empty() => (Vec::new(), false),
            Mode::Undecided(held) => (vec![AnswerPiece::Text(std::mem::take(held))], false),
            Mode::Text => (Vec::new(), false),
            Mode::Call(stream) => (stream.finish().into_iter().map(Into::into).collect(), true),
            Mode::Thinking(split) => (split.finish().into_iter().map(Into::into).collect(), false),
        }
    }
}

impl From<Part> for AnswerPiece {
    fn from(p: Part) -> Self {
        match p {
            Part::Reasoning(r) => AnswerPiece::Reasoning(r),
            Part::Answer(a) => AnswerPiece::Text(a),
        }
    }
}

impl From<CallPiece> for AnswerPiece {
    fn from(p: CallPiece) -> Self {
        match p {
            CallPiece::Start(name) => AnswerPiece::CallStart(name),
            CallPiece::Arguments(a) => AnswerPiece::Arguments(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(choice: ToolChoice) -> Tools {
        Tools {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather in a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            }],
            choice,
        }
    }

    #[test]
    fn calls_parse_and_stream_to_exactly_their_arguments() {
        let t = tools(ToolChoice::Required);
        let text = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
        let call = t.parse(text).unwrap();
        assert_eq!(call.name, "get_weather");
        assert_eq!(call.arguments, r#"{"city": "Paris"}"#);
        for split in 1..text.len() {
            let mut s = CallStream::default();
            let mut pieces = s.push(&text[..split]);
            pieces.extend(s.push(&text[split..]));
            pieces.extend(s.finish());
            let args: String = pieces
                .iter()
                .filter_map(|p| match p {
                    CallPiece::Arguments(a) => Some(a.as_str()),
                    CallPiece::Start(_) => None,
                })
                .collect();
            assert_eq!(
                pieces[0],
                CallPiece::Start("get_weather".into()),
                "split {split}"
            );
            assert_eq!(args, call.arguments, "split {split}");
        }
        let auto = tools(ToolChoice::Auto);
        assert!(auto.parse("Just text.").is_none());
        assert!(auto.parse(&format!("{CALL_MARKER}{text}")).is_some());
        assert!(tools(ToolChoice::None).grammar().is_none());
    }
}
