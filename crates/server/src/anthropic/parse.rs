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
//! - block types this server cannot serve yet (`image`, `document`, ...) and
//!   the `thinking` and `output_config` parameters are refused by name, never dropped;
//! - a conversation ending in an assistant turn (Anthropic's "prefill") is refused by name:
//!   continuing an assistant turn needs the template to leave it open, which it does not.

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::ChatMessage;
use serde_json::Value;

use std::collections::HashMap;

use crate::core::error::ApiError;
use crate::core::request::GenerationOptions;
use crate::core::tools::{render_call, render_result, Tool, ToolCall, ToolChoice, Tools};
use crate::http::params::{kind, Fields};

/// Parameters of the Messages API this server does not implement yet.
const UNSUPPORTED: &[&str] = &["thinking", "output_config", "mcp_servers", "container"];

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
    pub options: GenerationOptions,
    /// The tools offered, unless there are none or `tool_choice` is `none`.
    pub tools: Option<Tools>,
}

/// A `/v1/messages` body.
pub fn parse_messages(body: Value) -> Result<MessagesRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    let (messages, tools) = prompt(&mut f)?;
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
        grammar: tools.as_ref().and_then(Tools::grammar),
        ..GenerationOptions::default()
    };
    metadata(&mut f)?;
    f.finish()?;
    Ok(MessagesRequest {
        messages,
        options,
        tools,
    })
}

/// A `/v1/messages/count_tokens` body: the prompt part of a Messages body.
pub fn parse_count_tokens(body: Value) -> Result<(Option<String>, Vec<ChatMessage>), ApiError> {
    let mut f = Fields::from_body(body)?;
    let (messages, _) = prompt(&mut f)?;
    let model = f.take("model")?;
    f.finish()?;
    Ok((model, messages))
}

/// What a Messages body and a count_tokens body share: the refused and the no-effect
/// parameters, the tools, and the conversation with the tools described in its system turn.
fn prompt(f: &mut Fields) -> Result<(Vec<ChatMessage>, Option<Tools>), ApiError> {
    f.refuse_unsupported(UNSUPPORTED)?;
    for name in NO_EFFECT {
        f.accept(name);
    }
    let tools = parse_tools(f)?;
    let mut messages = conversation(f, tools.as_ref())?;
    if let Some(t) = &tools {
        t.describe_in(&mut messages);
    }
    Ok((messages, tools))
}

/// `system` and `messages`, as chat messages with alternating turns.
fn conversation(f: &mut Fields, tools: Option<&Tools>) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out: Vec<ChatMessage> = Vec::new();
    let mut calls = Calls {
        auto: tools.is_some_and(|t| t.choice == ToolChoice::Auto),
        names: HashMap::new(),
    };
    if let Some(system) = f.take_raw("system") {
        out.push(ChatMessage::new(
            "system",
            content(system, "system", &mut calls)?,
        ));
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
        let text = match m.take_raw("content") {
            None => {
                return Err(ApiError::MissingParameter {
                    param: content_path,
                })
            }
            Some(v) => content(v, &content_path, &mut calls)?,
        };
        m.finish()?;
        match out.last_mut() {
            Some(last) if last.role == role => {
                last.content.push_str("\n\n");
                last.content.push_str(&text);
            }
            _ => out.push(ChatMessage::new(role, text)),
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

/// The tool calls seen so far in a conversation, so that a result can name its tool.
struct Calls {
    /// Past calls are written with the `auto` marker, as this request's model writes them.
    auto: bool,
    names: HashMap<String, String>,
}

/// A string, or an array of blocks (joined with newlines): `text`, `tool_use` (a past call,
/// written as the model writes one), `tool_result` (written as a turn naming the tool), and
/// `thinking` / `redacted_thinking` (past reasoning, which clients send back and thinking
/// templates leave out of the prompt: dropped).
fn content(value: Value, path: &str, calls: &mut Calls) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s),
        Value::Array(blocks) => {
            let texts = blocks
                .into_iter()
                .enumerate()
                .map(|(j, b)| block(b, &format!("{path}[{j}]"), calls))
                .collect::<Result<Vec<_>, _>>()?;
            let texts: Vec<String> = texts.into_iter().filter(|t| !t.is_empty()).collect();
            Ok(texts.join("\n"))
        }
        other => Err(ApiError::invalid(
            path,
            format!(
                "expected a string or an array of content blocks, got {}",
                kind(&other)
            ),
        )),
    }
}

fn block(block: Value, path: &str, calls: &mut Calls) -> Result<String, ApiError> {
    let mut b = Fields::nested(block, path)?;
    let ty: String = b.require("type")?;
    // The prefix cache is automatic: a breakpoint changes nothing.
    b.accept("cache_control");
    let text = match ty.as_str() {
        "text" => {
            b.refuse_unsupported(&["citations"])?;
            b.require("text")?
        }
        "tool_use" => {
            let id: String = b.require("id")?;
            let name: String = b.require("name")?;
            let input = b.take_raw("input").unwrap_or_else(|| serde_json::json!({}));
            // Who made the call and from which toolset (Anthropic's programmatic tool
            // calling, tool search): no effect here.
            b.accept("caller");
            b.accept("toolset_name");
            calls.names.insert(id, name.clone());
            let call = ToolCall {
                name,
                arguments: input.to_string(),
            };
            render_call(&call, calls.auto)
        }
        "thinking" | "redacted_thinking" => {
            b.accept("thinking");
            b.accept("signature");
            b.accept("data");
            String::new()
        }
        "tool_result" => {
            let id: String = b.require("tool_use_id")?;
            let is_error = b.take::<bool>("is_error")?.unwrap_or(false);
            let cpath = b.path("content");
            let body = match b.take_raw("content") {
                None => String::new(),
                Some(v) => content(v, &cpath, calls)?,
            };
            let body = if is_error {
                format!("error: {body}")
            } else {
                body
            };
            render_result(calls.names.get(&id).map(String::as_str), &body)
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
    };
    b.finish()?;
    Ok(text)
}

/// `tools` (custom tools: `name`, `description`, `input_schema`) and `tool_choice`
/// (`auto`, `any`, `tool` with a `name`, `none`; `disable_parallel_tool_use` accepted: an
/// answer makes one call at most). Anthropic's server tools (`bash_…`, `web_search_…`) are
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
            let ipath = t.path("input_schema");
            let parameters = t
                .take_raw("input_schema")
                .ok_or(ApiError::MissingParameter { param: ipath })?;
            t.accept("cache_control");
            t.finish()?;
            tools.push(Tool {
                name,
                description,
                parameters,
            });
        }
    }
    let choice = match f.take_raw("tool_choice") {
        None if tools.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(v) => {
            let mut c = Fields::nested(v, "tool_choice")?;
            c.take::<bool>("disable_parallel_tool_use")?;
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
    Tools::checked(tools, choice, "tool_choice")
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
