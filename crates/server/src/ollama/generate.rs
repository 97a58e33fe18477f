//! `/api/chat` and `/api/generate`: Ollama's generating routes, encoded. Both run the one
//! generation path; they differ in where the text goes (`message.content` or `response`)
//! and in what they take (tools only on chat; `raw`, `system` and `suffix` only on generate).
//!
//! A stream is NDJSON (`http/ndjson.rs`): a line per piece of the answer with `done: false`
//! — text in `message.content` / `response`, reasoning in `thinking`, each tool call whole
//! in `message.tool_calls` once its arguments have closed (arguments as an object, as
//! Ollama sends them) — then one `done: true` line with `done_reason` (`stop`, `length`),
//! the counts (`prompt_eval_count` counts the whole prompt, cached tokens included) and
//! the durations in nanoseconds: `total_duration` from the request's arrival,
//! `load_duration` the wait for the model, `prompt_eval_duration` to the first token,
//! `eval_duration` from it to the last. A failure after the first line is an `{"error"}`
//! line. Without streaming, the same fields in one object.
//!
//! An empty request (no messages, no prompt) is Ollama's idiom for the model's lifetime: it
//! loads the model (`done_reason: "load"`), or with `keep_alive: 0` unloads it
//! (`"unload"`) without loading it first.

use std::time::{Duration, Instant, SystemTime};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Map, Value};

use super::parse::{self, PromptKind, Request};
use crate::core::answer::{Answer, AnswerPiece, AnswerStream};
use crate::core::error::ApiError;
use crate::core::fim::{self, Infill};
use crate::core::generate::{generate, Finish, Generation};
use crate::core::ids::{random_id, rfc3339};
use crate::core::reasoning::Thinking;
use crate::core::request::{Input, Prompt};
use crate::core::served::ServedModel;
use crate::core::stream::{drive, Encoder};
use crate::core::tools::ToolCall;
use crate::http::ndjson::ndjson_response;
use crate::http::params::JsonBody;
use crate::models::{take_keep_alive, KeepAlive, Unload};
use crate::state::AppState;

/// Which route a reply is for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    Chat,
    Generate,
}

pub async fn chat(
    State(state): State<AppState>,
    JsonBody(mut body): JsonBody,
) -> Result<Response, ApiError> {
    let keep_alive = take_keep_alive(&mut body)?;
    run(state, parse::chat(body)?, keep_alive, Route::Chat).await
}

pub async fn generate_route(
    State(state): State<AppState>,
    JsonBody(mut body): JsonBody,
) -> Result<Response, ApiError> {
    let keep_alive = take_keep_alive(&mut body)?;
    run(state, parse::generate(body)?, keep_alive, Route::Generate).await
}

async fn run(
    state: AppState,
    request: Request,
    keep_alive: Option<KeepAlive>,
    route: Route,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let head = Head {
        route,
        model: request.model.clone(),
    };
    if request.prompt == PromptKind::Empty {
        return lifecycle(&state, head, keep_alive, arrived).await;
    }
    let served = state.models.acquire(Some(&head.model), keep_alive).await?;
    let load = arrived.elapsed();
    let input = match request.prompt {
        PromptKind::Empty => unreachable!("answered above"),
        PromptKind::Chat(messages) => Input::Chat(messages),
        PromptKind::Raw(text) => Input::Completion(Prompt::Text(text)),
        PromptKind::Fill { prefix, suffix } => {
            if !fim::supported(&served) {
                return Err(ApiError::invalid(
                    "suffix",
                    format!("\"{}\" does not support insert", head.model),
                ));
            }
            let infill = Infill {
                prefix,
                suffix,
                extra: Vec::new(),
                prompt: String::new(),
            };
            Input::Completion(infill.prompt(&served, "suffix")?)
        }
    };
    let chat = matches!(input, Input::Chat(_));
    let options = request.options;
    let thinking = thinking(&served, &head.model, request.think, chat, &options)?;
    let tools = options.tools.clone();
    let format = served.tool_format;
    let generation = generate(served, input, &options).await?;
    let timing = Timing { arrived, load };
    if options.stream {
        let lines = Lines {
            head,
            timing,
            answer: AnswerStream::for_request(tools.as_ref(), format, thinking),
            call: None,
            calls: 0,
            logprobs: request.logprobs.then(Vec::new),
            show_thinking: request.think != Some(false),
        };
        return Ok(ndjson_response(drive(generation, lines)));
    }
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let out = &outputs[0];
    let answer = Answer::read(&out.completion.text, tools.as_ref(), format, thinking);
    let mut body = head.reply(&answer, request.think != Some(false));
    if request.logprobs {
        body["logprobs"] = json!(out
            .tokens
            .iter()
            .map(|t| logprob_json(&generation.served, t))
            .collect::<Vec<_>>());
    }
    timing.finish(&mut body, &generation, &out.finish);
    Ok(Json(body).into_response())
}

/// The reasoning split for this request, or the 400 when `think: true` cannot be honoured:
/// a model that does not think, a prompt not rendered through the template, or an answer
/// shaped by tools or a format (the split is off then). `think: false` on a model that
/// always thinks (its template has no switch) still splits, and the reply leaves the
/// reasoning out.
fn thinking(
    served: &ServedModel,
    model: &str,
    think: Option<bool>,
    chat: bool,
    options: &crate::core::request::GenerationOptions,
) -> Result<Option<Thinking>, ApiError> {
    let split = match chat {
        true => served.thinking_for(options.tools.is_some(), options.grammar.is_some()),
        false => None,
    };
    let effort = options
        .template_vars
        .as_ref()
        .is_some_and(|v| v.get("reasoning_effort").is_some());
    let source = served
        .model
        .file()
        .get("tokenizer.chat_template")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    if effort && !source.contains("reasoning_effort") {
        return Err(ApiError::invalid(
            "think",
            format!("\"{model}\" has no thinking levels (its template reads no reasoning_effort); send true or false"),
        ));
    }
    match think {
        Some(true) if served.thinking.is_none() => Err(ApiError::invalid(
            "think",
            format!("\"{model}\" does not support thinking"),
        )),
        Some(true) if split.is_none() => Err(ApiError::invalid(
            "think",
            "the reasoning is not split from an answer shaped by tools or a format, or from \
             a raw or suffix prompt: leave think out",
        )),
        _ => Ok(split),
    }
}

/// An empty request: load the model, or with `keep_alive: 0` unload it.
async fn lifecycle(
    state: &AppState,
    head: Head,
    keep_alive: Option<KeepAlive>,
    arrived: Instant,
) -> Result<Response, ApiError> {
    let reason = if keep_alive == Some(KeepAlive::For(Duration::ZERO)) {
        // Unloads now if idle, else as its last request ends; a model not loaded stays so.
        match state.models.unload(&head.model)? {
            Unload::Now | Unload::WhenIdle | Unload::NotLoaded => "unload",
        }
    } else {
        drop(state.models.acquire(Some(&head.model), keep_alive).await?);
        "load"
    };
    let mut body = head.line("", None);
    body["done"] = json!(true);
    body["done_reason"] = json!(reason);
    body["total_duration"] = json!(nanos(arrived.elapsed()));
    body["load_duration"] = json!(nanos(arrived.elapsed()));
    Ok(Json(body).into_response())
}

/// What every line of a reply starts with.
struct Head {
    route: Route,
    /// The name as the client sent it (`gemma3:latest` stays so), as Ollama echoes it.
    model: String,
}

impl Head {
    /// A line with `text` (and `thinking`), `done: false`.
    fn line(&self, text: &str, thinking: Option<&str>) -> Value {
        let mut line = json!({"model": self.model, "created_at": rfc3339(SystemTime::now())});
        match self.route {
            Route::Chat => {
                line["message"] = json!({"role": "assistant", "content": text});
                if let Some(t) = thinking {
                    line["message"]["thinking"] = json!(t);
                }
            }
            Route::Generate => {
                line["response"] = json!(text);
                if let Some(t) = thinking {
                    line["thinking"] = json!(t);
                }
            }
        }
        line["done"] = json!(false);
        line
    }
}

impl Head {
    /// The buffered reply's object for `answer` (before its `done` fields): an answer that
    /// is calls (even calls the budget cut) has only the text said beside them, since call
    /// markup is not text.
    fn reply(&self, answer: &Answer, show_thinking: bool) -> Value {
        let text = answer.text.as_str();
        let reasoning = answer.reasoning.as_deref().filter(|_| show_thinking);
        let mut body = self.line(text, reasoning);
        if let Some(calls) = answer.calls.as_ref().filter(|c| !c.is_empty()) {
            body["message"]["tool_calls"] = json!(calls
                .iter()
                .enumerate()
                .map(|(k, c)| call_json(c, k))
                .collect::<Vec<_>>());
        }
        body
    }
}

/// When the request arrived and how long it waited for its model.
#[derive(Debug, Clone, Copy)]
struct Timing {
    arrived: Instant,
    load: Duration,
}

impl Timing {
    /// Makes `line` the last: `done`, why, the counts and the durations.
    fn finish(&self, line: &mut Value, g: &Generation, finish: &Finish) {
        let usage = g.usage();
        let timings = g.timings();
        let fields = json!({
            "done": true,
            "done_reason": match finish {
                Finish::EndOfTurn | Finish::StopSequence(_) => "stop",
                Finish::Length => "length",
            },
            "total_duration": nanos(self.arrived.elapsed()),
            "load_duration": nanos(self.load),
            "prompt_eval_count": usage.prompt_tokens,
            "prompt_eval_duration": nanos(timings.prompt),
            "eval_count": usage.completion_tokens,
            "eval_duration": nanos(timings.generation),
        });
        if let (Value::Object(line), Value::Object(fields)) = (line, fields) {
            line.extend(fields);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A call as Ollama writes one: arguments as an object.
fn call_json(call: &ToolCall, index: usize) -> Value {
    let arguments: Value =
        serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::Object(Map::new()));
    json!({
        "id": random_id("call_"),
        "function": {"index": index, "name": call.name, "arguments": arguments},
    })
}

/// A token's logprob as Ollama writes it: `{token, logprob, bytes, top_logprobs}`.
fn logprob_json(g: &ServedModel, t: &TokenEvent) -> Value {
    let entry = |id: u32, logprob: f32| {
        let (token, bytes) = g.token_piece(id);
        json!({"token": token, "logprob": logprob, "bytes": bytes})
    };
    let mut v = entry(t.id, t.logprob.unwrap_or(0.0));
    v["top_logprobs"] = json!(t
        .top_logprobs
        .iter()
        .map(|&(id, lp)| entry(id, lp))
        .collect::<Vec<_>>());
    v
}

/// The stream encoder: a line per piece, calls whole, the `done` line last.
struct Lines {
    head: Head,
    timing: Timing,
    answer: AnswerStream,
    /// The call being written: its name and argument text so far.
    call: Option<(String, String)>,
    /// Calls sent so far (each call's `function.index`).
    calls: usize,
    /// Logprobs of tokens not yet on a line, when asked for.
    logprobs: Option<Vec<Value>>,
    /// `think: false` leaves the reasoning out.
    show_thinking: bool,
}

impl Lines {
    fn lines(&mut self, pieces: Vec<AnswerPiece>) -> Vec<Value> {
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                AnswerPiece::Text(t) if !t.is_empty() => out.push(self.head.line(&t, None)),
                AnswerPiece::Reasoning(r) if !r.is_empty() && self.show_thinking => {
                    out.push(self.head.line("", Some(&r)))
                }
                AnswerPiece::Text(_) | AnswerPiece::Reasoning(_) => {}
                AnswerPiece::CallStart(name) => {
                    out.extend(self.close_call());
                    self.call = Some((name, String::new()));
                }
                AnswerPiece::Arguments(a) => {
                    if let Some((_, args)) = &mut self.call {
                        args.push_str(&a);
                        // Sent as soon as its arguments are a whole object.
                        if args.trim_end().ends_with('}') {
                            out.extend(self.close_call());
                        }
                    }
                }
            }
        }
        out
    }

    /// The call being written, as a line, once its arguments are a whole JSON object (then
    /// it is done with; a call cut off by the budget never is one, and is not sent).
    fn close_call(&mut self) -> Option<Value> {
        let (_, arguments) = self.call.as_ref()?;
        serde_json::from_str::<Map<String, Value>>(arguments).ok()?;
        let (name, arguments) = self.call.take()?;
        let mut line = self.head.line("", None);
        let call = ToolCall { name, arguments };
        line["message"]["tool_calls"] = json!([call_json(&call, self.calls)]);
        self.calls += 1;
        Some(line)
    }

    /// `lines` with the pending logprobs on the first of them.
    fn with_logprobs(&mut self, mut lines: Vec<Value>) -> Vec<Value> {
        if let (Some(first), Some(pending)) = (lines.first_mut(), self.logprobs.as_mut()) {
            first["logprobs"] = json!(std::mem::take(pending));
        }
        lines
    }
}

impl Encoder for Lines {
    type Chunk = Value;

    fn token(&mut self, g: &Generation, _: usize, token: &TokenEvent) -> Vec<Value> {
        if let Some(pending) = &mut self.logprobs {
            pending.push(logprob_json(&g.served, token));
        }
        let pieces = self.answer.push(&token.text);
        let lines = self.lines(pieces);
        self.with_logprobs(lines)
    }

    fn text(&mut self, _: &Generation, _: usize, text: &str) -> Vec<Value> {
        let pieces = self.answer.push(text);
        let lines = self.lines(pieces);
        self.with_logprobs(lines)
    }

    fn finish(&mut self, g: &Generation, _: usize, f: &Finish, _: &Completion) -> Vec<Value> {
        let (pieces, _) = self.answer.finish();
        let mut lines = self.lines(pieces);
        lines.extend(self.close_call());
        let mut last = self.head.line("", None);
        self.timing.finish(&mut last, g, f);
        lines.push(last);
        self.with_logprobs(lines)
    }

    fn close(&mut self, _: &Generation) -> Vec<Value> {
        Vec::new()
    }

    fn fail(&mut self, _: &Generation, e: &ApiError) -> Vec<Value> {
        vec![json!({"error": e.to_string()})]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tool_syntax::ToolFormat;
    use crate::core::tools::tests::weather_tools;
    use crate::core::tools::{Parallel, ToolChoice};

    fn lines() -> Lines {
        let tools = weather_tools(ToolChoice::Auto, Parallel::ByDefault);
        Lines {
            head: Head {
                route: Route::Chat,
                model: "m".into(),
            },
            timing: Timing {
                arrived: Instant::now(),
                load: Duration::ZERO,
            },
            answer: AnswerStream::new(&tools, ToolFormat::Hermes),
            call: None,
            calls: 0,
            logprobs: None,
            show_thinking: true,
        }
    }

    #[test]
    fn each_call_is_one_line_with_object_arguments_and_a_cut_call_is_none() {
        let mut l = lines();
        let call = |name: &str| AnswerPiece::CallStart(name.into());
        let args = |a: &str| AnswerPiece::Arguments(a.into());
        let mut out = l.lines(vec![call("get_weather"), args("{\"city\": ")]);
        assert!(out.is_empty(), "a call is sent whole: {out:?}");
        // `}` inside a string does not close it.
        out.extend(l.lines(vec![args("\"Ro}")]));
        assert!(out.is_empty(), "{out:?}");
        out.extend(l.lines(vec![args("me\"}")]));
        assert_eq!(out.len(), 1, "sent as soon as its arguments close");
        out.extend(l.lines(vec![call("get_weather"), args("{\"city\": \"Oslo\"}")]));
        out.extend(l.close_call());
        assert_eq!(out.len(), 2, "{out:?}");
        for (k, (line, city)) in out.iter().zip(["Ro}me", "Oslo"]).enumerate() {
            let c = &line["message"]["tool_calls"][0];
            assert_eq!(c["function"]["arguments"], json!({"city": city}), "{line}");
            assert_eq!(c["function"]["index"], k);
            assert_eq!(line["message"]["content"], "");
            assert_eq!(line["done"], false);
        }
        // Cut off by the budget: no line.
        l.lines(vec![call("get_weather"), args("{\"city\": ")]);
        assert_eq!(l.close_call(), None);
    }

    #[test]
    fn a_buffered_reply_of_calls_has_no_markup_as_text() {
        let l = lines();
        let tools = weather_tools(ToolChoice::Auto, Parallel::ByDefault);
        let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
        let read = |t: &str| Answer::read(t, Some(&tools), ToolFormat::Hermes, None);
        let body = l.head.reply(&read(text), true);
        assert_eq!(body["message"]["content"], "", "{body}");
        let call = &body["message"]["tool_calls"][0]["function"];
        assert_eq!(call["arguments"], json!({"city": "Rome"}));
        // Cut before its object closed: neither a call nor text.
        let cut = l.head.reply(&read(&text[..30]), true);
        assert_eq!(cut["message"]["content"], "", "{cut}");
        assert!(cut["message"].get("tool_calls").is_none(), "{cut}");
        let plain = l.head.reply(&read("Sunny."), true);
        assert_eq!(plain["message"]["content"], "Sunny.");
    }
}
