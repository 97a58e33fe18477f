//! `/rerank` and its aliases over a random-weight cross-encoder (`SyntheticSpec::reranker`):
//! the scores llama-server gives on the very same file (golden, from
//! `scripts/gen-parity-goldens.sh bert-reranker`), the ordering, `top_n`,
//! `return_documents`, the token count, batched == alone, and the refusals.

use ferrox_engine::synthetic::{build_gguf, fingerprint, SyntheticSpec};
use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny_server, TestServer};

fn golden() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/parity/bert-reranker.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the reranker golden")).unwrap()
}

async fn server() -> TestServer {
    TestServer::start(synthetic_state(
        &SyntheticSpec::reranker(),
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await
}

#[tokio::test]
async fn scores_match_llama_cpp_on_the_same_file() {
    let g = golden();
    assert_eq!(
        fingerprint(&build_gguf(&SyntheticSpec::reranker())),
        g["fingerprint"],
        "the reranker changed since its golden; run scripts/gen-parity-goldens.sh bert-reranker"
    );
    let s = server().await;
    let body = json!({"query": g["query"], "documents": g["documents"]});
    let (status, v) = s.post("/v1/rerank", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], g["prompt_tokens"], "{v}");
    let results = v["results"].as_array().unwrap();
    let want = g["scores"].as_array().unwrap();
    assert_eq!(results.len(), want.len());
    let mut last = f64::INFINITY;
    for r in results {
        let (i, score) = (
            r["index"].as_u64().unwrap() as usize,
            r["relevance_score"].as_f64().unwrap(),
        );
        // llama.cpp rounds its activations differently (f16 in places): a few 1e-4.
        assert!(
            (score - want[i].as_f64().unwrap()).abs() < 2e-3,
            "{i}: {score} vs {}",
            want[i]
        );
        assert!(score <= last, "results are best first: {v}");
        last = score;
        assert!(
            r.get("document").is_none(),
            "documents only when asked: {v}"
        );
    }
    // Each pair alone scores what it scored in the batch, bit for bit.
    for (i, doc) in g["documents"].as_array().unwrap().iter().enumerate() {
        let (_, one) = s
            .post("/rerank", json!({"query": g["query"], "documents": [doc]}))
            .await;
        let batched = results.iter().find(|r| r["index"] == i).unwrap();
        assert_eq!(
            one["results"][0]["relevance_score"],
            batched["relevance_score"]
        );
    }
}

#[tokio::test]
async fn top_n_return_documents_aliases_and_refusals() {
    let s = server().await;
    let docs = json!(["the cat sat", {"text": "hello world playing"}, "unaffable !"]);
    for path in ["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"] {
        let (status, v) = s
            .post(
                path,
                json!({"query": "hello", "documents": docs, "top_n": 2, "return_documents": true}),
            )
            .await;
        assert_eq!(status, 200, "{path}: {v}");
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{v}");
        let i = results[0]["index"].as_u64().unwrap() as usize;
        let text = ["the cat sat", "hello world playing", "unaffable !"][i];
        assert_eq!(results[0]["document"]["text"], text, "{v}");
    }
    for (body, param) in [
        (json!({"documents": ["a"]}), "query"),
        (json!({"query": "q"}), "documents"),
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q", "documents": [3]}), "documents"),
        (
            json!({"query": "q", "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
    ] {
        let (status, v) = s.post("/v1/rerank", body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    // A generative model is not a reranker.
    let gen = tiny_server().await;
    let (status, v) = gen
        .post("/v1/rerank", json!({"query": "q", "documents": ["a"]}))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a reranker"),
        "{v}"
    );
}

/// `--reranking` (llama-server's flag): a model without a classification head is refused
/// at load, naming the flag; a reranker serves `/rerank` and refuses embeddings.
#[tokio::test]
async fn reranking_needs_a_head_and_turns_embeddings_off() {
    let config = ServerConfig {
        reranking: true,
        ..ServerConfig::default()
    };
    let state =
        ferrox_server::AppState::new(config.clone(), ferrox_server::ModelsConfig::default());
    let plain = ferrox_engine::synthetic::load(&crate::common::tiny(), 1).unwrap();
    let err = state
        .models
        .insert("tiny", std::sync::Arc::new(plain))
        .err()
        .expect("a model without a head is refused")
        .to_string();
    assert!(
        err.contains("--reranking") && err.contains("classification head"),
        "{err}"
    );

    // The reranker pooled as CLS embeds; served as a reranker, it does not, whatever the
    // pooling says.
    let cls = ServerConfig {
        pooling: Some(ferrox_sched::Pooling::Cls),
        ..ServerConfig::default()
    };
    let spec = SyntheticSpec::reranker();
    let embeds = TestServer::start(synthetic_state(
        &spec,
        SchedulerConfig::default(),
        cls.clone(),
    ))
    .await;
    let (status, v) = embeds.post("/v1/embeddings", json!({"input": "a"})).await;
    assert_eq!(status, 200, "{v}");
    let config = ServerConfig {
        reranking: true,
        ..cls
    };
    let s = TestServer::start(synthetic_state(&spec, SchedulerConfig::default(), config)).await;
    let (status, v) = s
        .post("/v1/rerank", json!({"query": "a", "documents": ["b", "c"]}))
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post("/v1/embeddings", json!({"input": "a"})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("reranker"), "{v}");
}
