//! Every architecture through the server: each parity model (`SyntheticSpec::parity_models`)
//! served, judged against llama.cpp's goldens over `/completion` (the rule of
//! `engine/tests/parity.rs`, here on the first two golden sequences, one position per
//! request with the prompt cache on), and generating through every protocol.

use ferrox_engine::synthetic::SyntheticSpec;
use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use serde_json::{json, Value};

use crate::common::{synthetic_state, TestServer};

fn golden(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/parity")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("a parity golden")).unwrap()
}

/// Our top (id, logprob) list after `ids`, through `/completion`.
async fn top(s: &TestServer, ids: &[u64]) -> Vec<(u64, f64)> {
    let (status, body) = s
        .post(
            "/completion",
            // EOS is an ordinary token here, as it was in the golden's (`ignore_eos`) run.
            json!({"prompt": ids, "n_predict": 1, "temperature": 0, "n_probs": 10,
                   "post_sampling_probs": false, "cache_prompt": true, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["completion_probabilities"][0]["top_logprobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no probabilities: {body}"))
        .iter()
        .map(|t| (t["id"].as_u64().unwrap(), t["logprob"].as_f64().unwrap()))
        .collect()
}

#[tokio::test]
async fn every_architecture_agrees_with_llama_cpp_through_the_server() {
    for (name, spec) in SyntheticSpec::parity_models() {
        let s = TestServer::start(synthetic_state(
            &spec,
            SchedulerConfig::default(),
            ServerConfig::default(),
        ))
        .await;
        let g = golden(name);
        let (mut sharp, mut agree, mut dlp) = (0, 0, Vec::new());
        for seq in g["sequences"].as_array().unwrap().iter().take(2) {
            let mut ids: Vec<u64> = seq["prompt"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            for (pos, theirs) in seq["top"].as_array().unwrap().iter().enumerate() {
                let theirs: Vec<(u64, f64)> = theirs
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| (t[0].as_u64().unwrap(), t[1].as_f64().unwrap()))
                    .collect();
                let ours = top(&s, &ids).await;
                if theirs[0].1 - theirs[1].1 >= 0.6 {
                    sharp += 1;
                    agree += usize::from(ours[0].0 == theirs[0].0);
                }
                // The log-probability we give llama.cpp's top token.
                if let Some(o) = ours.iter().find(|o| o.0 == theirs[0].0) {
                    dlp.push((o.1 - theirs[0].1).abs());
                }
                ids.push(seq["tokens"][pos].as_u64().unwrap());
            }
        }
        dlp.sort_by(f64::total_cmp);
        let median = dlp[dlp.len() / 2];
        eprintln!("{name}: {agree}/{sharp} sharp positions agree, median |Δlogprob| {median:.1e}");
        assert!(sharp >= 128, "{name}: only {sharp} sharp positions");
        // The engine-level gate allows 1 % (an MoE router's near-ties); on these ~200
        // positions that is two.
        assert!(
            agree + (sharp / 100).max(2) >= sharp,
            "{name}: {agree}/{sharp}"
        );
        assert!(
            median < 1e-2,
            "{name}: median |Δlogprob| of the top token {median}"
        );
    }
}

#[tokio::test]
async fn every_architecture_generates_through_every_protocol() {
    for (name, spec) in SyntheticSpec::parity_models() {
        let s = TestServer::start(synthetic_state(
            &spec,
            SchedulerConfig::default(),
            ServerConfig::default(),
        ))
        .await;
        let msgs = json!([{"role": "user", "content": "hello there"}]);
        let calls = [
            (
                "/v1/chat/completions",
                json!({"messages": msgs, "max_tokens": 5, "temperature": 0}),
            ),
            (
                "/v1/messages",
                json!({"model": "synthetic", "messages": msgs, "max_tokens": 5}),
            ),
            (
                "/v1/responses",
                json!({"input": "hello there", "max_output_tokens": 5}),
            ),
            (
                "/api/chat",
                json!({"model": "synthetic", "messages": msgs, "stream": false,
                       "options": {"num_predict": 5}}),
            ),
            (
                "/completion",
                json!({"prompt": "hello there", "n_predict": 5, "ignore_eos": true}),
            ),
        ];
        for (path, body) in calls {
            let (status, out) = s.post(path, body).await;
            assert_eq!(status, 200, "{name} {path}: {out}");
            let tokens = [
                &out["usage"]["completion_tokens"],
                &out["usage"]["output_tokens"],
                &out["eval_count"],
                &out["tokens_predicted"],
            ]
            .into_iter()
            .find_map(|v| v.as_u64())
            .unwrap_or_else(|| panic!("{name} {path}: no token count in {out}"));
            assert!(tokens >= 1, "{name} {path}: {out}");
        }
    }
}
