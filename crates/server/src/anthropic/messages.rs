//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API,
//! encoded.
//!
//! Reply: `{id: "msg_…", type: "message", role: "assistant", content: [{type: "text",
//! text}], model, stop_reason, stop_sequence, usage}`. `stop_reason` is `end_turn` (the
//! model ended its turn), `stop_sequence` (with the matched string in `stop_sequence`) or
//! `max_tokens`.
//!
//! Usage follows Anthropic's split: `input_tokens` are the prompt tokens computed,
//! `cache_read_input_tokens` those served from the prefix cache, so their sum is the whole
//! prompt — what `count_tokens` returns. `cache_creation_input_tokens` is always 0: caching
//! is automatic here and costs nothing extra.
//!
//! Streaming, in Anthropic's grammar: `message_start` (its usage counts the whole prompt as
//! input, since what the cache supplies is known only at the end) → per block
//! `content_block_start` → `content_block_delta`s (`text_delta`, or `input_json_delta` for
//! a `tool_use` block) → `content_block_stop`, blocks strictly one after another →
//! `message_delta` (the stop reason — `tool_use` after a call — and the final usage,
//! cumulative) → `message_stop`. With tools, a `tool_use` reply holds a block per call with
//! its `input` parsed from the constrained arguments. Idle time is filled with `ping` events; a failure after the headers is
//! `event: error`.

use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Value};

use super::parse::{parse_count_tokens, parse_messages};
use crate::core::answer::{Answer, AnswerPiece, AnswerStream};
use crate::core::error::ApiError;
use crate::core::generate::{generate, prompt_ids, Finish, Generation, RequestUsage};
use crate::core::ids::random_id;
use crate::core::request::Input;
use crate::core::stream::{drive, Encoder};
use crate::http::sse::{sse_response, Frame, Ping};
use crate::models::Pinned;

pub async fn handle(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let request = parse_messages(body)?;
    let options = request.options;
    let tools = options.tools.clone();
    let format = served.tool_format;
    let thinking = served.thinking_for(tools.is_some(), options.grammar.is_some());
    let generation = generate(served, Input::Chat(request.messages), &options).await?;
    let message = Message {
        id: random_id("msg_"),
        model: generation.served.model_id.clone(),
    };
    if options.stream {
        let ping = Frame::named("ping", &json!({"type": "ping"}));
        let answer = AnswerStream::for_request(tools.as_ref(), format, thinking);
        let encoder = Events {
            message,
            answer,
            open: None,
            blocks: 0,
        };
        return Ok(sse_response(drive(generation, encoder), Ping::Event(ping)));
    }
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let usage = generation.usage();
    let out = &outputs[0];
    let answer = Answer::read(&out.completion.text, tools.as_ref(), format, thinking);
    let mut body = message.object(&answer.text, usage);
    if let Some(r) = &answer.reasoning {
        let block = json!({"type": "thinking", "thinking": r, "signature": ""});
        body["content"]
            .as_array_mut()
            .expect("an array")
            .insert(0, block);
    }
    set_stop(&mut body, &out.finish);
    if let Some(calls) = &answer.calls {
        let blocks: Vec<Value> = calls
            .iter()
            .map(|call| {
                let input: Value =
                    serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
                json!({"type": "tool_use", "id": random_id("toolu_"), "name": call.name,
                       "input": input})
            })
            .collect();
        if answer.called() && out.finish == Finish::EndOfTurn {
            body["stop_reason"] = json!("tool_use");
        }
        // After the thinking and text blocks (a harmony model reasons, and may say
        // something, before it calls).
        body["content"]
            .as_array_mut()
            .expect("an array")
            .extend(blocks);
    }
    Ok(Json(body).into_response())
}

pub async fn count_tokens(Pinned { served, body }: Pinned) -> Result<Json<Value>, ApiError> {
    let count = parse_count_tokens(body)?;
    let ids = prompt_ids(&served, Input::Chat(count.messages), count.tools).await?;
    Ok(Json(json!({ "input_tokens": ids.len() })))
}

/// What the reply and every event of one message share.
struct Message {
    id: String,
    model: String,
}

impl Message {
    /// The message object with `text` as its one block (an empty text: no block).
    fn object(&self, text: &str, usage: RequestUsage) -> Value {
        let content: Vec<Value> = match text {
            "" => Vec::new(),
            text => vec![json!({"type": "text", "text": text})],
        };
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage_json(usage),
        })
    }
}

fn usage_json(u: RequestUsage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens - u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": 0,
    })
}

/// `stop_reason` and `stop_sequence` of `finish`, into `target`.
fn set_stop(target: &mut Value, finish: &Finish) {
    let (reason, sequence) = match finish {
        Finish::EndOfTurn => ("end_turn", Value::Null),
        Finish::StopSequence(s) => ("stop_sequence", json!(s)),
        Finish::Length => ("max_tokens", Value::Null),
    };
    target["stop_reason"] = json!(reason);
    target["stop_sequence"] = sequence;
}

/// The stream encoder. Blocks open as their first piece arrives — a thinking model's
/// `thinking` block (`thinking_delta`s), a text block, or with tools a `tool_use` block whose
/// input streams as `input_json_delta`s — and close before the next one or the message's
/// end.
struct Events {
    message: Message,
    /// Text or a call, as the answer goes (text from the start without tools).
    answer: AnswerStream,
    /// The kind of the open block, if one is.
    open: Option<Block>,
    blocks: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Text,
    ToolUse,
    Thinking,
}

fn event(name: &'static str, mut data: Value) -> Frame {
    data["type"] = json!(name);
    Frame::named(name, &data)
}

impl Events {
    /// Frames for `pieces`, opening and closing blocks as needed.
    fn pieces(&mut self, pieces: Vec<AnswerPiece>) -> Vec<Frame> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                AnswerPiece::Text(t) if t.is_empty() => {}
                AnswerPiece::Text(t) => {
                    if self.open != Some(Block::Text) {
                        out.extend(self.close_block());
                        out.push(self.start(json!({"type": "text", "text": ""}), Block::Text));
                    }
                    out.push(self.delta(json!({"type": "text_delta", "text": t})));
                }
                AnswerPiece::Reasoning(r) if r.is_empty() => {}
                AnswerPiece::Reasoning(r) => {
                    if self.open != Some(Block::Thinking) {
                        out.extend(self.close_block());
                        let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                        out.push(self.start(block, Block::Thinking));
                    }
                    out.push(self.delta(json!({"type": "thinking_delta", "thinking": r})));
                }
                AnswerPiece::CallStart(name) => {
                    out.extend(self.close_block());
                    let block = json!({"type": "tool_use", "id": random_id("toolu_"),
                                       "name": name, "input": {}});
                    out.push(self.start(block, Block::ToolUse));
                }
                AnswerPiece::Arguments(a) => {
                    out.push(self.delta(json!({"type": "input_json_delta", "partial_json": a})));
                }
            }
        }
        out
    }

    fn start(&mut self, block: Value, kind: Block) -> Frame {
        self.open = Some(kind);
        event(
            "content_block_start",
            json!({"index": self.blocks, "content_block": block}),
        )
    }

    fn delta(&self, delta: Value) -> Frame {
        event(
            "content_block_delta",
            json!({"index": self.blocks, "delta": delta}),
        )
    }

    /// Closes the open block, if one is: a thinking block's (empty) signature first, as
    /// Anthropic's stream sends one before the block stops.
    fn close_block(&mut self) -> Vec<Frame> {
        let Some(kind) = self.open.take() else {
            return Vec::new();
        };
        let mut frames = Vec::new();
        if kind == Block::Thinking {
            frames.push(self.delta(json!({"type": "signature_delta", "signature": ""})));
        }
        frames.push(event("content_block_stop", json!({"index": self.blocks})));
        self.blocks += 1;
        frames
    }

    fn text(&mut self, text: &str) -> Vec<Frame> {
        let pieces = self.answer.push(text);
        self.pieces(pieces)
    }
}

impl Encoder for Events {
    type Chunk = Frame;

    fn open(&mut self, g: &Generation) -> Vec<Frame> {
        let usage = RequestUsage {
            cached_tokens: 0,
            ..g.usage()
        };
        vec![event(
            "message_start",
            json!({"message": self.message.object("", usage)}),
        )]
    }

    fn token(&mut self, _: &Generation, _: usize, token: &TokenEvent) -> Vec<Frame> {
        self.text(&token.text)
    }

    fn text(&mut self, _: &Generation, _: usize, text: &str) -> Vec<Frame> {
        Events::text(self, text)
    }

    fn finish(&mut self, g: &Generation, _: usize, f: &Finish, _: &Completion) -> Vec<Frame> {
        let (pieces, called) = self.answer.finish();
        let mut frames = self.pieces(pieces);
        frames.extend(self.close_block());
        let mut delta = json!({});
        set_stop(&mut delta, f);
        if called && *f == Finish::EndOfTurn {
            delta["stop_reason"] = json!("tool_use");
        }
        frames.push(event(
            "message_delta",
            json!({"delta": delta, "usage": usage_json(g.usage())}),
        ));
        frames
    }

    fn close(&mut self, _: &Generation) -> Vec<Frame> {
        vec![event("message_stop", json!({}))]
    }

    /// The same body and error type as the route's own error answer (a shutdown's cut is
    /// an `overloaded_error`, as its 503 would be).
    fn fail(&mut self, _: &Generation, e: &ApiError) -> Vec<Frame> {
        let status = crate::http::errors::status(e);
        vec![event("error", super::error_body(e, status))]
    }
}
