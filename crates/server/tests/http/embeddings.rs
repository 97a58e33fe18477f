//! `POST /v1/embeddings` (`openai/embeddings.rs`, `core/embed.rs`): OpenAI's shape, unit
//! vectors of the model's width, a batch equal to each input alone, base64 equal to the
//! floats, and every refusal named.

use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, tiny_server, TestServer};

async fn server() -> TestServer {
    tiny_server().await
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("a list of floats")
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Standard base64, decoded, as little-endian f32s.
fn from_base64(s: &str) -> Vec<f32> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut bytes = Vec::new();
    for quad in s.as_bytes().chunks(4) {
        let n = quad
            .iter()
            .take_while(|&&c| c != b'=')
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(value(c)) << (18 - 6 * i));
        let keep = quad.iter().filter(|&&c| c != b'=').count() - 1;
        bytes.extend_from_slice(&n.to_be_bytes()[1..1 + keep]);
    }
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[tokio::test]
async fn a_reply_has_openais_shape_and_unit_vectors_of_the_models_width() {
    let s = server().await;
    let g = s.state.served().unwrap();
    let (status, v) = s
        .post(
            "/v1/embeddings",
            json!({"input": "hello world", "model": g.model_id}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], g.model_id.as_str());
    let item = &v["data"][0];
    assert_eq!(
        (item["object"].as_str(), item["index"].as_u64()),
        (Some("embedding"), Some(0))
    );
    let e = floats(&item["embedding"]);
    assert_eq!(e.len(), g.model.config().n_embd);
    let norm: f64 = e.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    assert!((norm - 1.0).abs() < 1e-5, "|e|^2 = {norm}");
    let tok = g.model.tokenizer();
    let n = tok.encode("hello world", tok.add_bos_default(), true).len();
    assert_eq!(v["usage"], json!({"prompt_tokens": n, "total_tokens": n}));
}

#[tokio::test]
async fn a_batch_equals_each_input_alone_and_base64_equals_the_floats() {
    let s = server().await;
    let inputs = json!([
        "the first text",
        "a second, longer text to embed",
        [5, 6, 7, 8],
        "x"
    ]);
    let (status, batch) = s.post("/v1/embeddings", json!({"input": inputs})).await;
    assert_eq!(status, 200, "{batch}");
    let data = batch["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    let mut total = 0;
    for (i, input) in inputs.as_array().unwrap().iter().enumerate() {
        let (_, alone) = s.post("/v1/embeddings", json!({"input": input})).await;
        assert_eq!(data[i]["index"], i);
        assert_eq!(
            data[i]["embedding"], alone["data"][0]["embedding"],
            "input {i}"
        );
        total += alone["usage"]["prompt_tokens"].as_u64().unwrap();
        let (_, b64) = s
            .post(
                "/v1/embeddings",
                json!({"input": input, "encoding_format": "base64"}),
            )
            .await;
        let decoded = from_base64(b64["data"][0]["embedding"].as_str().unwrap());
        assert_eq!(
            decoded,
            floats(&alone["data"][0]["embedding"]),
            "input {i} base64"
        );
    }
    assert_eq!(batch["usage"]["prompt_tokens"], total);
    // Different inputs, different vectors.
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
}

/// More inputs than the queue and the batch hold together: they go through a window of
/// `max_seqs` at a time instead of overflowing the queue with a 503 no retry could pass.
#[tokio::test]
async fn more_inputs_than_the_queue_holds_are_all_embedded() {
    let sched = SchedulerConfig {
        max_seqs: 2,
        max_queue: 3,
        ..SchedulerConfig::default()
    };
    let s = TestServer::start(synthetic_state(&tiny(), sched, ServerConfig::default())).await;
    let inputs: Vec<String> = (0..20).map(|i| format!("input number {i}")).collect();
    let (status, v) = s.post("/v1/embeddings", json!({"input": inputs})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"].as_array().unwrap().len(), 20);
    let (_, one) = s
        .post("/v1/embeddings", json!({"input": "input number 13"}))
        .await;
    assert_eq!(v["data"][13]["embedding"], one["data"][0]["embedding"]);
}

#[tokio::test]
async fn every_refusal_names_its_parameter() {
    let s = server().await;
    let many: Vec<&str> = vec!["a"; 2049];
    for (body, status, param) in [
        (json!({"input": "a", "dimensions": 8}), 400, "dimensions"),
        (
            json!({"input": "a", "encoding_format": "int8"}),
            400,
            "encoding_format",
        ),
        (json!({"input": ""}), 400, "input"),
        (json!({"input": ["a", ""]}), 400, "input[1]"),
        (json!({"input": many}), 400, "input"),
        (json!({}), 400, "input"),
        (json!({"input": "a", "model": "other"}), 404, "model"),
        (json!({"input": "a", "temperature": 1}), 400, "temperature"),
    ] {
        let (got, v) = s.post("/v1/embeddings", body.clone()).await;
        assert_eq!(got, status, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
    }
    // A token outside the vocabulary is the scheduler's typed refusal.
    let (got, v) = s
        .post("/v1/embeddings", json!({"input": [[1, 999_999]]}))
        .await;
    assert_eq!(got, 400, "{v}");
}

/// A random-weight BERT-family encoder, its pooling as given (the GGUF writes CLS).
fn encoder(pooling_type: Option<usize>, prefill_chunk: usize) -> TestServer {
    let spec = ferrox_engine::synthetic::SyntheticSpec {
        context_length: 128,
        pooling_type,
        ..ferrox_engine::synthetic::SyntheticSpec::tiny(ferrox_engine::Arch::Bert, 21)
    };
    let sched = SchedulerConfig {
        prefill_chunk_tokens: prefill_chunk,
        ..SchedulerConfig::default()
    };
    let state = synthetic_state(&spec, sched, ServerConfig::default());
    futures_util::FutureExt::now_or_never(TestServer::start(state)).expect("starts at once")
}

#[tokio::test]
async fn an_encoder_embeds_whole_prompts_batched_as_alone() {
    // A chunk budget far below the inputs: an encoder's prompt must still go whole.
    let s = encoder(None, 8);
    let long = "hello world the cat sat playing ".repeat(6);
    let inputs = json!([long.clone(), "hello, world!", "the cat sat"]);
    let (status, v) = s.post("/v1/embeddings", json!({"input": inputs})).await;
    assert_eq!(status, 200, "{v}");
    let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    // [CLS] and [SEP] around every input: 6 x 7 (playing is two pieces) + 4 + 3 pieces.
    assert_eq!(tokens, 6 * 7 + 4 + 3 + 3 * 2, "{v}");
    for (i, item) in v["data"].as_array().unwrap().iter().enumerate() {
        let vector = floats(&item["embedding"]);
        assert_eq!(vector.len(), 64);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "input {i}: norm {norm}");
        let (_, alone) = s
            .post("/v1/embeddings", json!({"input": inputs[i].clone()}))
            .await;
        assert_eq!(floats(&alone["data"][0]["embedding"]), vector, "input {i}");
    }
    // An input of exactly the context (128 positions, [CLS] and [SEP] included) fits: an
    // embedding generates nothing. One more does not.
    let (status, v) = s
        .post("/v1/embeddings", json!({"input": "hello ".repeat(126)}))
        .await;
    assert_eq!(
        (status, v["usage"]["prompt_tokens"].as_u64()),
        (200, Some(128)),
        "{v}"
    );
    let (status, v) = s
        .post("/v1/embeddings", json!({"input": "hello ".repeat(127)}))
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("context_length_exceeded"))
    );
    // The same vector with a budget that fits the whole prompt: chunking never enters.
    let wide = encoder(None, 512);
    let (_, a) = s
        .post("/v1/embeddings", json!({"input": long.clone()}))
        .await;
    let (_, b) = wide.post("/v1/embeddings", json!({"input": long})).await;
    assert_eq!(a["data"][0]["embedding"], b["data"][0]["embedding"]);
}

#[tokio::test]
async fn an_encoder_refuses_to_generate_on_every_route_and_a_reranker_to_pool() {
    let s = encoder(None, 128);
    let messages = json!([{"role": "user", "content": "hello"}]);
    for (route, body) in [
        ("/v1/chat/completions", json!({"messages": messages})),
        ("/v1/completions", json!({"prompt": "hello"})),
        (
            "/v1/messages",
            json!({"model": "synthetic", "max_tokens": 4, "messages": messages}),
        ),
        ("/v1/responses", json!({"input": "hello"})),
        ("/completion", json!({"prompt": "hello"})),
    ] {
        let (status, v) = s.post(route, body).await;
        assert_eq!(status, 400, "{route}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("encoder-only model (bert)"),
            "{route}: {v}"
        );
    }
    let reranker = encoder(Some(4), 128);
    let (status, v) = reranker
        .post("/v1/embeddings", json!({"input": "hello"}))
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "model");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("rank"),
        "{v}"
    );
}
