//! A client that goes away cancels its request, streaming or not, and its KV blocks come
//! back; shutdown lets in-flight requests finish, and cancels them after the grace period.

use std::time::{Duration, Instant};

use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::json;

use ferrox_server::client::SseEvent;

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

/// Starts a stream on `path` with `body` on a server with a 300 ms grace, signals shutdown
/// and returns the events that followed the first one, once the server has stopped; checks
/// the stream's request was cancelled and its KV blocks came back.
async fn cut_by_the_grace(path: &str, body: serde_json::Value) -> Vec<SseEvent> {
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
    let response = endpoint.post_json(path, &body).await.unwrap();
    assert_eq!(response.status, 200, "{path}");
    let mut events = response.events();
    events.next_event().await.unwrap();
    let started = Instant::now();
    stop.send(()).unwrap();
    served.await.unwrap().unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= grace && waited < Duration::from_secs(5),
        "{path}: {waited:?}"
    );
    let mut tail = Vec::new();
    while let Ok(Some(event)) = events.next_event().await {
        tail.push(event);
    }
    server_rt.shutdown_background();
    // Its request is cancelled.
    let status = || state.served().unwrap().scheduler.status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while status().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let st = status();
    assert_eq!(
        (st.running, st.finished.cancelled),
        (0, 1),
        "{path}: {st:?}"
    );
    assert_eq!(st.blocks_free, st.blocks_total, "{path}");
    drop(events);
    tail
}

fn json_of(event: &SseEvent) -> serde_json::Value {
    serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("{event:?}: {e}"))
}

/// What a long greedy chat asks on every chat protocol (greedy: on the random-weight model
/// it is the same tokens every run, none of them an end of turn for thousands of tokens).
fn chat(extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({"messages": [{"role": "user", "content": "hello"}],
                          "max_tokens": 12000, "temperature": 0, "stream": true});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_what_outlives_the_grace_period_with_each_protocols_ending() {
    // OpenAI: an error object, then the terminator.
    let tail = cut_by_the_grace("/v1/completions", long(true)).await;
    let end = &tail[tail.len().saturating_sub(2)..];
    assert_eq!(
        end.last().map(|e| e.data.as_str()),
        Some("[DONE]"),
        "{end:?}"
    );
    assert_eq!(
        json_of(&end[0])["error"]["code"],
        "shutting_down",
        "{end:?}"
    );
    // Anthropic: an `error` event ends the stream (no message_stop after it).
    let tail = cut_by_the_grace("/v1/messages", chat(json!({"model": "synthetic"}))).await;
    let last = tail.last().expect("events after the first");
    assert_eq!(last.event.as_deref(), Some("error"), "{tail:?}");
    let error = json_of(last);
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "overloaded_error", "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("shut"),
        "{error}"
    );
    assert!(tail
        .iter()
        .all(|e| e.event.as_deref() != Some("message_stop")));
    // Responses: `response.failed`, with the response marked failed.
    let body = json!({"input": "hello", "max_output_tokens": 12000, "temperature": 0,
                      "stream": true});
    let tail = cut_by_the_grace("/v1/responses", body).await;
    let last = tail.last().expect("events after the first");
    assert_eq!(last.event.as_deref(), Some("response.failed"), "{tail:?}");
    assert_eq!(json_of(last)["response"]["status"], "failed", "{last:?}");
    // llama.cpp: a last data line that is its error object.
    let body = json!({"prompt": "hello", "n_predict": 12000, "ignore_eos": true,
                      "stream": true});
    let tail = cut_by_the_grace("/completion", body).await;
    let last = json_of(tail.last().expect("events after the first"));
    assert_eq!(last["error"]["code"], 503, "{last}");
    assert!(
        last["error"]["message"].as_str().unwrap().contains("shut"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_requests_that_never_arrived_whole() {
    use tokio::io::AsyncWriteExt;
    // A grace far longer than the test may take: only what is in flight may hold it.
    let grace = Duration::from_secs(60);
    let state = synthetic_state(&slow(), SchedulerConfig::default(), ServerConfig::default());
    let mut s = TestServer::start_with_grace(state, grace).await;
    let addr = s.endpoint.authority.clone();
    // One connection mid-headers, one with its headers and half its body.
    let mut half_headers = tokio::net::TcpStream::connect(&addr).await.unwrap();
    half_headers
        .write_all(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .await
        .unwrap();
    let mut half_body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    half_body
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"prompt\": \"hel",
        )
        .await
        .unwrap();
    // And one whole request, short, which is waited for and answered.
    let whole = s
        .post_raw(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 40, "ignore_eos": true, "stream": true}),
        )
        .await;
    let mut events = whole.events();
    events.next_data().await.unwrap();
    // Both half-sent requests reached the server before the signal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let stopped = s.trigger_shutdown();
    let mut data = Vec::new();
    while let Some(d) = events.next_data().await.unwrap() {
        data.push(d);
    }
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "the whole one finished"
    );
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("shutdown waited for requests that never arrived whole")
        .unwrap()
        .unwrap();
    eprintln!("stopped {:?} after the signal", started.elapsed());
    drop((half_headers, half_body));
}
