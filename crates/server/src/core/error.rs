//! Every way a request can fail, as one enum, [`ApiError`], whatever protocol it came in on.
//!
//! Why one enum: handlers, parsers, the body extractor, the router's fallbacks and the panic
//! catcher all return an `ApiError`, so no code path picks a status by itself and two paths
//! cannot answer the same mistake differently. This module knows no wire format and no status
//! code: [`ApiError::class`] says what *kind* of failure it is, `http/errors.rs` turns the
//! class into a status, and each protocol (`openai/`, `anthropic/`, `llamacpp/`) writes the
//! body in its own shape.
//!
//! The scheduler's capacity refusals are wrapped as they are ([`ApiError::Refused`]), not
//! re-declared: [`ApiError::details`] reads their numbers, so a client can act on them
//! without parsing the message.

use ferrox_engine::sampler::SamplingError;
use ferrox_sched::{InvalidRequest, Refusal};
use serde_json::{json, Map, Value};

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
    /// The scheduler refused the request for capacity (never `Refusal::Invalid`, which
    /// becomes [`ApiError::InvalidParameter`] naming the parameter). `limit_param` is the
    /// output limit as the client's protocol names it (`max_tokens`, `max_output_tokens`,
    /// `n_predict`, ...), which a context refusal names ([`ApiError::for_limit`]).
    #[error("{}", refusal_message(refusal, limit_param))]
    Refused {
        refusal: Refusal,
        limit_param: &'static str,
    },
    #[error("the model `{model}` does not exist; this server serves {}", list_ids(.available))]
    ModelNotFound {
        model: String,
        available: Vec<String>,
    },
    /// Loading a model failed (a missing or hostile file, an unsupported architecture); a
    /// version already serving under its id keeps serving.
    #[error("loading the model `{model}` from {path} failed: {reason}")]
    ModelLoadFailed {
        model: String,
        path: String,
        reason: String,
    },
    /// Loading the model needs room that busy models hold, and none went idle in time.
    #[error(
        "no room to load `{model}`: the loaded models stayed busy for {waited_secs} s \
         (--max-loaded-models / --memory-budget); retry later"
    )]
    ModelsBusy { model: String, waited_secs: u64 },
    /// The model could never be resident within `--memory-budget`, even with every other
    /// model unloaded (its weights and KV cache, priced from the GGUF header).
    #[error(
        "the model `{model}` needs {needed_bytes} bytes (weights and KV cache), over the \
         memory budget of {budget_bytes} bytes"
    )]
    ModelTooLarge {
        model: String,
        needed_bytes: u64,
        budget_bytes: u64,
    },
    /// A stored object (a response) that does not exist, or no longer does.
    #[error("{what} `{id}` not found (it was never stored, was deleted, or was evicted)")]
    ObjectNotFound { what: &'static str, id: String },
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("the request body is larger than the limit of {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    /// API keys are configured and the request presented none of them.
    #[error(
        "a valid API key is required: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`"
    )]
    Unauthorized,
    /// The client did not send its whole body within `--body-timeout`; the connection is
    /// closed after this answer.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    BodyTimeout { timeout_ms: u64 },
    /// A JSON route got another content type (cross-site "simple" requests are forms or
    /// text, so requiring JSON keeps web pages from posting to a local server).
    #[error("the body must be sent with Content-Type: application/json, not {content_type:?}")]
    UnsupportedMediaType { content_type: String },
    /// The `Host` header is not one this server answers to (DNS rebinding protection).
    #[error(
        "Host {host:?} is not allowed; this server answers to loopback names and \
         --allowed-hosts"
    )]
    HostNotAllowed { host: String },
    /// A route the served model cannot serve (infill without FIM tokens).
    #[error("{message}")]
    NotImplemented { message: String },
    #[error("the model is still loading; retry later")]
    Loading,
    /// The server's shutdown grace ran out with this request still streaming.
    #[error("the server is shutting down; the request was cut off")]
    ShuttingDown,
    /// The shutdown signal came: in-flight requests finish, nothing new should come here.
    #[error("the server is shutting down and takes no new work")]
    Draining,
    /// Generation started and failed (the model errored, or the worker recovered from a panic).
    #[error("generation failed: {message}")]
    GenerationFailed { message: String },
    /// A bug: a handler panicked, or a task failed.
    #[error("internal error: {message}")]
    Internal { message: String },
}

/// What kind of failure an error is; each protocol names the kinds its own way, and
/// `http/errors.rs` gives each one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The client's request is wrong (400).
    BadRequest,
    /// What the request names does not exist (404).
    NotFound,
    MethodNotAllowed,
    TooLarge,
    /// The client was too slow sending its request (408).
    Timeout,
    /// No valid API key (401).
    Unauthorized,
    /// The body's content type is not the route's (415).
    UnsupportedMediaType,
    /// The request is refused whatever its content (403).
    Forbidden,
    /// The server cannot take it now; retrying later may work (503).
    Unavailable,
    /// This server cannot do it for this model (501).
    NotImplemented,
    /// The server failed (500).
    Internal,
}

/// `a`, `b` and `c`: the ids a server lists, for a message.
fn list_ids(ids: &[String]) -> String {
    match ids {
        [] => "no model".into(),
        ids => ids
            .iter()
            .map(|id| format!("`{id}`"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn refusal_message(r: &Refusal, limit_param: &str) -> String {
    match r {
        Refusal::ContextLengthExceeded {
            prompt_tokens,
            max_tokens,
            requested_tokens,
            limit_tokens,
            ..
        } => format!(
            "this model's maximum context length is {limit_tokens} tokens; the request asks \
             for {requested_tokens} ({prompt_tokens} in the prompt + {max_tokens} \
             {limit_param})"
        ),
        Refusal::KvBudgetExceeded {
            requested_blocks,
            limit_blocks,
            estimated_bytes,
            limit_bytes,
        } => format!(
            "the request needs {estimated_bytes} bytes of KV cache ({requested_blocks} blocks); \
             the whole cache is {limit_bytes} bytes ({limit_blocks} blocks)"
        ),
        Refusal::QueueFull { queued, cap } => {
            format!(
                "the server is busy: {queued} requests are waiting (the cap is {cap}); retry later"
            )
        }
        Refusal::WorkerGone => "the generation worker has stopped".into(),
        Refusal::Invalid(invalid) => invalid.to_string(),
    }
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidParameter {
            param: param.into(),
            message: message.into(),
        }
    }

    /// This error with the output limit named `param`, as the client's protocol names it
    /// (every parser records its name in `GenerationOptions::max_tokens_param`).
    pub fn for_limit(self, param: &'static str) -> Self {
        match self {
            ApiError::Refused { refusal, .. } => ApiError::Refused {
                refusal,
                limit_param: param,
            },
            other => other,
        }
    }

    pub fn unsupported(param: impl Into<String>) -> Self {
        ApiError::UnsupportedParameter {
            param: param.into(),
        }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            ApiError::InvalidParameter { .. }
            | ApiError::UnsupportedParameter { .. }
            | ApiError::UnknownParameter { .. }
            | ApiError::MissingParameter { .. }
            | ApiError::MalformedJson { .. } => ErrorClass::BadRequest,
            ApiError::Refused {
                refusal: Refusal::QueueFull { .. } | Refusal::WorkerGone,
                ..
            } => ErrorClass::Unavailable,
            ApiError::Refused { refusal: _, .. } => ErrorClass::BadRequest,
            ApiError::ModelTooLarge { .. } => ErrorClass::BadRequest,
            ApiError::ModelNotFound { .. }
            | ApiError::ObjectNotFound { .. }
            | ApiError::RouteNotFound { .. } => ErrorClass::NotFound,
            ApiError::MethodNotAllowed { .. } => ErrorClass::MethodNotAllowed,
            ApiError::PayloadTooLarge { .. } => ErrorClass::TooLarge,
            ApiError::BodyTimeout { .. } => ErrorClass::Timeout,
            ApiError::Unauthorized => ErrorClass::Unauthorized,
            ApiError::UnsupportedMediaType { .. } => ErrorClass::UnsupportedMediaType,
            ApiError::HostNotAllowed { .. } => ErrorClass::Forbidden,
            ApiError::NotImplemented { .. } => ErrorClass::NotImplemented,
            ApiError::Loading
            | ApiError::ShuttingDown
            | ApiError::Draining
            | ApiError::ModelsBusy { .. } => ErrorClass::Unavailable,
            ApiError::GenerationFailed { .. }
            | ApiError::ModelLoadFailed { .. }
            | ApiError::Internal { .. } => ErrorClass::Internal,
        }
    }

    /// Whether a client should retry after [`RETRY_AFTER_SECS`] (a full queue, a loading
    /// model): the `Retry-After` header.
    pub fn retry_after(&self) -> bool {
        matches!(
            self,
            ApiError::Refused {
                refusal: Refusal::QueueFull { .. },
                ..
            } | ApiError::Loading
                | ApiError::ModelsBusy { .. }
        )
    }

    /// The stable machine-readable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidParameter { .. } => "invalid_value",
            ApiError::UnsupportedParameter { .. } => "unsupported_parameter",
            ApiError::UnknownParameter { .. } => "unknown_parameter",
            ApiError::MissingParameter { .. } => "missing_required_parameter",
            ApiError::MalformedJson { .. } => "invalid_json",
            ApiError::Refused {
                refusal: Refusal::ContextLengthExceeded { .. },
                ..
            } => "context_length_exceeded",
            ApiError::Refused {
                refusal: Refusal::KvBudgetExceeded { .. },
                ..
            } => "device_memory_budget_exceeded",
            ApiError::Refused {
                refusal: Refusal::QueueFull { .. },
                ..
            } => "queue_full",
            ApiError::Refused {
                refusal: Refusal::WorkerGone,
                ..
            } => "worker_gone",
            ApiError::Refused {
                refusal: Refusal::Invalid(_),
                ..
            } => "invalid_value",
            ApiError::ModelNotFound { .. } => "model_not_found",
            ApiError::ModelLoadFailed { .. } => "model_load_failed",
            ApiError::ModelTooLarge { .. } => "model_too_large",
            ApiError::ModelsBusy { .. } => "models_busy",
            ApiError::ObjectNotFound { .. } => "not_found",
            ApiError::RouteNotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::BodyTimeout { .. } => "request_timeout",
            ApiError::Unauthorized => "invalid_api_key",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::HostNotAllowed { .. } => "host_not_allowed",
            ApiError::NotImplemented { .. } => "not_implemented",
            ApiError::Loading => "model_loading",
            ApiError::ShuttingDown | ApiError::Draining => "shutting_down",
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
            ApiError::Refused {
                refusal: Refusal::ContextLengthExceeded { .. },
                limit_param,
            } => Some(limit_param),
            ApiError::ModelNotFound { .. } | ApiError::ModelTooLarge { .. } => Some("model"),
            _ => None,
        }
    }

    /// The numbers behind a capacity refusal (`estimated_bytes`, `limit_bytes`, ...), as
    /// fields to add to the error object; empty for every other error.
    pub fn details(&self) -> Map<String, Value> {
        let mut obj = Map::new();
        let mut put = |k: &str, v: Value| {
            obj.insert(k.into(), v);
        };
        match self {
            ApiError::Refused {
                refusal:
                    Refusal::ContextLengthExceeded {
                        prompt_tokens,
                        max_tokens,
                        limit_tokens,
                        estimated_bytes,
                        limit_bytes,
                        ..
                    },
                ..
            } => {
                put("prompt_tokens", json!(prompt_tokens));
                put("max_tokens", json!(max_tokens));
                put("limit_tokens", json!(limit_tokens));
                put("estimated_bytes", json!(estimated_bytes));
                put("limit_bytes", json!(limit_bytes));
            }
            ApiError::Refused {
                refusal:
                    Refusal::KvBudgetExceeded {
                        requested_blocks,
                        limit_blocks,
                        estimated_bytes,
                        limit_bytes,
                    },
                ..
            } => {
                put("requested_blocks", json!(requested_blocks));
                put("limit_blocks", json!(limit_blocks));
                put("estimated_bytes", json!(estimated_bytes));
                put("limit_bytes", json!(limit_bytes));
            }
            ApiError::Refused {
                refusal: Refusal::QueueFull { queued, cap },
                ..
            } => {
                put("queued", json!(queued));
                put("queue_cap", json!(cap));
            }
            ApiError::ModelTooLarge {
                needed_bytes,
                budget_bytes,
                ..
            } => {
                put("needed_bytes", json!(needed_bytes));
                put("budget_bytes", json!(budget_bytes));
            }
            _ => {}
        }
        obj
    }

    /// Logs the error once, at the level its class deserves: client mistakes at debug, load
    /// shedding and loading at info, server faults at error (their details never reach the
    /// client beyond a short message).
    pub fn log(&self) {
        match self.class() {
            ErrorClass::Internal => tracing::error!(code = self.code(), "{self}"),
            ErrorClass::Unavailable => tracing::info!(code = self.code(), "{self}"),
            _ => tracing::debug!(code = self.code(), "{self}"),
        }
    }
}

/// The scheduler's refusals: an invalid request names its parameter; the rest are wrapped.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Invalid(invalid) => invalid.into(),
            refusal => ApiError::Refused {
                refusal,
                limit_param: "max_tokens",
            },
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
            InvalidRequest::DraftLimits { .. } => ApiError::invalid("speculative", message),
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

    #[test]
    fn refusals_keep_their_numbers_and_class() {
        let e = ApiError::from(Refusal::QueueFull { queued: 3, cap: 3 });
        assert_eq!(e.class(), ErrorClass::Unavailable);
        assert!(e.retry_after());
        assert_eq!(e.details()["queue_cap"], 3);
        assert_eq!(e.code(), "queue_full");
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
        assert_eq!(e.class(), ErrorClass::BadRequest);
    }
}
