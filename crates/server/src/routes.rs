//! The router: every route, the fallbacks for unknown routes and methods, and the layers
//! every request passes through.
//!
//! [`app`] is the whole server as a `Router`, so tests can drive it in-process with
//! `oneshot` or bind it to a loopback port. Layers, outermost first:
//! 1. request counting by matched route and status (`metrics.rs`), which so sees errors,
//!    404s and panics too;
//! 2. the body-limit extension (`params::BodyLimit`) and axum's `DefaultBodyLimit`, so that
//!    `JsonBody` answers 413 naming the limit;
//! 3. panic catching: a panicking handler is a 500 for its request only (the connection and
//!    the server carry on; the scheduler worker has its own recovery).
//!
//! Each protocol's routes are one group with its error shape around them
//! (`http/errors.rs`), so an error on `/v1/messages` reaches an Anthropic SDK in Anthropic's
//! shape, whichever layer raised it. The small read-only routes (`/health`, `/v1/models`,
//! `/metrics`) live here, in OpenAI's shape, as do unknown routes.
//!
//! With API keys configured every group is guarded (`http/auth.rs`) except the public list:
//! `/health` (a load balancer's probe), the chat page `/` (`webui`; what it calls is
//! guarded) and, with `--metrics-public`, `/metrics`. A new route
//! joins a guarded group, so it is guarded too; unknown routes check the key before saying
//! 404. CORS (`--cors-origins`) answers preflights before any route runs, after the `Host`
//! check.

use std::any::Any;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{middleware, Extension, Json, Router};
use serde_json::{json, Value};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::CorsLayer;

use crate::anthropic;
use crate::core::error::ApiError;

use crate::http::errors::{render, with_error_shape};
use crate::http::metrics::track_requests;
use crate::http::params::BodyLimit;
use crate::llamacpp::{self, tokenize};
use crate::models;
use crate::ollama;
use crate::openai;
use crate::state::AppState;

/// The whole server.
pub fn app(state: AppState) -> Router {
    let guard = |routes: Router<AppState>| {
        routes.route_layer(middleware::from_fn_with_state(state.clone(), require_key))
    };
    let mut public = Router::new().route("/health", get(health));
    if state.config.webui {
        public = public.route("/", get(crate::webui::page));
    }
    let metrics = Router::new().route("/metrics", get(metrics));
    let metrics = if state.config.metrics_public {
        metrics
    } else {
        guard(metrics)
    };
    // The Responses API's stored responses: the OpenAI adapter's own, outliving any model.
    let responses = Arc::new(openai::responses::store::ResponseStore::new(
        state.config.responses_max_entries,
        state.config.responses_max_bytes,
    ));
    let openai = Router::new()
        .route("/v1/models", get(models::routes::list))
        .route("/v1/models/:id", get(models::routes::one))
        .route("/admin/models/load", post(models::routes::load))
        .route("/admin/models/unload", post(models::routes::unload))
        .route("/v1/chat/completions", post(openai::chat::handle))
        .route("/v1/completions", post(openai::completions::handle))
        .route("/v1/embeddings", post(openai::embeddings::handle))
        .route("/v1/responses", post(openai::responses::create))
        .route(
            "/v1/responses/:id",
            get(openai::responses::get).delete(openai::responses::delete),
        )
        .layer(Extension(responses));
    let llamacpp = Router::new()
        .route("/completion", post(llamacpp::completion::completion))
        .route("/completions", post(llamacpp::completion::completion))
        .route("/infill", post(llamacpp::completion::infill))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/rerank", post(llamacpp::rerank::handle))
        .route("/reranking", post(llamacpp::rerank::handle))
        .route("/v1/rerank", post(llamacpp::rerank::handle))
        .route("/v1/reranking", post(llamacpp::rerank::handle));
    let anthropic = Router::new()
        .route("/v1/messages", post(anthropic::messages::handle))
        .route(
            "/v1/messages/count_tokens",
            post(anthropic::messages::count_tokens),
        );
    let ollama = Router::new()
        .route("/api/chat", post(ollama::generate::chat))
        .route("/api/generate", post(ollama::generate::generate_route))
        .route("/api/embed", post(ollama::embed::embed))
        .route("/api/embeddings", post(ollama::embed::embeddings))
        .route("/api/tags", get(ollama::models::tags))
        .route("/api/show", post(ollama::models::show))
        .route("/api/ps", get(ollama::models::ps))
        .route("/api/version", get(ollama::models::version))
        .route("/api/pull", post(ollama::pull::pull))
        .route("/api/create", post(ollama::models::unsupported))
        .route("/api/copy", post(ollama::models::unsupported))
        .route("/api/push", post(ollama::models::unsupported))
        .route("/api/delete", delete(ollama::models::unsupported))
        .route(
            "/api/blobs/:digest",
            post(ollama::models::unsupported).head(ollama::models::unsupported),
        );
    let openai = public.merge(metrics).merge(guard(openai));
    let routes = with_error_shape(openai, openai::error_body)
        .merge(with_error_shape(guard(anthropic), anthropic::error_body))
        .merge(with_error_shape(guard(llamacpp), llamacpp::error_body))
        .merge(with_error_shape(guard(ollama), ollama::error_body));
    with_layers(routes, state)
}

/// The layers of [`app`] around any routes (tests add routes of their own, e.g. one that
/// panics, and get the same treatment).
pub fn with_layers(routes: Router<AppState>, state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(cors(&state.config.cors_origins))
        .layer(middleware::from_fn_with_state(
            std::sync::Arc::clone(&state.config),
            check_host,
        ))
        .layer(axum::middleware::map_response(|r: Response| async move {
            render(r, openai::error_body)
        }))
        .layer(DefaultBodyLimit::max(limit))
        .layer(Extension(BodyLimit {
            bytes: limit,
            timeout: state.config.body_timeout,
        }))
        .layer(middleware::from_fn_with_state(
            std::sync::Arc::clone(&state.in_flight),
            crate::http::in_flight::track,
        ))
        .layer(middleware::from_fn_with_state(
            state.metrics.clone(),
            track_requests,
        ))
        .with_state(state)
}

/// 403 for a `Host` this server does not answer to (`HostPolicy::allows`). A
/// request without one (HTTP/1.0) passes.
async fn check_host(
    State(config): State<std::sync::Arc<crate::config::ServerConfig>>,
    req: Request,
    next: middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("?").to_string());
    match host {
        Some(h) if !config.hosts.allows(&h) => ApiError::HostNotAllowed { host: h }.into_response(),
        _ => next.run(req).await,
    }
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!("a request handler panicked: {detail}");
    ApiError::Internal {
        message: "the request handler panicked".into(),
    }
    .into_response()
}

/// The layer around every guarded group: passes a request with a valid key (or any request
/// when no keys are configured), answers 401 otherwise (`http/auth.rs`).
async fn require_key(
    State(state): State<AppState>,
    req: Request,
    next: middleware::Next,
) -> Response {
    if state.config.api_keys.allow(req.headers()) {
        return next.run(req).await;
    }
    unauthorized(&state)
}

/// A counted 401 (for the layer and for the fallbacks of unknown routes).
fn unauthorized(state: &AppState) -> Response {
    state
        .metrics
        .auth_failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ApiError::Unauthorized.into_response()
}

/// With keys configured an unknown route is a 401 for a client without one: the router
/// says what exists only to those who may use it.
async fn not_found(State(state): State<AppState>, req: Request) -> Response {
    if !state.config.api_keys.allow(req.headers()) {
        return unauthorized(&state);
    }
    ApiError::RouteNotFound {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
    .into_response()
}

async fn method_not_allowed(State(state): State<AppState>, req: Request) -> Response {
    if !state.config.api_keys.allow(req.headers()) {
        return unauthorized(&state);
    }
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
    }
    .into_response()
}

/// A `--cors-origins` entry must be `*` or an origin, `scheme://host[:port]` exactly as a
/// browser sends it (no path, no trailing slash), or it could never match: refused at start.
pub fn check_cors_origin(origin: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("--cors-origins {origin:?}: {why}"));
    if origin == "*" {
        return Ok(());
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return bad("an origin is scheme://host[:port]");
    };
    if !matches!(scheme, "http" | "https") {
        return bad("the scheme must be http or https");
    }
    if rest.is_empty() || rest.contains('/') || rest.contains(char::is_whitespace) {
        return bad("an origin has a host and no path (not even a trailing /)");
    }
    if origin.parse::<axum::http::HeaderValue>().is_err() {
        return bad("not a valid header value");
    }
    Ok(())
}

/// The CORS policy: none at all (no header, preflights refused) unless origins are listed;
/// then exactly those origins (a listed `http://localhost:3000` admits neither
/// `http://localhost:3000.evil.com` nor another port), or any with `*`.
fn cors(origins: &[String]) -> tower::util::Either<CorsLayer, tower::layer::util::Identity> {
    use tower_http::cors::{AllowHeaders, AllowOrigin};
    if origins.is_empty() {
        return tower::util::Either::Right(tower::layer::util::Identity::new());
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    tower::util::Either::Left(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            // SDKs in a browser send their own headers (x-stainless-*, anthropic-version):
            // echo what the preflight asks for; the origin list is the policy.
            .allow_headers(AllowHeaders::mirror_request())
            .max_age(std::time::Duration::from_secs(600)),
    )
}

/// 200 once the default model has loaded at start and while every loaded model's scheduler
/// runs; 503 while starting, while draining for a shutdown (a load balancer's readiness
/// probe takes the replica out), or if a scheduler's worker is gone.
async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if !state.is_ready() {
        return Err(ApiError::Loading);
    }
    if state.is_draining() {
        return Err(ApiError::Draining);
    }
    if state
        .models
        .loaded()
        .iter()
        .any(|g| !g.scheduler.status().healthy)
    {
        return Err(ferrox_sched::Refusal::WorkerGone.into());
    }
    Ok(Json(json!({"status": "ok"})))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let loaded: Vec<_> = state
        .models
        .loaded()
        .iter()
        .map(|g| (g.scheduler.status(), g.model_id.clone()))
        .collect();
    let text = state.metrics.render(&loaded);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
