//! Every way a request can fail, as one enum, [`ApiError`], and the one place that turns it
//! into an HTTP status and OpenAI's error shape: its `IntoResponse` impl.
//!
//! Why one enum: handlers, validation, the body extractor, the router's fallbacks and the
//! panic catcher all return an `ApiError`, so no code path picks a status by itself and two
//! paths cannot answer the same mistake differently. The body is always
//! `{"error": {"message", "type", "param", "code"}}`, plus the numbers behind the decision for
//! the two capacity refusals (`estimated_bytes`, `limit_bytes`, ...), so a client can act on
//! them without parsing the message.
//!
//! Client mistakes (4xx) are logged at debug level only, load shedding and loading (503) at
//! info; server faults (500) at error level here, once, and their details never reach the
//! client beyond a short message.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ferrox_sched::{InvalidRequest, Refusal};
use serde_json::{json, Map, Value};

use ferrox_engine::sampler::SamplingError;

/// Seconds a client is told to wait after a full queue or while the model loads.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Why a request was not served. Each variant names what was wrong and carries its numbers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// A parameter has the wrong type or a value out of range.
    #[error("invalid value for `{param}`: {message}")]
    InvalidParameter { param: String, message: String },
    /// A parameter the API defines but this server does not implement (`tools`, ...).
    #[error("parameter `{param}` is not supported by this server")]
    UnsupportedParameter { param: String },
    /// A parameter no version of the API defines (often a typo).
    #[error("unrecognized parameter `{param}`")]
    UnknownParameter { param: String },
    #[error("missing required parameter `{param}`")]
    MissingParameter { param: String },
    /// The body is not JSON, or not a JSON object.
    #[error("the request body is not valid JSON: {message}")]
    MalformedJson { message: String },
    #[error(
        "this model's maximum context length is {limit_tokens} tokens; the request asks for \
         {requested_tokens} ({prompt_tokens} in the prompt + {max_tokens} max_tokens)"
    )]
    ContextLengthExceeded {
        prompt_tokens: usize,
        max_tokens: usize,
        requested_tokens: usize,
        limit_tokens: usize,
        estimated_bytes: u64,
        limit_bytes: u64,
    },
    #[error(
        "the request needs {estimated_bytes} bytes of KV cache ({requested_blocks} blocks); \
         the whole cache is {limit_bytes} bytes ({limit_blocks} blocks)"
    )]
    DeviceMemoryBudgetExceeded {
        requested_blocks: usize,
        limit_blocks: usize,
        estimated_bytes: u64,
        limit_bytes: u64,
    },
    #[error("the server is busy: {queued} requests are waiting (the cap is {cap}); retry later")]
    QueueFull { queued: usize, cap: usize },
    #[error("the model `{model}` does not exist; this server serves `{served}`")]
    ModelNotFound { model: String, served: String },
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("the request body is larger than the limit of {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("the model is still loading; retry later")]
    Loading,
    /// The scheduler's worker thread is gone; nothing can be generated.
    #[error("the generation worker has stopped")]
    WorkerGone,
    /// Generation started and failed (the model errored, or the worker recovered from a panic).
    #[error("generation failed: {message}")]
    GenerationFailed { message: String },
    /// A bug: a handler panicked, or a task failed.
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidParameter {
            param: param.into(),
            message: message.into(),
        }
    }

    /// The stable machine-readable `code` of the error object.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidParameter { .. } => "invalid_value",
            ApiError::UnsupportedParameter { .. } => "unsupported_parameter",
            ApiError::UnknownParameter { .. } => "unknown_parameter",
            ApiError::MissingParameter { .. } => "missing_required_parameter",
            ApiError::MalformedJson { .. } => "invalid_json",
            ApiError::ContextLengthExceeded { .. } => "context_length_exceeded",
            ApiError::DeviceMemoryBudgetExceeded { .. } => "device_memory_budget_exceeded",
            ApiError::QueueFull { .. } => "queue_full",
            ApiError::ModelNotFound { .. } => "model_not_found",
            ApiError::RouteNotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::Loading => "model_loading",
            ApiError::WorkerGone => "worker_gone",
            ApiError::GenerationFailed { .. } => "generation_failed",
            ApiError::Internal { .. } => "internal_error",
        }
    }

    /// The request parameter at fault, if one is.
    pub fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidParameter { param, .. }
            | ApiError::UnsupportedParameter { param }
            | ApiError::UnknownParameter { param }
            | ApiError::MissingParameter { param } => Some(param),
            ApiError::ContextLengthExceeded { .. } => Some("max_tokens"),
            ApiError::ModelNotFound { .. } => Some("model"),
            _ => None,
        }
    }

    /// The `error` object of the body: OpenAI's four fields plus the numbers of the
    /// capacity refusals. Also sent as an SSE event when a stream fails after its headers.
    pub fn error_object(&self, error_type: &str) -> Value {
        let mut obj = Map::new();
        obj.insert("message".into(), Value::String(self.to_string()));
        obj.insert("type".into(), Value::String(error_type.into()));
        obj.insert(
            "param".into(),
            self.param().map_or(Value::Null, |p| json!(p)),
        );
        obj.insert("code".into(), json!(self.code()));
        match self {
            ApiError::ContextLengthExceeded {
                prompt_tokens,
                max_tokens,
                limit_tokens,
                estimated_bytes,
                limit_bytes,
                ..
            } => {
                obj.insert("prompt_tokens".into(), json!(prompt_tokens));
                obj.insert("max_tokens".into(), json!(max_tokens));
                obj.insert("limit_tokens".into(), json!(limit_tokens));
                obj.insert("estimated_bytes".into(), json!(estimated_bytes));
                obj.insert("limit_bytes".into(), json!(limit_bytes));
            }
            ApiError::DeviceMemoryBudgetExceeded {
                requested_blocks,
                limit_blocks,
                estimated_bytes,
                limit_bytes,
            } => {
                obj.insert("requested_blocks".into(), json!(requested_blocks));
                obj.insert("limit_blocks".into(), json!(limit_blocks));
                obj.insert("estimated_bytes".into(), json!(estimated_bytes));
                obj.insert("limit_bytes".into(), json!(limit_bytes));
            }
            ApiError::QueueFull { queued, cap } => {
                obj.insert("queued".into(), json!(queued));
                obj.insert("queue_cap".into(), json!(cap));
            }
            _ => {}
        }
        Value::Object(obj)
    }

    /// The error event a stream sends when generation fails after the headers went out.
    pub fn stream_event(&self) -> Value {
        json!({ "error": self.error_object("server_error") })
    }
}

/// The only place a status is chosen.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error_type) = match &self {
            ApiError::InvalidParameter { .. }
            | ApiError::UnsupportedParameter { .. }
            | ApiError::UnknownParameter { .. }
            | ApiError::MissingParameter { .. }
            | ApiError::MalformedJson { .. }
            | ApiError::ContextLengthExceeded { .. }
            | ApiError::DeviceMemoryBudgetExceeded { .. } => {
                (StatusCode::BAD_REQUEST, "invalid_request_error")
            }
            ApiError::ModelNotFound { .. } | ApiError::RouteNotFound { .. } => {
                (StatusCode::NOT_FOUND, "invalid_request_error")
            }
            ApiError::MethodNotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error")
            }
            ApiError::PayloadTooLarge { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error")
            }
            ApiError::QueueFull { .. } | ApiError::Loading | ApiError::WorkerGone => {
                (StatusCode::SERVICE_UNAVAILABLE, "server_error")
            }
            ApiError::GenerationFailed { .. } | ApiError::Internal { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "server_error")
            }
        };
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(code = self.code(), "{self}");
        } else if status.is_server_error() {
            tracing::info!(code = self.code(), "{self}");
        } else {
            tracing::debug!(code = self.code(), "{self}");
        }
        let body = json!({ "error": self.error_object(error_type) });
        let mut response = (status, axum::Json(body)).into_response();
        if matches!(self, ApiError::QueueFull { .. } | ApiError::Loading) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// The scheduler's refusals, each mapped to the parameter or ceiling it is about.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Invalid(invalid) => invalid.into(),
            Refusal::ContextLengthExceeded {
                prompt_tokens,
                max_tokens,
                requested_tokens,
                limit_tokens,
                estimated_bytes,
                limit_bytes,
            } => ApiError::ContextLengthExceeded {
                prompt_tokens,
                max_tokens,
                requested_tokens,
                limit_tokens,
                estimated_bytes,
                limit_bytes,
            },
            Refusal::KvBudgetExceeded {
                requested_blocks,
                limit_blocks,
                estimated_bytes,
                limit_bytes,
            } => ApiError::DeviceMemoryBudgetExceeded {
                requested_blocks,
                limit_blocks,
                estimated_bytes,
                limit_bytes,
            },
            Refusal::QueueFull { queued, cap } => ApiError::QueueFull { queued, cap },
            Refusal::WorkerGone => ApiError::WorkerGone,
        }
    }
}

impl From<InvalidRequest> for ApiError {
    fn from(invalid: InvalidRequest) -> Self {
        let message = invalid.to_string();
        match invalid {
            InvalidRequest::EmptyPrompt | InvalidRequest::TokenOutOfVocab { .. } => {
                ApiError::invalid("prompt", message)
            }
            InvalidRequest::ZeroMaxTokens => ApiError::invalid("max_tokens", message),
            InvalidRequest::Sampling(s) => s.into(),
        }
    }
}

impl From<SamplingError> for ApiError {
    fn from(s: SamplingError) -> Self {
        let message = s.to_string();
        match s {
            SamplingError::OutOfRange { parameter, .. } => ApiError::invalid(parameter, message),
            SamplingError::BiasTokenOutOfVocab { .. } => ApiError::invalid("logit_bias", message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_full_is_503_with_retry_after_and_numbers() {
        let r = ApiError::from(Refusal::QueueFull { queued: 3, cap: 3 }).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "queue_full");
        assert_eq!(v["error"]["queue_cap"], 3);
    }

    #[test]
    fn sampling_errors_name_their_parameter() {
        let e: ApiError = Refusal::Invalid(InvalidRequest::Sampling(SamplingError::OutOfRange {
            parameter: "top_p",
            value: 2.0,
            expected: "in (0, 1]",
        }))
        .into();
        assert_eq!(e.param(), Some("top_p"));
        assert_eq!(e.code(), "invalid_value");
    }
}
