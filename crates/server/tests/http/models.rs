//! Many models in one server: models named by request, loaded on demand (one load for many
//! requests), LRU unloading under `--max-loaded-models` and `--memory-budget` that never
//! touches a busy model, keep-alive, and hot swaps that leave a running stream on the version
//! it started with. The models are random-weight GGUFs the tests write to disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrox_engine::synthetic::{build_gguf, SyntheticSpec};
use ferrox_sched::{KvBudget, SchedulerConfig};
use ferrox_server::{AppState, KeepAlive, ModelsConfig, ServerConfig};
use serde_json::{json, Value};

use crate::common::{slow, text_of, tiny, ScratchDir, TestServer};

/// A fresh directory for one test's model files, removed when the test ends.
fn dir(test: &str) -> ScratchDir {
    ScratchDir::new(&format!("models-{test}"))
}

fn write(dir: &Path, name: &str, spec: &SyntheticSpec) -> PathBuf {
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, build_gguf(spec)).unwrap();
    path
}

fn tiny_seed(seed: u64) -> SyntheticSpec {
    SyntheticSpec { seed, ..tiny() }
}

fn config(max_loaded: Option<usize>, memory_budget: Option<u64>) -> ModelsConfig {
    ModelsConfig {
        // A small pool, so that a model's price is mostly its file.
        scheduler: SchedulerConfig {
            kv_budget: KvBudget::Blocks(256),
            ..SchedulerConfig::default()
        },
        threads: 1,
        max_loaded,
        memory_budget,
        keep_alive: KeepAlive::Forever,
        ..ModelsConfig::default()
    }
}

/// A server over `models` (id, file), none loaded yet.
async fn server(models: &[(&str, &Path)], config: ModelsConfig) -> TestServer {
    let state = AppState::new(ServerConfig::default(), config);
    for (id, path) in models {
        state.models.add(id, path.to_path_buf()).unwrap();
    }
    state.set_ready();
    TestServer::start(state).await
}

/// Each model's status in `/v1/models`.
async fn statuses(s: &TestServer) -> Vec<(String, String)> {
    let (code, body) = s.get("/v1/models").await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn status_of(s: &TestServer, id: &str) -> String {
    statuses(s)
        .await
        .into_iter()
        .find(|(m, _)| m == id)
        .map(|(_, st)| st)
        .unwrap_or_else(|| panic!("{id} not listed"))
}

async fn model_field(s: &TestServer, id: &str, field: &str) -> Value {
    let (_, body) = s.get(&format!("/v1/models/{id}")).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    v["ferrox"][field].clone()
}

/// Polls until `id` has `status`, for at most `timeout`.
async fn wait_status(s: &TestServer, id: &str, status: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if status_of(s, id).await == status {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Makes `model` busy: a stream of `tokens` tokens, its first event read.
async fn busy(s: &TestServer, model: &str, tokens: usize) -> ferrox_server::client::EventReader {
    let body = json!({"model": model, "prompt": "a b c", "max_tokens": tokens,
                      "ignore_eos": true, "stream": true});
    let mut events = s.post_raw("/v1/completions", body).await.events();
    events.next_data().await.unwrap().expect("a first event");
    events
}

/// A greedy completion on `model`: its text.
async fn complete(s: &TestServer, model: &str, max_tokens: usize) -> String {
    let (code, v) = s
        .post(
            "/v1/completions",
            json!({"model": model, "prompt": "a b c", "max_tokens": max_tokens,
                   "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["model"], model);
    text_of(&v)
}

#[tokio::test]
async fn two_models_are_served_by_name() {
    let d = dir("by-name");
    let a = write(&d, "a", &tiny_seed(1));
    // A shorter context: a request only `b` must refuse proves which model answered.
    let b = write(
        &d,
        "b",
        &SyntheticSpec {
            context_length: 64,
            ..tiny_seed(2)
        },
    );
    let s = server(&[("a", &a), ("b", &b)], config(None, None)).await;
    assert_eq!(
        statuses(&s).await,
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "unloaded".into())
        ]
    );
    let text_a = complete(&s, "a", 8).await;
    let text_b = complete(&s, "b", 8).await;
    assert_ne!(text_a, text_b, "two random models wrote the same text");
    // No model named: the first one, the default.
    let (_, v) = s
        .post(
            "/v1/completions",
            json!({"prompt": "a b c", "max_tokens": 8, "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(
        (v["model"].as_str(), text_of(&v)),
        (Some("a"), text_a.clone())
    );
    let long = |model: &str| json!({"model": model, "prompt": "a b c", "max_tokens": 100});
    let (code, v) = s.post("/v1/completions", long("b")).await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let (code, _) = s.post("/v1/completions", long("a")).await;
    assert_eq!(code, 200);
    // Every route resolves the same way: the Anthropic one, and the tokenizer.
    let (code, v) = s
        .post(
            "/v1/messages",
            json!({"model": "b", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!((code, v["model"].as_str()), (200, Some("b")), "{v}");
    let (code, v) = s
        .post("/v1/completions", json!({"model": "c", "prompt": "x"}))
        .await;
    assert_eq!(code, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("`a`, `b`"), "{message}");
    assert_eq!(
        statuses(&s).await,
        [("a".into(), "loaded".into()), ("b".into(), "loaded".into())]
    );
    // The scheduler series carry each model's label.
    let (_, metrics) = s.get("/metrics").await;
    for id in ["a", "b"] {
        let series = format!("ferrox_requests_admitted_total{{model=\"{id}\"}} ");
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }
}

#[tokio::test]
async fn the_least_recently_used_idle_model_makes_room() {
    let d = dir("lru");
    let files: Vec<PathBuf> = (0..3)
        .map(|i| write(&d, &format!("m{i}"), &tiny_seed(10 + i)))
        .collect();
    let models: Vec<(&str, &Path)> = vec![("m0", &files[0]), ("m1", &files[1]), ("m2", &files[2])];
    let s = server(&models, config(Some(2), None)).await;
    let first = complete(&s, "m0", 4).await;
    complete(&s, "m1", 4).await;
    // m0 is used again, so m1 is now the least recently used...
    assert_eq!(complete(&s, "m0", 4).await, first);
    complete(&s, "m2", 4).await;
    // ...and goes to make room for m2.
    let listed = |a: &str, b: &str, c: &str| {
        vec![
            ("m0".to_string(), a.to_string()),
            ("m1".to_string(), b.to_string()),
            ("m2".to_string(), c.to_string()),
        ]
    };
    assert_eq!(statuses(&s).await, listed("loaded", "unloaded", "loaded"));
    // Back on demand, and still the same model.
    complete(&s, "m1", 4).await;
    assert_eq!(statuses(&s).await, listed("unloaded", "loaded", "loaded"));
    assert_eq!(complete(&s, "m0", 4).await, first);
    assert_eq!(model_field(&s, "m0", "loads").await, 2);
}

#[tokio::test]
async fn a_busy_model_is_never_unloaded_a_load_waits_for_it() {
    let d = dir("busy");
    let a = write(&d, "a", &slow());
    let b = write(&d, "b", &tiny_seed(3));
    busy_model_keeps_its_room(&[("a", &a), ("b", &b)], config(Some(1), None)).await;
}

#[tokio::test]
async fn under_a_memory_budget_a_busy_model_is_never_unloaded_either() {
    let d = dir("busy-budget");
    let a = write(&d, "a", &slow());
    let b = write(&d, "b", &tiny_seed(3));
    let models = [("a", a.as_path()), ("b", b.as_path())];
    // Each model's price, read off a server without limits: the budget holds either one,
    // never both.
    let probe = server(&models, config(None, None)).await;
    complete(&probe, "a", 1).await;
    complete(&probe, "b", 1).await;
    let price = |v: Value| v.as_u64().expect("memory_bytes");
    let (pa, pb) = (
        price(model_field(&probe, "a", "memory_bytes").await),
        price(model_field(&probe, "b", "memory_bytes").await),
    );
    let budget = pa.max(pb) + pa.min(pb) / 2;
    busy_model_keeps_its_room(&models, config(None, Some(budget))).await;
}

/// With room for one of `models` ("a", slow, then "b"): b's request waits while a streams,
/// a stays loaded until its stream has ended, then b loads in its place.
async fn busy_model_keeps_its_room(models: &[(&str, &Path)], config: ModelsConfig) {
    let s = server(models, config).await;
    let mut events = busy(&s, "a", 1500).await;
    // b needs a's room: its request waits while a streams.
    let endpoint = s.endpoint.clone();
    let waiting = tokio::spawn(async move {
        let r = endpoint
            .post_json(
                "/v1/completions",
                &json!({"model": "b", "prompt": "x", "max_tokens": 2}),
            )
            .await
            .unwrap();
        (r.status, Instant::now())
    });
    // b's load has begun (it waits for room), and a is still the one loaded.
    assert!(wait_status(&s, "b", "loading", Duration::from_secs(10)).await);
    assert_eq!(status_of(&s, "a").await, "loaded");
    assert!(!waiting.is_finished());
    let mut tokens = 1;
    while let Some(data) = events.next_data().await.unwrap() {
        if data != "[DONE]" {
            tokens += 1;
        }
    }
    let stream_ended = Instant::now();
    assert!(tokens > 100, "the stream was cut after {tokens} events");
    let (code, answered) = waiting.await.unwrap();
    assert_eq!(code, 200);
    assert!(
        answered >= stream_ended,
        "b was served before a's stream ended"
    );
    assert_eq!(status_of(&s, "a").await, "unloaded");
}

#[tokio::test]
async fn a_load_that_waits_too_long_for_room_is_a_503_models_busy() {
    let d = dir("busy-wait");
    let a = write(&d, "a", &slow());
    let b = write(&d, "b", &tiny_seed(3));
    let config = ModelsConfig {
        room_wait: Duration::from_millis(500),
        ..config(Some(1), None)
    };
    let s = server(&[("a", &a), ("b", &b)], config).await;
    let mut events = busy(&s, "a", 3000).await;
    let asked = Instant::now();
    let (code, v) = s
        .post(
            "/v1/completions",
            json!({"model": "b", "prompt": "x", "max_tokens": 2}),
        )
        .await;
    let waited = asked.elapsed();
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (503, Some("models_busy")),
        "{v}"
    );
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    // a was left alone: still loaded, still streaming.
    assert_eq!(status_of(&s, "a").await, "loaded");
    assert!(events
        .next_data()
        .await
        .unwrap()
        .is_some_and(|d| d != "[DONE]"));
    drop(events);
}

#[tokio::test]
async fn concurrent_requests_for_an_unloaded_model_share_one_load() {
    let d = dir("coalesce");
    let a = write(&d, "a", &tiny_seed(4));
    let s = server(&[("a", &a)], config(None, None)).await;
    let requests = (0..8).map(|_| {
        let endpoint = s.endpoint.clone();
        tokio::spawn(async move {
            let body = json!({"model": "a", "prompt": "a b", "max_tokens": 3,
                              "temperature": 0, "ignore_eos": true});
            let r = endpoint.post_json("/v1/completions", &body).await.unwrap();
            (r.status, r.json().await.unwrap())
        })
    });
    let replies: Vec<(u16, Value)> = futures_util::future::join_all(requests)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for (code, v) in &replies {
        assert_eq!(*code, 200, "{v}");
        assert_eq!(text_of(v), text_of(&replies[0].1));
    }
    assert_eq!(model_field(&s, "a", "loads").await, 1);
}

/// A stream started on one version finishes on it, token for token, while a new file is
/// swapped in under its id; the next request runs on the new version.
#[tokio::test]
async fn a_hot_swap_leaves_a_running_stream_on_its_version() {
    let d = dir("swap");
    let v1 = write(&d, "v1", &slow());
    let v2 = write(&d, "v2", &SyntheticSpec { seed: 99, ..slow() });
    let s = server(&[("m", &v1)], config(None, None)).await;
    let body = json!({"model": "m", "prompt": "a b c", "max_tokens": 1200, "temperature": 0,
                      "ignore_eos": true, "stream": true});
    let text = |events: &[Value]| -> String {
        events
            .iter()
            .filter_map(|e| e["choices"][0]["text"].as_str())
            .collect()
    };
    let (_, alone) = s.stream("/v1/completions", body.clone()).await;
    let alone = text(&alone);

    let r = s.post_raw("/v1/completions", body.clone()).await;
    let mut events = r.events();
    let mut during = Vec::new();
    for _ in 0..5 {
        let data = events.next_data().await.unwrap().unwrap();
        during.push(serde_json::from_str::<Value>(&data).unwrap());
    }
    let (code, v) = s
        .post("/admin/models/load", json!({"model": "m", "path": v2}))
        .await;
    assert_eq!((code, v["status"].as_str()), (200, Some("loaded")), "{v}");
    let swapped_at = during.len();
    while let Some(data) = events.next_data().await.unwrap() {
        if let Ok(v) = serde_json::from_str::<Value>(&data) {
            during.push(v);
        }
    }
    assert!(
        during.len() > swapped_at + 100,
        "the swap came after the stream ended"
    );
    assert_eq!(text(&during), alone, "the stream changed version mid-way");

    let (_, after) = s.stream("/v1/completions", body.clone()).await;
    let after = text(&after);
    assert_ne!(after, alone, "the next request is still on the old version");
    // It is the new file's answer: the same as a server of v2 alone.
    let fresh = server(&[("m", &v2)], config(None, None)).await;
    let (_, v2_alone) = fresh.stream("/v1/completions", body).await;
    assert_eq!(after, text(&v2_alone));
}

#[tokio::test]
async fn a_failed_load_names_the_file_and_keeps_the_serving_version() {
    let d = dir("failed");
    let good = write(&d, "good", &tiny_seed(5));
    let hostile = d.join("hostile.gguf");
    std::fs::write(&hostile, b"GGUF\x03\x00\x00\x00 not really").unwrap();
    let s = server(&[("m", &good), ("bad", &hostile)], config(None, None)).await;
    let before = complete(&s, "m", 6).await;
    let (code, v) = s
        .post("/admin/models/load", json!({"model": "m", "path": hostile}))
        .await;
    assert_eq!(code, 500, "{v}");
    assert_eq!(v["error"]["code"], "model_load_failed");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&hostile.display().to_string()),
        "{message}"
    );
    assert_eq!(complete(&s, "m", 6).await, before);
    assert_eq!(status_of(&s, "m").await, "loaded");
    // The first load and the failed one: the version serving was never reloaded.
    assert_eq!(model_field(&s, "m", "loads").await, 2);
    // A path that is no file is the client's mistake, named before anything loads.
    let missing = d.join("missing.gguf");
    let (code, v) = s
        .post("/admin/models/load", json!({"model": "m", "path": missing}))
        .await;
    assert_eq!(
        (code, v["error"]["param"].as_str()),
        (400, Some("path")),
        "{v}"
    );
    assert_eq!(model_field(&s, "m", "loads").await, 2);
    // A registered model whose file is bad is listed as failed, with the reason.
    let (code, v) = s
        .post("/v1/completions", json!({"model": "bad", "prompt": "x"}))
        .await;
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (500, Some("model_load_failed"))
    );
    assert_eq!(status_of(&s, "bad").await, "failed");
    assert!(model_field(&s, "bad", "reason").await.is_string());
    // A new id whose first load fails is not kept.
    let (code, _) = s
        .post(
            "/admin/models/load",
            json!({"model": "typo", "path": hostile}),
        )
        .await;
    assert_eq!(code, 500);
    assert!(!statuses(&s).await.iter().any(|(id, _)| id == "typo"));
    // Unknown ids without a file are a 404 on both admin routes.
    let (code, _) = s.post("/admin/models/load", json!({"model": "nope"})).await;
    assert_eq!(code, 404);
    let (code, _) = s
        .post("/admin/models/unload", json!({"model": "nope"}))
        .await;
    assert_eq!(code, 404);
}

/// Two loads that each need the other's room: the first to reserve it loads, the other
/// waits for it to go idle, and neither waits for ever.
#[tokio::test]
async fn concurrent_loads_under_a_cap_take_turns() {
    let d = dir("turns");
    let a = write(&d, "a", &tiny_seed(12));
    let b = write(&d, "b", &tiny_seed(13));
    let s = server(&[("a", &a), ("b", &b)], config(Some(1), None)).await;
    let ask = |model: &'static str| {
        let endpoint = s.endpoint.clone();
        tokio::spawn(async move {
            let body = json!({"model": model, "prompt": "x", "max_tokens": 2});
            endpoint
                .post_json("/v1/completions", &body)
                .await
                .unwrap()
                .status
        })
    };
    let both = futures_util::future::join(ask("a"), ask("b"));
    let (ra, rb) = tokio::time::timeout(Duration::from_secs(30), both)
        .await
        .expect("two loads under a cap of one deadlocked");
    assert_eq!((ra.unwrap(), rb.unwrap()), (200, 200));
}

/// A load that waits for room is given up when every request that wanted it has gone.
#[tokio::test]
async fn a_load_nobody_waits_for_any_more_is_abandoned() {
    let d = dir("abandoned");
    let a = write(&d, "a", &slow());
    let b = write(&d, "b", &tiny_seed(14));
    let s = server(&[("a", &a), ("b", &b)], config(Some(1), None)).await;
    let events = busy(&s, "a", 1500).await;
    let endpoint = s.endpoint.clone();
    let gone = tokio::spawn(async move {
        let body = json!({"model": "b", "prompt": "x", "max_tokens": 2});
        endpoint.post_json("/v1/completions", &body).await
    });
    assert!(wait_status(&s, "b", "loading", Duration::from_secs(3)).await);
    gone.abort();
    assert!(wait_status(&s, "b", "failed", Duration::from_secs(3)).await);
    assert_eq!(status_of(&s, "a").await, "loaded");
    let reason = model_field(&s, "b", "reason").await;
    assert!(reason.as_str().unwrap().contains("no room"), "{reason}");
    drop(events);
}

#[tokio::test]
async fn keep_alive_zero_unloads_when_idle_negative_keeps() {
    let d = dir("keep-alive");
    let a = write(&d, "a", &tiny_seed(6));
    let s = server(&[("a", &a)], config(None, None)).await;
    let ask =
        |keep: Value| json!({"model": "a", "prompt": "x", "max_tokens": 2, "keep_alive": keep});
    let (code, _) = s.post("/v1/completions", ask(json!(0))).await;
    assert_eq!(code, 200);
    assert!(wait_status(&s, "a", "unloaded", Duration::from_secs(3)).await);

    let (code, _) = s.post("/v1/completions", ask(json!(-1))).await;
    assert_eq!(code, 200);
    // Kept for ever: no expiry is set, rather than one not reached yet.
    assert_eq!(status_of(&s, "a").await, "loaded");
    assert!(model_field(&s, "a", "expires_at").await.is_null());
    assert_eq!(model_field(&s, "a", "keep_alive_secs").await, -1.0);

    let (code, _) = s.post("/v1/completions", ask(json!("1s"))).await;
    assert_eq!(code, 200);
    assert!(model_field(&s, "a", "expires_at").await.is_u64());
    assert_eq!(status_of(&s, "a").await, "loaded");
    assert!(wait_status(&s, "a", "unloaded", Duration::from_secs(4)).await);

    let (code, v) = s.post("/v1/completions", ask(json!("5x"))).await;
    assert_eq!(
        (code, v["error"]["param"].as_str()),
        (400, Some("keep_alive")),
        "{v}"
    );
}

#[tokio::test]
async fn the_admin_unloads_an_idle_model_at_once_a_busy_one_when_it_ends() {
    let d = dir("unload");
    let a = write(&d, "a", &slow());
    let s = server(&[("a", &a)], config(None, None)).await;
    complete(&s, "a", 2).await;
    let (code, v) = s.post("/admin/models/unload", json!({"model": "a"})).await;
    assert_eq!((code, v["status"].as_str()), (200, Some("unloaded")));
    assert_eq!(status_of(&s, "a").await, "unloaded");

    let mut events = busy(&s, "a", 400).await;
    let (_, v) = s.post("/admin/models/unload", json!({"model": "a"})).await;
    assert_eq!(v["status"], "unloading");
    assert_eq!(status_of(&s, "a").await, "loaded");
    let mut n = 0;
    while events.next_data().await.unwrap().is_some() {
        n += 1;
    }
    assert!(n > 100, "the stream was cut after {n} events");
    assert!(wait_status(&s, "a", "unloaded", Duration::from_secs(3)).await);
}

#[tokio::test]
async fn the_memory_budget_prices_models_before_loading() {
    let d = dir("budget");
    let a = write(&d, "a", &tiny_seed(7));
    let b = write(&d, "b", &tiny_seed(8));
    // What one model costs, as the server prices it.
    let probe = server(&[("a", &a)], config(None, None)).await;
    complete(&probe, "a", 1).await;
    let price = model_field(&probe, "a", "memory_bytes")
        .await
        .as_u64()
        .unwrap();
    // Its file (the weights are mapped from it) and its whole KV pool: 256 blocks of 16.
    let per_token = ferrox_engine::ModelConfig::read(&a)
        .unwrap()
        .kv_shape()
        .bytes_per_token();
    let file = std::fs::metadata(&a).unwrap().len();
    assert_eq!(price, file + 256 * 16 * per_token as u64);

    let s = server(&[("a", &a), ("b", &b)], config(None, Some(price * 3 / 2))).await;
    complete(&s, "a", 1).await;
    complete(&s, "b", 1).await;
    assert_eq!(
        statuses(&s).await,
        [
            ("a".into(), "unloaded".into()),
            ("b".into(), "loaded".into())
        ]
    );
    let tight = server(&[("a", &a)], config(None, Some(price - 1))).await;
    let (code, v) = tight
        .post("/v1/completions", json!({"model": "a", "prompt": "x"}))
        .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"]["code"], "model_too_large");
    assert_eq!(v["error"]["needed_bytes"], price);
    assert_eq!(v["error"]["budget_bytes"], price - 1);
}

#[tokio::test]
async fn an_encoder_is_priced_at_its_file_a_decoder_at_its_file_and_kv_pool() {
    let d = dir("price");
    let encoder = write(
        &d,
        "enc",
        &SyntheticSpec::tiny(ferrox_engine::Arch::Bert, 2),
    );
    let decoder = write(&d, "dec", &tiny_seed(2));
    let s = server(&[("enc", &encoder), ("dec", &decoder)], config(None, None)).await;
    let (code, v) = s
        .post("/v1/embeddings", json!({"model": "enc", "input": "a b"}))
        .await;
    assert_eq!(code, 200, "{v}");
    complete(&s, "dec", 1).await;
    let file = |p: &Path| std::fs::metadata(p).unwrap().len();
    let price = |v: Value| v.as_u64().expect("memory_bytes");
    // An encoder never writes a KV cache: its price is its file.
    assert_eq!(
        price(model_field(&s, "enc", "memory_bytes").await),
        file(&encoder)
    );
    // A decoder's KV pool (256 blocks) is part of its price.
    assert!(price(model_field(&s, "dec", "memory_bytes").await) > file(&decoder));
}
