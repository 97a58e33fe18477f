//! `ferrox bench serve --route`: which protocol the load goes through, so that each adapter's
//! cost can be measured against another in the same run.
//!
//! A route says three things: the body of a streaming request for one user text, the text a
//! stream event carries, and the token counts its usage reports. The chat-shaped routes
//! (`chat`, `messages`, `responses`) render the same chat template, so with greedy sampling
//! they generate the same tokens and compare like for like; so do the two raw-prompt routes
//! (`completions`, `completion`), which also send `ignore_eos` (every request generates
//! exactly `max_tokens`). Anthropic's and the Responses API have no `ignore_eos`; chat
//! leaves it out too, to stay comparable with them. Ollama's chat is chat-shaped too; its
//! stream is NDJSON and its request needs the model's name.

use serde_json::{json, Value};

/// The protocol a benchmark request goes through.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// OpenAI `/v1/completions` (the load scenario's default).
    Completions,
    /// OpenAI `/v1/chat/completions`.
    Chat,
    /// Anthropic `/v1/messages`.
    Messages,
    /// OpenAI `/v1/responses` (`store: false`).
    Responses,
    /// llama.cpp `/completion`.
    Completion,
    /// Ollama `/api/chat` (NDJSON; needs `--model`).
    Ollama,
}

/// The usage a stream reported: prompt tokens (if it says) and output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamUsage {
    pub prompt_tokens: Option<usize>,
    pub output_tokens: usize,
}

impl Route {
    pub fn path(self) -> &'static str {
        match self {
            Route::Completions => "/v1/completions",
            Route::Chat => "/v1/chat/completions",
            Route::Messages => "/v1/messages",
            Route::Responses => "/v1/responses",
            Route::Completion => "/completion",
            Route::Ollama => "/api/chat",
        }
    }

    /// Whether the stream is NDJSON (Ollama's) rather than server-sent events.
    pub fn ndjson(self) -> bool {
        self == Route::Ollama
    }

    /// Whether the route renders a chat (else the text is the raw prompt).
    pub fn is_chat(self) -> bool {
        matches!(
            self,
            Route::Chat | Route::Messages | Route::Responses | Route::Ollama
        )
    }

    /// A greedy streaming request: `messages` for a chat route (a raw route gets the user
    /// texts joined), at most `max_tokens`, its output constrained to `schema` if given
    /// (in the route's own spelling).
    pub fn body(
        self,
        messages: &[Value],
        max_tokens: usize,
        model: Option<&str>,
        schema: Option<&Value>,
    ) -> Value {
        let prompt = || {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut body = match self {
            Route::Completions => json!({
                "prompt": prompt(), "max_tokens": max_tokens, "ignore_eos": true,
                "stream_options": {"include_usage": true},
            }),
            Route::Chat => json!({
                "messages": messages, "max_tokens": max_tokens,
                "stream_options": {"include_usage": true},
            }),
            Route::Messages => {
                let (system, turns): (Vec<&Value>, Vec<&Value>) =
                    messages.iter().partition(|m| m["role"] == "system");
                let mut b = json!({"messages": turns, "max_tokens": max_tokens});
                if let Some(s) = system.first() {
                    b["system"] = s["content"].clone();
                }
                b
            }
            Route::Responses => json!({
                "input": messages, "max_output_tokens": max_tokens, "store": false,
            }),
            Route::Completion => json!({
                "prompt": prompt(), "n_predict": max_tokens, "ignore_eos": true,
            }),
            Route::Ollama => json!({
                "messages": messages, "options": {"num_predict": max_tokens, "temperature": 0},
            }),
        };
        body["stream"] = json!(true);
        if self != Route::Ollama {
            body["temperature"] = json!(0);
        }
        if let Some(schema) = schema {
            match self {
                Route::Completions | Route::Chat => {
                    body["response_format"] = json!({"type": "json_schema",
                        "json_schema": {"name": "bench", "schema": schema}});
                }
                Route::Responses => {
                    body["text"] = json!({"format": {"type": "json_schema", "name": "bench",
                                                     "schema": schema}});
                }
                Route::Completion => body["json_schema"] = schema.clone(),
                Route::Ollama => body["format"] = schema.clone(),
                Route::Messages => {} // refused by `BenchServeArgs::check`
            }
        }
        if let Some(m) = model {
            body["model"] = json!(m);
        }
        body
    }

    /// The output text an event carries, if any.
    pub fn text(self, event: &Value) -> Option<&str> {
        match self {
            Route::Completions | Route::Chat => {
                let choice = event["choices"].get(0)?;
                choice["text"]
                    .as_str()
                    .or_else(|| choice["delta"]["content"].as_str())
            }
            Route::Messages => (event["type"] == "content_block_delta")
                .then(|| event["delta"]["text"].as_str())
                .flatten(),
            Route::Responses => (event["type"] == "response.output_text.delta")
                .then(|| event["delta"].as_str())
                .flatten(),
            Route::Completion => event["content"].as_str(),
            Route::Ollama => event["message"]["content"].as_str(),
        }
    }

    /// The usage an event reports, if it is the one that does.
    pub fn usage(self, event: &Value) -> Option<StreamUsage> {
        let count = |v: &Value| v.as_u64().map(|t| t as usize);
        match self {
            Route::Completions | Route::Chat => {
                let u = event.get("usage").filter(|u| !u.is_null())?;
                Some(StreamUsage {
                    prompt_tokens: count(&u["prompt_tokens"]),
                    output_tokens: count(&u["completion_tokens"])?,
                })
            }
            Route::Messages => {
                let u = (event["type"] == "message_delta").then(|| &event["usage"])?;
                let prompt = count(&u["input_tokens"])? + count(&u["cache_read_input_tokens"])?;
                Some(StreamUsage {
                    prompt_tokens: Some(prompt),
                    output_tokens: count(&u["output_tokens"])?,
                })
            }
            Route::Responses => {
                let u = event["response"].get("usage").filter(|u| !u.is_null())?;
                Some(StreamUsage {
                    prompt_tokens: count(&u["input_tokens"]),
                    output_tokens: count(&u["output_tokens"])?,
                })
            }
            Route::Completion => {
                (event["stop"] == true).then_some(())?;
                Some(StreamUsage {
                    prompt_tokens: count(&event["tokens_evaluated"]),
                    output_tokens: count(&event["tokens_predicted"])?,
                })
            }
            Route::Ollama => {
                (event["done"] == true).then_some(())?;
                Some(StreamUsage {
                    prompt_tokens: count(&event["prompt_eval_count"]),
                    output_tokens: count(&event["eval_count"])?,
                })
            }
        }
    }

    /// An error the stream reports after its 200, if this event is one.
    pub fn error(self, event: &Value) -> Option<String> {
        let failed = match self {
            Route::Messages => event["type"] == "error",
            Route::Responses => event["type"] == "response.failed",
            _ => event.get("error").is_some(),
        };
        failed.then(|| event.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_reads_its_own_events() {
        let chat = json!({"choices": [{"index": 0, "delta": {"content": "Hi"}}]});
        assert_eq!(Route::Chat.text(&chat), Some("Hi"));
        let delta =
            json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}});
        assert_eq!(Route::Messages.text(&delta), Some("Hi"));
        let end = json!({"type": "message_delta", "usage": {"input_tokens": 3,
                         "cache_read_input_tokens": 4, "output_tokens": 5}});
        assert_eq!(
            Route::Messages.usage(&end),
            Some(StreamUsage {
                prompt_tokens: Some(7),
                output_tokens: 5
            })
        );
        let done = json!({"type": "response.completed", "response": {"usage":
                          {"input_tokens": 2, "output_tokens": 9}}});
        assert_eq!(Route::Responses.usage(&done).unwrap().output_tokens, 9);
        let last =
            json!({"stop": true, "content": "", "tokens_predicted": 4, "tokens_evaluated": 2});
        assert_eq!(Route::Completion.usage(&last).unwrap().output_tokens, 4);
        assert_eq!(Route::Completion.usage(&json!({"stop": false})), None);
        let body = Route::Messages.body(
            &[
                json!({"role": "system", "content": "s"}),
                json!({"role": "user", "content": "u"}),
            ],
            8,
            None,
            None,
        );
        assert_eq!(body["system"], "s");
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        let line = json!({"message": {"role": "assistant", "content": "Hi"}, "done": false});
        assert_eq!(Route::Ollama.text(&line), Some("Hi"));
        assert_eq!(Route::Ollama.usage(&line), None);
        let done = json!({"message": {"content": ""}, "done": true, "prompt_eval_count": 6,
                          "eval_count": 8});
        assert_eq!(
            Route::Ollama.usage(&done),
            Some(StreamUsage {
                prompt_tokens: Some(6),
                output_tokens: 8
            })
        );
        let body = Route::Ollama.body(
            &[json!({"role": "user", "content": "u"})],
            8,
            Some("m"),
            None,
        );
        assert_eq!(
            (&body["model"], &body["options"]["num_predict"]),
            (&json!("m"), &json!(8))
        );
        assert!(Route::Ollama.ndjson() && !Route::Chat.ndjson());
    }
}
