//! Ollama's API, so that Ollama's clients — Open WebUI, VS Code's Copilot, LangChain's
//! `ChatOllama`, the `ollama` Python and JS libraries, editor plugins — talk to us as they
//! talk to Ollama: generation ([`generate`]: `/api/chat`, `/api/generate`), embeddings
//! ([`embed`]: `/api/embed`, `/api/embeddings`), and the routes about models ([`models`]:
//! `/api/tags`, `/api/show`, `/api/ps`, `/api/version`) and pulling by name ([`pull`]:
//! `/api/pull`). Bodies are parsed by [`parse`], `options` by [`options`].
//!
//! Errors are Ollama's shape, `{"error": "message"}`, with the same statuses as every other
//! protocol here (400, 404 for an unknown model, 501 for what is not built, 503 while a model
//! loads or the queue is full).

pub mod embed;
pub mod generate;
pub mod models;
pub mod options;
pub mod parse;
pub mod pull;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::core::error::ApiError;

/// Ollama's error body for `e`.
pub fn error_body(e: &ApiError, _status: StatusCode) -> Value {
    json!({ "error": e.to_string() })
}
