//! The real default model through the server: a few short generations checked against
//! llama.cpp's golden data (`shared/golden/gemma3-270m`), the Gemma chat format, tokenize
//! with pieces, and stop on the chat's end of turn. Skipped (with a note) when the model is
//! not on disk.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::common::{default_model_state, streamed_text, text_of, TestServer};

fn golden(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/gemma3-270m")
        .join(file);
    // `shared/` is beside the project on every machine: a missing file is a failure, not
    // a comparison skipped.
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!rows.is_empty(), "{} holds no rows", path.display());
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_renders_gemma_turns_and_matches_llama_cpp() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    // greedy.jsonl holds the Gemma-format chat prompt "What is 2 + 2?" with llama.cpp's
    // greedy continuation; through the chat route the same prompt must come out.
    let (status, v) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 8, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, t) = s
        .post(
            "/tokenize",
            json!({"content": "<start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n<start_of_turn>model\n", "add_special": true}),
        )
        .await;
    assert_eq!(
        v["usage"]["prompt_tokens"],
        t["tokens"].as_array().unwrap().len()
    );
    assert_eq!(t["tokens"][0], 2, "one BOS");
    assert_ne!(t["tokens"][1], 2);
    let row = golden("greedy.jsonl")
        .into_iter()
        .find(|r| r["prompt"].as_str().unwrap().contains("What is 2 + 2?"))
        .expect("greedy.jsonl has the \"What is 2 + 2?\" chat row");
    assert_eq!(t["tokens"], row["ids_prompt"]);
    let expected: String = row["text_out"].as_str().unwrap().chars().take(8).collect();
    assert!(
        text_of(&v).starts_with(&expected),
        "{:?} vs {expected:?}",
        text_of(&v)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_chat_stops_on_a_stop_string_with_usage() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    let (status, events) = s
        .stream(
            "/v1/chat/completions",
            json!({
                "messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 16,
                "temperature": 0, "stop": "\n", "stream": true, "stream_options": {"include_usage": true},
            }),
        )
        .await;
    assert_eq!(status, 200);
    let text = streamed_text(&events, 0);
    assert!(
        !text.contains('\n') && text.starts_with("What is 2 + 2?"),
        "{text:?}"
    );
    let finish = events
        .iter()
        .find_map(|e| e["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("stop"));
    assert!(
        events[events.len() - 2]["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            < 16
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_with_pieces_matches_llama_server() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    let rows = golden("tokenize.jsonl");
    for row in rows.iter().take(40) {
        let (status, v) = s
            .post(
                "/tokenize",
                json!({
                    "content": row["text"], "add_special": row["add_bos"],
                    "parse_special": row["parse_special"], "with_pieces": true,
                }),
            )
            .await;
        assert_eq!(status, 200);
        let tokens = v["tokens"].as_array().unwrap();
        let ids: Vec<&Value> = tokens.iter().map(|t| &t["id"]).collect();
        let pieces: Vec<&Value> = tokens.iter().map(|t| &t["piece"]).collect();
        let want_ids: Vec<&Value> = row["ids"].as_array().unwrap().iter().collect();
        let want_pieces: Vec<&Value> = row["pieces"].as_array().unwrap().iter().collect();
        assert_eq!(ids, want_ids, "{}", row["text"]);
        assert_eq!(pieces, want_pieces, "{}", row["text"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_sampling_reproduces_on_the_real_model() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    let body = json!({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0.9, "seed": 1234, "n": 2});
    let (status, a) = s.post("/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{a}");
    let (_, b) = s.post("/v1/completions", body).await;
    assert_eq!(a["choices"], b["choices"]);
}

/// On the real model, an embedding means something: two sentences that say the same thing
/// are closer than either is to one about something else, for several such triples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similar_sentences_embed_closer_than_unrelated_ones() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    let triples = [
        (
            "The cat sat on the mat.",
            "A cat was sitting on the rug.",
            "Quarterly revenue grew by eight percent.",
        ),
        (
            "How do I bake bread at home?",
            "What is a simple recipe for homemade bread?",
            "The train to Berlin leaves at noon.",
        ),
        (
            "The stock market fell sharply today.",
            "Shares dropped steeply on the exchange this afternoon.",
            "My dog loves playing fetch in the park.",
        ),
    ];
    for (a, b, c) in triples {
        let (status, v) = s.post("/v1/embeddings", json!({"input": [a, b, c]})).await;
        assert_eq!(status, 200, "{v}");
        let vectors: Vec<Vec<f64>> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                d["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect();
        // Unit vectors: the dot product is the cosine.
        let cos = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        let (ab, ac, bc) = (
            cos(&vectors[0], &vectors[1]),
            cos(&vectors[0], &vectors[2]),
            cos(&vectors[1], &vectors[2]),
        );
        assert!(
            ab > ac && ab > bc,
            "{a:?} / {b:?} / {c:?}: {ab:.4} {ac:.4} {bc:.4}"
        );
    }
}
