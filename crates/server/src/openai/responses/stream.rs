//! The Responses API's stream: `response.created`, `response.in_progress`, then one output
//! item — a `message` (`response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`) or, with tools, a `function_call`
//! (`response.output_item.added`, `response.function_call_arguments.delta`…,
//! `response.function_call_arguments.done`, `response.output_item.done`) per call, one
//! after another — and one of
//! `response.completed` / `response.incomplete` / `response.failed`. Every event carries a
//! gap-free `sequence_number`; the ids streamed are the final response's.
//!
//! Without tools the message item opens at once. With tools the item opens when the core's
//! `AnswerStream` knows whether the answer is text or a call.

use ferrox_sched::{Completion, TokenEvent};
use serde_json::{json, Value};

use super::draft::{text_part_json, Draft};
use crate::core::answer::{AnswerPiece, AnswerStream};
use crate::core::error::ApiError;
use crate::core::generate::{Finish, Generation};
use crate::core::stream::Encoder;
use crate::http::sse::Frame;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Item {
    Reasoning,
    Message,
    Call,
}

pub(super) struct Events {
    draft: Draft,
    sequence: u64,
    /// Text or a call, as the answer goes (text from the start without tools).
    answer: AnswerStream,
    opened: Option<Item>,
    /// The output index of the item being streamed (a reasoning item comes first).
    index: usize,
    /// The text (or the current call's argument text) streamed so far.
    text: String,
    /// Calls begun, and the current one's name.
    calls: usize,
    call_name: String,
    /// A thinking model's reasoning streamed so far.
    reasoning: String,
}

impl Events {
    pub(super) fn new(draft: Draft) -> Self {
        let answer = AnswerStream::for_request(
            draft.request.options.tools.as_ref(),
            draft.tool_format,
            draft.thinking,
        );
        Events {
            draft,
            sequence: 0,
            answer,
            opened: None,
            index: 0,
            text: String::new(),
            calls: 0,
            call_name: String::new(),
            reasoning: String::new(),
        }
    }

    fn event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Frame::named(name, &data)
    }

    fn part_event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["item_id"] = json!(self.draft.item_id);
        data["output_index"] = json!(self.index);
        data["content_index"] = json!(0);
        self.event(name, data)
    }

    fn call_event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["item_id"] = json!(self.draft.call_ids(self.calls.saturating_sub(1)).0);
        data["output_index"] = json!(self.index);
        self.event(name, data)
    }

    fn reasoning_event(&mut self, name: &'static str, mut data: Value) -> Frame {
        data["item_id"] = json!(self.draft.reasoning_item_id);
        data["output_index"] = json!(self.index);
        data["content_index"] = json!(0);
        self.event(name, data)
    }

    /// Ends the reasoning item, if it is the one open: the next item follows it.
    fn close_reasoning(&mut self) -> Vec<Frame> {
        if self.opened != Some(Item::Reasoning) {
            return Vec::new();
        }
        let text = self.reasoning.clone();
        let item = self.draft.reasoning_item("completed", Some(&text));
        let frames = vec![
            self.reasoning_event("response.reasoning_text.done", json!({"text": text})),
            self.event(
                "response.output_item.done",
                json!({"output_index": self.index, "item": item}),
            ),
        ];
        self.opened = None;
        self.index += 1;
        frames
    }

    fn open_message(&mut self) -> Vec<Frame> {
        let mut frames = self.close_reasoning();
        if self.opened.is_some() {
            return frames;
        }
        self.opened = Some(Item::Message);
        let item = self.draft.item("in_progress", Vec::new());
        frames.extend([
            self.event(
                "response.output_item.added",
                json!({"output_index": self.index, "item": item}),
            ),
            self.part_event(
                "response.content_part.added",
                json!({"part": text_part_json("")}),
            ),
        ]);
        frames
    }

    fn pieces(&mut self, pieces: Vec<AnswerPiece>) -> Vec<Frame> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                AnswerPiece::Text(t) if t.is_empty() => {}
                AnswerPiece::Text(t) => {
                    out.extend(self.open_message());
                    self.text.push_str(&t);
                    let delta = json!({"delta": t, "logprobs": []});
                    out.push(self.part_event("response.output_text.delta", delta));
                }
                AnswerPiece::Reasoning(r) if r.is_empty() => {}
                AnswerPiece::Reasoning(r) => {
                    if self.opened.is_none() {
                        self.opened = Some(Item::Reasoning);
                        let item = self.draft.reasoning_item("in_progress", None);
                        out.push(self.event(
                            "response.output_item.added",
                            json!({"output_index": self.index, "item": item}),
                        ));
                    }
                    self.reasoning.push_str(&r);
                    out.push(
                        self.reasoning_event("response.reasoning_text.delta", json!({"delta": r})),
                    );
                }
                AnswerPiece::CallStart(name) => {
                    // A harmony model reasons before it calls.
                    out.extend(self.close_reasoning());
                    if self.opened == Some(Item::Call) {
                        // The previous call is whole: its item ends before the next opens.
                        let (name, args) = (self.call_name.clone(), std::mem::take(&mut self.text));
                        let item = self
                            .draft
                            .call_item(self.calls - 1, "completed", &name, &args);
                        out.push(self.call_event(
                            "response.function_call_arguments.done",
                            json!({"arguments": args}),
                        ));
                        out.push(self.event(
                            "response.output_item.done",
                            json!({"output_index": self.index, "item": item}),
                        ));
                        self.index += 1;
                    }
                    self.opened = Some(Item::Call);
                    self.calls += 1;
                    self.call_name = name.clone();
                    let item = self
                        .draft
                        .call_item(self.calls - 1, "in_progress", &name, "");
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": self.index, "item": item}),
                    ));
                }
                AnswerPiece::Arguments(a) => {
                    self.text.push_str(&a);
                    out.push(self.call_event(
                        "response.function_call_arguments.delta",
                        json!({"delta": a}),
                    ));
                }
            }
        }
        out
    }

    fn push(&mut self, text: &str) -> Vec<Frame> {
        let pieces = self.answer.push(text);
        self.pieces(pieces)
    }
}

impl Encoder for Events {
    type Chunk = Frame;

    fn open(&mut self, _: &Generation) -> Vec<Frame> {
        let response = self.draft.object("in_progress", Vec::new(), None);
        let mut frames = vec![
            self.event("response.created", json!({"response": response.clone()})),
            self.event("response.in_progress", json!({"response": response})),
        ];
        if self.answer.is_text() {
            frames.extend(self.open_message());
        }
        frames
    }

    fn token(&mut self, _: &Generation, _: usize, token: &TokenEvent) -> Vec<Frame> {
        self.push(&token.text)
    }

    fn text(&mut self, _: &Generation, _: usize, text: &str) -> Vec<Frame> {
        self.push(text)
    }

    fn finish(&mut self, g: &Generation, _: usize, f: &Finish, c: &Completion) -> Vec<Frame> {
        let rest = self.answer.finish().0;
        let mut frames = self.pieces(rest);
        let response = self.draft.finished(&c.text, f, g.usage());
        let output = response["output"].as_array().cloned().unwrap_or_default();
        let mut item = output.last().cloned().unwrap_or_default();
        let status = response["status"]
            .as_str()
            .unwrap_or("completed")
            .to_string();
        if self.opened == Some(Item::Call) {
            // A call the budget cut is not in the output: its item ends as it streamed.
            let id = self.draft.call_ids(self.calls - 1).0;
            item = output
                .iter()
                .find(|i| i["id"] == id)
                .cloned()
                .unwrap_or_else(|| {
                    let name = self.call_name.clone();
                    self.draft
                        .call_item(self.calls - 1, "incomplete", &name, &self.text)
                });
            let arguments = item["arguments"].clone();
            frames.push(self.call_event(
                "response.function_call_arguments.done",
                json!({"arguments": arguments}),
            ));
        } else if item["type"] == "message" {
            frames.extend(self.open_message());
            let text = item["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            debug_assert_eq!(self.text, text, "streamed text differs from the whole");
            frames.push(self.part_event(
                "response.output_text.done",
                json!({"text": text, "logprobs": []}),
            ));
            frames.push(self.part_event(
                "response.content_part.done",
                json!({"part": text_part_json(&text)}),
            ));
        }
        // Calls cut before the first name was read opened no item: none to end.
        if self.opened.is_some() {
            frames.push(self.event(
                "response.output_item.done",
                json!({"output_index": self.index, "item": item}),
            ));
        }
        let done = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        frames.push(self.event(done, json!({"response": response})));
        frames
    }

    fn close(&mut self, _: &Generation) -> Vec<Frame> {
        Vec::new()
    }

    fn fail(&mut self, g: &Generation, e: &ApiError) -> Vec<Frame> {
        let mut response = self.draft.object("failed", Vec::new(), Some(g.usage()));
        response["error"] = json!({"code": "server_error", "message": e.to_string()});
        vec![self.event("response.failed", json!({"response": response}))]
    }
}
