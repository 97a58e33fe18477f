//! The real default model against llama.cpp's golden data in ../shared/golden/gemma3-270m/.
//!
//! Rules from that folder's README: greedy continuations may first diverge only at a near-tie;
//! at the last prompt position the top-1 id equals llama.cpp's (unless it is a near-tie) and
//! the top-5 log-probabilities are within 0.5. A near-tie is a top-1/top-2 gap below
//! [`NEAR_TIE`] for llama.cpp or the float64 reference: 0.6, llama.cpp's own spread across
//! schedules, as the README's gate allows for an engine that passes its statistical step —
//! `scripts/fidelity-gate.sh`, which judges changes to the engine's numbers over 1,000+
//! positions; one greedy row is a draw, not a measure.
//! The model is found at FERROX_MODEL or in the cache (`ferrox pull` puts it there).

use std::path::PathBuf;

use ferrox_engine::{KvCache, Model, SeqChunk};
use serde_json::Value;

/// Top-1/top-2 log-probability gap below which a divergence is a near-tie (see the module doc).
const NEAR_TIE: f64 = 0.6;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden/gemma3-270m")
}

fn rows(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(golden_dir().join(file)).expect("golden file readable");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn model() -> Model {
    let path = ferrox_engine::cache::default_model_path();
    assert!(
        path.exists(),
        "{} missing: run `cargo run -p ferrox -- pull`",
        path.display()
    );
    Model::load(&path, 2).expect("default model loads")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Prefills `prompt` in one chunk and returns the last position's logits.
fn prefill(m: &Model, kv: &mut KvCache, blocks: &[u32], prompt: &[u32]) -> Vec<f32> {
    let chunk = SeqChunk {
        tokens: prompt,
        start_pos: 0,
        blocks,
        logit_rows: 1,
        want_hidden: false,
    };
    m.forward_multi_seq(kv, &[chunk]).unwrap()
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    x.iter().map(|&v| v as f64 - lse).collect()
}

#[test]
fn greedy_continuations_match_llama_cpp() {
    let m = model();
    let bs = 16;
    let mut kv = m.new_kv_cache(bs, 8);
    let blocks: Vec<u32> = (0..8).collect();
    let mut failures = Vec::new();
    let all = rows("greedy.jsonl");
    for row in &all {
        let prompt = ids(&row["ids_prompt"]);
        let want = ids(&row["ids_out"]);
        let gaps: Vec<f64> = row["top1_top2_logprob_gap"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_f64().unwrap())
            .collect();
        let ref_gaps: Vec<f64> = row["ref_f64_top1_top2_gap"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_f64().unwrap())
            .collect();
        let mut logits = prefill(&m, &mut kv, &blocks, &prompt);
        let mut got = Vec::new();
        for i in 0..want.len() {
            let t = argmax(&logits);
            got.push(t);
            let chunk = SeqChunk {
                tokens: &[t],
                start_pos: prompt.len() + i,
                blocks: &blocks,
                logit_rows: 1,
                want_hidden: false,
            };
            logits = m.forward_multi_seq(&mut kv, &[chunk]).unwrap();
        }
        if let Some(k) = (0..want.len()).find(|&k| got[k] != want[k]) {
            let near_tie = gaps[k] < NEAR_TIE || ref_gaps.get(k).is_some_and(|&g| g < NEAR_TIE);
            eprintln!(
                "{:?}: first divergence at {k} (gap {:.3}, ref gap {:?}) {}",
                row["prompt"].as_str().unwrap(),
                gaps[k],
                ref_gaps.get(k),
                if near_tie {
                    "near-tie: ok"
                } else {
                    "NOT a near-tie"
                }
            );
            if !near_tie {
                failures.push((row["prompt"].clone(), k, got.clone(), want.clone()));
            }
        }
    }
    eprintln!(
        "greedy: {}/{} prompts pass",
        all.len() - failures.len(),
        all.len()
    );
    assert!(failures.is_empty(), "greedy mismatches: {failures:?}");
}

#[test]
fn last_position_logprobs_match_llama_cpp() {
    let m = model();
    let mut kv = m.new_kv_cache(16, 8);
    let blocks: Vec<u32> = (0..8).collect();
    let mut worst_llama = 0.0f64;
    let mut worst_ref = 0.0f64;
    for row in rows("logits.jsonl") {
        let prompt = ids(&row["ids_prompt"]);
        let logits = prefill(&m, &mut kv, &blocks, &prompt);
        let lp = log_softmax(&logits);
        let top = row["top"].as_array().unwrap();
        let gap = top[0]["logprob"].as_f64().unwrap() - top[1]["logprob"].as_f64().unwrap();
        let greedy = row["greedy_id"].as_u64().unwrap() as u32;
        if gap >= NEAR_TIE {
            assert_eq!(argmax(&logits), greedy, "top-1 for {:?}", row["prompt"]);
        }
        for t in &top[..5] {
            let id = t["id"].as_u64().unwrap() as usize;
            let d = (lp[id] - t["logprob"].as_f64().unwrap()).abs();
            worst_llama = worst_llama.max(d);
        }
        for t in &row["ref_f64"].as_array().unwrap()[..5] {
            let id = t["id"].as_u64().unwrap() as usize;
            worst_ref = worst_ref.max((lp[id] - t["logprob"].as_f64().unwrap()).abs());
        }
    }
    eprintln!(
        "top-5 |Δlogprob|: vs llama.cpp {worst_llama:.4}, vs float64 reference {worst_ref:.4}"
    );
    assert!(
        worst_llama <= 0.5,
        "top-5 logprobs off llama.cpp by {worst_llama}"
    );
    assert!(
        worst_ref <= 0.5,
        "top-5 logprobs off the f64 reference by {worst_ref}"
    );
}
