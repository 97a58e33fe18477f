//! `/v1/responses` on a synthetic model: the reply, the event sequence (gap-free sequence
//! numbers, streamed ids == final ids, streamed text == the final text), `incomplete` when
//! the budget runs out, and the bounded store behind `previous_response_id`, `GET` and
//! `DELETE` — continuing reuses the cached conversation, and an unknown, deleted or evicted
//! id is a 404, never ignored.

use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};

fn state(server: ServerConfig) -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), server)
}

fn request(extra: Value) -> Value {
    let mut body = json!({
        "model": "synthetic", "max_output_tokens": 10, "temperature": 0,
        "instructions": "be brief", "input": "hello there",
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn output_text(v: &Value) -> String {
    v["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn string_and_item_inputs_give_one_response_shape() {
    let s = TestServer::start(state(ServerConfig::default())).await;
    let (status, a) = s.post("/v1/responses", request(json!({}))).await;
    assert_eq!(status, 200, "{a}");
    assert!(a["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(a["object"], "response");
    assert_eq!(
        a["status"], "incomplete",
        "10 tokens of a synthetic model never end"
    );
    assert_eq!(a["incomplete_details"]["reason"], "max_output_tokens");
    let item = &a["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(item["content"][0]["type"], "output_text");
    let u = &a["usage"];
    assert_eq!(u["output_tokens"], 10);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["input_tokens"].as_u64().unwrap() + 10)
    );
    let items = json!([{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "hello there"}]}]);
    let (status, b) = s
        .post("/v1/responses", request(json!({"input": items})))
        .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(output_text(&b), output_text(&a), "the same prompt, greedy");
    assert_eq!(b["usage"]["input_tokens"], a["usage"]["input_tokens"]);
    assert!(
        b["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[tokio::test]
async fn a_stream_sends_openais_events_in_order_with_the_final_ids() {
    let s = TestServer::start(state(ServerConfig::default())).await;
    let (_, whole) = s
        .post("/v1/responses", request(json!({"store": false})))
        .await;
    let (status, events) = s
        .named_stream("/v1/responses", request(json!({"stream": true})))
        .await;
    assert_eq!(status, 200);
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i, "sequence numbers have a gap");
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "response.output_text.delta")
        .count();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]);
    assert_eq!(names, expected);
    let last = &events.last().unwrap().1["response"];
    let id = events[0].1["response"]["id"].clone();
    assert_eq!(last["id"], id, "streamed response id != final");
    let item_id = events[2].1["item"]["id"].clone();
    assert_eq!(
        last["output"][0]["id"], item_id,
        "streamed item id != final"
    );
    for (_, d) in &events[3..events.len() - 2] {
        assert_eq!(d["item_id"], item_id);
    }
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, output_text(last));
    assert_eq!(text, output_text(&whole), "streamed != buffered");
    // Stored: GET returns the final object.
    let (status, got) = s
        .get(&format!("/v1/responses/{}", id.as_str().unwrap()))
        .await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), *last);
}

#[tokio::test]
async fn previous_response_id_continues_the_stored_conversation() {
    let s = TestServer::start(state(ServerConfig::default())).await;
    let (_, first) = s.post("/v1/responses", request(json!({}))).await;
    let id = first["id"].as_str().unwrap();
    let (status, second) = s
        .post(
            "/v1/responses",
            request(json!({"previous_response_id": id, "input": "and then?"})),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["previous_response_id"], id);
    let (u1, u2) = (&first["usage"], &second["usage"]);
    let whole_first = u1["input_tokens"].as_u64().unwrap() + u1["output_tokens"].as_u64().unwrap();
    assert!(
        u2["input_tokens"].as_u64().unwrap() > whole_first,
        "history not included"
    );
    let cached = u2["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= u1["input_tokens"].as_u64().unwrap() / 2,
        "history not reused: {u2}"
    );

    // The same conversation sent in full gives the same answer.
    let full = json!([
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": output_text(&first)},
        {"role": "user", "content": "and then?"},
    ]);
    let (_, resent) = s
        .post("/v1/responses", request(json!({"input": full})))
        .await;
    assert_eq!(output_text(&resent), output_text(&second));
    assert_eq!(resent["usage"]["input_tokens"], u2["input_tokens"]);

    // Unknown, deleted and unstored ids are 404s in OpenAI's shape.
    let missing = request(json!({"previous_response_id": "resp_nope"}));
    let (status, v) = s.post("/v1/responses", missing).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, v) = s.delete(&format!("/v1/responses/{id}")).await;
    assert_eq!((status, v["deleted"].as_bool()), (200, Some(true)));
    assert_eq!(s.get(&format!("/v1/responses/{id}")).await.0, 404);
    assert_eq!(s.delete(&format!("/v1/responses/{id}")).await.0, 404);
    let (_, unstored) = s
        .post("/v1/responses", request(json!({"store": false})))
        .await;
    let path = format!("/v1/responses/{}", unstored["id"].as_str().unwrap());
    assert_eq!(s.get(&path).await.0, 404);
}

#[tokio::test]
async fn the_store_is_bounded_and_evicts_the_least_recently_used() {
    let config = ServerConfig {
        responses_max_entries: 2,
        ..ServerConfig::default()
    };
    let s = TestServer::start(state(config)).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, v) = s
            .post(
                "/v1/responses",
                request(json!({"input": format!("turn {i}")})),
            )
            .await;
        ids.push(v["id"].as_str().unwrap().to_string());
        if i == 1 {
            // Using the first makes the second the least recently used.
            assert_eq!(s.get(&format!("/v1/responses/{}", ids[0])).await.0, 200);
        }
    }
    let alive: Vec<u16> = {
        let mut out = Vec::new();
        for id in &ids {
            out.push(s.get(&format!("/v1/responses/{id}")).await.0);
        }
        out
    };
    assert_eq!(alive, [200, 404, 200]);
    let evicted = request(json!({"previous_response_id": ids[1]}));
    assert_eq!(s.post("/v1/responses", evicted).await.0, 404);
}

#[tokio::test]
async fn what_cannot_be_honoured_is_refused_by_name() {
    let s = TestServer::start(state(ServerConfig::default())).await;
    let cases = [
        (
            request(json!({"tools": [{"type": "web_search"}]})),
            "tools[0].type",
        ),
        (
            request(json!({"text": {"format": {"type": "json_schema"}}})),
            "text.format.name",
        ),
        (
            request(json!({"reasoning": {"effort": "high"}})),
            "reasoning.effort",
        ),
        (
            request(json!({"input": [{"type": "function_call_output", "call_id": "c"}]})),
            "input[0].output",
        ),
        (
            request(json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})),
            "input[0].content[0].type",
        ),
        (
            request(json!({"max_output_tokens": 0})),
            "max_output_tokens",
        ),
        (request(json!({"wat": 1})), "wat"),
    ];
    for (body, param) in cases {
        let (status, v) = s.post("/v1/responses", body.clone()).await;
        assert_eq!(
            (status, &v["error"]["param"]),
            (400, &json!(param)),
            "{body}"
        );
    }
    // What SDKs send by default is accepted.
    let defaults = request(json!({
        "tools": [], "tool_choice": "auto", "parallel_tool_calls": true, "include": [],
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "store": true,
        "reasoning": null, "metadata": {"k": "v"}, "user": "u", "background": false,
    }));
    let (status, v) = s.post("/v1/responses", defaults).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["metadata"], json!({"k": "v"}));
}
