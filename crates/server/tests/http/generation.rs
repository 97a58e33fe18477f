//! Generation through both protocols on a synthetic model: JSON and streaming replies agree,
//! usage is right, stop strings cut, seeds reproduce, `n` gives distinct choices, logprobs
//! have the documented shapes.

use std::time::Duration;

use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use crate::common::{streamed_text, synthetic_state, text_of, tiny, TestServer};

fn state() -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), ServerConfig::default())
}

fn greedy(extra: Value) -> Value {
    let mut body =
        json!({"prompt": "hello world", "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn chat(extra: Value) -> Value {
    let mut body = json!({
        "model": "synthetic",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}],
        "max_tokens": 10, "temperature": 0, "ignore_eos": true,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn completions_json_has_text_finish_reason_and_usage() {
    let server = TestServer::start(state()).await;
    let (status, v) = server.post("/v1/completions", greedy(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["model"], "synthetic");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let (_, t) = server
        .post(
            "/tokenize",
            json!({"content": "hello world", "add_special": true}),
        )
        .await;
    assert_eq!(
        prompt_tokens as usize,
        t["tokens"].as_array().unwrap().len(),
        "BOS + text"
    );
    assert_eq!(v["usage"]["total_tokens"], prompt_tokens + 12);

    // The same prompt as token ids gives the same text.
    let (_, by_ids) = server
        .post("/v1/completions", greedy(json!({"prompt": t["tokens"]})))
        .await;
    assert_eq!(text_of(&by_ids), text_of(&v));
}

#[tokio::test]
async fn completions_stream_matches_json_and_reports_usage() {
    let server = TestServer::start(state()).await;
    let (_, whole) = server.post("/v1/completions", greedy(json!({}))).await;
    let (status, events) = server
        .stream(
            "/v1/completions",
            greedy(json!({"stream": true, "stream_options": {"include_usage": true}})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(streamed_text(&events, 0), text_of(&whole));
    let usage_chunk = &events[events.len() - 2];
    assert_eq!(usage_chunk["choices"], json!([]));
    // The resent prompt reuses all but its last token from the prefix cache.
    let mut usage = usage_chunk["usage"].clone();
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], prompt - 1);
    assert_eq!(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    usage["prompt_tokens_details"]["cached_tokens"] = json!(0);
    // How many drafted tokens speculation verified follows the measured step costs, never
    // the tokens.
    let mut want = whole["usage"].clone();
    for u in [&mut usage, &mut want] {
        u["completion_tokens_details"] = json!(null);
    }
    assert_eq!(usage, want);
    let finish: Vec<&Value> = events
        .iter()
        .filter(|e| !e["choices"][0]["finish_reason"].is_null() && e.is_object())
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "length");
    assert!(events[..events.len() - 2]
        .iter()
        .all(|e| e["usage"].is_null()));

    // Without include_usage there is no usage chunk and no usage field.
    let (_, events) = server
        .stream("/v1/completions", greedy(json!({"stream": true})))
        .await;
    assert!(events.iter().all(|e| e.get("usage").is_none()));
}

#[tokio::test]
async fn chat_json_and_stream_agree() {
    let server = TestServer::start(state()).await;
    let (status, v) = server.post("/v1/chat/completions", chat(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 10);
    let (status, events) = server
        .stream(
            "/v1/chat/completions",
            chat(json!({"stream": true, "stream_options": {"include_usage": true}})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(streamed_text(&events, 0), text_of(&v));
    // The same prompt again: its full blocks come from the prefix cache, nothing else moves
    // but how many drafted tokens speculation verified (that follows the measured step
    // costs, never the tokens).
    let mut usage = events[events.len() - 2]["usage"].clone();
    let mut want = v["usage"].clone();
    for u in [&mut usage, &mut want] {
        u["completion_tokens_details"] = json!(null);
    }
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(cached > 0, "{usage}");
    usage["prompt_tokens_details"]["cached_tokens"] = json!(0);
    assert_eq!(usage, want);
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn chat_prompt_is_the_gemma_format_with_one_bos() {
    let server = TestServer::start(state()).await;
    let (_, v) = server.post("/v1/chat/completions", chat(json!({}))).await;
    let rendered = "<start_of_turn>user\nbe brief\n\nhi there<end_of_turn>\n<start_of_turn>model\n";
    let (_, t) = server
        .post(
            "/tokenize",
            json!({"content": rendered, "add_special": true}),
        )
        .await;
    assert_eq!(
        v["usage"]["prompt_tokens"],
        t["tokens"].as_array().unwrap().len()
    );
    // A prompt that writes BOS itself does not get a second one.
    let (_, a) = server
        .post(
            "/v1/completions",
            greedy(json!({"prompt": "<bos>hello world"})),
        )
        .await;
    let (_, b) = server.post("/v1/completions", greedy(json!({}))).await;
    assert_eq!(a["usage"]["prompt_tokens"], b["usage"]["prompt_tokens"]);
    assert_eq!(text_of(&a), text_of(&b));
}

#[tokio::test]
async fn stop_strings_cut_the_text() {
    let server = TestServer::start(state()).await;
    let (_, v) = server
        .post("/v1/completions", greedy(json!({"max_tokens": 24})))
        .await;
    let full = text_of(&v);
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 8, "{full:?}");
    // A stop string from the middle of the greedy text: the reply ends right before its
    // first occurrence.
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    for stream in [false, true] {
        let body =
            greedy(json!({"max_tokens": 24, "stop": [stop, "never-there"], "stream": stream}));
        let (text, finish) = if stream {
            let (_, events) = server.stream("/v1/completions", body).await;
            let finish = events.iter().find_map(|e| {
                e["choices"][0]["finish_reason"]
                    .as_str()
                    .map(str::to_string)
            });
            (streamed_text(&events, 0), finish.unwrap())
        } else {
            let (_, v) = server.post("/v1/completions", body).await;
            (
                text_of(&v),
                v["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        };
        assert_eq!(text, expected, "stream: {stream}");
        assert_eq!(finish, "stop");
    }
}

#[tokio::test]
async fn seeds_reproduce_and_n_gives_one_choice_each() {
    let server = TestServer::start(state()).await;
    let sampled = |seed: u64, n: u64| json!({"prompt": "hello", "max_tokens": 16, "temperature": 1.0, "seed": seed, "n": n, "ignore_eos": true});
    let (_, a) = server.post("/v1/completions", sampled(42, 1)).await;
    let (_, b) = server.post("/v1/completions", sampled(42, 1)).await;
    let (_, c) = server.post("/v1/completions", sampled(43, 1)).await;
    assert_eq!(text_of(&a), text_of(&b), "same seed, same text");
    assert_ne!(text_of(&a), text_of(&c), "another seed, another text");

    let (status, v) = server.post("/v1/completions", sampled(42, 3)).await;
    assert_eq!(status, 200);
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    assert_eq!(
        choices[0]["text"], a["choices"][0]["text"],
        "choice 0 uses the seed itself"
    );
    assert_ne!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(v["usage"]["completion_tokens"], 48);
    assert_eq!(
        v["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"],
        "the prompt counts once"
    );

    // Streaming n = 2: every chunk names its choice, each choice finishes once.
    let mut body = sampled(42, 2);
    body["stream"] = json!(true);
    let (_, events) = server
        .stream(
            "/v1/chat/completions",
            json!({
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "seed": 5, "n": 2,
                "ignore_eos": true, "stream": true,
            }),
        )
        .await;
    for i in 0..2u64 {
        let finishes = events
            .iter()
            .filter(|e| {
                e["choices"][0]["index"] == i && e["choices"][0]["finish_reason"].is_string()
            })
            .count();
        assert_eq!(finishes, 1, "choice {i}");
    }
    let (_, events) = server.stream("/v1/completions", body).await;
    assert_eq!(streamed_text(&events, 0), text_of(&a));
}

#[tokio::test]
async fn logprobs_have_the_openai_shapes() {
    let server = TestServer::start(state()).await;
    let (status, v) = server
        .post(
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": 3})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 10);
    for entry in content {
        let lp = entry["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = entry["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert!((top[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-6);
        assert!(entry["bytes"].is_array());
    }

    let (_, v) = server
        .post("/v1/completions", greedy(json!({"logprobs": 2})))
        .await;
    let lp = &v["choices"][0]["logprobs"];
    for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[key].as_array().unwrap().len(), 12, "{key}");
    }
    assert!(lp["top_logprobs"][0].as_object().unwrap().len() <= 2);
    assert_eq!(lp["text_offset"][0], 0);

    let (_, events) = server
        .stream(
            "/v1/completions",
            greedy(json!({"logprobs": 1, "stream": true})),
        )
        .await;
    let with_logprobs = events
        .iter()
        .filter(|e| e["choices"][0]["logprobs"]["tokens"].is_array())
        .count();
    assert_eq!(
        with_logprobs, 12,
        "one chunk per token when logprobs are asked for"
    );
    // Without logprobs the field is null.
    let (_, v) = server.post("/v1/completions", greedy(json!({}))).await;
    assert!(v["choices"][0]["logprobs"].is_null());
}

#[tokio::test]
async fn max_tokens_defaults_to_the_context_left() {
    // Context 512, default max_tokens 2048: capped at what the prompt leaves.
    let server = TestServer::start(state()).await;
    let (status, v) = server
        .post(
            "/v1/completions",
            json!({"prompt": "hello", "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        v["usage"]["completion_tokens"].as_u64().unwrap() + prompt,
        512
    );
}

/// One request's `n` choices hold at most half the batch's slots: a small request behind
/// `n: 16` of long choices is served within a few steps, while they still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_request_behind_many_long_choices_is_served_at_once() {
    let s = TestServer::start(synthetic_state(
        &crate::common::slow(),
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await;
    let big = s
        .post_raw(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 3000, "ignore_eos": true, "n": 16,
                   "stream": true}),
        )
        .await;
    let mut events = big.events();
    events.next_data().await.unwrap();
    // Half of the 16 slots, the other choices waiting.
    assert!(
        s.wait_for(Duration::from_secs(10), |st| st.running == 8
            && st.queued == 8)
            .await,
        "{:?}",
        s.status()
    );
    let steps = s.status().steps;
    let (status, v) = s
        .post("/v1/completions", greedy(json!({"max_tokens": 4})))
        .await;
    assert_eq!(status, 200, "{v}");
    let took = s.status().steps - steps;
    assert!(took < 20, "the small request took {took} steps");
    // The choices are still running.
    let next = events.next_data().await.unwrap();
    assert!(next.is_some_and(|d| d != "[DONE]"));
    drop(events);
}
