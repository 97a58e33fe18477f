//! The conversation as the model's template takes it: every tool result named after the
//! tool whose call it answers, and for a template that knows no tools
//! ([`ToolFormat::Generic`]) what the template cannot do itself: the tool descriptions go into
//! the system text, a past call is written as the model writes one, and a tool's result
//! becomes a user turn naming the tool, so the model reads its past calls in the form it
//! writes them.

use std::collections::HashMap;

use ferrox_engine::template::ChatMessage;

use crate::core::tool_syntax::{write_calls, ToolFormat, CALL_CLOSE, CALL_OPEN};
use crate::core::tools::{ToolChoice, Tools};

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
        ToolFormat::Hermes | ToolFormat::Llama3 | ToolFormat::Harmony(_) => messages,
        ToolFormat::Generic => {
            let mut out = written_out(messages);
            if let Some(t) = tools {
                describe_in(t, &mut out);
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

/// Writes the tool descriptions into the system turn (a new one if there is none).
fn describe_in(tools: &Tools, messages: &mut Vec<ChatMessage>) {
    let Some(text) = system_text(tools) else {
        return;
    };
    match messages.first_mut().filter(|m| m.role == "system") {
        Some(system) => system.content = format!("{}\n\n{text}", system.content),
        None => messages.insert(0, ChatMessage::new("system", text)),
    }
}

/// The text that tells the model about its tools, for the system turn; `None` with
/// `tool_choice: none`.
fn system_text(tools: &Tools) -> Option<String> {
    let callable = tools.callable();
    if callable.is_empty() {
        return None;
    }
    let call = format!(
        "{CALL_OPEN}\n{{\"name\": <tool name>, \"arguments\": <arguments object>}}\n\
         {CALL_CLOSE}"
    );
    let how = match tools.choice {
        ToolChoice::Auto => {
            format!("To call a tool, answer with only {call}; otherwise answer normally.")
        }
        _ => format!("Answer with only {call}, calling one of them."),
    };
    let mut text = format!("You can call these tools. {how}\nTools:");
    for t in callable {
        text.push_str(&format!("\n- {}", t.name));
        if let Some(d) = &t.description {
            text.push_str(&format!(": {d}"));
        }
        text.push_str(&format!(" Parameters: {}", t.parameters));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tools::tests::weather_tools;
    use crate::core::tools::Parallel;
    use ferrox_engine::template::ChatToolCall;

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
}
