//! A quantized KV cache through the server: `--cache-type-k/-v q8_0` prices the pool in
//! q8_0's bytes (more blocks for the same budget), and the prefix cache reuses q8_0 blocks —
//! attached whole or copied in part — with the very bits a cold computation writes.

use ferrox_engine::synthetic::SyntheticSpec;
use ferrox_engine::KvType;
use ferrox_sched::{KvBudget, SchedulerConfig};
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};

fn spec() -> SyntheticSpec {
    // Heads of 32 values: one q8_0 block each.
    SyntheticSpec {
        head_dim: 32,
        ..tiny()
    }
}

async fn server(k: KvType, v: KvType) -> TestServer {
    let sched = SchedulerConfig {
        cache_type_k: k,
        cache_type_v: v,
        kv_budget: KvBudget::Bytes(64 << 20),
        ..SchedulerConfig::default()
    };
    TestServer::start(synthetic_state(&spec(), sched, ServerConfig::default())).await
}

async fn blocks_total(s: &TestServer) -> f64 {
    let (status, text) = s.get("/metrics").await;
    assert_eq!(status, 200, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("ferrox_kv_blocks_total{"))
        .expect("the pool's size is a metric");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_q8_0_pool_holds_more_blocks_for_the_same_bytes() {
    let f16 = blocks_total(&server(KvType::F16, KvType::F16).await).await;
    let q8 = blocks_total(&server(KvType::Q8_0, KvType::Q8_0).await).await;
    let k_only = blocks_total(&server(KvType::Q8_0, KvType::F16).await).await;
    // 64 bytes per 32 values against 34: 1.88x the blocks (within one block of rounding).
    assert!((q8 / f16 - 64.0 / 34.0).abs() < 0.01, "{q8} vs {f16}");
    assert!(
        (k_only / f16 - 128.0 / 98.0).abs() < 0.01,
        "{k_only} vs {f16}"
    );
}

#[tokio::test]
async fn cached_q8_0_blocks_give_the_cold_bits() {
    let s = server(KvType::Q8_0, KvType::Q8_0).await;
    let ask = |prompt: &str, cache: bool| {
        json!({"prompt": prompt, "n_predict": 6, "temperature": 0, "n_probs": 3,
               "ignore_eos": true, "cache_prompt": cache})
    };
    // A first turn computes the prompt and its answer; the second resends both and more, so
    // its full blocks are attached and the partly filled one copied.
    let first = "one two three four five six seven eight nine ten eleven twelve thirteen";
    let (status, a) = s.post("/completion", ask(first, true)).await;
    assert_eq!(status, 200, "{a}");
    let second = format!("{first}{} fourteen fifteen", a["content"].as_str().unwrap());
    let (_, warm) = s.post("/completion", ask(&second, true)).await;
    let (_, cold) = s.post("/completion", ask(&second, false)).await;
    assert!(
        warm["timings"]["cache_n"].as_u64().unwrap() > 0,
        "nothing came from the cache: {warm}"
    );
    assert_eq!(cold["timings"]["cache_n"], 0);
    let probs = |v: &Value| v["completion_probabilities"].clone();
    assert_eq!(warm["content"], cold["content"]);
    assert_eq!(probs(&warm), probs(&cold));
}
