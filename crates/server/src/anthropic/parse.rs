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
//! - block types this server cannot serve yet (`image`, `document`, `tool_use`,
//!   `tool_result`, `thinking`, ...) and the `tools`, `tool_choice`, `thinking` and
//!   `output_config` parameters are refused by name, never dropped;
//! - a conversation ending in an assistant turn (Anthropic's "prefill") is refused by name:
//!   continuing an assistant turn needs the template to leave it open, which it does not.

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::ChatMessage;
use serde_json::Value;

use crate::core::error::ApiError;
use crate::core::request::GenerationOptions;
use crate::http::params::{kind, Fields};

/// Parameters of the Messages API this server does not implement yet.
const UNSUPPORTED: &[&str] = &[
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "mcp_servers",
    "container",
];

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
}

/// A `/v1/messages` body.
pub fn parse_messages(body: Value) -> Result<MessagesRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    f.refuse_unsupported(UNSUPPORTED)?;
    for name in NO_EFFECT {
        f.accept(name);
    }
    let messages = conversation(&mut f)?;
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
        ..GenerationOptions::default()
    };
    metadata(&mut f)?;
    f.finish()?;
    Ok(MessagesRequest { messages, options })
}

/// A `/v1/messages/count_tokens` body: the prompt part of a Messages body.
pub fn parse_count_tokens(body: Value) -> Result<(Option<String>, Vec<ChatMessage>), ApiError> {
    let mut f = Fields::from_body(body)?;
    f.refuse_unsupported(UNSUPPORTED)?;
    for name in NO_EFFECT {
        f.accept(name);
    }
    let messages = conversation(&mut f)?;
    let model = f.take("model")?;
    f.finish()?;
    Ok((model, messages))
}

/// `system` and `messages`, as chat messages with alternating turns.
fn conversation(f: &mut Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out: Vec<ChatMessage> = Vec::new();
    if let Some(system) = f.take_raw("system") {
        out.push(ChatMessage::new("system", content(system, "system")?));
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
            Some(v) => content(v, &content_path)?,
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

/// A string, or an array of `text` blocks (joined with newlines).
fn content(value: Value, path: &str) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s),
        Value::Array(blocks) => {
            let texts = blocks
                .into_iter()
                .enumerate()
                .map(|(j, b)| text_block(b, &format!("{path}[{j}]")))
                .collect::<Result<Vec<_>, _>>()?;
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

fn text_block(block: Value, path: &str) -> Result<String, ApiError> {
    let mut b = Fields::nested(block, path)?;
    let ty: String = b.require("type")?;
    if ty != "text" {
        return Err(ApiError::invalid(
            b.path("type"),
            format!(
                "content blocks of type {ty:?} are not supported by this server yet; only \"text\""
            ),
        ));
    }
    let text: String = b.require("text")?;
    // The prefix cache is automatic: a breakpoint changes nothing.
    b.accept("cache_control");
    b.refuse_unsupported(&["citations"])?;
    b.finish()?;
    Ok(text)
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
        assert_eq!(param(json!({"tools": []})).as_deref(), Some("tools"));
        assert_eq!(
            param(json!({"messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "x"}]}]}))
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
