//! llama-server's `/completion` and `/infill` on a synthetic model: prompts in every shape,
//! streamed == buffered, stop types, `n_probs`, `cache_prompt`, and errors in llama-server's
//! shape.

use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use ferrox_engine::synthetic::{self, SyntheticSpec};

use crate::common::{synthetic_state, tiny, TestServer};

fn state() -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), ServerConfig::default())
}

fn request(extra: Value) -> Value {
    let mut body = json!({"prompt": "hello world", "n_predict": 12, "temperature": 0,
                          "ignore_eos": true});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn a_completion_has_llama_servers_fields() {
    let s = TestServer::start(state()).await;
    let (status, v) = s
        .post("/completion", request(json!({"return_tokens": true})))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["stopping_word"], "");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["model"], "synthetic");
    assert_eq!(v["tokens_predicted"], 12);
    assert_eq!(v["tokens"].as_array().unwrap().len(), 12);
    let (_, t) = s
        .post(
            "/tokenize",
            json!({"content": "hello world", "add_special": true}),
        )
        .await;
    let prompt_n = t["tokens"].as_array().unwrap().len() as u64;
    assert_eq!(v["tokens_evaluated"], prompt_n);
    assert_eq!(v["tokens_cached"], prompt_n + 12);
    let timings = &v["timings"];
    assert_eq!(timings["predicted_n"], 12);
    assert_eq!(
        timings["prompt_n"].as_u64().unwrap() + timings["cache_n"].as_u64().unwrap(),
        prompt_n
    );
    assert!(timings["predicted_per_second"].as_f64().unwrap() > 0.0);
    assert!(v["generation_settings"]["n_predict"] == 12);

    // The same prompt as ids, and as a mixed list, gives the same text.
    let ids = t["tokens"].clone();
    let (_, by_ids) = s.post("/completion", request(json!({"prompt": ids}))).await;
    assert_eq!(by_ids["content"], v["content"]);
    let bos = t["tokens"][0].clone();
    let mixed = json!([bos, "hello world"]);
    let (status, by_mix) = s
        .post("/completion", request(json!({"prompt": mixed})))
        .await;
    assert_eq!(status, 200, "{by_mix}");
    assert_eq!(by_mix["content"], v["content"]);
    let (_, none) = s.post("/completion", request(json!({}))).await;
    assert_eq!(none["tokens"], json!([]), "tokens without return_tokens");
}

#[tokio::test]
async fn a_stream_concatenates_to_the_reply_and_ends_with_the_final_object() {
    let s = TestServer::start(state()).await;
    let (_, whole) = s.post("/completion", request(json!({}))).await;
    let r = s
        .post_raw("/completion", request(json!({"stream": true})))
        .await;
    assert_eq!(r.status, 200);
    let mut events = r.events();
    let mut lines = Vec::new();
    while let Some(e) = events.next_event().await.unwrap() {
        assert_eq!(e.event, None, "llama-server's stream has no event names");
        assert_ne!(e.data, "[DONE]");
        lines.push(serde_json::from_str::<Value>(&e.data).unwrap());
    }
    let (last, partials) = lines.split_last().unwrap();
    assert!(partials.iter().all(|l| l["stop"] == false));
    assert!(partials
        .iter()
        .all(|l| l["tokens"].as_array().unwrap().len() == 1));
    assert_eq!(partials.len(), 12);
    assert_eq!(last["stop"], true);
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["timings"]["predicted_n"], 12);
    let text: String = lines
        .iter()
        .map(|l| l["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        text,
        whole["content"].as_str().unwrap(),
        "streamed != buffered"
    );
}

#[tokio::test]
async fn a_stop_word_is_reported_and_n_probs_has_its_entries() {
    let s = TestServer::start(state()).await;
    let (_, whole) = s
        .post("/completion", request(json!({"n_predict": 24})))
        .await;
    let text = whole["content"].as_str().unwrap().to_string();
    let chars: Vec<char> = text.chars().collect();
    let word: String = chars[4..7].iter().collect();
    let (_, v) = s
        .post(
            "/completion",
            request(json!({"n_predict": 24, "stop": [word]})),
        )
        .await;
    assert_eq!(v["stop_type"], "word");
    assert_eq!(v["stopping_word"], word.as_str());
    assert_eq!(v["content"], &text[..text.find(&word).unwrap()]);

    let (_, v) = s
        .post(
            "/completion",
            request(json!({"n_predict": 5, "n_probs": 3})),
        )
        .await;
    let probs = v["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 5);
    for p in probs {
        assert!(p["id"].is_u64() && p["token"].is_string() && p["bytes"].is_array());
        assert!(p["logprob"].as_f64().unwrap() <= 0.0);
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["id"], p["id"], "greedy takes the best");
    }
}

#[tokio::test]
async fn cache_prompt_false_reuses_nothing_and_answers_the_same() {
    let s = TestServer::start(state()).await;
    let long = "the quick brown fox jumps over the lazy dog ".repeat(8);
    let body = |cache: bool| request(json!({"prompt": long, "cache_prompt": cache}));
    let (_, cold) = s.post("/completion", body(true)).await;
    let (_, warm) = s.post("/completion", body(true)).await;
    assert!(warm["timings"]["cache_n"].as_u64().unwrap() > 0, "{warm}");
    let (_, declined) = s.post("/completion", body(false)).await;
    assert_eq!(
        declined["timings"]["cache_n"], 0,
        "reused although told not to"
    );
    assert_eq!(declined["content"], cold["content"]);
    assert_eq!(warm["content"], cold["content"]);
}

#[tokio::test]
async fn infill_without_fim_tokens_is_501_and_errors_are_llama_servers() {
    let s = TestServer::start(state()).await;
    let (status, v) = s
        .post(
            "/infill",
            json!({"input_prefix": "def f(", "input_suffix": "):"}),
        )
        .await;
    assert_eq!(status, 501, "{v}");
    assert_eq!(v["error"]["code"], 501);
    assert_eq!(v["error"]["type"], "not_supported_error");
    let cases = [
        (request(json!({"n_predict": 0})), "n_predict"),
        (request(json!({"mirostat": 2})), "mirostat"),
        (request(json!({"grammar": "root ::= \"a"})), "grammar"),
        (request(json!({"prompt": ["a", "b"]})), "prompt"),
        (request(json!({"logit_bias": [[1]]})), "logit_bias[0]"),
        (request(json!({"wat": 1})), "wat"),
    ];
    for (body, param) in cases {
        let (status, v) = s.post("/completion", body.clone()).await;
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["code"], 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], param, "{body}");
    }
    // Neutral values of samplers we lack, as llama.cpp's tools send them, are accepted.
    let neutral = request(json!({"typical_p": 1.0, "mirostat": 0, "repeat_last_n": 64,
                                 "dry_multiplier": 0.0, "n_keep": 0, "id_slot": -1}));
    assert_eq!(s.post("/completion", neutral).await.0, 200);
    // A banned token (`false`) never appears.
    let (_, plain) = s
        .post("/completion", request(json!({"return_tokens": true})))
        .await;
    let first = plain["tokens"][0].clone();
    let banned = request(json!({"return_tokens": true, "logit_bias": [[first, false]]}));
    let (_, v) = s.post("/completion", banned).await;
    assert!(!v["tokens"].as_array().unwrap().contains(&first), "{v}");
}

#[tokio::test]
async fn infill_lays_the_prompt_out_with_the_fim_tokens() {
    let spec = SyntheticSpec {
        control_tokens: synthetic::FIM_TOKENS,
        ..tiny()
    };
    let s = TestServer::start(synthetic_state(
        &spec,
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await;
    let fill = json!({"input_prefix": "a b", "input_suffix": "c", "prompt": "d",
                      "input_extra": [{"filename": "x", "text": "e"}],
                      "n_predict": 6, "temperature": 0, "ignore_eos": true});
    let (status, v) = s.post("/infill", fill).await;
    assert_eq!(status, 200, "{v}");
    // The same layout written out by hand, as a mixed prompt, gives the same tokens.
    let tok = |text: &str| {
        let s = &s;
        let text = text.to_string();
        async move {
            let (_, t) = s
                .post("/tokenize", json!({"content": text, "parse_special": true}))
                .await;
            t["tokens"].as_array().unwrap().clone()
        }
    };
    let special = |name: &'static str| async move { tok(name).await[0].clone() };
    let mut prompt = vec![json!(2)]; // <bos>
    prompt.push(special("<|file_sep|>").await);
    prompt.push(json!("x\ne"));
    prompt.push(special("<|fim_prefix|>").await);
    prompt.push(json!("a b"));
    prompt.push(special("<|fim_suffix|>").await);
    prompt.push(json!("c"));
    prompt.push(special("<|fim_middle|>").await);
    prompt.push(json!("d"));
    let by_hand = json!({"prompt": prompt, "n_predict": 6, "temperature": 0,
                         "ignore_eos": true});
    let (_, w) = s.post("/completion", by_hand).await;
    assert_eq!(v["tokens_evaluated"], w["tokens_evaluated"]);
    assert_eq!(v["content"], w["content"]);
}
