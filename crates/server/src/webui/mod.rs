//! The chat page at `/`: one HTML file (`index.html`, its style and script inside it) built
//! into the binary, so nothing is fetched at run time and it works wherever the server is
//! reached — behind TLS, on a phone, with or without an API key (the page asks for one on a
//! 401 and keeps it in the browser). It is a client of the OpenAI chat route like any other:
//! conversations live in the browser's storage, answers stream from
//! `/v1/chat/completions`, the model picker reads `/v1/models`. `--no-webui` turns it off.
//!
//! The page itself is public (a browser cannot send a key for the page load); every route it
//! calls is guarded as usual.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page.
const PAGE: &str = include_str!("index.html");

pub async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Only this server's own scripts and routes; no frame may hold it.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 img-src 'self' data: blob:; frame-ancestors 'none'",
            ),
        ],
        PAGE,
    )
        .into_response()
}
