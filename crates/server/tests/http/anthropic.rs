//! `/v1/messages` and `/v1/messages/count_tokens` on a synthetic model: the reply and the
//! stream in Anthropic's shapes and grammar, streamed == buffered, stop reasons, token counts
//! that add up, and every error in Anthropic's error shape — including errors raised before
//! the handler runs (body too large, not JSON).

use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};

fn state() -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), ServerConfig::default())
}

pub fn message(extra: Value) -> Value {
    let mut body = json!({
        "model": "synthetic", "max_tokens": 12, "temperature": 0,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi there"}],
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn text_of(v: &Value) -> String {
    v["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_reply_has_anthropics_shape_and_usage_that_adds_up() {
    let s = TestServer::start(state()).await;
    let (status, v) = s.post("/v1/messages", message(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        (v["type"].as_str(), v["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(v["model"], "synthetic");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["stop_reason"], "max_tokens");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert_eq!(v["usage"]["output_tokens"], 12);
    let (status, count) = s
        .post(
            "/v1/messages/count_tokens",
            json!({"model": "synthetic", "system": "be brief",
                   "messages": [{"role": "user", "content": "hi there"}]}),
        )
        .await;
    assert_eq!(status, 200, "{count}");
    let u = &v["usage"];
    let whole =
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(count["input_tokens"].as_u64().unwrap(), whole);

    // The same conversation again: the cache serves most of it, and the sum still holds.
    let (_, again) = s.post("/v1/messages", message(json!({}))).await;
    assert!(
        again["usage"]["cache_read_input_tokens"].as_u64().unwrap() > 0,
        "{again}"
    );
    let u = &again["usage"];
    let whole =
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(count["input_tokens"].as_u64().unwrap(), whole);
    assert_eq!(text_of(&again), text_of(&v), "greedy replies differ");
}

#[tokio::test]
async fn a_stream_follows_anthropics_grammar_and_equals_the_reply() {
    let s = TestServer::start(state()).await;
    let (_, whole) = s.post("/v1/messages", message(json!({}))).await;
    let (status, events) = s
        .named_stream("/v1/messages", message(json!({"stream": true})))
        .await;
    assert_eq!(status, 200);
    for (name, data) in &events {
        assert_eq!(
            data["type"],
            name.as_str(),
            "event name and data type differ"
        );
    }
    let names: Vec<&str> = events
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "ping")
        .collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "content_block_delta")
        .count();
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    let start = &events[0].1["message"];
    assert_eq!(start["content"], json!([]));
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, text_of(&whole), "streamed != buffered");
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(
        delta["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
}

#[tokio::test]
async fn a_stop_sequence_ends_the_text_and_is_named() {
    let s = TestServer::start(state()).await;
    let (_, whole) = s
        .post("/v1/messages", message(json!({"max_tokens": 24})))
        .await;
    let text = text_of(&whole);
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 8, "too short to cut: {text:?}");
    let stop: String = chars[4..7].iter().collect();
    let cut = &text[..text.find(&stop).unwrap()];
    let body = message(json!({"max_tokens": 24, "stop_sequences": [stop]}));
    let (status, v) = s.post("/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["stop_sequence"], stop.as_str());
    assert_eq!(text_of(&v), cut);
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (_, events) = s.named_stream("/v1/messages", streamed).await;
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(delta["delta"]["stop_sequence"], stop.as_str());
}

/// `(status, error type, param)` of an Anthropic error body, checking its shape.
fn anthropic_error(status: u16, v: &Value) -> (u16, String, Value) {
    assert_eq!(v["type"], "error", "not Anthropic's shape: {v}");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    let ty = v["error"]["type"].as_str().unwrap().to_string();
    (status, ty, v["error"]["param"].clone())
}

#[tokio::test]
async fn errors_are_in_anthropics_shape_and_name_their_parameter() {
    let s = TestServer::start(state()).await;
    let no_max = json!({"model": "synthetic", "messages": [{"role": "user", "content": "x"}]});
    let cases = [
        (no_max, "max_tokens"),
        (
            message(json!({"tools": [{"name": "f"}]})),
            "tools[0].input_schema",
        ),
        (
            message(json!({"thinking": {"type": "enabled"}})),
            "thinking",
        ),
        (
            message(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {}}]}]})),
            "messages[0].content[0].type",
        ),
        (
            message(json!({"messages": [{"role": "user", "content": [
                {"type": "document", "source": {}}]}]})),
            "messages[0].content[0].type",
        ),
        (message(json!({"temperature": "hot"})), "temperature"),
        (message(json!({"stop_sequences": [1]})), "stop_sequences[0]"),
        (message(json!({"frobnicate": true})), "frobnicate"),
    ];
    for (body, param) in cases {
        let (status, v) = s.post("/v1/messages", body.clone()).await;
        assert_eq!(
            anthropic_error(status, &v),
            (400, "invalid_request_error".into(), json!(param)),
            "{body}"
        );
    }
    let (status, v) = s
        .post("/v1/messages", message(json!({"model": "claude-opus-4"})))
        .await;
    assert_eq!(anthropic_error(status, &v).0, 404);
    assert_eq!(v["error"]["type"], "not_found_error");
    // Raised before the handler: the body extractor, in the route's shape all the same.
    let huge = message(json!({"system": "x".repeat(3 << 20)}));
    let (status, v) = s.post("/v1/messages", huge).await;
    assert_eq!(anthropic_error(status, &v).1, "request_too_large");
    assert_eq!(status, 413);
    let (status, v) = s.post("/v1/messages/count_tokens", json!([1])).await;
    assert_eq!(anthropic_error(status, &v).0, 400);
    // A sampling range the scheduler refuses.
    let (status, v) = s.post("/v1/messages", message(json!({"top_p": 7}))).await;
    assert_eq!(anthropic_error(status, &v).2, "top_p");
}
