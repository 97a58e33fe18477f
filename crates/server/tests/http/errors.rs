//! Every refusal: its status, its error object (OpenAI's four fields plus the numbers), and
//! that the server keeps serving after it.

use std::time::Duration;

use bytes::Bytes;
use ferrox_sched::{KvBudget, SchedulerConfig};
use ferrox_server::{HostPolicy, ServerConfig};
use hyper::Method;
use serde_json::{json, Value};

use crate::common::{slow, synthetic_state, tiny, tiny_server, TestServer};

async fn server() -> TestServer {
    tiny_server().await
}

/// Checks the error shape and returns the error object.
fn error_of(status: u16, v: &Value, expected_status: u16, code: &str) -> Value {
    assert_eq!(status, expected_status, "{v}");
    let e = &v["error"];
    for key in ["message", "type", "param", "code"] {
        assert!(e.get(key).is_some(), "error object lacks {key}: {v}");
    }
    assert_eq!(e["code"], code, "{v}");
    e.clone()
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_parameter_and_the_server_keeps_serving() {
    let s = server().await;
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            chat(json!({"temperature": "hot"})),
            "invalid_value",
            "temperature",
        ),
        (
            chat(json!({"temperature": -1})),
            "invalid_value",
            "temperature",
        ),
        (chat(json!({"top_p": 2})), "invalid_value", "top_p"),
        (
            chat(json!({"presence_penalty": 3})),
            "invalid_value",
            "presence_penalty",
        ),
        (chat(json!({"messages": []})), "invalid_value", "messages"),
        (chat(json!({"messages": "hi"})), "invalid_value", "messages"),
        (
            chat(json!({"max_tokens": 1_000_000_000_000i64})),
            "invalid_value",
            "max_tokens",
        ),
        (
            chat(json!({"max_tokens": -5})),
            "invalid_value",
            "max_tokens",
        ),
        (
            chat(json!({"tools": [{"type": "function"}]})),
            "missing_required_parameter",
            "tools[0].function",
        ),
        (
            chat(json!({"response_format": {"type": "yaml"}})),
            "invalid_value",
            "response_format.type",
        ),
        (
            chat(json!({"functions": [{"name": "f"}]})),
            "unsupported_parameter",
            "functions",
        ),
        (chat(json!({"best_of": 2})), "unknown_parameter", "best_of"),
        (
            chat(json!({"logit_bias": {"999999": 1}})),
            "invalid_value",
            "logit_bias",
        ),
        (chat(json!({"n": 0})), "invalid_value", "n"),
        (chat(json!({"stop": ""})), "invalid_value", "stop"),
        (chat(json!({"stop": ["a", ""]})), "invalid_value", "stop[1]"),
    ];
    for (body, code, param) in cases {
        let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
        let e = error_of(status, &v, 400, code);
        assert_eq!(e["param"], param, "{body}");
        assert_eq!(e["type"], "invalid_request_error");
    }
    let (status, v) = s
        .post("/v1/completions", json!({"prompt": [5, 99999]}))
        .await;
    assert_eq!(
        error_of(status, &v, 400, "invalid_value")["param"],
        "prompt"
    );
    let (status, v) = s
        .post("/v1/completions", json!({"prompt": "x", "echo": true}))
        .await;
    assert_eq!(
        error_of(status, &v, 400, "unsupported_parameter")["param"],
        "echo"
    );

    // Not JSON, not an object, empty: 400 in the same shape.
    for raw in ["{\"prompt\": ", "[1, 2]", "", "null"] {
        let r = s
            .endpoint
            .send(
                Method::POST,
                "/v1/completions",
                Some((Bytes::from(raw), "application/json")),
            )
            .await
            .unwrap();
        let status = r.status;
        let v = r.json().await.unwrap();
        error_of(status, &v, 400, "invalid_json");
    }
    assert_eq!(s.get("/health").await.0, 200);
    let (status, _) = s
        .post("/v1/completions", json!({"prompt": "ok", "max_tokens": 2}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn unknown_model_is_404() {
    let s = server().await;
    let (status, v) = s
        .post(
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_eq!(
        error_of(status, &v, 404, "model_not_found")["param"],
        "model"
    );
}

#[tokio::test]
async fn context_and_memory_refusals_carry_their_numbers() {
    let s = server().await;
    let (status, v) = s
        .post(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 600}),
        )
        .await;
    let e = error_of(status, &v, 400, "context_length_exceeded");
    assert_eq!(e["limit_tokens"], 512);
    assert!(e["estimated_bytes"].as_u64().unwrap() > e["limit_bytes"].as_u64().unwrap());
    // Each protocol's refusal names the output limit as its client sent it.
    let chat = |limit: &str| {
        let mut body = json!({"messages": [{"role": "user", "content": "x"}]});
        body[limit] = json!(600);
        body
    };
    for (route, body, param) in [
        ("/v1/chat/completions", chat("max_tokens"), "max_tokens"),
        (
            "/v1/chat/completions",
            chat("max_completion_tokens"),
            "max_completion_tokens",
        ),
        (
            "/v1/responses",
            json!({"input": "x", "max_output_tokens": 600}),
            "max_output_tokens",
        ),
        ("/v1/messages", chat("max_tokens"), "max_tokens"),
        (
            "/completion",
            json!({"prompt": "x", "n_predict": 600}),
            "n_predict",
        ),
        (
            "/completion",
            json!({"prompt": "x", "max_tokens": 600}),
            "max_tokens",
        ),
    ] {
        let (status, v) = s.post(route, body).await;
        assert_eq!(status, 400, "{route}: {v}");
        let error = &v["error"];
        let message = error["message"].as_str().unwrap();
        assert!(message.ends_with(&format!("600 {param})")), "{route}: {v}");
        // llama.cpp's error object has no `param`; the others name it.
        if route != "/completion" {
            assert_eq!(error["param"], param, "{route}: {v}");
        }
    }

    // A pool of 4 blocks of 16 positions: 64 tokens, under the 512-token context.
    let sched = SchedulerConfig {
        kv_budget: KvBudget::Blocks(4),
        ..SchedulerConfig::default()
    };
    let small = TestServer::start(synthetic_state(&tiny(), sched, ServerConfig::default())).await;
    let (status, v) = small
        .post(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 100}),
        )
        .await;
    let e = error_of(status, &v, 400, "device_memory_budget_exceeded");
    let per_block = e["limit_bytes"].as_u64().unwrap() / 4;
    assert_eq!(e["limit_blocks"], 4);
    assert_eq!(
        e["estimated_bytes"],
        e["requested_blocks"].as_u64().unwrap() * per_block
    );
    let (status, _) = small
        .post(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 8}),
        )
        .await;
    assert_eq!(status, 200, "a request that fits is still served");
}

#[tokio::test]
async fn an_oversized_body_is_413() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let s = TestServer::start(synthetic_state(&tiny(), SchedulerConfig::default(), config)).await;
    let (status, v) = s
        .post(
            "/v1/completions",
            json!({"prompt": "x".repeat(4000), "max_tokens": 1}),
        )
        .await;
    let e = error_of(status, &v, 413, "payload_too_large");
    assert!(e["message"].as_str().unwrap().contains("1024"));
    let (status, _) = s
        .post(
            "/v1/completions",
            json!({"prompt": "fits", "max_tokens": 1}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_503_with_retry_after() {
    let sched = SchedulerConfig {
        max_seqs: 1,
        max_queue: 1,
        ..SchedulerConfig::default()
    };
    let s = TestServer::start(synthetic_state(&slow(), sched, ServerConfig::default())).await;
    let long = json!({"prompt": "hello", "max_tokens": 10000, "ignore_eos": true, "stream": true});
    // One running...
    let running = s.post_raw("/v1/completions", long.clone()).await;
    let mut running = running.events();
    running.next_data().await.unwrap();
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.running == 1)
            .await
    );
    // ...one waiting...
    let waiting = s.post_raw("/v1/completions", long.clone()).await;
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.queued == 1)
            .await
    );
    // ...and the next is refused.
    let r = s
        .post_raw("/v1/completions", json!({"prompt": "x", "max_tokens": 1}))
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "1");
    let v = r.json().await.unwrap();
    let e = error_of(503, &v, 503, "queue_full");
    assert_eq!(e["queue_cap"], 1);
    drop((running, waiting));
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.running == 0
            && st.queued == 0
            && st.blocks_free == st.blocks_total)
            .await,
        "{:?}",
        s.status()
    );
    let (_, metrics) = s.get("/metrics").await;
    assert!(metrics.contains("ferrox_refusals_total{model=\"synthetic\",type=\"queue_full\"} 1"));
}

/// Every route, top level and nested: a parameter no API defines is a 400 that names it, in
/// the route's own error shape (never `param: null`).
#[tokio::test]
async fn an_unknown_parameter_is_named_on_every_route() {
    let s = server().await;
    let user = json!([{"role": "user", "content": "x"}]);
    let routes = [
        (
            "/v1/chat/completions",
            json!({"messages": user, "max_tokens": 2}),
        ),
        ("/v1/completions", json!({"prompt": "x", "max_tokens": 2})),
        (
            "/v1/responses",
            json!({"input": "x", "max_output_tokens": 2}),
        ),
        ("/v1/messages", json!({"messages": user, "max_tokens": 2})),
        ("/v1/messages/count_tokens", json!({"messages": user})),
        ("/completion", json!({"prompt": "x", "n_predict": 2})),
        ("/infill", json!({"input_prefix": "x"})),
        ("/tokenize", json!({"content": "x"})),
        ("/detokenize", json!({"tokens": [1]})),
    ];
    for (route, body) in routes {
        let mut bad = body.clone();
        bad["zz_unknown"] = json!(1);
        let (status, v) = s.post(route, bad).await;
        assert_eq!(status, 400, "{route}: {v}");
        assert_eq!(v["error"]["param"], "zz_unknown", "{route}: {v}");
    }
    let nested = [
        (
            "/v1/chat/completions",
            "/messages/0",
            "messages[0].zz_unknown",
        ),
        ("/v1/messages", "/messages/0", "messages[0].zz_unknown"),
        ("/v1/responses", "/input/0", "input[0].zz_unknown"),
    ];
    for (route, pointer, param) in nested {
        let mut body = json!({"messages": user, "input": user, "max_tokens": 2});
        if route == "/v1/responses" {
            body.as_object_mut().unwrap().remove("messages");
            body.as_object_mut().unwrap().remove("max_tokens");
        } else {
            body.as_object_mut().unwrap().remove("input");
        }
        body.pointer_mut(pointer).unwrap()["zz_unknown"] = json!(1);
        let (status, v) = s.post(route, body).await;
        assert_eq!(
            (status, &v["error"]["param"]),
            (400, &json!(param)),
            "{route}: {v}"
        );
    }
    let (status, v) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": user, "stream": true,
                                             "stream_options": {"zz_unknown": 1}}),
        )
        .await;
    assert_eq!(
        (status, &v["error"]["param"]),
        (400, &json!("stream_options.zz_unknown"))
    );
}

/// Browser attacks on a loopback server: a cross-site "simple" POST (a form, text) gets 415
/// on every JSON route, and a `Host` that is not loopback or allowed (DNS rebinding) gets 403
/// before any route runs; each in the route's shape, and nothing is generated. The same body
/// from a client that is no browser (no `Origin`: `curl -d`) is read as JSON.
#[tokio::test]
async fn cross_site_posts_and_rebound_hosts_are_refused() {
    use tower::ServiceExt;
    let s = server().await;
    let app = ferrox_server::app(s.state.clone());
    let body = r#"{"prompt": "x", "max_tokens": 2}"#;
    let post = |route: &str, ct: &str, origin: Option<&str>| {
        let mut req = axum::http::Request::builder()
            .method("POST")
            .uri(route)
            .header("host", "127.0.0.1")
            .header("content-type", ct);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        app.clone()
            .oneshot(req.body(axum::body::Body::from(body)).unwrap())
    };
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        for route in [
            "/v1/completions",
            "/v1/messages",
            "/completion",
            "/api/generate",
        ] {
            let r = post(route, ct, Some("https://evil.example")).await.unwrap();
            assert_eq!(r.status(), 415, "{route} {ct}");
            let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            let code = v["error"]["code"].clone();
            let ollama = v["error"]
                .as_str()
                .is_some_and(|e| e.contains("Content-Type"));
            assert!(
                code == "unsupported_media_type" || code == 415 || ollama,
                "{route}: {v}"
            );
            // No Origin: not a browser; the body is JSON whatever its label says.
            let r = post(route, ct, None).await.unwrap();
            assert_ne!(r.status(), 415, "{route} {ct} without Origin");
        }
    }
    let ok = post(
        "/v1/completions",
        "application/json; charset=utf-8",
        Some("http://x"),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 200);

    let policy = HostPolicy::Only(vec!["ferrox.lan".into()]);
    for (host, allowed) in [
        ("127.0.0.1:8080", true),
        ("localhost", true),
        ("[::1]:9", true),
        ("ferrox.lan:8080", true),
        ("FERROX.LAN", true),
        ("evil.example:8080", false),
        ("127.0.0.1.evil.example", false),
    ] {
        assert_eq!(policy.allows(host), allowed, "{host}");
    }
    // Through the router: a rebound Host is a 403 before the route.
    let app = ferrox_server::app(s.state.clone());
    let req = axum::http::Request::builder()
        .method("GET")
        .uri("/v1/models")
        .header("host", "evil.example:8080")
        .body(axum::body::Body::empty())
        .unwrap();
    let r = tower::ServiceExt::oneshot(app, req).await.unwrap();
    assert_eq!(r.status(), 403);
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["error"]["code"], "host_not_allowed");
}

/// A client that writes its whole (too large) body before reading, as blocking HTTP
/// libraries do, reads the 413 instead of a broken pipe: the server drains what it refuses.
#[tokio::test]
async fn a_blocking_client_reads_the_413_of_its_oversized_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = server().await;
    let addr = s.endpoint.authority.clone();
    let body = vec![b' '; 6 << 20];
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
        .write_all(&body)
        .await
        .expect("the whole body is taken");
    let mut reply = vec![0u8; 4096];
    let n = stream.read(&mut reply).await.unwrap();
    let text = String::from_utf8_lossy(&reply[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("payload_too_large"), "{text}");
}
