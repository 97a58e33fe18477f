//! Anthropic Messages bodies to protocol-free requests: [`parse_messages`] for
//! `/v1/messages`, [`parse_count_tokens`] for `/v1/messages/count_tokens`. Every parameter
//! is read or refused by name, as on the OpenAI routes.
//!
//! What this server chose where Anthropic's API leaves room:
//! - `max_tokens` is required, as Anthropic requires it;
//! - consecutive messages of one role are joined into one turn (with a blank line), as
//!   Anthropic combines them; the chat template then sees alternating turns;
//! - `cache_control` (on a block or the whole request) is accepted and changes nothing: the
//!   prefix cache is automatic, every prompt is cached; so are the parameters that label or
//!   route a request on Anthropic's side (`service_tier`, `inference_geo`, `speed`,
//!   `workspace_id`, ...);
//! - `temperature`, `top_p` and `top_k` are honoured (the current SDK sends them through
//!   `extra_body` only);
//! - `tools` and `tool_choice`, `tool_use` and `tool_result` blocks: tool calling as the
//!   core does it (`core/tools.rs`);
//! - `output_config.format` (`{"type": "json_schema", "schema"}`, Anthropic's structured
//!   output) constrains the answer as `response_format` does on the OpenAI routes, tools or
//!   not; `output_config.effort` is refused by name (a local model has no effort setting);
//! - block types this server cannot serve yet (`image`, `document`, ...) and
//!   the `thinking` parameter are refused by name, never dropped;
//! - a conversation ending in an assistant turn (Anthropic's "prefill") is refused by name:
//!   continuing an assistant turn needs the template to leave it open, which it does not.

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::{ChatMessage, ChatToolCall};
use serde_json::Value;

use crate::core::error::ApiError;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::GenerationOptions;
use crate::core::tools::{Parallel, Tool, ToolChoice, Tools};
use crate::http::params::{kind, Fields};

/// Parameters of the Messages API this server does not implement yet.
const UNSUPPORTED: &[&str] = &["thinking", "mcp_servers", "container"];

/// Parameters that label or route a request on Anthropic's side and change nothing about
/// what is generated: accepted and logged. (A top-level `cache_control` marks the prompt
/// for caching, which is automatic here.)
const NO_EFFECT: &[&str] = &[
    "cache_control",
    "service_tier",
    "inference_geo",
    "speed",
    "user_profile_id",
    "workspace_id",
    "diagnostics",
];

/// A `/v1/messages` request.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub messages: Vec<ChatMessage>,
    /// With the tools offered (`options.tools`), unless there are none or `tool_choice` is
    /// `none`.
    pub options: GenerationOptions,
}

/// A `/v1/messages` body.
pub fn parse_messages(body: Value) -> Result<MessagesRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    let (messages, tools, grammar) = prompt(&mut f)?;
    let max_tokens = f
        .max_tokens("max_tokens")?
        .ok_or_else(|| ApiError::MissingParameter {
            param: "max_tokens".into(),
        })?;
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: f.take("temperature")?.unwrap_or(defaults.temperature),
        top_p: f.take("top_p")?.unwrap_or(defaults.top_p),
        top_k: f.top_k()?,
        ..defaults
    };
    let options = GenerationOptions {
        model: f.take("model")?,
        max_tokens: Some(max_tokens),
        sampling,
        stop: f.stop("stop_sequences")?,
        stream: f.take("stream")?.unwrap_or(false),
        tools,
        grammar,
        speculation: f.speculative()?,
        ..GenerationOptions::default()
    };
    metadata(&mut f)?;
    f.finish()?;
    Ok(MessagesRequest { messages, options })
}

/// A `/v1/messages/count_tokens` request: the prompt part of a Messages body.
pub struct CountRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Option<Tools>,
}

/// A `/v1/messages/count_tokens` body (its `model` is the one `Pinned` resolved).
pub fn parse_count_tokens(body: Value) -> Result<CountRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    // A structured output changes nothing in the prompt here: checked, then not counted.
    let (messages, tools, _) = prompt(&mut f)?;
    f.take::<String>("model")?;
    f.finish()?;
    Ok(CountRequest { messages, tools })
}

/// What a Messages body and a count_tokens body share: the refused and the no-effect
/// parameters, the tools, the structured output, and the conversation.
fn prompt(f: &mut Fields) -> Result<Prompt, ApiError> {
    f.refuse_unsupported(UNSUPPORTED)?;
    for name in NO_EFFECT {
        f.accept(name);
    }
    let tools = parse_tools(f)?;
    let grammar = output_config(f)?;
    Ok((conversation(f)?, tools, grammar))
}

/// The conversation, the tools offered and the answer's schema.
type Prompt = (Vec<ChatMessage>, Option<Tools>, Option<GrammarRequest>);

/// `output_config`: `format` (`{"type": "json_schema", "schema"}`) as the answer's
/// constraint; `effort` refused by name.
fn output_config(f: &mut Fields) -> Result<Option<GrammarRequest>, ApiError> {
    let Some(v) = f.take_raw("output_config") else {
        return Ok(None);
    };
    let mut o = Fields::nested(v, "output_config")?;
    o.refuse_unsupported(&["effort"])?;
    let grammar = match o.take_raw("format") {
        None => None,
        Some(v) => {
            let mut format = Fields::nested(v, "output_config.format")?;
            let ty: String = format.require("type")?;
            if ty != "json_schema" {
                return Err(ApiError::invalid(
                    format.path("type"),
                    format!("{ty:?} is not supported; the format is \"json_schema\""),
                ));
            }
            let schema = format.require_raw("schema")?;
            if !schema.is_object() {
                return Err(ApiError::invalid(
                    format.path("schema"),
                    format!("a JSON schema is an object, got {}", kind(&schema)),
                ));
            }
            format.finish()?;
            Some(GrammarRequest {
                spec: GrammarSpec::JsonSchema(schema),
                param: "output_config.format".into(),
            })
        }
    };
    o.finish()?;
    Ok(grammar)
}

/// `system` and `messages`, as chat messages with alternating turns: an assistant turn's
/// `tool_use` blocks become its calls, a user turn's `tool_result` blocks `tool` messages
/// before its text.
fn conversation(f: &mut Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out: Vec<ChatMessage> = Vec::new();
    if let Some(system) = f.take_raw("system") {
        let blocks = content(system, "system")?;
        blocks.only_text("system")?;
        out.push(ChatMessage::new("system", blocks.text()));
    }
    let items = match f.take_raw("messages") {
        None => {
            return Err(ApiError::MissingParameter {
                param: "messages".into(),
            })
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages",
                "must hold at least one message",
            ))
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("expected an array, got {}", kind(&other)),
            ))
        }
    };
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("messages[{i}]");
        let mut m = Fields::nested(item, &path)?;
        let role: String = m.require("role")?;
        if role != "user" && role != "assistant" {
            return Err(ApiError::invalid(
                m.path("role"),
                format!("role {role:?} is not one of \"user\", \"assistant\""),
            ));
        }
        let content_path = m.path("content");
        let blocks = match m.take_raw("content") {
            None => {
                return Err(ApiError::MissingParameter {
                    param: content_path,
                })
            }
            Some(v) => content(v, &content_path)?,
        };
        m.finish()?;
        if role == "user" && !blocks.calls.is_empty() {
            return Err(ApiError::invalid(
                content_path,
                "tool_use blocks belong in assistant turns",
            ));
        }
        if role == "assistant" && !blocks.results.is_empty() {
            return Err(ApiError::invalid(
                content_path,
                "tool_result blocks belong in user turns",
            ));
        }
        let text = blocks.text();
        out.extend(blocks.results);
        if text.is_empty()
            && blocks.calls.is_empty()
            && out.last().is_some_and(|m| m.role == "tool")
        {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => {
                if !text.is_empty() {
                    if !last.content.is_empty() {
                        last.content.push_str("\n\n");
                    }
                    last.content.push_str(&text);
                }
                last.tool_calls.extend(blocks.calls);
            }
            _ => {
                let mut message = ChatMessage::new(role, text);
                message.tool_calls = blocks.calls;
                out.push(message);
            }
        }
    }
    if out.last().is_some_and(|m| m.role == "assistant") {
        return Err(ApiError::invalid(
            "messages",
            "the last message is an assistant turn (a prefill); continuing an assistant turn \
             is not supported by this server: end with a user message",
        ));
    }
    Ok(out)
}

/// What a turn's content blocks hold.
#[derive(Default)]
struct Blocks {
    texts: Vec<String>,
    /// `tool_use` blocks (a past call).
    calls: Vec<ChatToolCall>,
    /// `tool_result` blocks, as `tool` messages.
    results: Vec<ChatMessage>,
}

impl Blocks {
    fn text(&self) -> String {
        self.texts.join("\n")
    }

    fn only_text(&self, path: &str) -> Result<(), ApiError> {
        match self.calls.is_empty() && self.results.is_empty() {
            true => Ok(()),
            false => Err(ApiError::invalid(path, "only text blocks belong here")),
        }
    }
}

/// A string, or an array of blocks: `text`, `tool_use`, `tool_result`, and `thinking` /
/// `redacted_thinking` (past reasoning, which clients send back and thinking templates leave
/// out of the prompt: dropped).
fn content(value: Value, path: &str) -> Result<Blocks, ApiError> {
    let mut out = Blocks::default();
    match value {
        Value::String(s) => out.texts.push(s),
        Value::Array(blocks) => {
            for (j, b) in blocks.into_iter().enumerate() {
                block(b, &format!("{path}[{j}]"), &mut out)?;
            }
        }
        other => {
            return Err(ApiError::invalid(
                path,
                format!(
                    "expected a string or an array of content blocks, got {}",
                    kind(&other)
                ),
            ))
        }
    }
    out.texts.retain(|t| !t.is_empty());
    Ok(out)
}

fn block(block: Value, path: &str, out: &mut Blocks) -> Result<(), ApiError> {
    let mut b = Fields::nested(block, path)?;
    let ty: String = b.require("type")?;
    // The prefix cache is automatic: a breakpoint changes nothing.
    b.accept("cache_control");
    match ty.as_str() {
        "text" => {
            b.refuse_unsupported(&["citations"])?;
            out.texts.push(b.require("text")?);
        }
        "tool_use" => {
            let id: String = b.require("id")?;
            let name: String = b.require("name")?;
            let input = b.take_raw("input").unwrap_or_else(|| serde_json::json!({}));
            // Who made the call and from which toolset (Anthropic's programmatic tool
            // calling, tool search): no effect here.
            b.accept("caller");
            b.accept("toolset_name");
            out.calls.push(ChatToolCall {
                id,
                name,
                arguments: input,
            });
        }
        "thinking" | "redacted_thinking" => {
            b.accept("thinking");
            b.accept("signature");
            b.accept("data");
        }
        "tool_result" => {
            let id: String = b.require("tool_use_id")?;
            let is_error = b.take::<bool>("is_error")?.unwrap_or(false);
            let cpath = b.path("content");
            let body = match b.take_raw("content") {
                None => String::new(),
                Some(v) => {
                    let inner = content(v, &cpath)?;
                    inner.only_text(&cpath)?;
                    inner.text()
                }
            };
            let body = if is_error {
                format!("error: {body}")
            } else {
                body
            };
            out.results.push(ChatMessage::tool_result(id, body));
        }
        other => {
            return Err(ApiError::invalid(
                b.path("type"),
                format!(
                    "content blocks of type {other:?} are not supported by this server yet; \
                     only \"text\", \"tool_use\", \"tool_result\" and \"thinking\""
                ),
            ))
        }
    }
    b.finish()
}

/// `tools` (custom tools: `name`, `description`, `input_schema`) and `tool_choice`
/// (`auto`, `any`, `tool` with a `name`, `none`; several calls in one answer unless
/// `disable_parallel_tool_use`, for a family with a call syntax of its own: [`Parallel`]). Anthropic's server tools (`bash_…`, `web_search_…`) are
/// refused by name.
fn parse_tools(f: &mut Fields) -> Result<Option<Tools>, ApiError> {
    let mut tools = Vec::new();
    if let Some(v) = f.take_raw("tools") {
        let Value::Array(items) = v else {
            return Err(ApiError::invalid("tools", "expected an array"));
        };
        for (i, item) in items.into_iter().enumerate() {
            let mut t = Fields::nested(item, &format!("tools[{i}]"))?;
            if let Some(ty) = t.take::<String>("type")? {
                if ty != "custom" {
                    return Err(ApiError::invalid(
                        t.path("type"),
                        format!("server tools ({ty:?}) are not supported; only custom tools"),
                    ));
                }
            }
            let name: String = t.require("name")?;
            let description = t.take::<String>("description")?;
            let parameters = t.require_raw("input_schema")?;
            t.accept("cache_control");
            t.finish()?;
            tools.push(Tool {
                name,
                description,
                parameters,
            });
        }
    }
    // Several calls in one answer unless the client disables them, as Anthropic's API says.
    let mut parallel = Parallel::ByDefault;
    let choice = match f.take_raw("tool_choice") {
        None if tools.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(v) => {
            let mut c = Fields::nested(v, "tool_choice")?;
            if c.take::<bool>("disable_parallel_tool_use")? == Some(true) {
                parallel = Parallel::Off;
            }
            let choice = match c.require::<String>("type")?.as_str() {
                "auto" => ToolChoice::Auto,
                "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                "tool" => ToolChoice::Named(c.require("name")?),
                other => {
                    return Err(ApiError::invalid(
                        c.path("type"),
                        format!("{other:?} is not one of \"auto\", \"any\", \"tool\", \"none\""),
                    ))
                }
            };
            c.finish()?;
            choice
        }
    };
    Tools::checked(tools, choice, parallel, "tool_choice")
}

/// `metadata`: an object whose `user_id` labels the request in logs.
fn metadata(f: &mut Fields) -> Result<(), ApiError> {
    let Some(v) = f.take_raw("metadata") else {
        return Ok(());
    };
    let mut m = Fields::nested(v, "metadata")?;
    if let Some(user) = m.take::<String>("user_id")? {
        tracing::debug!(user, "request user");
    }
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(extra: Value) -> Result<MessagesRequest, ApiError> {
        let mut body = json!({"model": "m", "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        parse_messages(body)
    }

    #[test]
    fn system_blocks_and_consecutive_turns_become_alternating_messages() {
        let r = parse(json!({
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "text", "text": "b"}]},
                {"role": "assistant", "content": "c"},
                {"role": "user", "content": "d"},
            ],
            "stop_sequences": ["END"], "temperature": 0.0, "top_k": 5,
            "metadata": {"user_id": "u1"}, "stream": true,
        }))
        .unwrap();
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(r.messages[1].content, "a\n\nb");
        assert_eq!(r.options.stop, ["END"]);
        assert_eq!(r.options.max_tokens, Some(8));
        assert_eq!(r.options.sampling.top_k, 5);
        assert!(r.options.stream);
    }

    #[test]
    fn refusals_name_what_is_not_served() {
        let param = |extra: Value| parse(extra).unwrap_err().param().map(str::to_string);
        let missing = parse_messages(json!({"messages": [{"role": "user", "content": "x"}]}));
        assert_eq!(missing.unwrap_err().param(), Some("max_tokens"));
        assert_eq!(
            param(json!({"tools": [{"type": "bash_20250124", "name": "bash"}]})).as_deref(),
            Some("tools[0].type")
        );
        assert_eq!(
            param(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {}}]}]}))
            .as_deref(),
            Some("messages[0].content[0].type")
        );
        assert_eq!(
            param(json!({"messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "y"}]}))
            .as_deref(),
            Some("messages")
        );
        assert_eq!(
            param(json!({"frobnicate": 1})).as_deref(),
            Some("frobnicate")
        );
        assert_eq!(
            param(json!({"metadata": {"nope": 1}})).as_deref(),
            Some("metadata.nope")
        );
    }
}
