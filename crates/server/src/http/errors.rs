//! An [`ApiError`] as an HTTP response: the one place a status is chosen ([`status`]), and
//! the layer that writes the body in the shape of the route's protocol ([`with_error_shape`]).
//!
//! Why a layer: an error can come from a handler, from an extractor (the body too large, not
//! JSON, the model still loading) or from the router's fallbacks, and each must reach the
//! client in the shape its SDK parses — OpenAI's `{"error": {...}}` on `/v1/chat/...`,
//! Anthropic's `{"type": "error", ...}` on `/v1/messages`. So `IntoResponse` only picks the
//! status and parks the error in the response's extensions; the protocol's layer around its
//! routes takes it out and writes the body. Whatever no protocol layer claimed (unknown
//! routes, panics) is written by the outermost layer in OpenAI's shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;

use crate::core::error::{ApiError, ErrorClass, RETRY_AFTER_SECS};

/// A protocol's error body for an error and the status it is sent with.
pub type ErrorShape = fn(&ApiError, StatusCode) -> Value;

/// The only place a status is chosen.
pub fn status(e: &ApiError) -> StatusCode {
    match e.class() {
        ErrorClass::BadRequest => StatusCode::BAD_REQUEST,
        ErrorClass::NotFound => StatusCode::NOT_FOUND,
        ErrorClass::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorClass::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorClass::Timeout => StatusCode::REQUEST_TIMEOUT,
        ErrorClass::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorClass::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorClass::Forbidden => StatusCode::FORBIDDEN,
        ErrorClass::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorClass::NotImplemented => StatusCode::NOT_IMPLEMENTED,
        ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error not yet written as a body, waiting in a response's extensions.
#[derive(Clone)]
struct Unrendered(ApiError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = status(&self).into_response();
        if self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if matches!(self, ApiError::BodyTimeout { .. }) {
            // The rest of the body may still come; the connection cannot be reused.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response.extensions_mut().insert(Unrendered(self));
        response
    }
}

/// Writes a parked error's body in `shape`; any other response passes unchanged.
pub fn render(mut response: Response, shape: ErrorShape) -> Response {
    let Some(Unrendered(error)) = response.extensions_mut().remove::<Unrendered>() else {
        return response;
    };
    error.log();
    let status = response.status();
    let headers = std::mem::take(response.headers_mut());
    let mut out = (status, axum::Json(shape(&error, status))).into_response();
    for (name, value) in headers.iter() {
        if name != header::CONTENT_LENGTH && name != header::CONTENT_TYPE {
            out.headers_mut().insert(name, value.clone());
        }
    }
    out
}

/// `routes` with their errors written in `shape`.
pub fn with_error_shape<S>(routes: Router<S>, shape: ErrorShape) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    routes.layer(axum::middleware::map_response(
        move |r: Response| async move { render(r, shape) },
    ))
}
