//! API keys and CORS (`http/auth.rs`, `routes.rs`): with keys set every route is guarded but
//! the public list, in the route's protocol shape, by either header; CORS admits exactly the
//! listed origins.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{Request, Response};
use ferrox_sched::SchedulerConfig;
use ferrox_server::{app, ApiKeys, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{synthetic_state, tiny};

/// Every route the router has, as (method, path with ids filled in, the route's pattern),
/// and whether it is public. A route added to `routes.rs` without a row here fails
/// [`every_route_is_classified`].
const ROUTES: &[(&str, &str, &str, bool)] = &[
    ("GET", "/health", "/health", true),
    ("GET", "/", "/", true),
    ("GET", "/metrics", "/metrics", false),
    ("GET", "/v1/models", "/v1/models", false),
    ("GET", "/v1/models/x", "/v1/models/:id", false),
    (
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions",
        false,
    ),
    ("POST", "/v1/completions", "/v1/completions", false),
    ("POST", "/admin/models/load", "/admin/models/load", false),
    (
        "POST",
        "/admin/models/unload",
        "/admin/models/unload",
        false,
    ),
    ("POST", "/v1/embeddings", "/v1/embeddings", false),
    ("POST", "/v1/responses", "/v1/responses", false),
    ("GET", "/v1/responses/resp_x", "/v1/responses/:id", false),
    ("DELETE", "/v1/responses/resp_x", "/v1/responses/:id", false),
    ("POST", "/completion", "/completion", false),
    ("POST", "/completions", "/completions", false),
    ("POST", "/infill", "/infill", false),
    ("POST", "/tokenize", "/tokenize", false),
    ("POST", "/detokenize", "/detokenize", false),
    ("POST", "/rerank", "/rerank", false),
    ("POST", "/reranking", "/reranking", false),
    ("POST", "/v1/rerank", "/v1/rerank", false),
    ("POST", "/v1/reranking", "/v1/reranking", false),
    ("POST", "/v1/messages", "/v1/messages", false),
    (
        "POST",
        "/v1/messages/count_tokens",
        "/v1/messages/count_tokens",
        false,
    ),
    ("POST", "/api/chat", "/api/chat", false),
    ("POST", "/api/generate", "/api/generate", false),
    ("POST", "/api/embed", "/api/embed", false),
    ("POST", "/api/embeddings", "/api/embeddings", false),
    ("GET", "/api/tags", "/api/tags", false),
    ("POST", "/api/show", "/api/show", false),
    ("GET", "/api/ps", "/api/ps", false),
    ("GET", "/api/version", "/api/version", false),
    ("POST", "/api/pull", "/api/pull", false),
    ("POST", "/api/create", "/api/create", false),
    ("POST", "/api/copy", "/api/copy", false),
    ("POST", "/api/push", "/api/push", false),
    ("DELETE", "/api/delete", "/api/delete", false),
    ("POST", "/api/blobs/sha256-x", "/api/blobs/:digest", false),
];

/// The route patterns `routes.rs` registers, read from its source.
fn registered_routes() -> BTreeSet<String> {
    let src = include_str!("../../src/routes.rs");
    src.match_indices(".route(")
        .filter_map(|(at, _)| {
            let rest = &src[at..];
            let open = rest.find('"')? + 1;
            let len = rest[open..].find('"')?;
            Some(rest[open..open + len].to_string())
        })
        .collect()
}

#[test]
fn every_route_is_classified() {
    let table: BTreeSet<String> = ROUTES.iter().map(|r| r.2.to_string()).collect();
    assert_eq!(
        registered_routes(),
        table,
        "a route is missing from (or stale in) this test's table: classify it public or guarded"
    );
}

fn keyed_app(config: ServerConfig) -> axum::Router {
    app(synthetic_state(&tiny(), SchedulerConfig::default(), config))
}

async fn send(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = if method == "POST" { "{}" } else { "" };
    app.clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap()
}

async fn json_of(r: Response<Body>) -> Value {
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Routes in OpenAI's error shape: its own, and the server's (metrics, model admin).
fn openai_shaped(path: &str) -> bool {
    // `/v1/rerank` is llama-server's route (OpenAI has none), in llama-server's shape.
    let llamacpp = path.starts_with("/v1/rerank");
    (path.starts_with("/v1/") && !llamacpp) || path == "/metrics" || path.starts_with("/admin/")
}

/// The error `type` each protocol's 401 carries.
fn auth_error_type(path: &str) -> &'static str {
    if path.starts_with("/v1/messages") {
        "authentication_error" // Anthropic's
    } else if openai_shaped(path) {
        "invalid_request_error" // OpenAI's
    } else {
        "authentication_error" // llama.cpp's
    }
}

#[tokio::test]
async fn with_keys_every_guarded_route_needs_one_by_either_header() {
    let config = ServerConfig {
        api_keys: ApiKeys::new(["sk-one".to_string(), "sk-two".to_string()]),
        ..ServerConfig::default()
    };
    let app = keyed_app(config);
    let mut refused = 0;
    for &(method, path, _, public) in ROUTES {
        let r = send(&app, method, path, &[]).await;
        if public {
            assert_eq!(r.status(), 200, "{method} {path} is public");
            continue;
        }
        assert_eq!(r.status(), 401, "{method} {path} without a key");
        let v = json_of(r).await;
        let error = &v["error"]; // every protocol nests it there
        if path.starts_with("/api/") {
            // Ollama's shape: the message itself.
            assert!(
                error.as_str().unwrap_or("").contains("API key"),
                "{path}: {v}"
            );
        } else {
            assert_eq!(error["type"], auth_error_type(path), "{method} {path}: {v}");
        }
        let code = if openai_shaped(path) {
            json!("invalid_api_key")
        } else if path.starts_with("/api/") {
            Value::Null // Ollama's error has no code
        } else {
            json!(401) // llama-server's shape carries the status as its code
        };
        assert_eq!(error["code"], code, "{method} {path}: {v}");
        for wrong in [
            ("authorization", "Bearer sk-three"),
            ("authorization", "sk-one"), // no scheme
            ("x-api-key", "sk-on"),
        ] {
            let r = send(&app, method, path, &[wrong]).await;
            assert_eq!(r.status(), 401, "{method} {path} with {wrong:?}");
        }
        refused += 4;
        for right in [("authorization", "Bearer sk-two"), ("x-api-key", "sk-one")] {
            let r = send(&app, method, path, &[right]).await;
            assert_ne!(r.status(), 401, "{method} {path} with {right:?}");
        }
    }
    // Unknown routes say nothing to a client without a key.
    assert_eq!(send(&app, "GET", "/v2/secret", &[]).await.status(), 401);
    assert_eq!(
        send(&app, "PUT", "/v1/completions", &[]).await.status(),
        401
    );
    let key = [("x-api-key", "sk-one")];
    assert_eq!(send(&app, "GET", "/v2/secret", &key).await.status(), 404);
    assert_eq!(
        send(&app, "PUT", "/v1/completions", &key).await.status(),
        405
    );
    refused += 2;
    let metrics = send(&app, "GET", "/metrics", &key).await;
    let bytes = axum::body::to_bytes(metrics.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(&format!("ferrox_auth_failures_total {refused}\n")),
        "{refused} refusals, metrics say:\n{}",
        text.lines()
            .find(|l| l.starts_with("ferrox_auth"))
            .unwrap_or("nothing")
    );
}

#[tokio::test]
async fn without_keys_nothing_is_guarded_and_metrics_can_be_public() {
    let app = keyed_app(ServerConfig::default());
    for &(method, path, _, _) in ROUTES {
        assert_ne!(
            send(&app, method, path, &[]).await.status(),
            401,
            "{method} {path}"
        );
    }
    let app = keyed_app(ServerConfig {
        api_keys: ApiKeys::new(["k".to_string()]),
        metrics_public: true,
        ..ServerConfig::default()
    });
    assert_eq!(send(&app, "GET", "/metrics", &[]).await.status(), 200);
    assert_eq!(send(&app, "GET", "/v1/models", &[]).await.status(), 401);
}

#[test]
fn cors_origins_that_could_never_match_are_refused() {
    for good in ["*", "http://localhost:3000", "https://app.example.com"] {
        assert!(ferrox_server::check_cors_origin(good).is_ok(), "{good}");
    }
    for bad in [
        "localhost:3000",
        "http://localhost:3000/",
        "ftp://x",
        "http://",
        "http://a b",
    ] {
        assert!(ferrox_server::check_cors_origin(bad).is_err(), "{bad}");
    }
}

fn allow_origin(r: &Response<Body>) -> Option<String> {
    r.headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn cors_admits_exactly_the_listed_origins() {
    let preflight = |origin: &'static str| {
        [
            ("origin", origin),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, x-stainless-os",
            ),
        ]
    };
    // By default: no CORS headers for anyone.
    let app = keyed_app(ServerConfig::default());
    let r = send(
        &app,
        "POST",
        "/v1/completions",
        &[("origin", "http://localhost:3000")],
    )
    .await;
    assert_eq!(allow_origin(&r), None);
    let r = send(
        &app,
        "OPTIONS",
        "/v1/completions",
        &preflight("http://localhost:3000"),
    )
    .await;
    assert_eq!(allow_origin(&r), None);

    // Listed: that origin exactly, even with keys set (a preflight carries no key).
    let app = keyed_app(ServerConfig {
        cors_origins: vec!["http://localhost:3000".into()],
        api_keys: ApiKeys::new(["k".to_string()]),
        ..ServerConfig::default()
    });
    let r = send(
        &app,
        "OPTIONS",
        "/v1/chat/completions",
        &preflight("http://localhost:3000"),
    )
    .await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(allow_origin(&r).as_deref(), Some("http://localhost:3000"));
    let allowed = r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(allowed.contains("x-stainless-os"), "{allowed}");
    for evil in [
        "http://localhost:3000.evil.com",
        "http://localhost:3001",
        "https://localhost:3000",
        "http://evil.com",
    ] {
        let r = send(&app, "OPTIONS", "/v1/chat/completions", &preflight(evil)).await;
        assert_eq!(allow_origin(&r), None, "{evil}");
    }
    let r = send(
        &app,
        "POST",
        "/v1/completions",
        &[("origin", "http://localhost:3000"), ("x-api-key", "k")],
    )
    .await;
    assert_eq!(allow_origin(&r).as_deref(), Some("http://localhost:3000"));
}
