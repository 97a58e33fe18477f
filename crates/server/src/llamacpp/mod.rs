//! llama-server's native routes, in its shapes, so its scripts, tools and web UI work
//! unchanged: `/completion` and `/infill` ([`completion`], parsed by [`parse`]),
//! `/tokenize` and `/detokenize` ([`tokenize`]), `/rerank` and its aliases ([`rerank`]). Errors on them are llama-server's
//! `{"error": {"code", "message", "type"}}` ([`error_body`]).

pub mod completion;
pub mod parse;
pub mod rerank;
pub mod tokenize;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::core::error::{ApiError, ErrorClass};

/// llama-server's error body: `{"error": {"code": <status>, "message", "type"}}`, with its
/// type names, plus `param` and the numbers of a capacity refusal.
pub fn error_body(e: &ApiError, status: StatusCode) -> Value {
    let error_type = match e.class() {
        ErrorClass::BadRequest if e.code() == "context_length_exceeded" => {
            "exceed_context_size_error"
        }
        ErrorClass::BadRequest
        | ErrorClass::MethodNotAllowed
        | ErrorClass::TooLarge
        | ErrorClass::Timeout
        | ErrorClass::UnsupportedMediaType => "invalid_request_error",
        ErrorClass::Forbidden => "permission_error",
        ErrorClass::Unauthorized => "authentication_error",
        ErrorClass::NotFound => "not_found_error",
        ErrorClass::Unavailable => "unavailable_error",
        ErrorClass::NotImplemented => "not_supported_error",
        ErrorClass::Internal => "server_error",
    };
    let mut obj = e.details();
    obj.insert("code".into(), json!(status.as_u16()));
    obj.insert("message".into(), json!(e.to_string()));
    obj.insert("type".into(), json!(error_type));
    if let Some(param) = e.param() {
        obj.insert("param".into(), json!(param));
    }
    json!({ "error": Value::Object(obj) })
}
