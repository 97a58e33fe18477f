//! Tool calling, protocol-free: the tools a request offers, the conversation as the model's
//! template takes it, and an answer split into text and calls as it streams. The syntax of
//! calls is the model family's (`core/tool_syntax.rs`).
//!
//! The choice: `required` or a named tool makes the whole answer calls (the grammar holds
//! an `anyOf` over the tools, each with its own parameter schema, so even a 270M model emits
//! arguments that validate); `auto` lets the model answer with text or with calls; `none`
//! offers nothing (no grammar, and the tools are not described).
//!
//! Several calls in one answer only when the request allows them ([`Parallel`]: OpenAI's
//! `parallel_tool_calls`, false by default as in llama-server; Anthropic's
//! `disable_parallel_tool_use`, allowed by default as its API says, for families with a
//! call syntax of their own) and the family has a syntax for them (Llama 3 has none).
//!
//! For a template that knows no tools ([`ToolFormat::Generic`]) the server does what the
//! template cannot: the tool descriptions go into the system text, a past call is written as
//! the model writes one, and a tool's result becomes a user turn naming the tool, so the model
//! reads its past calls in the form it writes them.

use std::collections::HashMap;

use ferrox_engine::template::ChatMessage;
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::reasoning::{Part, Splitter, Thinking};
use crate::core::tool_syntax::{
    write_calls, CallPiece, CallStream, ToolFormat, CALL_CLOSE, CALL_OPEN,
};

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
    /// Whether an answer may make several calls.
    pub parallel: Parallel,
}

/// Whether an answer may make several calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallel {
    /// One call.
    Off,
    /// The client asked for several (OpenAI's `parallel_tool_calls: true`).
    Asked,
    /// The protocol allows several unless told not to (Anthropic): honoured for a family
    /// whose template has its own syntax for calls. A model that only learns the generic
    /// syntax from the system text (the 270M default model) tends to call again after
    /// every call until the budget runs out, so it makes one unless asked.
    ByDefault,
}

impl Tools {
    /// A protocol's parsed tools and choice, checked: a named choice must name one of the
    /// tools, and `required` or a named choice needs tools (`param` is where the choice came
    /// in). `None` when nothing is callable: no tools, or `tool_choice: none`.
    pub fn checked(
        tools: Vec<Tool>,
        choice: ToolChoice,
        parallel: Parallel,
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
            choice => Ok(Some(Tools {
                tools,
                choice,
                parallel,
            })),
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
    pub(crate) fn callable(&self) -> Vec<&Tool> {
        match &self.choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            _ => self.tools.iter().collect(),
        }
    }

    /// The text that tells the model about its tools, for the system turn; `None` with
    /// `tool_choice: none`.
    fn system_text(&self) -> Option<String> {
        let tools = self.callable();
        if tools.is_empty() {
            return None;
        }
        let call = format!(
            "{CALL_OPEN}\n{{\"name\": <tool name>, \"arguments\": <arguments object>}}\n\
             {CALL_CLOSE}"
        );
        let how = match self.choice {
            ToolChoice::Auto => {
                format!("To call a tool, answer with only {call}; otherwise answer normally.")
            }
            _ => format!("Answer with only {call}, calling one of them."),
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

    /// The JSON list of the tools as Hugging Face's templates take it (`tools`).
    pub fn template_json(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    let mut f = json!({"name": t.name});
                    if let Some(d) = &t.description {
                        f["description"] = json!(d);
                    }
                    f["parameters"] = t.parameters.clone();
                    json!({"type": "function", "function": f})
                })
                .collect(),
        )
    }
}

/// The conversation as the model's template takes it. Every tool result gets the name of the
/// tool whose call it answers. A template that knows tools then takes the messages as they
/// are (Mistral's also gets the 9-character call ids its template insists on, derived from
/// the client's ids, so a resent history renders the same); for one that does not, calls and
/// results are written into the text and the tools described in the system turn.
pub fn prepare(
    mut messages: Vec<ChatMessage>,
    tools: Option<&Tools>,
    format: ToolFormat,
) -> Vec<ChatMessage> {
    let mut names: HashMap<String, String> = HashMap::new();
    for m in &mut messages {
        for c in &m.tool_calls {
            names.insert(c.id.clone(), c.name.clone());
        }
        if m.role == "tool" && m.name.is_none() {
            m.name = m
                .tool_call_id
                .as_ref()
                .and_then(|id| names.get(id))
                .cloned();
        }
    }
    match format {
        ToolFormat::Mistral { .. } => {
            for m in &mut messages {
                for c in &mut m.tool_calls {
                    c.id = short_id(&c.id);
                }
                if let Some(id) = &mut m.tool_call_id {
                    *id = short_id(id);
                }
            }
            messages
        }
        ToolFormat::Hermes | ToolFormat::Llama3 => messages,
        ToolFormat::Generic => {
            let mut out = written_out(messages);
            if let Some(t) = tools {
                t.describe_in(&mut out);
            }
            out
        }
    }
}

/// Calls and results written into the text: an assistant turn's calls after its text, a
/// result as a user turn naming the tool (joined to a user turn beside it).
fn written_out(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    let mut last_was_result = false;
    for m in messages {
        let result = m.role == "tool";
        let m = if result {
            ChatMessage::new("user", render_result(m.name.as_deref(), &m.content))
        } else if !m.tool_calls.is_empty() {
            let mut content = m.content.clone();
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&write_calls(&m.tool_calls));
            ChatMessage::new(m.role, content)
        } else {
            m
        };
        match out.last_mut() {
            Some(prev)
                if prev.role == "user" && m.role == "user" && (result || last_was_result) =>
            {
                prev.content.push('\n');
                prev.content.push_str(&m.content);
            }
            _ => out.push(m),
        }
        last_was_result = result;
    }
    out
}

/// How a tool's result is written for a template that knows no tools: a user turn naming
/// the tool.
fn render_result(name: Option<&str>, content: &str) -> String {
    match name {
        Some(n) => format!("Result of the tool {n}: {content}"),
        None => format!("Tool result: {content}"),
    }
}

/// A call id as Mistral's templates require it (9 letters or digits), the same for the same
/// id.
fn short_id(id: &str) -> String {
    if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return id.to_string();
    }
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    (0..9)
        .map(|_| {
            let c = DIGITS[(h % 62) as usize] as char;
            h /= 62;
            c
        })
        .collect()
}

/// What an answer streams as, protocol-free.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerPiece {
    /// Ordinary text.
    Text(String),
    /// A thinking model's reasoning (`core/reasoning.rs`).
    Reasoning(String),
    /// A call begins: its name. The calls of an answer come one after another.
    CallStart(String),
    /// More of the current call's argument text.
    Arguments(String),
}

#[derive(Debug)]
enum Mode {
    /// `auto`, before the answer's first character.
    Undecided(ToolFormat),
    Text,
    Call(CallStream),
    /// A thinking model's answer without tools: reasoning, then text.
    Thinking(Splitter),
}

/// Turns the text of an answer, as it streams, into text or call pieces: a `required` or
/// named answer is calls from its first character; an `auto` one is told by its first
/// character (`core/tool_syntax.rs`), then goes one way for good.
#[derive(Debug)]
pub struct AnswerStream {
    mode: Mode,
}

impl AnswerStream {
    pub fn new(tools: &Tools, format: ToolFormat) -> Self {
        let mode = match tools.choice {
            ToolChoice::Auto => Mode::Undecided(format),
            _ => Mode::Call(CallStream::new(format)),
        };
        AnswerStream { mode }
    }

    /// The stream of a request's answer: with tools as [`Self::new`]; without them, a
    /// thinking model's reasoning then text, or plain text from the start.
    pub fn for_request(
        tools: Option<&Tools>,
        format: ToolFormat,
        thinking: Option<Thinking>,
    ) -> Self {
        match (tools, thinking) {
            (Some(t), _) => Self::new(t, format),
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
        if let Mode::Undecided(format) = self.mode {
            if text.is_empty() {
                return Vec::new();
            }
            self.mode = match format.begins_call(text) {
                true => Mode::Call(CallStream::new(format)),
                false => Mode::Text,
            };
        }
        match &mut self.mode {
            Mode::Undecided(_) => Vec::new(),
            Mode::Text if text.is_empty() => Vec::new(),
            Mode::Text => vec![AnswerPiece::Text(text.to_string())],
            Mode::Call(stream) => stream.push(text).into_iter().map(Into::into).collect(),
            Mode::Thinking(split) => split.push(text).into_iter().map(Into::into).collect(),
        }
    }

    /// The last pieces (a thinking model's held text), and whether the answer made a call.
    pub fn finish(&mut self) -> (Vec<AnswerPiece>, bool) {
        match &mut self.mode {
            Mode::Undecided(_) | Mode::Text => (Vec::new(), false),
            Mode::Call(stream) => (Vec::new(), stream.called()),
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
pub(crate) mod tests {
    use super::*;
    use ferrox_engine::template::ChatToolCall;

    /// One weather tool, for the tests here and in `tool_syntax.rs`.
    pub(crate) fn weather_tools(choice: ToolChoice, parallel: Parallel) -> Tools {
        Tools {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather in a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            }],
            choice,
            parallel,
        }
    }

    fn tools(choice: ToolChoice) -> Tools {
        weather_tools(choice, Parallel::Asked)
    }

    fn history() -> Vec<ChatMessage> {
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls = vec![
            ChatToolCall::from_text("call_1", "get_weather", r#"{"city": "Paris"}"#),
            ChatToolCall::from_text("call_2", "get_weather", r#"{"city": "Rome"}"#),
        ];
        vec![
            ChatMessage::new("user", "Weather?"),
            call,
            ChatMessage::tool_result("call_1", "sunny"),
            ChatMessage::tool_result("call_2", "rain"),
            ChatMessage::new("user", "Thanks."),
        ]
    }

    #[test]
    fn a_template_without_tools_reads_calls_as_the_model_writes_them() {
        let t = tools(ToolChoice::Auto);
        let out = prepare(history(), Some(&t), ToolFormat::Generic);
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert!(out[0].content.contains("get_weather"));
        // The written calls read back as the same calls.
        let calls = ToolFormat::Generic
            .parse(&ToolChoice::Auto, &out[2].content)
            .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].name, "get_weather");
        assert_eq!(calls[1].arguments, r#"{"city": "Rome"}"#);
        assert_eq!(
            out[3].content,
            "Result of the tool get_weather: sunny\nResult of the tool get_weather: rain\nThanks."
        );
        assert!(out.iter().all(|m| m.tool_calls.is_empty()));
    }

    #[test]
    fn native_templates_get_the_fields_and_mistral_its_ids() {
        let out = prepare(history(), None, ToolFormat::Hermes);
        assert_eq!(out[2].name.as_deref(), Some("get_weather"));
        assert_eq!(out[1].tool_calls.len(), 2);
        let m = prepare(history(), None, ToolFormat::Mistral { marker: None });
        let id = &m[1].tool_calls[0].id;
        assert_eq!(id.len(), 9);
        assert!(id.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(m[2].tool_call_id.as_ref(), Some(id));
        assert_ne!(m[1].tool_calls[1].id, *id);
    }

    #[test]
    fn an_auto_answer_is_told_by_its_first_character() {
        let t = tools(ToolChoice::Auto);
        let mut s = AnswerStream::new(&t, ToolFormat::Hermes);
        assert_eq!(s.push(""), Vec::new());
        assert_eq!(s.push("Sun"), vec![AnswerPiece::Text("Sun".into())]);
        assert!(s.is_text());
        let mut s = AnswerStream::new(&t, ToolFormat::Hermes);
        let mut pieces = s.push("<tool_call>\n{\"name\": \"get_weather\", ");
        pieces.extend(s.push("\"arguments\": {}}\n</tool_call>"));
        assert_eq!(
            pieces,
            vec![
                AnswerPiece::CallStart("get_weather".into()),
                AnswerPiece::Arguments("{}".into())
            ]
        );
        assert!(s.finish().1);
    }
}
