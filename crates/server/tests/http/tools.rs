//! Tool calling on `/v1/chat/completions`: with `required` or a named tool every sample of a
//! random model is a call whose arguments validate against the tool's schema; streamed
//! fragments concatenate to exactly the non-streamed arguments and no call text reaches
//! `content`; a parameterless tool streams `{}`; `auto` answers either text or a call; a
//! history with calls and results renders; what cannot be honoured is refused by name.

use ferrox_engine::synthetic::SyntheticSpec;
use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use crate::common::{default_model_state, synthetic_state, tiny, TestServer};

/// The tiny model with room for tool descriptions (its small vocabulary spells them in
/// about a token per character).
fn state() -> AppState {
    let spec = SyntheticSpec {
        context_length: 2048,
        ..tiny()
    };
    synthetic_state(&spec, SchedulerConfig::default(), ServerConfig::default())
}

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "enum": ["paris", "rome"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"], "additionalProperties": false}}})
}

fn clock() -> Value {
    json!({"type": "function", "function": {"name": "now"}})
}

fn ask(extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 120,
        "temperature": 1.0, "tools": [weather(), clock()], "tool_choice": "required",
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn validate(call: &Value) {
    let f = &call["function"];
    let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {call}"));
    let schema = match f["name"].as_str().unwrap() {
        "get_weather" => weather()["function"]["parameters"].clone(),
        "now" => json!({"type": "object", "properties": {}}),
        other => panic!("called an unknown tool {other}"),
    };
    let v = jsonschema::validator_for(&schema).unwrap();
    assert!(v.is_valid(&args), "{call} does not validate");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
}

/// The tool calls a stream's deltas build for choice 0, and its content.
fn streamed_call(events: &[Value]) -> (Option<(String, String, String)>, String) {
    let (mut id, mut name, mut args, mut content) = (None, None, String::new(), String::new());
    for e in events {
        let Some(d) = e["choices"].get(0).map(|c| &c["delta"]) else {
            continue;
        };
        if let Some(c) = d["content"].as_str() {
            content.push_str(c);
        }
        for call in d["tool_calls"].as_array().into_iter().flatten() {
            assert_eq!(call["index"], 0);
            if let Some(i) = call["id"].as_str() {
                assert!(id.is_none(), "a second first delta");
                id = Some(i.to_string());
                name = call["function"]["name"].as_str().map(str::to_string);
            }
            args.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    (id.map(|i| (i, name.unwrap(), args)), content)
}

#[tokio::test]
async fn every_required_call_validates_and_streams_to_the_same_arguments() {
    let s = TestServer::start(state()).await;
    for seed in 0..16 {
        let (status, v) = s
            .post("/v1/chat/completions", ask(json!({"seed": seed})))
            .await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "seed {seed}: {v}");
        assert_eq!(choice["message"]["content"], Value::Null);
        let call = &choice["message"]["tool_calls"][0];
        validate(call);

        let (_, events) = s
            .stream(
                "/v1/chat/completions",
                ask(json!({"seed": seed, "stream": true})),
            )
            .await;
        let (got, content) = streamed_call(&events);
        let (_, name, args) = got.expect("the stream made a call");
        assert_eq!(content, "", "call text leaked into content");
        assert_eq!(name, call["function"]["name"].as_str().unwrap());
        assert_eq!(
            args,
            call["function"]["arguments"].as_str().unwrap(),
            "seed {seed}"
        );
        let last = events
            .iter()
            .rev()
            .find(|e| e["choices"][0]["finish_reason"].is_string());
        assert_eq!(last.unwrap()["choices"][0]["finish_reason"], "tool_calls");
    }
}

#[tokio::test]
async fn a_named_parameterless_tool_is_called_with_empty_arguments() {
    let s = TestServer::start(state()).await;
    let named = json!({"type": "function", "function": {"name": "now"}});
    let (_, v) = s
        .post(
            "/v1/chat/completions",
            ask(json!({"tool_choice": named.clone()})),
        )
        .await;
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "now", "{v}");
    assert_eq!(call["function"]["arguments"], "{}");
    let (_, events) = s
        .stream(
            "/v1/chat/completions",
            ask(json!({"tool_choice": named, "stream": true})),
        )
        .await;
    let (got, _) = streamed_call(&events);
    assert_eq!(got.unwrap().2, "{}");
}

#[tokio::test]
async fn auto_answers_text_or_a_call_and_histories_render() {
    let s = TestServer::start(state()).await;
    // The random model left to itself never opens a call; pushed towards the call syntax's
    // first character (`logit_bias`) it does. Under `auto` both must come out whole: text
    // that is not markup, calls that validate (a grammar that forced either fails here).
    let (_, t) = s
        .post("/tokenize", json!({"content": "<", "add_special": false}))
        .await;
    let opener = t["tokens"][0].as_u64().expect("a token for '<'");
    let (mut texts, mut calls) = (0, 0);
    for seed in 0..12 {
        let mut body = ask(json!({"tool_choice": "auto", "seed": seed}));
        if seed % 2 == 1 {
            body["logit_bias"] = json!({opener.to_string(): 100});
        }
        let (status, v) = s.post("/v1/chat/completions", body).await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        match choice["message"]["tool_calls"].as_array() {
            Some(c) => {
                validate(&c[0]);
                calls += 1;
            }
            None => {
                let text = choice["message"]["content"].as_str().unwrap();
                assert!(!text.trim_start().starts_with("<tool_call>"), "{v}");
                texts += 1;
            }
        }
    }
    assert!(texts > 0 && calls > 0, "texts {texts}, calls {calls}");
    // A history with a call and its result, under every choice.
    let history = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"rome\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]);
    for choice in ["none", "auto", "required"] {
        let body = ask(json!({"messages": history, "tool_choice": choice, "seed": 1}));
        let (status, v) = s.post("/v1/chat/completions", body).await;
        assert_eq!(status, 200, "{choice}: {v}");
    }
}

#[tokio::test]
async fn what_cannot_be_honoured_is_refused_by_name() {
    let s = TestServer::start(state()).await;
    let cases = [
        (
            ask(json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice",
        ),
        (
            ask(json!({"tools": [{"type": "retrieval"}]})),
            "tools[0].type",
        ),
        (
            ask(json!({"tools": [{"type": "function", "function": {"name": "a b"}}]})),
            "tools[0].function.name",
        ),
        (
            ask(json!({"tools": [], "tool_choice": "required"})),
            "tool_choice",
        ),
        (
            ask(
                json!({"tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"x": {"type": "nope"}}}}}]}),
            ),
            "tools",
        ),
        (
            ask(json!({"messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].tool_call_id",
        ),
    ];
    for (body, param) in cases {
        let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(
            (status, &v["error"]["param"]),
            (400, &json!(param)),
            "{body}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_calls_a_required_tool_with_valid_arguments() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    for seed in 0..6 {
        let body = ask(json!({"seed": seed, "temperature": 0.7,
            "messages": [{"role": "user", "content": "What is the weather in Rome for 3 days?"}]}));
        let (_, v) = s.post("/v1/chat/completions", body).await;
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        validate(&v["choices"][0]["message"]["tool_calls"][0]);
    }
}

fn anthropic_ask(extra: Value) -> Value {
    let w = &weather()["function"];
    let mut body = json!({
        "model": "synthetic", "max_tokens": 120, "temperature": 1.0,
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"name": w["name"], "description": w["description"],
                   "input_schema": w["parameters"]}],
        // Anthropic allows several calls by default, but not in the generic syntax this
        // model learns from its system text: a model given more keeps calling until the
        // budget runs out (`core/tools.rs`, `Parallel`).
        "tool_choice": {"type": "any"},
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn anthropic_tool_use_validates_and_streams_its_input() {
    let s = TestServer::start(state()).await;
    let schema = weather()["function"]["parameters"].clone();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for round in 0..8 {
        let (status, v) = s.post("/v1/messages", anthropic_ask(json!({}))).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["stop_reason"], "tool_use", "{v}");
        let block = &v["content"][0];
        assert_eq!(block["type"], "tool_use");
        assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
        assert_eq!(block["name"], "get_weather");
        assert!(validator.is_valid(&block["input"]), "round {round}: {v}");
    }
    // Greedy, streamed and not: the input_json_delta fragments parse to the same input.
    let greedy = json!({"temperature": 0});
    let (_, whole) = s.post("/v1/messages", anthropic_ask(greedy.clone())).await;
    let mut streamed = anthropic_ask(greedy);
    streamed["stream"] = json!(true);
    let (_, events) = s.named_stream("/v1/messages", streamed).await;
    let names: Vec<&str> = events
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "ping")
        .collect();
    assert_eq!(names[..2], ["message_start", "content_block_start"]);
    assert_eq!(events[1].1["content_block"]["type"], "tool_use");
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let json_text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta", "{d}");
            d["delta"]["partial_json"].as_str().unwrap().to_string()
        })
        .collect();
    let input: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(input, whole["content"][0]["input"]);
    let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");

    // The call and its result in the history render; a server tool is refused by name.
    let history = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
            "name": "get_weather", "input": {"city": "rome", "days": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "sunny"}]}]},
    ]);
    let body = anthropic_ask(json!({"messages": history, "tool_choice": {"type": "auto"}}));
    let (status, v) = s.post("/v1/messages", body).await;
    assert_eq!(status, 200, "{v}");
    let bash = anthropic_ask(json!({"tools": [{"type": "bash_20250124", "name": "bash"}],
                                   "tool_choice": {"type": "auto"}}));
    let (status, v) = s.post("/v1/messages", bash).await;
    assert_eq!(
        (status, &v["error"]["param"]),
        (400, &json!("tools[0].type"))
    );
}

#[tokio::test]
async fn responses_function_calls_stream_and_continue() {
    let s = TestServer::start(state()).await;
    let w = &weather()["function"];
    let tool = json!({"type": "function", "name": w["name"], "description": w["description"],
                      "parameters": w["parameters"]});
    let body = |extra: Value| {
        let mut b = json!({"input": "weather?", "max_output_tokens": 120, "temperature": 0,
                           "tools": [tool], "tool_choice": "required"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let (status, whole) = s.post("/v1/responses", body(json!({}))).await;
    assert_eq!(status, 200, "{whole}");
    let item = &whole["output"][0];
    assert_eq!(item["type"], "function_call", "{whole}");
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    assert!(item["id"].as_str().unwrap().starts_with("fc_"));
    let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    let schema = weather()["function"]["parameters"].clone();
    assert!(jsonschema::validator_for(&schema).unwrap().is_valid(&args));

    let (_, events) = s
        .named_stream("/v1/responses", body(json!({"stream": true})))
        .await;
    for (i, (_, d)) in events.iter().enumerate() {
        assert_eq!(d["sequence_number"], i);
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert_eq!(events[2].1["item"]["type"], "function_call");
    assert_eq!(
        names[names.len() - 3..],
        [
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let streamed: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    let last = &events.last().unwrap().1["response"]["output"][0];
    assert_eq!(streamed, last["arguments"].as_str().unwrap());
    assert_eq!(last["arguments"], item["arguments"], "streamed != buffered");
    assert_eq!(last["id"], events[2].1["item"]["id"]);

    // Continue with the call's output, by previous_response_id and by items.
    let output = json!([{"type": "function_call_output", "call_id": item["call_id"],
                         "output": "sunny"}]);
    let (status, v) = s
        .post(
            "/v1/responses",
            body(json!({"previous_response_id": whole["id"], "input": output, "tool_choice": "none"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["output"][0]["type"], "message");
    let mut items = vec![json!({"role": "user", "content": "weather?"}), item.clone()];
    items.extend(output.as_array().unwrap().iter().cloned());
    let (status, v) = s
        .post(
            "/v1/responses",
            body(json!({"input": items, "tool_choice": "auto"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn a_call_cut_before_its_name_is_no_item_and_no_text() {
    let s = TestServer::start(state()).await;
    let w = &weather()["function"];
    let body = json!({"input": "weather?", "max_output_tokens": 3, "temperature": 0,
                      "tools": [{"type": "function", "name": w["name"],
                                 "parameters": w["parameters"]}],
                      "tool_choice": "required"});
    let (status, whole) = s.post("/v1/responses", body.clone()).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["status"], "incomplete");
    assert_eq!(whole["output"], json!([]), "{whole}");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (_, events) = s.named_stream("/v1/responses", streamed).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.incomplete"
        ]
    );
    // Chat: no call closed, so no tool_calls, and the markup is not content.
    let (_, v) = s
        .post("/v1/chat/completions", ask(json!({"max_tokens": 3})))
        .await;
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null, "{v}");
    assert!(message.get("tool_calls").is_none(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}
