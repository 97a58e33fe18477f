//! gpt-oss's harmony format (`core/harmony.rs`) with a random-weight model whose vocabulary
//! has harmony's markers as control tokens, as a gpt-oss GGUF does, and a small template
//! written here in gpt-oss's style (tools as a `functions` namespace, past calls as
//! messages to `functions.NAME` closed by `<|call|>`, results from `functions.NAME`):
//! - a history with a call and its result renders, and the call the template wrote reads
//!   back, through the harmony reader, as the same call;
//! - the model is detected as the harmony family and a thinking one;
//! - its `required` calls validate against the tool's schema, its analysis channel is
//!   reasoning beside them, and streamed equals buffered — on OpenAI's chat, Anthropic's
//!   messages, the Responses API and Ollama's chat.

use ferrox_engine::synthetic::{self, SyntheticSpec};
use ferrox_engine::template::{ChatMessage, ChatTemplate, ChatToolCall};
use ferrox_sched::SchedulerConfig;
use ferrox_server::core::harmony;
use ferrox_server::core::tools::{Parallel, Tool, ToolChoice, Tools};
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};
use crate::tool_families::weather;

const HARMONY: &str = r#"<|start|>system<|message|>You are a helpful assistant.
Reasoning: medium<|end|>
{%- if tools %}<|start|>developer<|message|># Tools

namespace functions {
{% for t in tools %}
// {{ t.function.description }}
type {{ t.function.name }} = (_: {{ t.function.parameters | tojson }}) => any;
{% endfor %}
} // namespace functions<|end|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}
{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}
{%- set c = m.tool_calls[0].function %}<|start|>assistant to=functions.{{ c.name }}<|channel|>commentary json<|message|>{{ c.arguments | tojson }}<|call|>
{%- set last = c.name %}
{%- elif m.role == 'tool' %}<|start|>functions.{{ last }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
{%- elif m.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}"#;

fn spec() -> SyntheticSpec {
    SyntheticSpec {
        context_length: 2048,
        chat_template: Some(HARMONY.into()),
        control_tokens: synthetic::HARMONY_TOKENS,
        ..tiny()
    }
}

/// The id of a harmony marker in [`spec`]'s vocabulary (its last entries).
fn id_of(marker: &str) -> usize {
    let k = synthetic::HARMONY_TOKENS
        .iter()
        .position(|&m| m == marker)
        .unwrap();
    spec().n_vocab - synthetic::HARMONY_TOKENS.len() + k
}

#[test]
fn the_call_the_template_wrote_reads_back_as_the_same_call() {
    let template = ChatTemplate::from_jinja(HARMONY, "", "").unwrap();
    let tools = Tools {
        tools: vec![Tool {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: weather(),
        }],
        choice: ToolChoice::Required,
        parallel: Parallel::Off,
    };
    let mut assistant = ChatMessage::new("assistant", "");
    let args = r#"{"city": "rome", "days": 3}"#;
    assistant.tool_calls = vec![ChatToolCall::from_text("call_0", "get_weather", args)];
    let messages = vec![
        ChatMessage::new("user", "Weather in Rome?"),
        assistant,
        ChatMessage::tool_result("call_0", "sunny"),
    ];
    let prompt = template
        .render_with_tools(&messages, Some(&tools.template_json()), true)
        .unwrap();
    assert!(prompt.contains("type get_weather"), "{prompt}");
    // The assistant's turn, as the model would have written it after `<|start|>assistant`.
    let start = prompt
        .find("Weather in Rome?<|end|><|start|>assistant")
        .unwrap()
        + "Weather in Rome?<|end|><|start|>assistant".len();
    let end = prompt.find("<|call|>").unwrap();
    let (_, _, calls) = harmony::read(&prompt[start..end], Some(&tools), true, false);
    let calls = calls.unwrap();
    assert_eq!(calls.len(), 1, "{prompt}");
    assert_eq!(calls[0].name, "get_weather");
    let got: Value = serde_json::from_str(&calls[0].arguments).unwrap();
    assert_eq!(got, serde_json::from_str::<Value>(args).unwrap());
}

async fn server() -> TestServer {
    TestServer::start(synthetic_state(
        &spec(),
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await
}

/// A required call; `<|end|>` favoured so that the random model's reasoning ends soon.
fn ask(seed: u64, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 300,
        "temperature": 1.0, "seed": seed, "stream": stream, "tool_choice": "required",
        "logit_bias": {id_of("<|end|>").to_string(): 6},
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "description": "Weather in a city", "parameters": weather()}}],
    })
}

#[tokio::test]
async fn calls_validate_beside_their_reasoning_and_stream_as_buffered() {
    let s = server().await;
    let (_, models) = s.get("/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["ferrox"]["tool_format"], "harmony");
    let validator = jsonschema::validator_for(&weather()).unwrap();
    let (mut called, mut reasoned) = (0, 0);
    for seed in 0..6 {
        let (status, v) = s.post("/v1/chat/completions", ask(seed, false)).await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        let message = &choice["message"];
        let calls = message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in &calls {
            assert_eq!(c["function"]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            assert!(validator.is_valid(&args), "seed {seed}: {v}");
        }
        match choice["finish_reason"].as_str().unwrap() {
            "tool_calls" => {
                assert_eq!(calls.len(), 1, "{v}");
                called += 1;
            }
            reason => assert_eq!((reason, calls.len()), ("length", 0), "{v}"),
        }
        let reasoning = message["reasoning_content"].as_str().unwrap_or("");
        reasoned += usize::from(!reasoning.is_empty());
        assert!(!reasoning.contains("<|"), "markers are not reasoning: {v}");
        // Streamed: the same reasoning, and the same call.
        let (_, events) = s.stream("/v1/chat/completions", ask(seed, true)).await;
        let (mut r, mut name, mut args) = (String::new(), String::new(), String::new());
        for e in &events {
            let d = &e["choices"][0]["delta"];
            assert!(d["content"].as_str().unwrap_or("").is_empty(), "{e}");
            r.push_str(d["reasoning_content"].as_str().unwrap_or(""));
            for c in d["tool_calls"].as_array().into_iter().flatten() {
                assert_eq!(c["index"], 0, "{e}");
                name.push_str(c["function"]["name"].as_str().unwrap_or(""));
                args.push_str(c["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        assert_eq!(r, reasoning, "seed {seed}");
        if let Some(c) = calls.first() {
            assert_eq!(name, "get_weather");
            assert_eq!(args, c["function"]["arguments"].as_str().unwrap());
        }
    }
    assert!(called >= 3, "only {called} of 6 answers called");
    assert!(reasoned >= 1, "no answer reasoned first");
}

fn tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city", "parameters": weather()}})
}

fn chat(seed: u64, temperature: f64, choice: &str) -> Value {
    json!({"messages": [{"role": "user", "content": "weather?"}], "max_tokens": 300,
           "temperature": temperature, "seed": seed, "tool_choice": choice,
           "tools": [tool()]})
}

/// The same answer on the other protocols. Seeded and sampled: the Responses API's
/// reasoning and function_call items, and Ollama's thinking and tool_calls (Ollama has no
/// `required`: compared with chat's `auto`). Anthropic's API has no seed, so greedy there:
/// a thinking block (if any) and a tool_use block.
#[tokio::test]
async fn every_protocol_gives_the_reasoning_and_the_call() {
    let s = server().await;
    // A seed whose answer reasons, then calls.
    let mut found = None;
    for seed in 0..24 {
        let (_, v) = s
            .post("/v1/chat/completions", chat(seed, 1.0, "required"))
            .await;
        let m = &v["choices"][0]["message"];
        if m["reasoning_content"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
            && v["choices"][0]["finish_reason"] == "tool_calls"
        {
            found = Some((seed, m.clone()));
            break;
        }
    }
    let (seed, message) = found.expect("a seed that reasons, then calls");
    let reasoning = message["reasoning_content"].as_str().unwrap();
    let args = message["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();

    let (status, v) = s
        .post(
            "/v1/responses",
            json!({"model": "synthetic", "max_output_tokens": 300, "temperature": 1.0,
                   "seed": seed, "input": "weather?", "tool_choice": "required",
                   "tools": [{"type": "function", "name": "get_weather",
                              "description": "Weather in a city", "parameters": weather()}]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let output = &v["output"];
    assert_eq!(output[0]["type"], "reasoning", "{v}");
    assert_eq!(output[0]["content"][0]["text"], reasoning, "{v}");
    assert_eq!(output[1]["type"], "function_call", "{v}");
    assert_eq!(output[1]["arguments"], args, "{v}");

    let (_, auto) = s
        .post("/v1/chat/completions", chat(seed, 1.0, "auto"))
        .await;
    let auto = &auto["choices"][0]["message"];
    let (status, v) = s
        .post(
            "/api/chat",
            json!({"model": "synthetic", "stream": false, "tools": [tool()],
                   "messages": [{"role": "user", "content": "weather?"}],
                   "options": {"num_predict": 300, "temperature": 1.0, "seed": seed}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let m = &v["message"];
    for (ours, theirs) in [("thinking", "reasoning_content"), ("content", "content")] {
        let text = |x: &Value| x.as_str().unwrap_or("").to_string();
        assert_eq!(text(&m[ours]), text(&auto[theirs]), "{ours}: {v} vs {auto}");
    }
    let calls = |x: &Value| -> Vec<Value> {
        x["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let a = &c["function"]["arguments"];
                let a = a
                    .as_str()
                    .map_or(a.clone(), |t| serde_json::from_str(t).unwrap());
                json!([c["function"]["name"], a])
            })
            .collect()
    };
    assert_eq!(calls(m), calls(auto), "{v} vs {auto}");

    // Greedy: one question reasons until the budget ends, another calls at once.
    for q in ["weather?", "weather 0?"] {
        let mut body = chat(0, 0.0, "required");
        body["messages"][0]["content"] = json!(q);
        let (_, greedy) = s.post("/v1/chat/completions", body).await;
        let greedy = &greedy["choices"][0]["message"];
        let (status, v) = s
            .post(
                "/v1/messages",
                json!({"model": "synthetic", "max_tokens": 300, "temperature": 0,
                       "messages": [{"role": "user", "content": q}],
                       "tools": [{"name": "get_weather", "description": "Weather in a city",
                                  "input_schema": weather()}],
                       "tool_choice": {"type": "any"}}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let mut blocks = v["content"].as_array().unwrap().clone();
        if let Some(r) = greedy["reasoning_content"].as_str() {
            let thinking = blocks.remove(0);
            assert_eq!(thinking["type"], "thinking", "{v}");
            assert_eq!(thinking["thinking"], r, "{v}");
        }
        let want: Vec<Value> = calls(greedy).iter().map(|c| c[1].clone()).collect();
        let got: Vec<Value> = blocks
            .iter()
            .map(|b| {
                assert_eq!(b["type"], "tool_use", "{v}");
                b["input"].clone()
            })
            .collect();
        assert_eq!(got, want, "{v}");
        let stop = if want.is_empty() {
            "max_tokens"
        } else {
            "tool_use"
        };
        assert_eq!(v["stop_reason"], stop, "{v}");
    }
}

/// A structured answer without tools is the final message's JSON, after free reasoning
/// (as llama-server lays it out for gpt-oss), not raw JSON in place of the harmony headers.
#[tokio::test]
async fn a_json_schema_answer_is_the_final_message() {
    let s = server().await;
    let validator = jsonschema::validator_for(&weather()).unwrap();
    let mut answered = 0;
    for seed in 0..6 {
        let body = json!({
            "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 300,
            "temperature": 1.0, "seed": seed, "logprobs": true,
            "logit_bias": {id_of("<|end|>").to_string(): 6},
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "w", "schema": weather()}},
        });
        let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        let content = choice["message"]["content"].as_str().unwrap();
        assert!(!content.contains("<|"), "{v}");
        if choice["finish_reason"] == "stop" {
            // The model wrote the final message's header before the JSON.
            let tokens: String = choice["logprobs"]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["token"].as_str().unwrap())
                .collect();
            assert!(tokens.contains("<|channel|>final<|message|>{"), "{tokens}");
            let answer: Value = serde_json::from_str(content).expect("the answer is JSON");
            assert!(validator.is_valid(&answer), "{v}");
            answered += 1;
        }
        let mut streamed = body;
        streamed["stream"] = json!(true);
        let (_, events) = s.stream("/v1/chat/completions", streamed).await;
        let text: String = events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, content, "seed {seed}");
    }
    assert!(answered >= 3, "only {answered} of 6 answered");
}
