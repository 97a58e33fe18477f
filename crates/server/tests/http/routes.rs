//! The small routes, the fallbacks and the layers: health while loading and when ready,
//! models, metrics, tokenize/detokenize, 404/405, and a panicking handler.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use ferrox_sched::SchedulerConfig;
use ferrox_server::{app, with_layers, AppState, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{slow, synthetic_state, tiny, TestServer};

fn state() -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), ServerConfig::default())
}

async fn body_json(r: axum::response::Response) -> Value {
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn health_is_503_while_loading_then_200() {
    let loading = AppState::loading(ServerConfig::default());
    for uri in ["/health", "/v1/models"] {
        let r = app(loading.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(body_json(r).await["error"]["code"], "model_loading");
    }
    let r = app(loading)
        .oneshot(
            Request::post("/v1/completions")
                .body(Body::from(r#"{"prompt": "a"}"#))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);

    let server = TestServer::start(state()).await;
    assert_eq!(
        server.get("/health").await,
        (200, r#"{"status":"ok"}"#.to_string())
    );
}

#[tokio::test]
async fn models_lists_the_served_model() {
    let server = TestServer::start(state()).await;
    let (status, body) = server.get("/v1/models").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "synthetic");
    assert_eq!(v["data"][0]["meta"]["n_ctx"], 512);
    assert_eq!(server.get("/v1/models/synthetic").await.0, 200);
    let (status, body) = server.get("/v1/models/gpt-4").await;
    assert_eq!(status, 404);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["param"], "model");
}

#[tokio::test]
async fn tokenize_and_detokenize_round_trip() {
    let server = TestServer::start(state()).await;
    let (status, v) = server
        .post(
            "/tokenize",
            json!({"content": "hello world", "add_special": true}),
        )
        .await;
    assert_eq!(status, 200);
    let ids = v["tokens"].as_array().unwrap().clone();
    assert_eq!(ids[0], 2, "add_special adds the model's BOS");
    let (_, plain) = server
        .post("/tokenize", json!({"content": "hello world"}))
        .await;
    assert_eq!(plain["tokens"].as_array().unwrap().len(), ids.len() - 1);
    let (_, pieces) = server
        .post(
            "/tokenize",
            json!({"content": "hello", "with_pieces": true}),
        )
        .await;
    let joined: String = pieces["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["piece"].as_str().unwrap())
        .collect();
    assert_eq!(joined, "hello");
    let (status, text) = server
        .post("/detokenize", json!({"tokens": plain["tokens"]}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(text["content"], "hello world");
    let (status, e) = server
        .post("/detokenize", json!({"tokens": [1, 99999]}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["param"], "tokens[1]");
    let (status, e) = server
        .post("/tokenize", json!({"content": "x", "add_bos": true}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["param"], "add_bos");
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_api_shape() {
    let server = TestServer::start(state()).await;
    let (status, body) = server.get("/v2/nothing").await;
    assert_eq!(status, 404);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "not_found");
    let (status, body) = server.get("/v1/completions").await;
    assert_eq!(status, 405);
    assert!(body.contains("method_not_allowed"), "{body}");
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_for_that_request_only() {
    let state = state();
    let routes = Router::new()
        .route(
            "/boom",
            get(|| async {
                if std::hint::black_box(true) {
                    panic!("deliberate test panic");
                }
                "unreachable"
            }),
        )
        .route("/fine", get(|| async { "fine" }));
    let router = with_layers(routes, state.clone());
    let r = router
        .clone()
        .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let v = body_json(r).await;
    assert_eq!(v["error"]["code"], "internal_error");
    assert!(
        !v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deliberate"),
        "details stay in the log"
    );
    let r = router
        .oneshot(Request::get("/fine").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        state.metrics.requests("/boom", 500),
        1,
        "the panic was counted"
    );
}

#[tokio::test]
async fn metrics_expose_every_series() {
    let server = TestServer::start(state()).await;
    let (status, _) = server
        .post(
            "/v1/completions",
            json!({"prompt": "ab", "max_tokens": 3, "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200);
    let _ = server.get("/nope").await;
    // The scheduler publishes its numbers at the end of a tick, just after the last event.
    let idle = |st: &ferrox_sched::SchedulerStatus| {
        st.finished.length == 1 && st.blocks_free == st.blocks_total
    };
    assert!(
        server
            .wait_for(std::time::Duration::from_secs(5), idle)
            .await
    );
    let (status, text) = server.get("/metrics").await;
    assert_eq!(status, 200);
    for series in [
        "ferrox_requests_total{route=\"/v1/completions\",status=\"200\"} 1",
        "ferrox_requests_total{route=\"unmatched\",status=\"404\"} 1",
        "ferrox_queue_depth{model=\"synthetic\"} 0",
        "ferrox_sequences_running{model=\"synthetic\"} 0",
        "ferrox_sequences_prefilling{model=\"synthetic\"} 0",
        "ferrox_sequences_preempted{model=\"synthetic\"} 0",
        "ferrox_preemptions_total{model=\"synthetic\"} 0",
        "ferrox_kv_blocks_used{model=\"synthetic\"} 0",
        "ferrox_kv_blocks_free{model=\"synthetic\"} ",
        "ferrox_prompt_tokens_total 3",
        "ferrox_generation_tokens_total 3",
        "ferrox_refusals_total{model=\"synthetic\",type=\"queue_full\"} 0",
        "ferrox_time_to_first_token_seconds_count 1",
        "ferrox_inter_token_latency_seconds_count 2",
        "ferrox_request_duration_seconds_count 1",
    ] {
        assert!(text.contains(series), "missing {series:?} in\n{text}");
    }
}

/// Under load, the vLLM-named series a gateway reads say what ferrox's own say: two
/// sequences running, one request waiting, the KV in use, the prefix-cache counters, the
/// pool's geometry.
#[tokio::test]
async fn gateway_metrics_follow_the_load() {
    let sched = SchedulerConfig {
        max_seqs: 2,
        ..SchedulerConfig::default()
    };
    let server = TestServer::start(synthetic_state(&slow(), sched, ServerConfig::default())).await;
    let long = json!({"prompt": "a b c", "max_tokens": 3000, "ignore_eos": true, "stream": true});
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(server.post_raw("/v1/completions", long.clone()).await);
    }
    let loaded = |s: &ferrox_sched::SchedulerStatus| s.running == 2 && s.queued == 1;
    assert!(
        server
            .wait_for(std::time::Duration::from_secs(10), loaded)
            .await
    );
    let (_, text) = server.get("/metrics").await;
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    };
    let m = "{model_name=\"synthetic\"}";
    assert_eq!(value(&format!("vllm:num_requests_running{m}")), 2.0);
    assert_eq!(value(&format!("vllm:num_requests_waiting{m}")), 1.0);
    let used = value("ferrox_kv_blocks_used{model=\"synthetic\"} ");
    let total = value("ferrox_kv_blocks_total{model=\"synthetic\"} ");
    assert!(used > 0.0);
    assert_eq!(value(&format!("vllm:kv_cache_usage_perc{m}")), used / total);
    assert_eq!(
        value(&format!("vllm:prefix_cache_queries_total{m}")),
        value("ferrox_prefix_cache_queries_total{model=\"synthetic\"} ")
    );
    assert_eq!(
        value(&format!("vllm:prefix_cache_hits_total{m}")),
        value("ferrox_prefix_cache_hits_total{model=\"synthetic\"} ")
    );
    let geometry =
        format!("vllm:cache_config_info{{model_name=\"synthetic\",block_size=\"16\",num_gpu_blocks=\"{total}\"}} 1");
    assert!(text.contains(&geometry), "no {geometry} in\n{text}");
    drop(streams);
}

/// The chat page is served at `/` as HTML that loads nothing from elsewhere, and
/// `--no-webui` takes it away.
#[tokio::test]
async fn the_chat_page_is_at_the_root_unless_turned_off() {
    let get_root = |state: AppState| async move {
        app(state)
            .oneshot(
                Request::get("/")
                    .header("host", "127.0.0.1")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap()
    };
    let r = get_root(state()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    let page = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(page.contains("/v1/chat/completions"));
    for fetch in ["<script src", "<link", "@import", "url("] {
        assert!(!page.contains(fetch), "the page fetches nothing: {fetch}");
    }
    let off = ServerConfig {
        webui: false,
        ..ServerConfig::default()
    };
    let r = get_root(synthetic_state(&tiny(), SchedulerConfig::default(), off)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
