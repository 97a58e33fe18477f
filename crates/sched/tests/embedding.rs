//! Embeddings on the one decode path: an embedding request is a prefill-only row that pools
//! its tokens' hidden states, batched with generation in the same steps. Its vector is the
//! pooling of exactly its own tokens' states (checked against the fake model's states
//! computed directly), bit for bit the same alone or batched, at any chunk size, preempted
//! or not; the generation beside it is unchanged; every block comes back.

mod common;

use std::sync::Arc;

use common::{assert_same_run, config, random_request, run_alone, wait_for};
use ferrox_engine::synthetic::{self, SyntheticSpec};
use ferrox_engine::Arch;
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{FinishReason, GenerationRequest, Pooling, Scheduler, StepModel};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn embed(prompt: Vec<u32>, pooling: Pooling) -> GenerationRequest {
    GenerationRequest {
        embedding: Some(pooling),
        ..GenerationRequest::greedy(prompt, 1)
    }
}

/// What the fake model's pooling must give, from its hidden states computed directly.
fn expected(prompt: &[u32], pooling: Pooling) -> Vec<f32> {
    let states: Vec<Vec<f32>> = (1..=prompt.len())
        .map(|n| FakeModel::hidden_state(&prompt[..n]))
        .collect();
    match pooling {
        Pooling::Cls => states[0].clone(),
        Pooling::Last => states[states.len() - 1].clone(),
        Pooling::Mean => {
            let mut sum = states[0].clone();
            for s in &states[1..] {
                sum.iter_mut().zip(s).for_each(|(a, &v)| *a += v);
            }
            sum.iter().map(|&v| v / prompt.len() as f32).collect()
        }
    }
}

/// A random mix of generation and embedding requests; half the embeddings repeat an earlier
/// request's prompt, whose blocks are cached by then (a hit would be tempting, and wrong:
/// pooling needs every position).
fn mix(rng: &mut StdRng, n: usize) -> Vec<GenerationRequest> {
    let avoid = [FakeModel::ERROR, FakeModel::POISON];
    let mut out: Vec<GenerationRequest> = Vec::new();
    for _ in 0..n {
        let mut r = random_request(rng, FakeModel::VOCAB as u32, &avoid, 40, 16, Some(4));
        if rng.gen_bool(0.5) {
            if !out.is_empty() && rng.gen_bool(0.5) {
                r.prompt_ids = out[rng.gen_range(0..out.len())].prompt_ids.clone();
            }
            let pooling = [Pooling::Mean, Pooling::Cls, Pooling::Last][rng.gen_range(0..3)];
            r = embed(r.prompt_ids, pooling);
        }
        out.push(r);
    }
    out
}

#[test]
fn embeddings_batched_with_generation_equal_their_own_pooling() {
    let model = Arc::new(Probe::recording(FakeModel::hash()));
    let mut rng = StdRng::seed_from_u64(3);
    let mut widest = 0;
    for round in 0..6 {
        let requests = mix(&mut rng, 16);
        let alone = run_alone(Arc::clone(&model), &requests);
        let calls_before = model.calls().len();
        let chunk = [1, 7, 128][round % 3];
        // Rounds 3..6 on a pool small enough to preempt.
        let blocks = if round < 3 { 400 } else { 16 };
        let handle = Scheduler::start(Arc::clone(&model), config(6, chunk, blocks)).unwrap();
        let streams: Vec<_> = requests
            .iter()
            .map(|r| handle.submit(r.clone()).unwrap())
            .collect();
        for (i, (s, r)) in streams.into_iter().zip(&requests).enumerate() {
            let got = s.collect_blocking();
            let what = format!("round {round} (chunk {chunk}) request {i}");
            match r.embedding {
                Some(pooling) => {
                    assert!(got.tokens.is_empty(), "{what}: an embedding sampled");
                    let c = &got.completion;
                    assert_eq!(c.finish_reason, FinishReason::Stop, "{what}");
                    assert_eq!(c.usage.prompt_tokens, r.prompt_ids.len(), "{what}");
                    assert_eq!(c.usage.cached_tokens, 0, "{what}");
                    let v = c.embedding.as_ref().expect("a vector");
                    assert_eq!(v, &expected(&r.prompt_ids, pooling), "{what}: {pooling:?}");
                    assert_eq!(c.embedding, alone[i].completion.embedding, "{what}: alone");
                }
                None => {
                    assert_same_run(&got, &alone[i], &what);
                    assert_eq!(got.completion.embedding, None);
                }
            }
        }
        widest = model.calls()[calls_before..]
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(0)
            .max(widest);
        let total = handle.status().blocks_total;
        wait_for(&handle, "every block back", |s| {
            s.blocks_free == total && s.running + s.prefilling + s.queued + s.preempted == 0
        });
    }
    assert!(widest >= 2, "embeddings never batched");
}

/// On a random-weight engine model: the same embedding alone, at every chunk size, and in a
/// batch with generations, is the same vector bit for bit; mean pooling is the mean of the
/// last-token vectors of every prefix (the engine's hidden states, position by position).
#[test]
fn engine_embeddings_are_batch_and_chunk_invariant() {
    let model = Arc::new(synthetic::load(&SyntheticSpec::tiny(Arch::Gemma3, 5), 1).unwrap());
    let d = model.hidden_size();
    let vocab = model.vocab_size() as u32;
    let mut rng = StdRng::seed_from_u64(9);
    let prompt: Vec<u32> = (0..37).map(|_| rng.gen_range(0..vocab)).collect();
    let run = |chunk: usize, load: usize, pooling: Pooling, prompt: &[u32]| {
        let handle = Scheduler::start(Arc::clone(&model), config(8, chunk, 200)).unwrap();
        let others: Vec<_> = (0..load)
            .map(|k| {
                let p = (0..20).map(|i| (i * 7 + k as u32) % vocab).collect();
                handle.submit(GenerationRequest::greedy(p, 8)).unwrap()
            })
            .collect();
        let v = handle.submit(embed(prompt.to_vec(), pooling)).unwrap();
        let v = v.collect_blocking().completion.embedding.expect("a vector");
        others.into_iter().for_each(|o| drop(o.collect_blocking()));
        v
    };
    let reference = run(usize::MAX, 0, Pooling::Mean, &prompt);
    assert_eq!(reference.len(), d);
    for (chunk, load) in [(1, 0), (7, 3), (16, 5), (128, 2)] {
        assert_eq!(
            run(chunk, load, Pooling::Mean, &prompt),
            reference,
            "chunk {chunk} load {load}"
        );
    }
    // Mean = the average of each prefix's last-token state.
    let mut sum = vec![0.0f32; d];
    for n in 1..=prompt.len() {
        let last = run(usize::MAX, 0, Pooling::Last, &prompt[..n]);
        sum.iter_mut().zip(&last).for_each(|(a, &v)| *a += v);
    }
    let mean: Vec<f32> = sum.iter().map(|&v| v / prompt.len() as f32).collect();
    assert_eq!(mean, reference);
    assert_eq!(
        run(7, 2, Pooling::Cls, &prompt),
        run(usize::MAX, 0, Pooling::Last, &prompt[..1])
    );
}
