//! The response object as it is built: its ids (fixed before the first event, so a stream
//! and the final object agree), its output items, the finished response, and what is stored
//! for `previous_response_id`.

use std::sync::Arc;

use ferrox_engine::template::{ChatMessage, ChatToolCall};

use serde_json::{json, Value};

use super::parse::ResponsesRequest;
use super::store::{ResponseStore, Stored};
use crate::core::answer::Answer;
use crate::core::generate::{Finish, RequestUsage};
use crate::core::ids::unix_now;
use crate::core::reasoning::Thinking;
use crate::core::tool_syntax::ToolFormat;
use crate::core::tools::{Parallel, ToolChoice};
use crate::openai::random_id;

/// A response being made: its ids and what it will be stored with.
pub(super) struct Draft {
    pub(super) id: String,
    /// The id of its message item, or of its function call item (and the call's own id).
    pub(super) item_id: String,
    /// The id of a thinking model's reasoning item, and how its answers begin.
    pub(super) reasoning_item_id: String,
    pub(super) thinking: Option<Thinking>,
    /// How the model writes calls.
    pub(super) tool_format: ToolFormat,
    /// The ids of the first function call item and its call; call *i* > 0 adds `_i`.
    call_item_id: String,
    call_id: String,
    created_at: u64,
    model: String,
    pub(super) request: ResponsesRequest,
    /// The conversation so far, this request's input included.
    history: Vec<ChatMessage>,
    store: Arc<ResponseStore>,
}

impl Draft {
    /// A response to `request` on `model`, its ids made now (the stream sends the final
    /// ones from its first event).
    pub(super) fn new(
        request: ResponsesRequest,
        history: Vec<ChatMessage>,
        store: Arc<ResponseStore>,
        model: String,
        thinking: Option<Thinking>,
        tool_format: ToolFormat,
    ) -> Draft {
        Draft {
            id: random_id("resp_"),
            item_id: random_id("msg_"),
            reasoning_item_id: random_id("rs_"),
            thinking,
            tool_format,
            call_item_id: random_id("fc_"),
            call_id: random_id("call_"),
            created_at: unix_now(),
            model,
            request,
            history,
            store,
        }
    }

    /// The response object; `output` and `usage` filled in when they are known.
    pub(super) fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<RequestUsage>,
    ) -> Value {
        let o = &self.request.options;
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": self.request.instructions,
            "max_output_tokens": o.max_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": o.tools.as_ref().is_some_and(|t| t.parallel == Parallel::Asked),
            "previous_response_id": self.request.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.request.store,
            "temperature": o.sampling.temperature,
            "text": {"format": self.request.text_format},
            "tool_choice": self.tool_choice_json(),
            "tools": self.tools_json(),
            "top_p": o.sampling.top_p,
            "truncation": "disabled",
            "usage": usage.map(usage_json),
            "user": null,
            "metadata": self.request.metadata,
        })
    }

    fn tools_json(&self) -> Value {
        let tools = self
            .request
            .options
            .tools
            .as_ref()
            .map_or(&[][..], |t| &t.tools[..]);
        json!(tools
            .iter()
            .map(
                |t| json!({"type": "function", "name": t.name, "description": t.description,
                            "parameters": t.parameters, "strict": true})
            )
            .collect::<Vec<_>>())
    }

    fn tool_choice_json(&self) -> Value {
        match self.request.options.tools.as_ref().map(|t| &t.choice) {
            None | Some(ToolChoice::None) => json!("none"),
            Some(ToolChoice::Auto) => json!("auto"),
            Some(ToolChoice::Required) => json!("required"),
            Some(ToolChoice::Named(n)) => json!({"type": "function", "name": n}),
        }
    }

    pub(super) fn item(&self, status: &str, content: Vec<Value>) -> Value {
        json!({
            "id": self.item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    /// A reasoning item, its text as one `reasoning_text` part.
    pub(super) fn reasoning_item(&self, status: &str, text: Option<&str>) -> Value {
        let content: Vec<Value> = text
            .map(|t| json!({"type": "reasoning_text", "text": t}))
            .into_iter()
            .collect();
        json!({
            "type": "reasoning",
            "id": self.reasoning_item_id,
            "summary": [],
            "content": content,
            "status": status,
        })
    }

    /// The item id and call id of the answer's call `i`.
    pub(super) fn call_ids(&self, i: usize) -> (String, String) {
        match i {
            0 => (self.call_item_id.clone(), self.call_id.clone()),
            i => (
                format!("{}_{i}", self.call_item_id),
                format!("{}_{i}", self.call_id),
            ),
        }
    }

    /// The answer's call `i`, as a function call item.
    pub(super) fn call_item(&self, i: usize, status: &str, name: &str, arguments: &str) -> Value {
        let (id, call_id) = self.call_ids(i);
        json!({
            "type": "function_call",
            "id": id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status,
        })
    }

    /// The finished response, stored if asked.
    /// A thinking model's reasoning comes first, as its own item; the history keeps only the
    /// answer (thinking templates drop past reasoning too).
    pub(super) fn finished(&self, text: &str, finish: &Finish, usage: RequestUsage) -> Value {
        let complete = *finish != Finish::Length;
        let status = if complete { "completed" } else { "incomplete" };
        let Answer {
            reasoning,
            text,
            calls,
        } = Answer::read(
            text,
            self.request.options.tools.as_ref(),
            self.tool_format,
            self.thinking,
        );
        let text = text.as_str();
        let items: Vec<Value> = match &calls {
            Some(calls) => calls
                .iter()
                .enumerate()
                .map(|(i, c)| self.call_item(i, "completed", &c.name, &c.arguments))
                .collect(),
            None => vec![self.item(status, vec![text_part_json(text)])],
        };
        let mut output: Vec<Value> = reasoning
            .as_deref()
            .map(|r| self.reasoning_item("completed", Some(r)))
            .into_iter()
            .collect();
        output.extend(items);
        let mut response = self.object(status, output, Some(usage));
        if !complete {
            response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if self.request.store {
            let mut history = self.history.clone();
            let mut said = ChatMessage::new("assistant", "");
            match calls {
                None => said.content = text.to_string(),
                Some(calls) => {
                    said.tool_calls = calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            ChatToolCall::from_text(self.call_ids(i).1, &c.name, &c.arguments)
                        })
                        .collect()
                }
            }
            history.push(said);
            let stored = Stored {
                response: response.clone(),
                history,
            };
            self.store.insert(self.id.clone(), stored);
        }
        response
    }
}

pub(super) fn text_part_json(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn usage_json(u: RequestUsage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}
