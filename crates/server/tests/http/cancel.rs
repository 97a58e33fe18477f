//! A client that goes away cancels its request, streaming or not, and its KV blocks come
//! back; shutdown lets in-flight requests finish, and cancels them after the grace period.

use std::time::{Duration, Instant};

use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::json;

use crate::common::{slow, synthetic_state, TestServer};

/// Long enough that it cannot finish during a test (thousands of slow-model tokens).
fn long(stream: bool) -> serde_json::Value {
    json!({"prompt": "hello", "max_tokens": 12000, "ignore_eos": true, "stream": stream})
}

async fn server() -> TestServer {
    TestServer::start(synthetic_state(
        &slow(),
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_client_that_disconnects_cancels_its_request() {
    let s = server().await;
    let r = s.post_raw("/v1/completions", long(true)).await;
    let mut events = r.events();
    // Wait for generated text, so the request is decoding.
    for _ in 0..3 {
        events.next_data().await.unwrap();
    }
    let st = s.status();
    assert_eq!(st.running + st.prefilling, 1);
    assert!(st.blocks_free < st.blocks_total);
    let dropped = Instant::now();
    drop(events);
    assert!(
        s.wait_for(Duration::from_secs(5), |st| st.running == 0
            && st.blocks_free == st.blocks_total)
            .await,
        "{:?}",
        s.status()
    );
    let st = s.status();
    assert_eq!(st.finished.cancelled, 1);
    assert!(st.tokens_decoded < 6000, "cancelled long before its end");
    eprintln!("streaming cancel took {:?}", dropped.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_client_that_disconnects_cancels_its_request() {
    let s = server().await;
    let endpoint = s.endpoint.clone();
    let client = tokio::spawn(async move {
        let r = endpoint.post_json("/v1/completions", &long(false)).await;
        r.map(|r| r.status)
    });
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.running == 1)
            .await
    );
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.tokens_decoded > 5)
            .await
    );
    client.abort(); // drops the connection, as a client killed mid-request would
    let dropped = Instant::now();
    assert!(
        s.wait_for(Duration::from_secs(5), |st| st.running == 0
            && st.blocks_free == st.blocks_total)
            .await,
        "{:?}",
        s.status()
    );
    assert_eq!(s.status().finished.cancelled, 1);
    eprintln!("non-streaming cancel took {:?}", dropped.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests_then_stops() {
    let mut s = server().await;
    let r = s
        .post_raw(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 300, "ignore_eos": true, "stream": true,
                   "stream_options": {"include_usage": true}}),
        )
        .await;
    let mut events = r.events();
    let first = events.next_data().await.unwrap().unwrap();
    let stopped = s.trigger_shutdown();
    // Draining: /health says 503 to a load balancer's probe while the stream finishes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.state.is_draining() {
        assert!(Instant::now() < deadline, "never drained");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let probe = axum::http::Request::get("/health")
        .header("host", "127.0.0.1")
        .body(axum::body::Body::empty())
        .unwrap();
    let health = tower::ServiceExt::oneshot(ferrox_server::app(s.state.clone()), probe)
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    let body = axum::body::to_bytes(health.into_body(), 1 << 16)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("shutting_down"));
    // The stream still runs to its end: every one of its 300 tokens, its finish reason and
    // its terminator (whatever the token rate: a server that stopped without waiting would
    // cut it short).
    let mut data = vec![first];
    while let Some(d) = events.next_data().await.unwrap() {
        data.push(d);
    }
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("length"));
    let usage = chunks.last().unwrap()["usage"].clone();
    assert_eq!(usage["completion_tokens"], 300, "{usage}");
    stopped.await.unwrap().unwrap();
    assert!(
        s.endpoint.get("/health").await.is_err(),
        "no longer accepting"
    );
    assert!(
        s.wait_for(Duration::from_secs(5), |st| st.finished.length == 1)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_what_outlives_the_grace_period() {
    // The server on a runtime of its own, as in the binary, which drops that runtime (and
    // with it every connection still open) once `run` returns.
    let state = synthetic_state(&slow(), SchedulerConfig::default(), ServerConfig::default());
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let listener = {
        let _in_server_rt = server_rt.enter();
        tokio::net::TcpListener::from_std(std_listener).unwrap()
    };
    let endpoint = ferrox_server::client::Endpoint::from_addr(listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let grace = Duration::from_millis(300);
    let served = server_rt.spawn(ferrox_server::run(
        listener,
        state.clone(),
        async {
            let _ = stopped.await;
        },
        grace,
    ));
    let mut events = endpoint
        .post_json("/v1/completions", &long(true))
        .await
        .unwrap()
        .events();
    events.next_data().await.unwrap();
    let started = Instant::now();
    stop.send(()).unwrap();
    served.await.unwrap().unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= grace && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    // The stream ended with OpenAI's error event and terminator, not cut mid-body.
    let mut tail = Vec::new();
    while let Ok(Some(data)) = events.next_data().await {
        tail.push(data);
    }
    let end = &tail[tail.len().saturating_sub(2)..];
    assert_eq!(end.last().map(String::as_str), Some("[DONE]"), "{end:?}");
    let error: serde_json::Value = serde_json::from_str(&end[0]).unwrap();
    assert_eq!(error["error"]["code"], "shutting_down", "{end:?}");
    server_rt.shutdown_background();
    // Its request is cancelled.
    let status = || state.generator().unwrap().scheduler.status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while status().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let st = status();
    assert_eq!((st.running, st.finished.cancelled), (0, 1), "{st:?}");
    assert_eq!(st.blocks_free, st.blocks_total);
    drop(events);
}
