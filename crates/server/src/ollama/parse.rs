//! Ollama's request bodies, parsed into the core's request: `/api/chat`, `/api/generate`,
//! `/api/embed` and `/api/embeddings`. Unknown fields are refused by name like everywhere
//! else; `null` is taken as absent (the official clients leave out what is unset).
//!
//! Choices where Ollama's API is loose:
//! - `stream` is true unless sent false, as in Ollama;
//! - a tool result (`role: "tool"`) answers the call its `tool_call_id` names, else the
//!   oldest unanswered call of the tool its `tool_name` names, else the oldest unanswered
//!   call: Ollama's calls carry no ids, LangChain's do, and some clients drop them;
//! - an assistant turn's `thinking` is accepted and not shown to the model again (the
//!   templates of thinking models drop past reasoning too);
//! - `images` must be absent or empty: no loaded model can see;
//! - `think: true` needs a thinking model whose reasoning is split (not with tools or a
//!   format); `think: false` on a model that always thinks leaves the reasoning out of the
//!   reply; levels (`"high"`) are for gpt-oss, which is not served yet: a 400 naming
//!   `think`.

use std::collections::VecDeque;

use ferrox_engine::template::{ChatMessage, ChatToolCall};
use serde_json::Value;

use super::options;
use crate::core::error::ApiError;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::{GenerationOptions, Prompt};
use crate::core::tools::{Parallel, Tool, ToolChoice, Tools};
use crate::http::params::{kind, Fields};

/// Most `top_logprobs` a request may ask for (Ollama's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// What a generating request (`/api/chat` or `/api/generate`) asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub model: String,
    pub prompt: PromptKind,
    pub options: GenerationOptions,
    /// `think`: `None` when not sent.
    pub think: Option<bool>,
    /// Logprobs on each line (`logprobs: true`).
    pub logprobs: bool,
}

/// The prompt of a generating request.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptKind {
    /// No messages, or no prompt: Ollama's idiom to load (or with `keep_alive: 0` unload) a
    /// model.
    Empty,
    /// Messages through the model's template (`/api/chat`, and `/api/generate` with its
    /// `system` and `prompt`).
    Chat(Vec<ChatMessage>),
    /// `/api/generate` with `raw: true`: the text as it is.
    Raw(String),
    /// `/api/generate` with a `suffix`: fill in the middle between the prompt and it.
    Fill { prefix: String, suffix: String },
}

/// An `/api/chat` body (without `keep_alive`, which the registry takes).
pub fn chat(body: Value) -> Result<Request, ApiError> {
    let mut f = Fields::from_body(body)?;
    let model = model(&mut f)?;
    let messages = match f.take_raw("messages") {
        None => Vec::new(),
        Some(Value::Array(items)) => messages(items)?,
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("expected an array, got {}", kind(&other)),
            ))
        }
    };
    let tools = Tool::from_functions(f.take_raw("tools"))?;
    // Ollama has no tool_choice: the model may answer or call, and call several.
    let tools = Tools::checked(tools, ToolChoice::Auto, Parallel::ByDefault, "tools")?;
    let mut options = common(&mut f)?;
    options.tools = tools;
    let (think, logprobs) = think_and_logprobs(&mut f, &mut options)?;
    f.finish()?;
    let prompt = match messages.is_empty() {
        true => PromptKind::Empty,
        false => PromptKind::Chat(messages),
    };
    Ok(Request {
        model,
        prompt,
        options,
        think,
        logprobs,
    })
}

/// An `/api/generate` body (without `keep_alive`).
pub fn generate(body: Value) -> Result<Request, ApiError> {
    let mut f = Fields::from_body(body)?;
    let model = model(&mut f)?;
    let text: String = f.take("prompt")?.unwrap_or_default();
    let suffix: Option<String> = f.take("suffix")?;
    let system: Option<String> = f.take("system")?;
    let raw: bool = f.take("raw")?.unwrap_or(false);
    if f.take::<String>("template")?.is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::invalid(
            "template",
            "this server renders the model's own chat template and takes no other; send \
             raw: true with the prompt written out instead",
        ));
    }
    if f.take::<Vec<Value>>("context")?
        .is_some_and(|c| !c.is_empty())
    {
        return Err(ApiError::invalid(
            "context",
            "a previous answer's context is not taken: send the conversation to /api/chat \
             (the prefix cache makes each turn as fast)",
        ));
    }
    refuse_images(&mut f, "images")?;
    let options = common(&mut f)?;
    let mut options = options;
    let (think, logprobs) = think_and_logprobs(&mut f, &mut options)?;
    f.finish()?;
    let prompt = match (raw, suffix, system) {
        (true, Some(_), _) => {
            return Err(ApiError::invalid(
                "suffix",
                "a raw prompt takes no suffix: lay out the fill-in-the-middle tokens yourself",
            ))
        }
        (true, None, Some(_)) => {
            return Err(ApiError::invalid(
                "system",
                "a raw prompt takes no system prompt: write it into the prompt",
            ))
        }
        (true, None, None) if text.is_empty() => PromptKind::Empty,
        (true, None, None) => PromptKind::Raw(text),
        (false, Some(suffix), _) => PromptKind::Fill {
            prefix: text,
            suffix,
        },
        (false, None, _) if text.is_empty() => PromptKind::Empty,
        (false, None, system) => {
            let mut messages: Vec<ChatMessage> = system
                .into_iter()
                .map(|s| ChatMessage::new("system", s))
                .collect();
            messages.push(ChatMessage::new("user", text));
            PromptKind::Chat(messages)
        }
    };
    Ok(Request {
        model,
        prompt,
        options,
        think,
        logprobs,
    })
}

/// What an embedding request asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    pub model: String,
    pub inputs: Vec<Prompt>,
}

/// An `/api/embed` body: `input` one string or a list of them. `truncate` is accepted
/// either way: an input longer than the context is refused, never cut (docs/API.md).
/// `options` are checked and have nothing to change (an embedding samples nothing).
pub fn embed(body: Value) -> Result<EmbedRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    let model = model(&mut f)?;
    let inputs = match f.take_raw("input") {
        None => {
            return Err(ApiError::MissingParameter {
                param: "input".into(),
            })
        }
        Some(Value::String(s)) => vec![Prompt::Text(s)],
        Some(Value::Array(items)) if !items.is_empty() => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(Prompt::Text(s)),
                other => Err(ApiError::invalid(
                    format!("input[{i}]"),
                    format!("expected a string, got {}", kind(&other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "expected a string or a non-empty array of strings, got {}",
                    kind(&other)
                ),
            ))
        }
    };
    f.take::<bool>("truncate")?;
    if f.take_raw("dimensions").is_some() {
        return Err(ApiError::invalid(
            "dimensions",
            "vectors come at the model's own size; shortening them is not supported",
        ));
    }
    options::parse(f.take_raw("options"))?;
    f.finish()?;
    Ok(EmbedRequest { model, inputs })
}

/// The older `/api/embeddings` body: one `prompt`.
pub fn embeddings(body: Value) -> Result<EmbedRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    let model = model(&mut f)?;
    let prompt: String = f.require("prompt")?;
    options::parse(f.take_raw("options"))?;
    f.finish()?;
    Ok(EmbedRequest {
        model,
        inputs: vec![Prompt::Text(prompt)],
    })
}

/// `model`, required as Ollama requires it.
pub fn model(f: &mut Fields) -> Result<String, ApiError> {
    let model: String = f.require("model")?;
    if model.is_empty() {
        return Err(ApiError::MissingParameter {
            param: "model".into(),
        });
    }
    Ok(model)
}

/// `format`, `options` and `stream`, which both generating routes take.
fn common(f: &mut Fields) -> Result<GenerationOptions, ApiError> {
    let grammar = match f.take_raw("format") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) if s == "json" => Some(GrammarSpec::JsonObject),
        Some(schema @ Value::Object(_)) => Some(GrammarSpec::JsonSchema(schema)),
        Some(other) => {
            return Err(ApiError::invalid(
                "format",
                format!("expected \"json\" or a JSON schema object, got {other}"),
            ))
        }
    };
    let o = options::parse(f.take_raw("options"))?;
    let stream = f.take("stream")?.unwrap_or(true);
    Ok(GenerationOptions {
        max_tokens: o.max_tokens,
        max_tokens_param: "num_predict",
        fill_context: o.fill_context,
        context_limit: o.context,
        clamp_to_context: true,
        sampling: o.sampling,
        seed: o.seed,
        stop: o.stop,
        stream,
        speculation: f.speculative()?,
        grammar: grammar.map(|spec| GrammarRequest {
            spec,
            param: "format".into(),
        }),
        ..GenerationOptions::default()
    })
}

/// `think` and `logprobs` / `top_logprobs`. `think: true`/`false` also reaches the chat
/// template as `enable_thinking` (Qwen 3's switch); a level (`"low"`, `"medium"`,
/// `"high"`, gpt-oss's) as `reasoning_effort`, and counts as `think: true`.
fn think_and_logprobs(
    f: &mut Fields,
    options: &mut GenerationOptions,
) -> Result<(Option<bool>, bool), ApiError> {
    let think = match f.take_raw("think") {
        None => None,
        Some(Value::Bool(b)) => {
            options.template_vars = Some(serde_json::json!({ "enable_thinking": b }));
            Some(b)
        }
        Some(Value::String(level)) if matches!(level.as_str(), "low" | "medium" | "high") => {
            options.template_vars = Some(serde_json::json!({ "reasoning_effort": level }));
            Some(true)
        }
        Some(Value::String(level)) => {
            return Err(ApiError::invalid(
                "think",
                format!("expected true, false, \"low\", \"medium\" or \"high\", got {level:?}"),
            ))
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "think",
                format!("expected true or false, got {}", kind(&other)),
            ))
        }
    };
    let logprobs: bool = f.take("logprobs")?.unwrap_or(false);
    let top: Option<usize> = f.take("top_logprobs")?;
    match top {
        Some(k) if k > MAX_TOP_LOGPROBS => {
            return Err(ApiError::invalid(
                "top_logprobs",
                format!("at most {MAX_TOP_LOGPROBS}, got {k}"),
            ))
        }
        Some(k) if k > 0 && !logprobs => {
            return Err(ApiError::invalid("top_logprobs", "needs logprobs: true"))
        }
        _ => {}
    }
    if logprobs {
        options.logprobs = Some(top.unwrap_or(0));
    }
    Ok((think, logprobs))
}

fn refuse_images(f: &mut Fields, name: &str) -> Result<(), ApiError> {
    match f.take_raw(name) {
        Some(Value::Array(a)) if !a.is_empty() => Err(ApiError::invalid(
            f.path(name),
            "images are not supported: no model this server loads can see",
        )),
        None | Some(Value::Array(_)) => Ok(()),
        Some(other) => Err(ApiError::invalid(
            f.path(name),
            format!("expected an array, got {}", kind(&other)),
        )),
    }
}

/// The messages of a chat, tool results matched to the calls they answer.
fn messages(items: Vec<Value>) -> Result<Vec<ChatMessage>, ApiError> {
    // Calls not answered yet, oldest first: (id, tool name).
    let mut pending: VecDeque<(String, String)> = VecDeque::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let mut m = Fields::nested(item, &format!("messages[{i}]"))?;
        let role: String = m.require("role")?;
        let content: String = m.take("content")?.unwrap_or_default();
        refuse_images(&mut m, "images")?;
        let message = match role.as_str() {
            "system" | "user" => ChatMessage::new(role, content),
            "assistant" => {
                m.take::<String>("thinking")?;
                let mut message = ChatMessage::new("assistant", content);
                if let Some(calls) = m.take_raw("tool_calls") {
                    message.tool_calls = tool_calls(calls, &m.path("tool_calls"), i)?;
                    pending.extend(
                        message
                            .tool_calls
                            .iter()
                            .map(|c| (c.id.clone(), c.name.clone())),
                    );
                }
                message
            }
            "tool" => {
                let id: Option<String> = m.take("tool_call_id")?;
                let name: Option<String> = m.take("tool_name")?;
                // By id, else by tool name, else the oldest: clients that strip the calls'
                // ids still send results in order.
                let by_id = id
                    .as_ref()
                    .and_then(|id| pending.iter().position(|(p, _)| p == id));
                let by_name = || {
                    name.as_ref()
                        .and_then(|name| pending.iter().position(|(_, n)| n == name))
                };
                let at = by_id
                    .or_else(by_name)
                    .or_else(|| (!pending.is_empty()).then_some(0));
                let answered = at.and_then(|at| pending.remove(at));
                let call_id = answered
                    .as_ref()
                    .map(|(id, _)| id.clone())
                    .or(id)
                    .unwrap_or_else(|| format!("call_{i}"));
                let mut result = ChatMessage::tool_result(call_id, content);
                result.name = name.or(answered.map(|(_, n)| n));
                result
            }
            other => {
                return Err(ApiError::invalid(
                    m.path("role"),
                    format!("role {other:?} is not one of system, user, assistant, tool"),
                ))
            }
        };
        m.finish()?;
        out.push(message);
    }
    Ok(out)
}

/// An assistant turn's `tool_calls`: `{"function": {"name", "arguments"}}`, the arguments an
/// object (Ollama) or JSON text (as OpenAI writes them); an `id`, `type` and `index` may
/// come along. A call without an id gets one from its place in the conversation.
fn tool_calls(value: Value, path: &str, turn: usize) -> Result<Vec<ChatToolCall>, ApiError> {
    let Value::Array(items) = value else {
        return Err(ApiError::invalid(path, "expected an array"));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(k, item)| {
            let mut c = Fields::nested(item, &format!("{path}[{k}]"))?;
            let id: Option<String> = c.take("id")?;
            if c.take::<String>("type")?.is_some_and(|t| t != "function") {
                return Err(ApiError::invalid(c.path("type"), "must be \"function\""));
            }
            c.take::<u64>("index")?;
            let fpath = c.path("function");
            let func = c.require_raw("function")?;
            c.finish()?;
            let mut f = Fields::nested(func, &fpath)?;
            let name: String = f.require("name")?;
            f.take::<u64>("index")?;
            let arguments = match f.take_raw("arguments") {
                None => Value::Object(Default::default()),
                Some(Value::String(text)) => {
                    serde_json::from_str(&text).unwrap_or(Value::String(text))
                }
                Some(v @ Value::Object(_)) => v,
                Some(other) => {
                    return Err(ApiError::invalid(
                        f.path("arguments"),
                        format!("expected an object, got {}", kind(&other)),
                    ))
                }
            };
            f.finish()?;
            Ok(ChatToolCall {
                id: id.unwrap_or_else(|| format!("call_{turn}_{k}")),
                name,
                arguments,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_results_answer_their_calls_by_id_by_name_or_in_order() {
        let r = chat(json!({
            "model": "m",
            "messages": [
                {"role": "user", "content": "weather and time?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "weather", "arguments": {"city": "Rome"}}},
                    {"function": {"name": "time", "arguments": "{\"tz\": \"CET\"}"}},
                ]},
                {"role": "tool", "content": "12:00", "tool_name": "time", "tool_call_id": "lost"},
                {"role": "tool", "content": "sunny"},
            ],
        }))
        .unwrap();
        let PromptKind::Chat(m) = r.prompt else {
            panic!("a chat")
        };
        let calls = &m[1].tool_calls;
        assert_eq!(calls[0].arguments, json!({"city": "Rome"}));
        assert_eq!(calls[1].arguments, json!({"tz": "CET"}));
        assert_eq!(m[2].tool_call_id.as_ref(), Some(&calls[1].id));
        assert_eq!(m[2].name.as_deref(), Some("time"));
        assert_eq!(m[3].tool_call_id.as_ref(), Some(&calls[0].id));
        assert_eq!(m[3].name.as_deref(), Some("weather"));
        assert!(r.options.stream, "Ollama streams unless told not to");
        assert_eq!(r.options.max_tokens_param, "num_predict");
    }

    #[test]
    fn generate_prompts_and_the_empty_idiom() {
        let kind = |body: Value| generate(body).map(|r| r.prompt);
        assert_eq!(kind(json!({"model": "m"})).unwrap(), PromptKind::Empty);
        assert_eq!(
            kind(json!({"model": "m", "prompt": "hi", "system": "be brief"})).unwrap(),
            PromptKind::Chat(vec![
                ChatMessage::new("system", "be brief"),
                ChatMessage::new("user", "hi")
            ])
        );
        assert_eq!(
            kind(json!({"model": "m", "prompt": "a", "raw": true})).unwrap(),
            PromptKind::Raw("a".into())
        );
        assert_eq!(
            kind(json!({"model": "m", "prompt": "def f(", "suffix": "\n"})).unwrap(),
            PromptKind::Fill {
                prefix: "def f(".into(),
                suffix: "\n".into()
            }
        );
        let param = |body: Value| match generate(body) {
            Err(ApiError::InvalidParameter { param, .. }) => param,
            other => panic!("{other:?}"),
        };
        assert_eq!(param(json!({"model": "m", "context": [1, 2]})), "context");
        assert_eq!(param(json!({"model": "m", "images": ["aGk="]})), "images");
        assert_eq!(param(json!({"model": "m", "think": "extreme"})), "think");
        assert_eq!(param(json!({"model": "m", "format": 3})), "format");
        assert_eq!(
            param(json!({"model": "m", "prompt": "a", "raw": true, "system": "s"})),
            "system"
        );
        assert!(matches!(
            generate(json!({"prompt": "hi"})),
            Err(ApiError::MissingParameter { .. })
        ));
    }
}
