//! The reasoning split (`core/reasoning.rs`) on every chat-shaped protocol, with a
//! random-weight model whose chat template opens a `<think>` block at the end of the
//! prompt, as DeepSeek-R1's does: such a model never closes it (it does not know how), so
//! its whole answer is reasoning — in `reasoning_content`, a `thinking` block, a `reasoning`
//! item — streamed exactly as it comes whole, and the answer's text stays empty.

use ferrox_engine::synthetic::SyntheticSpec;
use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, text_of, tiny, TestServer};

const THINKING_TEMPLATE: &str = "{% for m in messages %}<|{{ m.role }}|>\
{% if '</think>' in m.content %}{{ m.content.split('</think>')[-1] }}{% else %}{{ m.content }}{% endif %}\n\
{% endfor %}{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}";

async fn server(reasoning: bool) -> TestServer {
    let spec = SyntheticSpec {
        chat_template: Some(THINKING_TEMPLATE.into()),
        ..tiny()
    };
    let config = ServerConfig {
        reasoning,
        ..ServerConfig::default()
    };
    TestServer::start(synthetic_state(&spec, SchedulerConfig::default(), config)).await
}

fn messages() -> Value {
    json!([{"role": "user", "content": "Why is the sky blue?"}])
}

#[tokio::test]
async fn chat_puts_the_block_in_reasoning_content_streamed_as_whole() {
    let s = server(true).await;
    let body = json!({"messages": messages(), "max_tokens": 12, "temperature": 0});
    let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap().to_string();
    assert!(!reasoning.is_empty(), "{v}");
    assert_eq!(message["content"], "", "{v}");
    // The same text the raw completion of the rendered prompt gives.
    let (_, raw) = s
        .post(
            "/v1/completions",
            json!({"prompt": "<|user|>Why is the sky blue?\n<|assistant|><think>\n",
                   "max_tokens": 12, "temperature": 0}),
        )
        .await;
    assert_eq!(reasoning, text_of(&raw));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, events) = s.stream("/v1/chat/completions", streamed).await;
    let (mut r, mut c) = (String::new(), String::new());
    for e in &events {
        let d = &e["choices"][0]["delta"];
        r.push_str(d["reasoning_content"].as_str().unwrap_or_default());
        c.push_str(d["content"].as_str().unwrap_or_default());
    }
    assert_eq!((r, c), (reasoning, String::new()));
}

#[tokio::test]
async fn anthropic_and_responses_carry_it_in_their_own_shapes() {
    let s = server(true).await;
    let (_, chat) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": messages(), "max_tokens": 12, "temperature": 0}),
        )
        .await;
    let reasoning = chat["choices"][0]["message"]["reasoning_content"].clone();

    let body = json!({"model": "synthetic", "messages": messages(), "max_tokens": 12,
                      "temperature": 0});
    let (status, v) = s.post("/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["thinking"], reasoning);
    assert_eq!(
        v["content"].as_array().unwrap().len(),
        1,
        "no text block: {v}"
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, events) = s.named_stream("/v1/messages", streamed).await;
    let thinking: String = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(json!(thinking), reasoning);
    let start = events
        .iter()
        .find(|(name, _)| name == "content_block_start")
        .unwrap();
    assert_eq!(start.1["content_block"]["type"], "thinking");
    assert!(events
        .iter()
        .any(|(_, d)| d["delta"]["type"] == "signature_delta"));
    // A conversation that sends the thinking block back is taken (and the block dropped).
    let history = json!({"model": "synthetic", "max_tokens": 4, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": ""},
            {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and?"}]});
    assert_eq!(s.post("/v1/messages", history).await.0, 200);

    let body = json!({"input": "Why is the sky blue?", "max_output_tokens": 12,
                      "temperature": 0, "store": false});
    let (status, v) = s.post("/v1/responses", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["output"][0]["type"], "reasoning", "{v}");
    assert_eq!(v["output"][0]["content"][0]["text"], reasoning);
    assert_eq!(v["output"][1]["type"], "message");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, events) = s.named_stream("/v1/responses", streamed).await;
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "response.reasoning_text.delta")
        .filter_map(|(_, d)| d["delta"].as_str())
        .collect();
    assert_eq!(json!(deltas), reasoning);
    let done = events
        .iter()
        .find(|(name, _)| name == "response.completed" || name == "response.incomplete")
        .unwrap();
    assert_eq!(
        done.1["response"]["output"],
        v["output"].clone().with_ids_of(&done.1)
    );
}

/// Output items carry fresh ids per response; compare everything else.
trait WithIds {
    fn with_ids_of(self, other: &Value) -> Value;
}

impl WithIds for Value {
    fn with_ids_of(mut self, other: &Value) -> Value {
        let theirs = &other["response"]["output"];
        for (i, item) in self.as_array_mut().unwrap().iter_mut().enumerate() {
            item["id"] = theirs[i]["id"].clone();
        }
        self
    }
}

#[tokio::test]
async fn off_or_with_tools_and_grammars_the_text_is_left_whole() {
    let off = server(false).await;
    let body = json!({"messages": messages(), "max_tokens": 12, "temperature": 0});
    let (_, v) = off.post("/v1/chat/completions", body.clone()).await;
    let message = &v["choices"][0]["message"];
    assert!(message.get("reasoning_content").is_none(), "{v}");
    assert!(!message["content"].as_str().unwrap().is_empty());
    let on = server(true).await;
    let mut constrained = body.clone();
    constrained["response_format"] = json!({"type": "json_object"});
    let (_, v) = on.post("/v1/chat/completions", constrained).await;
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );
}

/// gpt-oss's harmony format: a template that writes the analysis channel makes a thinking
/// family with harmony's tags; one whose prompt ends inside that channel gives a model whose
/// whole answer is reasoning, in every protocol's place for it.
#[tokio::test]
async fn harmony_analysis_channel_is_reasoning_on_every_protocol() {
    const HARMONY_TEMPLATE: &str = "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>\
{% endfor %}{% if add_generation_prompt %}<|start|>assistant<|channel|>analysis<|message|>{% endif %}";
    let spec = SyntheticSpec {
        chat_template: Some(HARMONY_TEMPLATE.into()),
        ..tiny()
    };
    let s = TestServer::start(synthetic_state(
        &spec,
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await;
    let (_, raw) = s
        .post(
            "/v1/completions",
            json!({"prompt": "<|start|>user<|message|>Why is the sky blue?<|end|><|start|>assistant<|channel|>analysis<|message|>",
                   "max_tokens": 10, "temperature": 0}),
        )
        .await;
    let want = text_of(&raw);
    assert!(!want.is_empty());
    let body = json!({"messages": messages(), "max_tokens": 10, "temperature": 0});
    let (status, v) = s.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], want, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "", "{v}");
    let mut anthropic = body.clone();
    anthropic["model"] = json!("synthetic");
    let (_, v) = s.post("/v1/messages", anthropic).await;
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["thinking"], want, "{v}");
}

/// Qwen 3's thinking switch: `chat_template_kwargs` (OpenAI, as vLLM and llama-server take
/// it) and Ollama's `think` reach the template as `enable_thinking`; a template that closes
/// an empty block when it is false gives a longer prompt, exactly the rendered one.
#[tokio::test]
async fn the_thinking_switch_reaches_the_template() {
    const SWITCH: &str = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}\
{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";
    let spec = SyntheticSpec {
        chat_template: Some(SWITCH.into()),
        ..tiny()
    };
    let s = TestServer::start(synthetic_state(
        &spec,
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await;
    let prompt_tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    let ask = |vars: Value| {
        let mut body = json!({"messages": messages(), "max_tokens": 2, "temperature": 0});
        if !vars.is_null() {
            body["chat_template_kwargs"] = vars;
        }
        body
    };
    let (_, plain) = s.post("/v1/chat/completions", ask(Value::Null)).await;
    let (_, on) = s
        .post(
            "/v1/chat/completions",
            ask(json!({"enable_thinking": true})),
        )
        .await;
    let (status, off) = s
        .post(
            "/v1/chat/completions",
            ask(json!({"enable_thinking": false})),
        )
        .await;
    assert_eq!(status, 200, "{off}");
    assert_eq!(prompt_tokens(&plain), prompt_tokens(&on));
    // The rendered prompt with the closed block, counted as a raw completion counts it.
    let (_, raw) = s
        .post(
            "/v1/completions",
            json!({"prompt": "<|user|>Why is the sky blue?\n<|assistant|><think>\n\n</think>\n\n",
                   "max_tokens": 1}),
        )
        .await;
    assert_eq!(prompt_tokens(&off), prompt_tokens(&raw), "{off}");
    assert!(prompt_tokens(&off) > prompt_tokens(&plain));
    let (status, v) = s
        .post("/v1/chat/completions", ask(json!("enable_thinking")))
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "chat_template_kwargs");
    // Ollama's `think: false` is the same switch.
    let (_, o) = s
        .post(
            "/api/chat",
            json!({"model": "synthetic", "messages": messages(), "stream": false, "think": false,
                   "options": {"num_predict": 1}}),
        )
        .await;
    assert_eq!(
        o["prompt_eval_count"].as_u64(),
        Some(prompt_tokens(&off)),
        "{o}"
    );
    // A level needs a template with levels (gpt-oss's reasoning_effort).
    let (status, v) = s
        .post(
            "/api/chat",
            json!({"model": "synthetic", "messages": messages(), "stream": false, "think": "high"}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
}
