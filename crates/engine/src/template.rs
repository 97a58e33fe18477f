//! Chat templates: a conversation (`[{role, content}]`) to the prompt text a model was trained on.
//!
//! This module owns choosing and rendering the template of a loaded model:
//!
//! - when the GGUF carries `tokenizer.chat_template`, that Jinja template is rendered with
//!   MiniJinja, set up like Hugging Face's `apply_chat_template` (`trim_blocks`,
//!   `lstrip_blocks`, the Python string methods from `minijinja-contrib`'s `pycompat`,
//!   `raise_exception`, `strftime_now`, `tojson`, and the `messages`, `add_generation_prompt`,
//!   `bos_token`, `eos_token` variables);
//! - otherwise the architecture's own format is written out directly ([`BuiltinFormat`]):
//!   Gemma for `gemma*`, ChatML for `qwen2`/`qwen3`, Llama 3 for `llama` when the vocabulary has
//!   `<|start_header_id|>` and Llama 2 `[INST]` otherwise; ChatML for any other architecture
//!   (which is also llama.cpp's fallback). Each follows llama.cpp's `llm_chat_apply_template`
//!   for that format, including its `trim` of message text where llama.cpp trims.
//!
//! Why builtin formats are Rust code, not Jinja strings: they are pinned byte for byte (the
//! Gemma rendering in `shared/golden/gemma3-270m/README.md` is tested in
//! `tests/template_render.rs`), and plain code has no whitespace-control surprises.
//!
//! Note on llama.cpp: with no template in the GGUF, llama-server (jinja on) renders ChatML
//! even for Gemma; we use Gemma's own format for Gemma, which is what the model was trained on
//! (llama.cpp's `--chat-template gemma`).
//!
//! BOS: a Jinja template usually starts with `{{ bos_token }}` while the tokenizer also adds
//! BOS. Like llama.cpp, a rendered prompt that starts with the BOS text has it removed when the
//! tokenizer adds BOS itself, so the prompt never carries two.

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::tokenizer::Tokenizer;

/// One message of a conversation.
///
/// Tool calling travels in the fields Hugging Face's templates read: an assistant turn's
/// `tool_calls`, and a `role: "tool"` turn's `tool_call_id` and `name` (the tool whose result
/// it holds). A template that knows tools renders them itself; for one that does not, the
/// server writes calls and results into `content` before rendering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool` (others are passed through to the template).
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ChatToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// A tool's result, answering the call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..ChatMessage::new("tool", content)
        }
    }
}

/// A call an assistant turn made. Templates see it as Hugging Face's
/// `{"id", "type": "function", "function": {"name", "arguments"}}`, the arguments an object
/// (templates write them with `tojson`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object (a string when the client's text was not JSON).
    pub arguments: serde_json::Value,
}

impl ChatToolCall {
    /// A call whose arguments arrive as JSON text (OpenAI's wire form).
    pub fn from_text(id: impl Into<String>, name: impl Into<String>, arguments: &str) -> Self {
        ChatToolCall {
            id: id.into(),
            name: name.into(),
            arguments: serde_json::from_str(arguments)
                .unwrap_or_else(|_| serde_json::Value::String(arguments.to_string())),
        }
    }
}

impl Serialize for ChatToolCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
        .serialize(s)
    }
}

/// Why a template could not be built or rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// `tokenizer.chat_template` holds something other than a string.
    #[error("GGUF metadata key `{key}` has the wrong type (expected string)")]
    WrongType { key: &'static str },
    /// The Jinja source does not parse.
    #[error("chat template does not compile: {detail}")]
    Compile { detail: String },
    /// The template called `raise_exception(message)` (e.g. roles out of order).
    #[error("chat template rejected the conversation: {message}")]
    Raised { message: String },
    /// Any other failure while rendering.
    #[error("chat template failed to render: {detail}")]
    Render { detail: String },
}

/// Formats written out in Rust (used when the GGUF has no template).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinFormat {
    /// `<start_of_turn>user\n…<end_of_turn>\n`; no system role (its trimmed text opens the
    /// next user turn, followed by a blank line); `assistant` is called `model`.
    Gemma,
    /// `<|im_start|>role\n…<|im_end|>\n`.
    ChatMl,
    /// `<|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>` (message text trimmed).
    Llama3,
    /// `[INST] <<SYS>>\n…\n<</SYS>>\n\n… [/INST]…</s>` (llama.cpp's `llama2-sys`).
    Llama2,
}

impl BuiltinFormat {
    /// The text that ends a model turn in this format.
    pub fn end_of_turn(self) -> &'static str {
        match self {
            BuiltinFormat::Gemma => "<end_of_turn>",
            BuiltinFormat::ChatMl => "<|im_end|>",
            BuiltinFormat::Llama3 => "<|eot_id|>",
            BuiltinFormat::Llama2 => "</s>",
        }
    }

    /// The format for an architecture (`general.architecture`) without a template in its GGUF.
    pub fn for_arch(arch: &str, tokenizer: &Tokenizer) -> BuiltinFormat {
        match arch {
            a if a.starts_with("gemma") => BuiltinFormat::Gemma,
            "llama" if tokenizer.token_id("<|start_header_id|>").is_some() => BuiltinFormat::Llama3,
            "llama" => BuiltinFormat::Llama2,
            _ => BuiltinFormat::ChatMl,
        }
    }

    fn render(self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let mut out = String::new();
        match self {
            BuiltinFormat::Gemma => {
                let mut system = String::new();
                for m in messages {
                    if m.role == "system" {
                        system.push_str(trim_c(&m.content));
                        continue;
                    }
                    let role = if m.role == "assistant" {
                        "model"
                    } else {
                        m.role.as_str()
                    };
                    out.push_str("<start_of_turn>");
                    out.push_str(role);
                    out.push('\n');
                    if !system.is_empty() && role != "model" {
                        out.push_str(&system);
                        out.push_str("\n\n");
                        system.clear();
                    }
                    out.push_str(trim_c(&m.content));
                    out.push_str("<end_of_turn>\n");
                }
                if add_generation_prompt {
                    out.push_str("<start_of_turn>model\n");
                }
            }
            BuiltinFormat::ChatMl => {
                for m in messages {
                    out.push_str(&format!(
                        "<|im_start|>{}\n{}<|im_end|>\n",
                        m.role, m.content
                    ));
                }
                if add_generation_prompt {
                    out.push_str("<|im_start|>assistant\n");
                }
            }
            BuiltinFormat::Llama3 => {
                for m in messages {
                    out.push_str(&format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        m.role,
                        trim_c(&m.content)
                    ));
                }
                if add_generation_prompt {
                    out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
                }
            }
            BuiltinFormat::Llama2 => {
                // The user turn's `[/INST]` already asks for the answer, so there is no
                // separate generation prompt.
                let mut inside_turn = true;
                out.push_str("[INST] ");
                for m in messages {
                    if !inside_turn {
                        inside_turn = true;
                        out.push_str("[INST] ");
                    }
                    match m.role.as_str() {
                        "system" => out.push_str(&format!("<<SYS>>\n{}\n<</SYS>>\n\n", m.content)),
                        "user" => out.push_str(&format!("{} [/INST]", m.content)),
                        _ => {
                            out.push_str(&m.content);
                            out.push_str("</s>");
                            inside_turn = false;
                        }
                    }
                }
            }
        }
        out
    }
}

/// Trim C `isspace` characters (space, `\t`, `\n`, `\v`, `\f`, `\r`) from both ends, as
/// llama.cpp's `trim` does (Unicode spaces such as U+00A0 are kept).
fn trim_c(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

enum Kind {
    Jinja(Box<Environment<'static>>),
    Builtin(BuiltinFormat),
}

/// A model's chat template, ready to render. `Send + Sync`.
pub struct ChatTemplate {
    kind: Kind,
    bos_token: String,
    eos_token: String,
    /// Remove a leading `bos_token` from the rendered text (the tokenizer adds BOS itself).
    strip_leading_bos: bool,
    stop_strings: Vec<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Jinja(_) => "jinja".to_string(),
            Kind::Builtin(b) => format!("{b:?}"),
        };
        f.debug_struct("ChatTemplate")
            .field("kind", &kind)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("stop_strings", &self.stop_strings)
            .finish()
    }
}

const TEMPLATE_KEY: &str = "tokenizer.chat_template";
const TEMPLATE_NAME: &str = "chat";
/// Marks errors raised by the template's own `raise_exception` call.
const RAISED_PREFIX: &str = "raise_exception: ";

impl ChatTemplate {
    /// The template of a loaded model: the GGUF's `tokenizer.chat_template` if present, else
    /// the builtin format for `arch` (`general.architecture`).
    pub fn from_gguf(
        f: &ferrox_gguf::GgufFile,
        arch: &str,
        tokenizer: &Tokenizer,
    ) -> Result<ChatTemplate, TemplateError> {
        match f.get(TEMPLATE_KEY) {
            Some(v) => {
                let source = v
                    .as_str()
                    .ok_or(TemplateError::WrongType { key: TEMPLATE_KEY })?;
                ChatTemplate::from_jinja_for(source, tokenizer)
            }
            None => Ok(ChatTemplate::builtin_for(
                BuiltinFormat::for_arch(arch, tokenizer),
                tokenizer,
            )),
        }
    }

    /// A Jinja template whose `bos_token`/`eos_token` and stop strings come from `tokenizer`.
    pub fn from_jinja_for(
        source: &str,
        tokenizer: &Tokenizer,
    ) -> Result<ChatTemplate, TemplateError> {
        let piece = |id: Option<u32>| {
            id.map(|i| tokenizer.token_to_piece(i).to_string())
                .unwrap_or_default()
        };
        let mut t =
            ChatTemplate::from_jinja(source, &piece(tokenizer.bos()), &piece(tokenizer.eos()))?;
        t.strip_leading_bos = tokenizer.add_bos_default();
        t.stop_strings = tokenizer
            .eog_ids()
            .iter()
            .map(|&id| tokenizer.token_to_piece(id).to_string())
            .collect();
        Ok(t)
    }

    /// A Jinja template from its source, with the given BOS/EOS texts (no BOS stripping; the
    /// stop strings are just `eos_token` when it is not empty).
    pub fn from_jinja(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("{RAISED_PREFIX}{message}"),
                ))
            },
        );
        env.add_function("strftime_now", |format: String| -> String {
            strftime_now(&format)
        });
        env.add_filter("tojson", tojson);
        env.add_filter("length", length);
        env.add_filter("count", length);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(source))
            .map_err(|e| TemplateError::Compile {
                detail: describe(&e),
            })?;
        Ok(ChatTemplate {
            kind: Kind::Jinja(Box::new(env)),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            strip_leading_bos: false,
            stop_strings: if eos_token.is_empty() {
                Vec::new()
            } else {
                vec![eos_token.to_string()]
            },
        })
    }

    /// A builtin format, with BOS/EOS texts from `tokenizer`.
    pub fn builtin_for(format: BuiltinFormat, tokenizer: &Tokenizer) -> ChatTemplate {
        let mut t = ChatTemplate::builtin(format);
        let piece = |id: Option<u32>| {
            id.map(|i| tokenizer.token_to_piece(i).to_string())
                .unwrap_or_default()
        };
        t.bos_token = piece(tokenizer.bos());
        t.eos_token = piece(tokenizer.eos());
        t
    }

    /// A builtin format on its own.
    pub fn builtin(format: BuiltinFormat) -> ChatTemplate {
        ChatTemplate {
            kind: Kind::Builtin(format),
            bos_token: String::new(),
            eos_token: String::new(),
            strip_leading_bos: false,
            stop_strings: vec![format.end_of_turn().to_string()],
        }
    }

    /// The builtin format in use, or `None` for a Jinja template.
    pub fn builtin_format(&self) -> Option<BuiltinFormat> {
        match self.kind {
            Kind::Builtin(b) => Some(b),
            Kind::Jinja(_) => None,
        }
    }

    /// Texts that end the model's turn (`<end_of_turn>` for Gemma; for a Jinja template, the
    /// texts of the tokenizer's end-of-generation tokens). Generation should stop at them.
    pub fn stop_strings(&self) -> &[String] {
        &self.stop_strings
    }

    /// The BOS text given to the template as `bos_token`.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The EOS text given to the template as `eos_token`.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    /// Render the conversation; `add_generation_prompt` opens the model's turn at the end.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// [`Self::render`] with the `tools` variable (Hugging Face's list of
    /// `{"type": "function", "function": {...}}`) for a template that describes tools itself.
    /// The builtin formats have no tool syntax and ignore it.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_vars(messages, tools, add_generation_prompt, None)
    }

    /// [`Self::render_with_tools`] with the caller's own template variables (a JSON object:
    /// vLLM's and llama-server's `chat_template_kwargs`, e.g. Qwen 3's `enable_thinking` or
    /// gpt-oss's `reasoning_effort`). They cannot replace the variables set here.
    pub fn render_with_vars(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        vars: Option<&serde_json::Value>,
    ) -> Result<String, TemplateError> {
        let text = match &self.kind {
            Kind::Builtin(format) => format.render(messages, add_generation_prompt),
            Kind::Jinja(env) => {
                let tmpl = env
                    .get_template(TEMPLATE_NAME)
                    .map_err(|e| TemplateError::Compile {
                        detail: describe(&e),
                    })?;
                let ctx = minijinja::context! {
                    messages => messages,
                    // Undefined without tools, as before tools existed.
                    tools => tools.map_or(Value::UNDEFINED, Value::from_serialize),
                    add_generation_prompt => add_generation_prompt,
                    bos_token => &self.bos_token,
                    eos_token => &self.eos_token,
                    ..vars.map_or(Value::UNDEFINED, Value::from_serialize)
                };
                tmpl.render(ctx).map_err(render_error)?
            }
        };
        if self.strip_leading_bos && !self.bos_token.is_empty() {
            if let Some(rest) = text.strip_prefix(self.bos_token.as_str()) {
                return Ok(rest.to_string());
            }
        }
        Ok(text)
    }
}

/// `tojson` as Hugging Face's template environment defines it: Python's `json.dumps` with
/// `ensure_ascii=False`, keys in insertion order, separators `", "` and `": "` (or `","` and
/// newlines plus `indent` spaces when `indent` is given). MiniJinja's own filter is compact
/// JSON, which would put different text (and tokens) into prompts that embed tool schemas.
fn tojson(value: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Accepted for compatibility; output is always insertion-ordered, non-ASCII kept.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match f64::try_from(v.clone()) {
            Ok(x) if v.as_i64().is_none() => {
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
                    out.push_str(&format!("{x:.1}"));
                } else if x.is_nan() {
                    out.push_str("NaN");
                } else if x.is_infinite() {
                    out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&x.to_string());
                }
            }
            _ => out.push_str(&v.to_string()),
        },
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            out.push_str(
                &serde_json::to_string(s).map_err(|e| {
                    minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string())
                })?,
            );
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_json(item, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                let name = key.as_str().map_or_else(|| key.to_string(), str::to_string);
                write_json(&Value::from(name), indent, depth + 1, out)?;
                out.push_str(": ");
                write_json(&v.get_item(key)?, indent, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a {} value", v.kind()),
            ))
        }
    }
    Ok(())
}

/// `length` as in Jinja2, where an undefined value has length 0 (templates write
/// `tools|length` without checking that `tools` was passed).
fn length(value: Value) -> Result<Value, minijinja::Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    value.len().map(Value::from).ok_or_else(|| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("cannot calculate length of value of type {}", value.kind()),
        )
    })
}

/// Turn Hugging Face's `{% generation %}…{% endgeneration %}` (it marks assistant text for
/// training masks and renders its body unchanged) into `{% if true %}…{% endif %}`, keeping
/// any whitespace-control dashes, since MiniJinja has no such tag.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        let Some(close_rel) = rest[open..].find("%}") else {
            break;
        };
        let close = open + close_rel + 2;
        let tag = &rest[open..close];
        let inner =
            tag[2..tag.len() - 2].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        let replacement = match inner {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        out.push_str(&rest[..open]);
        match replacement {
            Some(r) => out.push_str(&tag.replacen(inner, r, 1)),
            None => out.push_str(tag),
        }
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// A MiniJinja error with its source chain, on one line.
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn render_error(e: minijinja::Error) -> TemplateError {
    // The raised error may sit anywhere in the chain (e.g. wrapped by an include or macro).
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = cur {
        if let Some(mj) = err.downcast_ref::<minijinja::Error>() {
            if let Some(message) = mj.detail().and_then(|d| d.strip_prefix(RAISED_PREFIX)) {
                return TemplateError::Raised {
                    message: message.to_string(),
                };
            }
        }
        cur = err.source();
    }
    TemplateError::Render {
        detail: describe(&e),
    }
}

/// `strftime_now(format)` for templates that print today's date (Llama 3.x). Supports the
/// common `%d %b %B %m %Y %y %H %M %S %%` directives, in UTC.
fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(format, secs)
}

fn format_utc(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = MONTHS[(m - 1) as usize];

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_formats_a_known_instant() {
        // 2024-07-26 13:05:09 UTC
        assert_eq!(
            format_utc("%d %b %Y %H:%M:%S %% %B %m %y", 1_721_999_109),
            "26 Jul 2024 13:05:09 % July 07 24"
        );
        assert_eq!(format_utc("%Y-%m-%d", 0), "1970-01-01");
    }

    #[test]
    fn chat_template_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ChatTemplate>();
    }

    #[test]
    fn generation_tags_become_plain_blocks() {
        assert_eq!(
            rewrite_generation_tags(
                "a{%- generation -%}b{% endgeneration %}c{% if x %}{% endif %}"
            ),
            "a{%- if true -%}b{% endif %}c{% if x %}{% endif %}"
        );
    }

    #[test]
    fn trim_c_keeps_unicode_spaces() {
        assert_eq!(trim_c(" \t\nhi\r\n"), "hi");
        assert_eq!(trim_c("\u{a0}hi"), "\u{a0}hi");
    }
}
