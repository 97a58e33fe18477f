//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`
//! ([`messages`]), parsed by [`parse`], so that Claude Code and other Anthropic-SDK clients
//! talk to us as they talk to Anthropic. The `anthropic-version` and `x-api-key` headers are
//! accepted with or without a value and change nothing.
//!
//! Errors on these routes are in Anthropic's shape, `{"type": "error", "error": {"type",
//! "message"}}`, with its type names by status; our 503 (a full queue, a loading model) is
//! its `overloaded_error`.

pub mod messages;
pub mod parse;

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::core::error::{ApiError, ErrorClass};

/// Anthropic's error body for `e`.
pub fn error_body(e: &ApiError, _status: StatusCode) -> Value {
    let error_type = match e.class() {
        ErrorClass::BadRequest
        | ErrorClass::MethodNotAllowed
        | ErrorClass::UnsupportedMediaType => "invalid_request_error",
        ErrorClass::Forbidden => "permission_error",
        ErrorClass::NotFound => "not_found_error",
        ErrorClass::TooLarge => "request_too_large",
        ErrorClass::Timeout => "timeout_error",
        ErrorClass::Unauthorized => "authentication_error",
        ErrorClass::Unavailable => "overloaded_error",
        ErrorClass::NotImplemented | ErrorClass::Internal => "api_error",
    };
    json!({"type": "error", "error": error_object(e, error_type)})
}

/// The inner `error` object: Anthropic's `type` and `message`, plus our `code`, `param` and
/// the numbers of a capacity refusal, which Anthropic's SDKs pass through.
pub(crate) fn error_object(e: &ApiError, error_type: &str) -> Value {
    let mut obj = e.details();
    obj.insert("type".into(), json!(error_type));
    obj.insert("message".into(), json!(e.to_string()));
    obj.insert("code".into(), json!(e.code()));
    if let Some(param) = e.param() {
        obj.insert("param".into(), json!(param));
    }
    Value::Object(obj)
}
