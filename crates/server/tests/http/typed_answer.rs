//! Tools together with a structured final answer — the agent frameworks' shape: "call a
//! tool, or answer in this schema" — on every protocol, with a random-weight model pushed
//! towards a call on half the seeds: every reply is either calls whose arguments validate or
//! an answer that validates against the schema, never free text, and a stream builds exactly
//! the buffered reply. A family whose calls could begin like the answer is refused by name.

use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};
use crate::tool_families::{server, LLAMA3};

fn state() -> ferrox_server::AppState {
    let spec = ferrox_engine::synthetic::SyntheticSpec {
        context_length: 2048,
        ..tiny()
    };
    synthetic_state(&spec, SchedulerConfig::default(), ServerConfig::default())
}

fn weather() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string", "enum": ["paris", "rome"]}},
           "required": ["city"]})
}

fn answer() -> Value {
    json!({"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}},
           "required": ["colour"]})
}

/// Whether `text` is a schema-valid answer, or `(name, arguments)` schema-valid calls.
fn check(text: &str, calls: &[(String, String)]) -> &'static str {
    if calls.is_empty() {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(jsonschema::is_valid(&answer(), &v), "{text}");
        "answer"
    } else {
        for (name, args) in calls {
            assert_eq!(name, "get_weather");
            let v: Value = serde_json::from_str(args).unwrap();
            assert!(jsonschema::is_valid(&weather(), &v), "{args}");
        }
        "calls"
    }
}

/// The token the call syntax begins with, to push the model towards a call.
async fn opener(s: &TestServer) -> u64 {
    let (_, t) = s
        .post("/tokenize", json!({"content": "<", "add_special": false}))
        .await;
    t["tokens"][0].as_u64().unwrap()
}

#[tokio::test]
async fn chat_completions_answer_in_the_schema_or_call_streamed_as_buffered() {
    let s = TestServer::start(state()).await;
    let push = opener(&s).await;
    let mut seen = Vec::new();
    for seed in 0..8 {
        let mut body = json!({
            "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 200,
            "temperature": 1.0, "seed": seed,
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather()}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": answer()}},
        });
        if seed % 2 == 1 {
            body["logit_bias"] = json!({push.to_string(): 100});
        }
        let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(status, 200, "{v}");
        let m = &v["choices"][0]["message"];
        let calls: Vec<(String, String)> = m["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let f = &c["function"];
                (
                    f["name"].as_str().unwrap().into(),
                    f["arguments"].as_str().unwrap().into(),
                )
            })
            .collect();
        let text = m["content"].as_str().unwrap_or("");
        seen.push(check(text, &calls));
        body["stream"] = json!(true);
        let (_, events) = s.stream("/v1/chat/completions", body).await;
        let streamed_text: String = events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(streamed_text, text, "seed {seed}");
        let streamed_args: String = events
            .iter()
            .flat_map(|e| {
                e["choices"][0]["delta"]["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|c| c["function"]["arguments"].as_str().map(str::to_string))
            .collect();
        let args: String = calls.iter().map(|c| c.1.as_str()).collect();
        assert_eq!(streamed_args, args, "seed {seed}");
    }
    assert!(
        seen.contains(&"answer") && seen.contains(&"calls"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn messages_responses_and_ollama_take_the_schema_beside_tools() {
    let s = TestServer::start(state()).await;
    // Anthropic's structured output, alone and with tools.
    let anthropic = |extra: Value| {
        let mut body = json!({"max_tokens": 200, "temperature": 1.0,
            "messages": [{"role": "user", "content": "weather?"}],
            "output_config": {"format": {"type": "json_schema", "schema": answer()}}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, v) = s.post("/v1/messages", anthropic(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    check(v["content"][0]["text"].as_str().unwrap(), &[]);
    let tools = json!([{"name": "get_weather", "input_schema": weather()}]);
    let (status, v) = s
        .post("/v1/messages", anthropic(json!({"tools": tools})))
        .await;
    assert_eq!(status, 200, "{v}");
    let block = &v["content"][0];
    match block["type"].as_str().unwrap() {
        "text" => check(block["text"].as_str().unwrap(), &[]),
        _ => check(
            "",
            &[(
                block["name"].as_str().unwrap().into(),
                block["input"].to_string(),
            )],
        ),
    };
    // Anthropic's error shape for a schema that cannot be enforced.
    let bad =
        json!({"output_config": {"format": {"type": "json_schema", "schema": {"type": "strin"}}}});
    let (status, v) = s.post("/v1/messages", anthropic(bad)).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "output_config.format");
    let (status, v) = s
        .post(
            "/v1/messages",
            anthropic(json!({"output_config": {"effort": "high"}})),
        )
        .await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("output_config.effort"))
    );

    // The Responses API: text.format beside function tools.
    let (status, v) = s
        .post(
            "/v1/responses",
            json!({"input": "weather?", "max_output_tokens": 200, "temperature": 1.0, "seed": 1,
                   "tools": [{"type": "function", "name": "get_weather", "parameters": weather()}],
                   "text": {"format": {"type": "json_schema", "name": "a", "schema": answer()}}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let item = &v["output"][0];
    match item["type"].as_str().unwrap() {
        "message" => check(item["content"][0]["text"].as_str().unwrap(), &[]),
        _ => check(
            "",
            &[(
                item["name"].as_str().unwrap().into(),
                item["arguments"].as_str().unwrap().into(),
            )],
        ),
    };

    // Ollama: format beside tools.
    let (status, v) = s
        .post(
            "/api/chat",
            json!({"model": "synthetic", "stream": false, "format": answer(),
                   "options": {"temperature": 1.0, "seed": 2, "num_predict": 200},
                   "messages": [{"role": "user", "content": "weather?"}],
                   "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather()}}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let calls: Vec<(String, String)> = v["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["function"]["name"].as_str().unwrap().into(),
                c["function"]["arguments"].to_string(),
            )
        })
        .collect();
    check(v["message"]["content"].as_str().unwrap(), &calls);
}

#[tokio::test]
async fn a_family_whose_calls_begin_like_the_answer_is_refused_by_name() {
    // Llama 3 writes a call as a bare JSON object: an object answer could not be told apart.
    let s = server(LLAMA3).await;
    let body = json!({
        "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 20,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": weather()}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": answer()}},
    });
    let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "response_format", "{v}");
    // An answer that is a string begins with `"`: it can be told apart.
    let mut string_answer = body;
    string_answer["response_format"]["json_schema"]["schema"] =
        json!({"type": "string", "enum": ["red", "blue"]});
    let (status, v) = s.post("/v1/chat/completions", string_answer).await;
    assert_eq!(status, 200, "{v}");
}

/// A schema's integer with no bounds, written by a random model that picks among the
/// allowed tokens near uniformly (a digit after a digit most of the time): every answer ends
/// with its number at most 16 digits long, as llama.cpp bounds it, and validates.
#[tokio::test]
async fn unbounded_integers_end_within_sixteen_digits() {
    let s = TestServer::start(state()).await;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"]});
    let mut longest = 0;
    for seed in 0..24 {
        let body = json!({"messages": [{"role": "user", "content": "a number"}],
            "max_tokens": 120, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}});
        let (status, v) = s.post("/v1/chat/completions", body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let n: Value = serde_json::from_str(text).unwrap();
        let digits = n["n"].to_string().trim_start_matches('-').len();
        longest = longest.max(digits);
    }
    assert!(longest <= 16, "{longest} digits");
}
