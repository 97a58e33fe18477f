//! `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`: OpenAI's Responses API, for
//! Codex and other Responses clients.
//!
//! The request: `input` (a string, or message items whose content is a string or
//! `input_text` / `output_text` parts), `instructions` (a system message, not inherited by a
//! continuation, as OpenAI does), `max_output_tokens`, `temperature`, `top_p`, `stream`,
//! `store` (default true), `previous_response_id`, `metadata` (returned as given), `user`.
//! What the SDKs and Codex send with values that mean what this server does anyway is
//! accepted (`include: []`, `truncation: "disabled"`, `include: []`,
//! `reasoning` without an effort, `background: false`, `service_tier`, `prompt_cache_key`);
//! any other value of them is refused by name. `text.format` constrains the output:
//! `json_object`, or `json_schema` (always enforced). Function `tools` and `tool_choice`
//! work as on chat (`core/tools.rs`): a call is a `function_call` output item with its
//! `call_id`, and `function_call` / `function_call_output` input items carry the history.
//!
//! The reply is a `response` object with one `message` output item holding one
//! `output_text` part; `status` is `completed`, or `incomplete` with
//! `incomplete_details.reason: "max_output_tokens"` when the budget ran out. Streaming sends
//! OpenAI's event sequence (see `Events`), every event with a gap-free `sequence_number`,
//! and the ids it streams are the final ones.
//!
//! `previous_response_id` continues a stored response: its conversation (inputs and output)
//! is the prefix of this one, which the prefix cache makes cheap. An unknown or evicted id is
//! a 404, never ignored.
//!
//! The folder, one job a file: [`parse`] (the body, once), [`draft`] (the response object as
//! it is built: ids, items, the finished response and what is stored), `stream` (the
//! events of a streamed response), [`store`] (the stored responses), and the three handlers
//! here.

pub mod draft;
pub mod parse;
pub mod store;
mod stream;

use std::sync::Arc;

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use ferrox_engine::template::ChatMessage;

use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::generate::generate;
use crate::core::request::Input;
use crate::core::stream::drive;
use crate::http::sse::{sse_response, Ping};
use crate::models::Pinned;
use draft::Draft;
use parse::parse_request;
use store::ResponseStore;
use stream::Events;

pub async fn create(
    Extension(responses): Extension<Arc<ResponseStore>>,
    Pinned { served, body }: Pinned,
) -> Result<Response, ApiError> {
    let request = parse_request(body)?;
    let mut history = match &request.previous_response_id {
        None => Vec::new(),
        Some(id) => responses
            .get(id)
            .ok_or_else(|| ApiError::ObjectNotFound {
                what: "response",
                id: id.clone(),
            })?
            .history
            .clone(),
    };
    history.extend(request.input.iter().cloned());
    let mut prompt = Vec::with_capacity(history.len() + 1);
    if let Some(instructions) = &request.instructions {
        prompt.push(ChatMessage::new("system", instructions.clone()));
    }
    prompt.extend(history.iter().cloned());
    let thinking = served.thinking_for(
        request.options.tools.is_some(),
        request.options.grammar.is_some(),
    );
    let tool_format = served.tool_format;
    let generation = generate(served, Input::Chat(prompt), &request.options).await?;
    let model = generation.served.model_id.clone();
    let draft = Draft::new(request, history, responses, model, thinking, tool_format);
    if draft.request.options.stream {
        let encoder = Events::new(draft);
        return Ok(sse_response(drive(generation, encoder), Ping::Comment));
    }
    let mut generation = generation;
    let outputs = generation.collect().await?;
    let usage = generation.usage();
    let out = &outputs[0];
    let response = draft.finished(&out.completion.text, &out.finish, usage);
    Ok(Json(response).into_response())
}

pub async fn get(
    Extension(responses): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match responses.get(&id) {
        Some(stored) => Ok(Json(stored.response.clone())),
        None => Err(ApiError::ObjectNotFound {
            what: "response",
            id,
        }),
    }
}

pub async fn delete(
    Extension(responses): Extension<Arc<ResponseStore>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match responses.delete(&id) {
        true => Ok(Json(
            json!({"id": id, "object": "response", "deleted": true}),
        )),
        false => Err(ApiError::ObjectNotFound {
            what: "response",
            id,
        }),
    }
}
