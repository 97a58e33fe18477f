//! OpenAI request bodies to protocol-free requests, parsed once: [`parse_chat`] and
//! [`parse_completion`] read every parameter (and refuse every other one) into a
//! [`ChatRequest`] / [`CompletionRequest`], whose shared part is the core's
//! [`GenerationOptions`]. Nothing after this module looks at the JSON again. The Responses
//! API (`responses.rs`) reuses [`message_fields`], [`cache_salt`] and [`user`].
//!
//! What is checked here: types, ranges the API itself defines (`n`, `top_logprobs`,
//! `logit_bias` values, `max_tokens` being a sane number), and combinations
//! (`stream_options` without `stream`, `top_logprobs` without `logprobs`). What is checked
//! later, by the one owner of each rule: sampling ranges (`SamplingParams::validate`, through
//! the scheduler's refusal), the context and KV ceilings (the scheduler's `Limits`), the
//! model name (the registry, `models::Pinned`) and token ids (the vocabulary).

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::{ChatMessage, ChatToolCall};

use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::{GenerationOptions, Prompt};
use crate::http::params::{kind, Fields};
use crate::openai::tool_calls::parse_tools;

/// Most choices one request may ask for (`n`); each is a sequence in the batch.
pub const MAX_N: usize = 16;
/// Most alternatives reported per token (`top_logprobs`, completions' `logprobs`).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// OpenAI chat parameters this server does not implement: refused, never ignored.
const CHAT_UNSUPPORTED: &[&str] = &[
    "functions",
    "function_call",
    "audio",
    "modalities",
    "prediction",
    "reasoning_effort",
    "web_search_options",
    "store",
    "metadata",
    "service_tier",
];

/// OpenAI completions parameters this server does not implement.
const COMPLETION_UNSUPPORTED: &[&str] = &["suffix"];

/// A chat request: the messages, the generation options and the OpenAI-only stream flag.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub options: GenerationOptions,
    /// Streaming only: send a last chunk with the usage.
    pub include_usage: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    pub options: GenerationOptions,
    pub include_usage: bool,
}

/// A `/v1/chat/completions` body.
pub fn parse_chat(body: Value) -> Result<ChatRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    f.refuse_unsupported(CHAT_UNSUPPORTED)?;
    let tools = parse_tools(&mut f)?;
    let messages = parse_messages(f.take_raw("messages"))?;
    let (mut options, include_usage) = parse_options(&mut f)?;
    if let Some(m) = f.max_tokens("max_completion_tokens")? {
        if options.max_tokens.is_some_and(|t| t != m) {
            return Err(ApiError::invalid(
                "max_tokens",
                "max_tokens and max_completion_tokens disagree; send one",
            ));
        }
        options.max_tokens = Some(m);
        options.max_tokens_param = "max_completion_tokens";
    }
    let logprobs: bool = f.take("logprobs")?.unwrap_or(false);
    let top: Option<usize> = f.take("top_logprobs")?;
    if let Some(top) = top {
        if !logprobs {
            return Err(ApiError::invalid(
                "top_logprobs",
                "top_logprobs requires logprobs: true",
            ));
        }
        check_top_logprobs("top_logprobs", top)?;
    }
    options.logprobs = logprobs.then_some(top.unwrap_or(0));
    options.template_vars = template_vars(&mut f)?;
    f.finish()?;
    options.tools = tools;
    Ok(ChatRequest {
        messages,
        options,
        include_usage,
    })
}

/// vLLM's and llama-server's `chat_template_kwargs`: an object of variables for the chat
/// template (Qwen 3's `enable_thinking`, gpt-oss's `reasoning_effort`, ...).
fn template_vars(f: &mut Fields) -> Result<Option<Value>, ApiError> {
    match f.take_raw("chat_template_kwargs") {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v)),
        Some(other) => Err(ApiError::invalid(
            "chat_template_kwargs",
            format!("expected an object, got {}", kind(&other)),
        )),
    }
}

/// A `/v1/completions` body.
pub fn parse_completion(body: Value) -> Result<CompletionRequest, ApiError> {
    let mut f = Fields::from_body(body)?;
    f.refuse_unsupported(COMPLETION_UNSUPPORTED)?;
    let prompt = parse_prompt(f.take_raw("prompt"))?;
    let (mut options, include_usage) = parse_options(&mut f)?;
    if let Some(top) = f.take::<usize>("logprobs")? {
        check_top_logprobs("logprobs", top)?;
        options.logprobs = Some(top);
    }
    if f.take::<bool>("echo")? == Some(true) {
        return Err(ApiError::UnsupportedParameter {
            param: "echo".into(),
        });
    }
    if let Some(best_of) = f.take::<usize>("best_of")? {
        if best_of != options.n {
            return Err(ApiError::UnsupportedParameter {
                param: "best_of".into(),
            });
        }
    }
    f.finish()?;
    Ok(CompletionRequest {
        prompt,
        options,
        include_usage,
    })
}

/// The parameters chat and completions share, and `stream_options.include_usage`.
fn parse_options(f: &mut Fields) -> Result<(GenerationOptions, bool), ApiError> {
    let model = f.take::<String>("model")?;
    let max_tokens = f.max_tokens("max_tokens")?;
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: f.take("temperature")?.unwrap_or(defaults.temperature),
        top_p: f.take("top_p")?.unwrap_or(defaults.top_p),
        top_k: f.top_k()?,
        min_p: f.take("min_p")?.unwrap_or(defaults.min_p),
        presence_penalty: f.take("presence_penalty")?.unwrap_or(0.0),
        frequency_penalty: f.take("frequency_penalty")?.unwrap_or(0.0),
        repetition_penalty: f.take("repetition_penalty")?.unwrap_or(1.0),
        logit_bias: logit_bias(f)?,
        ..defaults
    };
    let seed = f.seed("seed")?;
    let stop = f.stop("stop")?;
    let ignore_eos = f.take("ignore_eos")?.unwrap_or(false);
    let n: usize = f.take("n")?.unwrap_or(1);
    if n == 0 || n > MAX_N {
        return Err(ApiError::invalid(
            "n",
            format!("must be in 1..={MAX_N}, got {n}"),
        ));
    }
    let stream = f.take("stream")?.unwrap_or(false);
    let include_usage = match f.take_raw("stream_options") {
        None => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options",
                "stream_options is only allowed with stream: true",
            ))
        }
        Some(v) => {
            let mut so = Fields::nested(v, "stream_options")?;
            let include = so.take("include_usage")?.unwrap_or(false);
            so.finish()?;
            include
        }
    };
    let cache_salt = cache_salt(f)?;
    let grammar = response_format(f)?;
    // Accepted for compatibility; it only labels the request in logs.
    user(f)?;
    let options = GenerationOptions {
        model,
        max_tokens,
        sampling,
        seed,
        stop,
        ignore_eos,
        n,
        stream,
        cache_salt,
        grammar,
        speculation: f.speculative()?,
        ..GenerationOptions::default()
    };
    Ok((options, include_usage))
}

/// `response_format`: `{"type": "text"}` (no constraint), `{"type": "json_object"}` (any
/// JSON object) or `{"type": "json_schema", "json_schema": {"name", "schema", "strict",
/// "description"}}`. The schema is always enforced, `strict` or not.
fn response_format(f: &mut Fields) -> Result<Option<GrammarRequest>, ApiError> {
    let Some(v) = f.take_raw("response_format") else {
        return Ok(None);
    };
    let mut rf = Fields::nested(v, "response_format")?;
    let spec = match rf.require::<String>("type")?.as_str() {
        "text" => None,
        "json_object" => Some(GrammarSpec::JsonObject),
        "json_schema" => {
            let path = rf.path("json_schema");
            let inner = rf.require_raw("json_schema")?;
            let mut j = Fields::nested(inner, &path)?;
            let spec = json_schema_fields(&mut j)?;
            j.finish()?;
            Some(spec)
        }
        other => {
            return Err(ApiError::invalid(
                rf.path("type"),
                format!("{other:?} is not one of \"text\", \"json_object\", \"json_schema\""),
            ))
        }
    };
    rf.finish()?;
    Ok(spec.map(|spec| GrammarRequest {
        spec,
        param: "response_format".into(),
    }))
}

/// A JSON schema format's fields (`name` required, as OpenAI requires it; `schema` absent
/// means any JSON value), shared by chat's `response_format.json_schema` and the Responses
/// API's `text.format`.
pub fn json_schema_fields(j: &mut Fields) -> Result<GrammarSpec, ApiError> {
    let _name: String = j.require("name")?;
    j.accept("description");
    j.take::<bool>("strict")?;
    let schema = j.take_raw("schema").unwrap_or(serde_json::json!({}));
    if !schema.is_object() && !schema.is_boolean() {
        return Err(ApiError::invalid(
            j.path("schema"),
            format!("a JSON schema is an object, got {}", kind(&schema)),
        ));
    }
    Ok(GrammarSpec::JsonSchema(schema))
}

/// vLLM's `cache_salt`: a non-empty string when given.
pub fn cache_salt(f: &mut Fields) -> Result<Option<String>, ApiError> {
    let salt = f.take::<String>("cache_salt")?;
    if salt.as_deref() == Some("") {
        return Err(ApiError::invalid(
            f.path("cache_salt"),
            "must be a non-empty string when given",
        ));
    }
    Ok(salt)
}

/// `user`: a string, accepted; it only labels the request in logs.
pub fn user(f: &mut Fields) -> Result<(), ApiError> {
    if let Some(user) = f.take::<String>("user")? {
        tracing::debug!(user, "request user");
    }
    Ok(())
}

/// OpenAI's `{"token id as a string": bias}`, each bias in [-100, 100].
fn logit_bias(f: &mut Fields) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(map) = f.take::<serde_json::Map<String, Value>>("logit_bias")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map {
        let token: u32 = key.trim().parse().map_err(|_| {
            ApiError::invalid("logit_bias", format!("key {key:?} is not a token id"))
        })?;
        let bias = value
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!(
                        "the bias for token {token} must be a number in [-100, 100], got {value}"
                    ),
                )
            })?;
        out.push((token, bias as f32));
    }
    out.sort_by_key(|&(t, _)| t);
    Ok(out)
}

fn check_top_logprobs(name: &str, top: usize) -> Result<(), ApiError> {
    if top > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid(
            name,
            format!("must be in 0..={MAX_TOP_LOGPROBS}, got {top}"),
        ));
    }
    Ok(())
}

/// A string, or a list of token ids. Batches (a list of strings or of lists) are refused:
/// send one prompt per request, or use `n` for several choices of one prompt.
fn parse_prompt(value: Option<Value>) -> Result<Prompt, ApiError> {
    match value {
        None => Err(ApiError::MissingParameter {
            param: "prompt".into(),
        }),
        Some(Value::String(s)) => Ok(Prompt::Text(s)),
        Some(Value::Array(items)) => {
            let mut ids = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                match v.as_u64().and_then(|t| u32::try_from(t).ok()) {
                    Some(t) => ids.push(t),
                    None if v.is_string() || v.is_array() => {
                        return Err(ApiError::invalid(
                            "prompt",
                            "batched prompts are not supported: send one prompt per request",
                        ))
                    }
                    None => {
                        return Err(ApiError::invalid(
                            format!("prompt[{i}]"),
                            format!("expected a token id, got {v}"),
                        ))
                    }
                }
            }
            Ok(Prompt::Tokens(ids))
        }
        Some(other) => Err(ApiError::invalid(
            "prompt",
            format!(
                "expected a string or an array of token ids, got {}",
                kind(&other)
            ),
        )),
    }
}

pub fn parse_messages(value: Option<Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match value {
        None => {
            return Err(ApiError::MissingParameter {
                param: "messages".into(),
            })
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::invalid(
                "messages",
                format!("expected an array, got {}", kind(&other)),
            ))
        }
    };
    if items.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "must hold at least one message",
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| parse_message(v, &format!("messages[{i}]")))
        .collect()
}

/// One chat message: `role` (system, developer, user, assistant, tool) and `content` (a
/// string, or a list of `{"type": "text", "text"}` parts, joined with newlines); an
/// assistant's `tool_calls`, a tool result's `tool_call_id`.
fn parse_message(value: Value, path: &str) -> Result<ChatMessage, ApiError> {
    let mut m = Fields::nested(value, path)?;
    m.refuse_unsupported(&["function_call", "refusal", "audio"])?;
    // The participant's name (LangGraph names its agents' messages): the template gets it.
    let name: Option<String> = m.take("name")?;
    let role = m.take_raw("role");
    if role.as_ref().is_some_and(|r| r == "tool") {
        let id: String = m.require("tool_call_id")?;
        m.map_insert("role", json!("user"));
        let result = message_fields(&mut m, &["text"])?;
        m.finish()?;
        let mut message = ChatMessage::tool_result(id, result.content);
        message.name = name;
        return Ok(message);
    }
    if let Some(role) = role {
        m.map_insert("role", role);
    }
    let tool_calls = m.take_raw("tool_calls");
    let Some(tool_calls) = tool_calls else {
        let mut message = message_fields(&mut m, &["text"])?;
        m.finish()?;
        message.name = name;
        return Ok(message);
    };
    // An assistant turn that called tools: its text (if any) and its calls.
    let content_missing = m
        .take_raw("content")
        .map(|c| m.map_insert("content", c))
        .is_none();
    if content_missing {
        m.map_insert("content", json!(""));
    }
    let mut message = message_fields(&mut m, &["text"])?;
    if message.role != "assistant" {
        return Err(ApiError::invalid(
            m.path("tool_calls"),
            "only assistant messages carry tool_calls",
        ));
    }
    let Value::Array(items) = tool_calls else {
        return Err(ApiError::invalid(m.path("tool_calls"), "expected an array"));
    };
    let base = m.path("tool_calls");
    for (k, item) in items.into_iter().enumerate() {
        let mut c = Fields::nested(item, &format!("{base}[{k}]"))?;
        let id: String = c.require("id")?;
        // OpenAI requires it, and a call of another type is not a function call to replay.
        if c.require::<String>("type")? != "function" {
            return Err(ApiError::invalid(c.path("type"), "must be \"function\""));
        }
        let fpath = c.path("function");
        let func = c.require_raw("function")?;
        c.finish()?;
        let mut f = Fields::nested(func, &fpath)?;
        let name: String = f.require("name")?;
        let arguments = f.take::<String>("arguments")?;
        f.finish()?;
        let arguments = arguments.as_deref().unwrap_or("{}");
        message
            .tool_calls
            .push(ChatToolCall::from_text(id, name, arguments));
    }
    m.finish()?;
    message.name = name;
    Ok(message)
}

/// The `role` and `content` of a message object, its content parts of `part_types`; the
/// chat route and the Responses API differ only in those and in the fields around them.
pub fn message_fields(m: &mut Fields, part_types: &[&str]) -> Result<ChatMessage, ApiError> {
    let role: String = m.require("role")?;
    let role = match role.as_str() {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        other => {
            return Err(ApiError::invalid(
                m.path("role"),
                format!("role {other:?} is not supported (system, developer, user, assistant)"),
            ))
        }
    };
    let content_path = m.path("content");
    let content = match m.take_raw("content") {
        None => {
            return Err(ApiError::MissingParameter {
                param: content_path,
            })
        }
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => {
            let texts = parts
                .into_iter()
                .enumerate()
                .map(|(j, part)| text_part(part, &format!("{content_path}[{j}]"), part_types))
                .collect::<Result<Vec<_>, _>>()?;
            texts.join("\n")
        }
        Some(other) => {
            return Err(ApiError::invalid(
                content_path,
                format!(
                    "expected a string or an array of content parts, got {}",
                    kind(&other)
                ),
            ))
        }
    };
    Ok(ChatMessage::new(role, content))
}

/// A text part whose `type` is one of `types`. An `output_text` part (the Responses API's
/// output sent back as input) may carry its `annotations` and `logprobs`, which are ignored.
fn text_part(part: Value, path: &str, types: &[&str]) -> Result<String, ApiError> {
    let mut p = Fields::nested(part, path)?;
    let ty: String = p.require("type")?;
    if !types.contains(&ty.as_str()) {
        return Err(ApiError::invalid(
            p.path("type"),
            format!(
                "content parts of type {ty:?} are not supported by this server; only {}",
                types
                    .iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let text: String = p.require("text")?;
    if ty == "output_text" {
        p.accept("annotations");
        p.accept("logprobs");
    }
    p.finish()?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(extra: Value) -> Result<ChatRequest, ApiError> {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        parse_chat(body)
    }

    #[test]
    fn every_listed_parameter_is_accepted_including_nulls() {
        let r = chat(json!({
            "max_tokens": 5, "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9,
            "top_k": 40, "min_p": 0.05, "presence_penalty": 0.1, "frequency_penalty": 0.2,
            "repetition_penalty": 1.1, "seed": -1, "stop": ["a", "b"], "logit_bias": {"7": -100},
            "logprobs": true, "top_logprobs": 3, "n": 2, "stream": true,
            "stream_options": {"include_usage": true}, "user": "u", "ignore_eos": false,
            "tools": null, "response_format": {"type": "json_object"},
        }))
        .unwrap();
        let o = &r.options;
        assert_eq!(o.max_tokens, Some(5));
        assert_eq!(o.seed, Some(u64::MAX));
        assert_eq!(o.logprobs, Some(3));
        assert_eq!(o.sampling.top_k, 40);
        assert_eq!(o.sampling.logit_bias, vec![(7, -100.0)]);
        assert!(r.include_usage && o.stream);
        assert_eq!((o.n, o.stop.len()), (2, 2));
    }

    #[test]
    fn content_parts_are_joined() {
        let r = chat(json!({"messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]}))
        .unwrap();
        assert_eq!(r.messages[0], ChatMessage::new("system", "be brief"));
        assert_eq!(r.messages[1].content, "a\nb");
    }

    #[test]
    fn refusals_name_the_parameter() {
        let param = |extra: Value| chat(extra).unwrap_err().param().map(str::to_string);
        assert_eq!(
            param(json!({"tools": [{"type": "retrieval"}]})).as_deref(),
            Some("tools[0].type")
        );
        assert_eq!(param(json!({"messages": []})).as_deref(), Some("messages"));
        // A past call's type, as a tool's: a function, said so.
        let call = |call: Value| {
            json!({"messages": [{"role": "user", "content": "x"},
                                {"role": "assistant", "tool_calls": [call]}]})
        };
        let function = json!({"name": "f", "arguments": "{}"});
        assert_eq!(
            param(call(
                json!({"id": "c", "type": "retrieval", "function": function})
            ))
            .as_deref(),
            Some("messages[1].tool_calls[0].type")
        );
        assert_eq!(
            param(call(json!({"id": "c", "function": function}))).as_deref(),
            Some("messages[1].tool_calls[0].type")
        );
        assert!(chat(call(
            json!({"id": "c", "type": "function", "function": function})
        ))
        .is_ok());
        assert_eq!(
            param(json!({"max_tokens": 0})).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            param(json!({"max_tokens": 1_000_000_000_000i64})).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(param(json!({"n": 99})).as_deref(), Some("n"));
        assert_eq!(
            param(json!({"top_logprobs": 2})).as_deref(),
            Some("top_logprobs")
        );
        assert_eq!(
            param(json!({"stream_options": {"include_usage": true}})).as_deref(),
            Some("stream_options")
        );
        assert_eq!(param(json!({"stop": [1]})).as_deref(), Some("stop[0]"));
        assert_eq!(
            param(json!({"logit_bias": {"x": 1}})).as_deref(),
            Some("logit_bias")
        );
        assert_eq!(
            param(json!({"temperature": "hot"})).as_deref(),
            Some("temperature")
        );
        assert_eq!(
            param(json!({"frobnicate": 1})).as_deref(),
            Some("frobnicate")
        );
        assert_eq!(
            param(json!({"response_format": {"type": "json_schema", "json_schema": {}}}))
                .as_deref(),
            Some("response_format.json_schema.name")
        );
        assert_eq!(
            param(json!({"messages": [{"role": "function", "content": "x"}]})).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            param(json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}))
                .as_deref(),
            Some("messages[0].content[0].type")
        );
        assert_eq!(
            param(json!({"messages": [{"role": "user"}]})).as_deref(),
            Some("messages[0].content")
        );
    }

    #[test]
    fn completion_prompts_and_logprobs() {
        let r =
            parse_completion(json!({"prompt": [2, 5, 9], "logprobs": 2, "echo": false})).unwrap();
        assert_eq!(r.prompt, Prompt::Tokens(vec![2, 5, 9]));
        assert_eq!(r.options.logprobs, Some(2));
        let e = parse_completion(json!({"prompt": ["a", "b"]})).unwrap_err();
        assert_eq!(e.param(), Some("prompt"));
        let e = parse_completion(json!({"prompt": "a", "echo": true})).unwrap_err();
        assert_eq!(e.code(), "unsupported_parameter");
        let e = parse_completion(json!({"max_tokens": 3})).unwrap_err();
        assert_eq!(e.code(), "missing_required_parameter");
    }
}
