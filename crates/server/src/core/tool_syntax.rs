//! How a model family writes tool calls: the grammar that makes a call well-formed in that
//! family's syntax, and reading calls back out of the text, whole or as it streams.
//!
//! A model's format is read off its chat template ([`ToolFormat::detect`]):
//! - **Hermes** (Qwen 2.5/3, Hermes): the template takes `tools` and writes `<tool_call>`;
//!   a call is `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, calls one per line;
//! - **Llama 3.x**: the template takes `tools` and writes `"parameters"`; a call is the one
//!   JSON object `{"name": …, "parameters": …}` (the family has no syntax for several);
//! - **Mistral**: the template writes `[TOOL_CALLS]`; a call is that marker (a control
//!   token, so it adds no text) and a JSON array of `{"name": …, "arguments": …}`;
//! - **Harmony** (gpt-oss): the template writes `<|channel|>` and `<|call|>`; a call is a
//!   message to `functions.NAME` whose body is the arguments. Its syntax is not JSON objects
//!   between markup, so it has its own reader and grammar (`core/harmony.rs`), and its
//!   answers carry reasoning beside calls;
//! - **Generic**: any other template, or none (Gemma 3, the default model). The server
//!   describes the tools in the system turn and writes past calls and results into the text
//!   (`core/tools.rs`); the model calls in the Hermes shape, which the grammar enforces.
//!
//! Every other syntax is the same thing underneath: calls are the JSON objects at the top level of
//! the answer, and whatever lies between them is the family's markup. So one reader serves
//! all of them ([`CallStream`]): it tracks JSON nesting byte by byte, announces a call's name
//! when its arguments key is read, and passes the arguments through as they arrive — exactly
//! the generated text, never the markup, and with nothing held back. The non-streamed reply
//! runs the same reader over the whole text, so streamed and buffered calls agree by
//! construction.
//!
//! With `auto`, the grammar lets the answer be text or calls, and the text may not begin with
//! the character a call begins with (`<`, `{` or `[`), so the first character of the answer
//! tells the two apart exactly. A structured answer asked for beside tools takes the text's
//! place (its JSON, through the schema), refused where its JSON could begin like a call
//! (a Llama 3 model, whose calls are bare objects, with an object schema).

use ferrox_engine::template::ChatToolCall;
use ferrox_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::grammar::{with_layout, GrammarRequest, GrammarSpec};
use crate::core::harmony;
use crate::core::tools::{Parallel, Tool, ToolCall, ToolChoice, Tools};

/// The marker of a Hermes (and a generic) call.
pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";
/// The marker of Mistral's calls.
pub const MISTRAL_CALLS: &str = "[TOOL_CALLS]";

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// The template knows no tools: the server describes them; calls in the Hermes shape.
    Generic,
    Hermes,
    Llama3,
    /// `marker`: the id of `[TOOL_CALLS]` when it is one token of the vocabulary (the
    /// grammar then asks for that token; otherwise for its text).
    Mistral {
        marker: Option<u32>,
    },
    /// gpt-oss's harmony messages (`core/harmony.rs`).
    Harmony(harmony::Marks),
}

impl ToolFormat {
    /// The format of a model whose GGUF template is `source` (`None`: no template, a
    /// builtin format, which has no tool syntax).
    pub fn detect(source: Option<&str>, tokenizer: &Tokenizer) -> ToolFormat {
        let Some(src) = source.filter(|s| s.contains("tools")) else {
            return ToolFormat::Generic;
        };
        if harmony::is_harmony_template(src) {
            return ToolFormat::Harmony(harmony::Marks::of(tokenizer));
        }
        // Templates of these families whose calls are not JSON objects (Qwen3-Coder's
        // `<function=…>`, newer Mistral's `[TOOL_CALLS]name[ARGS]{…}`) get the generic
        // family: the server writes their history, and the grammar asks for the Hermes shape.
        if src.contains(CALL_OPEN) && !src.contains("<function=") {
            ToolFormat::Hermes
        } else if src.contains(MISTRAL_CALLS) && !src.contains("[ARGS]") {
            ToolFormat::Mistral {
                marker: tokenizer.token_id(MISTRAL_CALLS),
            }
        } else if src.contains("<|start_header_id|>") && src.contains("parameters") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The name `/v1/models` and the logs give it.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Generic => "generic",
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral { .. } => "mistral",
            ToolFormat::Harmony(_) => "harmony",
        }
    }

    /// Whether the template renders `tools`, calls and results itself.
    pub fn native(self) -> bool {
        !matches!(self, ToolFormat::Generic)
    }

    /// The key of a call object that holds the arguments.
    fn args_key(self) -> &'static str {
        match self {
            ToolFormat::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// The character every answer that calls begins with (its text, control tokens add none).
    fn opener(self) -> char {
        match self {
            ToolFormat::Generic | ToolFormat::Hermes | ToolFormat::Harmony(_) => '<',
            ToolFormat::Llama3 => '{',
            ToolFormat::Mistral { .. } => '[',
        }
    }

    /// Whether the family can write several calls in one answer.
    fn has_parallel_calls(self) -> bool {
        !matches!(self, ToolFormat::Llama3 | ToolFormat::Harmony(_))
    }

    /// The grammar an answer must follow: calls only (`required`, a named tool), or text
    /// or calls (`auto`); several calls when the request allows them and the family can.
    /// With a structured answer asked for too (`answer`: a JSON schema, the agent
    /// frameworks' "call a tool or give the final answer in this shape"), the `auto` text is
    /// that answer's JSON. `Ok(None)`: nothing is callable.
    pub fn grammar(
        self,
        tools: &Tools,
        answer: Option<&GrammarRequest>,
    ) -> Result<Option<GrammarRequest>, ApiError> {
        let callable = tools.callable();
        if callable.is_empty() {
            return Ok(None);
        }
        if let ToolFormat::Harmony(marks) = self {
            // Its answer and its calls are told apart by their channels, never by a first
            // character, so any structured answer combines with tools.
            let answer = answer.map(|a| a.structured()).transpose()?.map(with_layout);
            return Ok(Some(GrammarRequest {
                spec: GrammarSpec::Lark(harmony::grammar(tools, answer.as_ref(), marks)),
                param: "tools".into(),
            }));
        }
        let objects: Vec<Value> = callable
            .iter()
            .map(|t| call_schema(t, self.args_key()))
            .collect();
        let object = with_layout(match objects.len() {
            1 => objects.into_iter().next().unwrap_or_default(),
            _ => json!({"anyOf": objects}),
        });
        let several = self.has_parallel_calls()
            && match tools.parallel {
                Parallel::Off => false,
                Parallel::Asked => true,
                Parallel::ByDefault => self.native(),
            };
        let calls = match self {
            ToolFormat::Mistral { marker } => {
                let marker = match marker {
                    Some(id) => format!("<[{id}]>"),
                    None => format!("{MISTRAL_CALLS:?}"),
                };
                let more = if several { " (\", \" obj)*" } else { "" };
                format!("calls: {marker} \"[\" obj{more} \"]\"")
            }
            ToolFormat::Llama3 => "calls: obj".to_string(),
            ToolFormat::Generic | ToolFormat::Hermes | ToolFormat::Harmony(_) => {
                let more = if several { " (\"\\n\" call)*" } else { "" };
                format!("calls: call{more}\ncall: \"{CALL_OPEN}\\n\" obj \"\\n{CALL_CLOSE}\"")
            }
        };
        let start = match (&tools.choice, answer) {
            // Text may not begin with whitespace either: a call after a newline would
            // read as text.
            (ToolChoice::Auto, None) => format!(
                "start: text | calls\ntext: /[^{}\\s][\\s\\S]*/",
                regex_escape(self.opener())
            ),
            (ToolChoice::Auto, Some(answer)) => format!(
                "start: answer | calls\nanswer: %json {}",
                with_layout(self.answer_schema(answer)?)
            ),
            _ => "start: calls".to_string(),
        };
        Ok(Some(GrammarRequest {
            spec: GrammarSpec::Lark(format!("{start}\n{calls}\nobj: %json {object}\n")),
            param: "tools".into(),
        }))
    }

    /// The schema of a structured answer beside tools, if the answer can be told from a
    /// call by its first character as every answer is (a grammar cannot be combined: it
    /// could begin like a call).
    fn answer_schema(self, answer: &GrammarRequest) -> Result<Value, ApiError> {
        let schema = answer.structured()?;
        let opener = self.opener();
        if first_chars(&schema).contains(&opener) {
            return Err(ApiError::invalid(
                answer.param.clone(),
                format!(
                    "this model's tool calls begin with `{opener}`, as an answer of this \
                     schema may: the two cannot be told apart, so the schema cannot be \
                     combined with tools for this model"
                ),
            ));
        }
        Ok(schema)
    }

    /// Whether an answer that begins with `text` is calls (`auto`; only the first character
    /// counts, see the module doc).
    pub fn begins_call(self, text: &str) -> bool {
        text.starts_with(self.opener())
    }

    /// The calls in a whole answer; `None` when it is text (an `auto` answer that began as
    /// text). A call cut off before its object closed (the budget or a stop string ended the
    /// answer) is not one, so a cut answer may hold fewer calls than its stream began, or
    /// none; its markup is never text.
    /// (Harmony answers are read by `core/harmony.rs`.)
    pub fn parse(self, choice: &ToolChoice, text: &str) -> Option<Vec<ToolCall>> {
        if *choice == ToolChoice::Auto && !self.begins_call(text) {
            return None;
        }
        let mut stream = CallStream::new(self);
        let mut calls: Vec<ToolCall> = Vec::new();
        for piece in stream.push(text) {
            match piece {
                CallPiece::Start(name) => calls.push(ToolCall {
                    name,
                    arguments: String::new(),
                }),
                CallPiece::Arguments(a) => {
                    if let Some(c) = calls.last_mut() {
                        c.arguments.push_str(&a);
                    }
                }
            }
        }
        calls.truncate(stream.closed);
        Some(calls)
    }
}

/// The characters a JSON value valid against `schema` may begin with (every JSON start
/// when the schema does not say).
fn first_chars(schema: &Value) -> Vec<char> {
    const ANY: &[char] = &['{', '[', '"', '-', '0', 't', 'f', 'n'];
    let of_type = |t: &str| -> Vec<char> {
        match t {
            "object" => vec!['{'],
            "array" => vec!['['],
            "string" => vec!['"'],
            "number" | "integer" => vec!['-', '0'],
            "boolean" => vec!['t', 'f'],
            "null" => vec!['n'],
            _ => ANY.to_vec(),
        }
    };
    let Some(obj) = schema.as_object() else {
        return ANY.to_vec(); // `true`: anything
    };
    let union = |schemas: &[Value]| -> Vec<char> { schemas.iter().flat_map(first_chars).collect() };
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .flat_map(|v| v.to_string().chars().next())
            .collect();
    }
    if let Some(v) = obj.get("const") {
        return v.to_string().chars().next().into_iter().collect();
    }
    match obj.get("type") {
        Some(Value::String(t)) => of_type(t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .flat_map(of_type)
            .collect(),
        _ => match (obj.get("anyOf").or(obj.get("oneOf")), obj) {
            (Some(Value::Array(alts)), _) => union(alts),
            (_, o) if o.contains_key("properties") => vec!['{'],
            (_, o) if o.contains_key("items") => vec!['['],
            _ => ANY.to_vec(),
        },
    }
}

/// How past calls are written into the text for a template that knows no tools (the
/// generic family): in the Hermes shape the grammar asks of the model, so they read as the
/// model writes them.
pub fn write_calls(calls: &[ChatToolCall]) -> String {
    calls
        .iter()
        .map(|c| {
            let object = json!({"name": c.name, "arguments": c.arguments});
            format!("{CALL_OPEN}\n{}\n{CALL_CLOSE}", spaced_json(&object))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// JSON in the layout the grammar gives the model's own calls (`", "` and `": "`,
/// `core/grammar.rs`), so a past call reads as the model writes one.
fn spaced_json(v: &Value) -> String {
    struct Spaced;
    /// `", "` before every item but the first.
    fn separate<W: ?Sized + std::io::Write>(w: &mut W, first: bool) -> std::io::Result<()> {
        match first {
            true => Ok(()),
            false => w.write_all(b", "),
        }
    }
    impl serde_json::ser::Formatter for Spaced {
        fn begin_array_value<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            separate(w, first)
        }
        fn begin_object_key<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            separate(w, first)
        }
        fn begin_object_value<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
        ) -> std::io::Result<()> {
            w.write_all(b": ")
        }
    }
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Spaced);
    match serde::Serialize::serialize(v, &mut ser) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => v.to_string(),
    }
}

/// `c` inside a regex character class.
fn regex_escape(c: char) -> String {
    match c {
        '[' | ']' | '\\' | '^' | '-' => format!("\\{c}"),
        c => c.to_string(),
    }
}

/// One tool's call object: its name as a constant and its parameters under `key`.
fn call_schema(t: &Tool, key: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, key: t.parameters},
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// One piece of a streamed call.
#[derive(Debug, Clone, PartialEq)]
pub enum CallPiece {
    /// A call begins: its name.
    Start(String),
    /// More of the current call's argument text.
    Arguments(String),
}

/// Reads calls out of an answer as it streams (see the module doc): each top-level JSON
/// object is a call; its name is announced when its arguments key has been read, and its
/// arguments are passed through as they arrive.
#[derive(Debug)]
pub struct CallStream {
    /// `"arguments":` or `"parameters":`.
    key: String,
    text: String,
    /// Bytes of `text` scanned.
    at: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Where the open call object starts, and whether its name was announced.
    object: Option<(usize, bool)>,
    /// Inside the arguments: the first byte not yet sent, and whether any was.
    args: Option<(usize, bool)>,
    /// Calls whose object closed.
    closed: usize,
}

impl CallStream {
    pub fn new(format: ToolFormat) -> Self {
        CallStream {
            key: format!("\"{}\":", format.args_key()),
            text: String::new(),
            at: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            object: None,
            args: None,
            closed: 0,
        }
    }

    /// Whether a call closed (what the buffered reply counts, so both give one reason).
    pub fn called(&self) -> bool {
        self.closed > 0
    }

    /// Adds `text` of the answer; returns what can be sent.
    pub fn push(&mut self, text: &str) -> Vec<CallPiece> {
        self.text.push_str(text);
        let mut out = Vec::new();
        while self.at < self.text.len() {
            let b = self.text.as_bytes()[self.at];
            self.at += 1;
            let Some((start, named)) = self.object else {
                // Markup between calls; a call's object opens.
                if b == b'{' {
                    self.object = Some((self.at - 1, false));
                    self.depth = 1;
                }
                continue;
            };
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth <= 1 {
                        // The arguments value closed (or, for a scalar, the object did).
                        let end = if self.depth == 1 {
                            self.at
                        } else {
                            self.at - 1
                        };
                        self.send_args(end, &mut out);
                        self.args = None;
                    }
                    if self.depth == 0 {
                        // Only a named object is a call.
                        if self.object.is_some_and(|(_, named)| named) {
                            self.closed += 1;
                        }
                        self.object = None;
                    }
                }
                b':' if self.depth == 1 && !named && self.text[..self.at].ends_with(&self.key) => {
                    let head = &self.text[start..self.at - self.key.len()];
                    let head = format!("{}}}", head.trim_end().trim_end_matches(','));
                    if let Some(name) = serde_json::from_str::<Value>(&head)
                        .ok()
                        .and_then(|v| v.get("name")?.as_str().map(str::to_string))
                    {
                        out.push(CallPiece::Start(name));
                        self.object = Some((start, true));
                        self.args = Some((self.at, false));
                    }
                }
                _ => {}
            }
        }
        self.send_args(self.at, &mut out);
        out
    }

    /// Sends the arguments up to `end`: not the whitespace after the key, nor (for a scalar
    /// that the object's brace ended) the whitespace before that brace.
    fn send_args(&mut self, end: usize, out: &mut Vec<CallPiece>) {
        let Some((mut from, begun)) = self.args else {
            return;
        };
        if !begun {
            from += self.text[from..end]
                .bytes()
                .take_while(u8::is_ascii_whitespace)
                .count();
        }
        let closed = self.depth == 0;
        let piece = match closed {
            true => self.text[from..end].trim_end(),
            false => &self.text[from..end],
        };
        if !piece.is_empty() {
            out.push(CallPiece::Arguments(piece.to_string()));
        }
        self.args = Some((end, begun || !piece.is_empty()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::core::tools::tests::weather_tools as tools;

    /// Two calls in each family's syntax, as its model writes them.
    fn answers() -> Vec<(ToolFormat, &'static str, usize)> {
        vec![
            (
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome }\\\"{\"}}\n</tool_call>",
                2,
            ),
            (
                ToolFormat::Generic,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                1,
            ),
            (
                ToolFormat::Llama3,
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": [\"a\", {\"b\": 1}]}}",
                1,
            ),
            (
                ToolFormat::Mistral { marker: None },
                "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}, {\"name\": \"get_weather\", \"arguments\": {}}]",
                2,
            ),
        ]
    }

    #[test]
    fn every_split_of_a_stream_gives_exactly_the_parsed_calls() {
        for (format, text, n) in answers() {
            let calls = format.parse(&ToolChoice::Auto, text).unwrap();
            assert_eq!(calls.len(), n, "{format:?}");
            for c in &calls {
                assert_eq!(c.name, "get_weather");
                let v: Value = serde_json::from_str(&c.arguments).expect("arguments are JSON");
                assert!(v.is_object(), "{format:?}: {}", c.arguments);
                assert!(text.contains(&c.arguments));
            }
            for split in 0..=text.len() {
                if !text.is_char_boundary(split) {
                    continue;
                }
                let mut s = CallStream::new(format);
                let mut pieces = s.push(&text[..split]);
                pieces.extend(s.push(&text[split..]));
                let mut streamed: Vec<ToolCall> = Vec::new();
                for p in pieces {
                    match p {
                        CallPiece::Start(name) => streamed.push(ToolCall {
                            name,
                            arguments: String::new(),
                        }),
                        CallPiece::Arguments(a) => {
                            streamed.last_mut().unwrap().arguments.push_str(&a)
                        }
                    }
                }
                assert_eq!(streamed, calls, "{format:?} split {split}");
            }
        }
    }

    #[test]
    fn text_answers_and_cut_calls_are_not_calls() {
        let f = ToolFormat::Hermes;
        assert_eq!(f.parse(&ToolChoice::Auto, "Sunny. {\"name\": 1}"), None);
        let cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci";
        assert_eq!(f.parse(&ToolChoice::Required, cut), Some(Vec::new()));
        assert_eq!(f.parse(&ToolChoice::Auto, cut), Some(Vec::new()));
        // An object without a name is no call, so it cannot make a later cut one count.
        let unnamed = format!("{{\"x\": 1}}{cut}");
        assert_eq!(f.parse(&ToolChoice::Required, &unnamed), Some(Vec::new()));
        assert_eq!(
            ToolFormat::Llama3.parse(&ToolChoice::Auto, "<b>no</b>"),
            None
        );
        // Arguments that are not an object end at the call's brace, whitespace and all.
        let scalar = "{\"name\": \"f\", \"parameters\":  5 }";
        let calls = ToolFormat::Llama3.parse(&ToolChoice::Auto, scalar).unwrap();
        assert_eq!(calls[0].arguments, "5");
    }

    #[test]
    fn grammars_follow_the_family_and_the_parallel_flag() {
        let lark = |f: ToolFormat, t: &Tools| match f.grammar(t, None).unwrap().unwrap().spec {
            GrammarSpec::Lark(g) => g,
            other => panic!("{other:?}"),
        };
        let g = lark(
            ToolFormat::Hermes,
            &tools(ToolChoice::Auto, Parallel::Asked),
        );
        assert!(g.starts_with("start: text | calls\ntext: /[^<\\s]"), "{g}");
        assert!(g.contains("(\"\\n\" call)*"), "{g}");
        let g = lark(
            ToolFormat::Hermes,
            &tools(ToolChoice::Required, Parallel::Off),
        );
        assert!(g.starts_with("start: calls\n") && !g.contains(")*"), "{g}");
        let g = lark(
            ToolFormat::Mistral { marker: Some(5) },
            &tools(ToolChoice::Auto, Parallel::Asked),
        );
        assert!(
            g.contains("calls: <[5]> \"[\" obj (\", \" obj)* \"]\""),
            "{g}"
        );
        assert!(g.contains("/[^\\[\\s]"), "{g}");
        // Anthropic's default: several only where the family has its own syntax.
        let g = lark(
            ToolFormat::Hermes,
            &tools(ToolChoice::Auto, Parallel::ByDefault),
        );
        assert!(g.contains(")*"), "{g}");
        let g = lark(
            ToolFormat::Generic,
            &tools(ToolChoice::Auto, Parallel::ByDefault),
        );
        assert!(!g.contains(")*"), "{g}");
        // Llama 3 has no syntax for several calls.
        let g = lark(
            ToolFormat::Llama3,
            &tools(ToolChoice::Auto, Parallel::Asked),
        );
        assert!(
            g.contains("calls: obj\n") && g.contains("\"parameters\""),
            "{g}"
        );
        assert!(ToolFormat::Hermes
            .grammar(&tools(ToolChoice::None, Parallel::Asked), None)
            .unwrap()
            .is_none());
    }
}
