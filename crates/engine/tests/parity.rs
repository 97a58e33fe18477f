//! Every architecture against llama.cpp on the same file (issue 25, item 4).
//!
//! No checkpoint of most families can be fetched here, so each has a random-weight parity
//! model (`SyntheticSpec::parity_models`: f32 weights, sharp logits) and golden files
//! `tests/data/parity/NAME.json` written by `scripts/gen-parity-goldens.sh`: llama.cpp's
//! top-10 log-probabilities at 1,024 positions of sampled continuations. Our engine is
//! teacher-forced on the same tokens and judged statistically, as
//! `../shared/golden/gemma3-270m/README.md` ("The gate for work that changes the engine's
//! numbers") asks, with the parity models' f32 weights (both engines multiply in f32, so
//! their logits differ by rounding only: KL ~1e-5):
//! - wherever llama.cpp's top two are at least 0.6 apart (its own spread across schedules),
//!   our top-1 is its top-1 at 99 % of such positions or more;
//! - the KL divergence from llama.cpp's distribution to ours (its top-10 tokens and one
//!   bucket for the rest) has a median below 1e-4 and, over the best 99 % of positions, a
//!   mean below 1e-3;
//! - and at least half the positions are that sharp, or the rule would excuse everything.
//!
//! Why 1 % may disagree: an MoE router's choice is discrete. Where its n-th and (n+1)-th
//! experts are near-tied, rounding picks either, and the position's output moves a lot —
//! a near-tie like the 0.6 rule's, one layer down. The MoE models show it at ~0.8 % of
//! positions (dense models at none), with the median as low as the dense models'.
//!
//! That the comparison bites was shown by breaking one feature at a time (RoPE pairing, the
//! sliding-window pattern, the experts used per token, the Q/K norm's extent, the K/V split
//! order, expert-weight renormalisation): each fails here, with its figures in
//! docs/MODELS.md.

use ferrox_engine::synthetic::{build_gguf, fingerprint, SyntheticSpec};
use ferrox_engine::{Model, SeqChunk};
use ferrox_gguf::GgufFile;
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    model: String,
    fingerprint: String,
    sequences: Vec<Sequence>,
}

#[derive(Deserialize)]
struct Sequence {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    /// Per generated position, llama.cpp's top (id, log-probability), best first.
    top: Vec<Vec<(u32, f64)>>,
}

/// What one model scored.
#[derive(Debug, Default)]
struct Score {
    sharp: usize,
    sharp_agree: usize,
    /// KL(theirs || ours) at every position.
    kls: Vec<f64>,
    /// The first few sharp positions where we disagreed: (sequence, position, theirs, ours).
    misses: Vec<(usize, usize, u32, u32)>,
}

/// Log-softmax of one row of logits, in f64.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    row.iter().map(|&l| l as f64 - max - z.ln()).collect()
}

/// KL(theirs || ours) over their listed tokens plus one bucket for everything else.
fn bucket_kl(top: &[(u32, f64)], ours: &[f64]) -> f64 {
    let (mut kl, mut p_rest, mut q_rest) = (0.0, 1.0, 1.0);
    for &(id, lp) in top {
        let (p, q) = (lp.exp(), ours[id as usize].exp());
        kl += p * (lp - ours[id as usize]);
        p_rest -= p;
        q_rest -= q;
    }
    let (p_rest, q_rest) = (p_rest.max(0.0), q_rest.max(1e-12));
    if p_rest > 1e-12 {
        kl += p_rest * (p_rest / q_rest).ln();
    }
    kl
}

fn score(model: &Model, golden: &Golden) -> Score {
    let mut s = Score::default();
    let n_vocab = model.vocab_size();
    for (si, seq) in golden.sequences.iter().enumerate() {
        // Every position that predicts a generated token: the last prompt position and all
        // generated ones but the last.
        let mut ids = seq.prompt.clone();
        ids.extend_from_slice(&seq.tokens[..seq.tokens.len() - 1]);
        let n = seq.tokens.len();
        let mut kv = model.new_kv_cache(16, ids.len().div_ceil(16));
        let blocks: Vec<u32> = (0..ids.len().div_ceil(16) as u32).collect();
        let logits = model
            .forward_multi_seq(
                &mut kv,
                &[SeqChunk {
                    tokens: &ids,
                    start_pos: 0,
                    blocks: &blocks,
                    logit_rows: n,
                    want_hidden: false,
                }],
            )
            .expect("forward");
        for (pos, top) in seq.top.iter().enumerate() {
            let ours = log_softmax(&logits[pos * n_vocab..(pos + 1) * n_vocab]);
            let our_best = (0..n_vocab)
                .max_by(|&a, &b| ours[a].total_cmp(&ours[b]).then(b.cmp(&a)))
                .expect("a vocabulary") as u32;
            s.kls.push(bucket_kl(top, &ours));
            if top.len() > 1 && top[0].1 - top[1].1 >= 0.6 {
                s.sharp += 1;
                if our_best == top[0].0 {
                    s.sharp_agree += 1;
                } else if s.misses.len() < 5 {
                    s.misses.push((si, pos, top[0].0, our_best));
                }
            }
        }
    }
    s
}

#[test]
fn every_architecture_meets_the_parity_gate_against_llama_cpp() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parity");
    let mut failures = Vec::new();
    for (name, spec) in SyntheticSpec::parity_models() {
        let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap_or_else(|e| {
            panic!("{name}: no golden ({e}); run scripts/gen-parity-goldens.sh")
        });
        let golden: Golden = serde_json::from_str(&text).expect("a golden file");
        assert_eq!(golden.model, name);
        let bytes = build_gguf(&spec);
        assert_eq!(
            fingerprint(&bytes),
            golden.fingerprint,
            "{name}: the parity model changed since its golden was made; run \
             scripts/gen-parity-goldens.sh {name}"
        );
        let model = Model::from_gguf(GgufFile::from_bytes(bytes).unwrap(), 2).unwrap();
        let mut s = score(&model, &golden);
        let n = s.kls.len();
        s.kls.sort_by(f64::total_cmp);
        let median = s.kls[n / 2];
        let kept = &s.kls[..n - n / 100];
        let trimmed = kept.iter().sum::<f64>() / kept.len() as f64;
        let mean = s.kls.iter().sum::<f64>() / n as f64;
        eprintln!(
            "{name:9} {n} positions, {} sharp, {} agree; KL median {median:.1e}, mean of the \
             best 99 % {trimmed:.1e}, mean {mean:.1e}; misses {:?}",
            s.sharp, s.sharp_agree, s.misses
        );
        let ok = n >= 1000
            && 2 * s.sharp >= n
            && 100 * s.sharp_agree >= 99 * s.sharp
            && median < 1e-4
            && trimmed < 1e-3;
        if !ok {
            failures.push(format!(
                "{name}: {}/{} sharp positions agree, KL median {median:.1e}, best 99 % \
                 {trimmed:.1e}",
                s.sharp_agree, s.sharp
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_kl_bound_sees_a_moved_distribution() {
    let theirs = [(0u32, (0.7f64).ln()), (1, (0.2f64).ln())];
    let same: Vec<f64> = [0.7f64, 0.2, 0.1].iter().map(|p| p.ln()).collect();
    assert!(bucket_kl(&theirs, &same).abs() < 1e-12);
    let moved: Vec<f64> = [0.2f64, 0.7, 0.1].iter().map(|p| p.ln()).collect();
    assert!(bucket_kl(&theirs, &moved) > 0.5);
}
