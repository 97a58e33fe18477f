//! Batching and the prefix cache never change a number: batched and cached == sequential and
//! cold, chunk size is invisible, and a seed means the same tokens under any load. On the fake model, whose logits depend on every
//! token of the sequence as read back from its KV blocks.

mod common;

use std::sync::Arc;

use common::props::{self, Spec};
use ferrox_sched::testkit::{FakeModel, Probe};

fn spec() -> Spec {
    Spec {
        vocab: FakeModel::VOCAB as u32,
        avoid: vec![FakeModel::ERROR, FakeModel::POISON],
        requests: 24,
        max_prompt: 40,
        max_new: 24,
        // The whole vocabulary: every logit, as a log-softmax, compared bit for bit.
        logprobs: Some(FakeModel::VOCAB),
        kv_blocks: 48,
    }
}

/// Speculative decoding changes nothing either: on a model that mostly repeats itself, every
/// draft prompt lookup finds is verified (many accepted, many rejected mid-draft), across
/// random chunk sizes, batch mixes, preemptions and cancels, greedy and seeded sampling,
/// stop strings and full logprobs, and every request's tokens and log-probabilities are
/// those of the plain sequential run to the bit.
#[test]
fn speculative_equals_plain_under_random_arrivals_and_preemption() {
    let model = Arc::new(Probe::recording(FakeModel::repeating()));
    let (mut drafted, mut accepted, mut preempted) = (0, 0, 0);
    for seed in 0..8 {
        let tight = Spec {
            kv_blocks: 24,
            max_new: 40,
            ..spec()
        };
        let run = props::batched_equals_sequential(Arc::clone(&model), &tight, seed);
        drafted += run.drafted;
        accepted += run.accepted;
        preempted += run.preemptions;
    }
    assert!(
        accepted > 500,
        "too few drafts accepted: {accepted} of {drafted}"
    );
    assert!(
        drafted > accepted + 200,
        "too few drafts rejected: {accepted} of {drafted}"
    );
    assert!(preempted > 10, "too few preemptions exercised: {preempted}");
}

#[test]
fn batched_equals_sequential_under_random_arrivals_and_cancels() {
    let model = Arc::new(Probe::recording(FakeModel::hash()));
    let (mut cancelled, mut cached, mut preempted) = (0, 0, 0);
    for seed in 0..8 {
        // The largest table is 16 blocks: rows evict cached blocks and preempt each other.
        let tight = Spec {
            kv_blocks: 20,
            ..spec()
        };
        let run = props::batched_equals_sequential(Arc::clone(&model), &tight, seed);
        cancelled += run.cancelled;
        cached += run.cached_tokens;
        preempted += run.preemptions;
    }
    assert!(cancelled > 10, "too few cancels exercised: {cancelled}");
    assert!(preempted > 10, "too few preemptions exercised: {preempted}");
    assert!(
        cached > 200,
        "too few prefix-cache hits exercised: {cached} tokens"
    );
}

#[test]
fn chunk_sizes_1_7_128_and_whole_prompt_agree() {
    let spec = Spec {
        requests: 6,
        max_prompt: 300,
        max_new: 8,
        kv_blocks: 400,
        ..spec()
    };
    props::chunk_sizes_agree(Arc::new(FakeModel::hash()), &spec, 1);
}

#[test]
fn a_seed_gives_the_same_tokens_alone_and_under_load() {
    props::seed_is_independent_of_load(Arc::new(FakeModel::hash()), &spec(), 2);
}
