//! Newline-delimited JSON streaming (`application/x-ndjson`), Ollama's stream format: one
//! JSON object a line, each sent as soon as it is made. There is no keep-alive line: an
//! NDJSON reader takes every line as an object, so idle time stays silent.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::stream::{Stream, StreamExt};
use serde_json::Value;

/// The streamed response of `lines`, one object a line.
pub fn ndjson_response(lines: impl Stream<Item = Value> + Send + 'static) -> Response {
    let body = Body::from_stream(lines.map(|v| {
        let mut line = v.to_string();
        line.push('\n');
        Ok::<_, Infallible>(Bytes::from(line))
    }));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
