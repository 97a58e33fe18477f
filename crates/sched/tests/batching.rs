//! Batching and the prefix cache never change a number: batched and cached == sequential and
//! cold, chunk size is invisible, and a seed means the same tokens under any load. On the fake model, whose logits depend on every
//! token of the sequence as read back from its KV blocks.

mod common;

use std::sync::Arc;

use common::props::{self, Spec};
use ferrox_sched::testkit::{FakeLogits, FakeModel, Probe};
use ferrox_sched::{GenerationRequest, StopConfig};

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

/// Eight random runs of [`props::batched_equals_sequential_drafted`] on a tight pool, long
/// outputs: drafted and accepted tokens, and preemptions, in all.
fn speculate_under_load(
    model: Arc<Probe<FakeModel>>,
    draft: Option<Arc<Probe<FakeModel>>>,
) -> (u64, u64, u64) {
    let (mut drafted, mut accepted, mut preempted) = (0, 0, 0);
    for seed in 0..8 {
        let tight = Spec {
            kv_blocks: 24,
            max_new: 40,
            ..spec()
        };
        let run = props::batched_equals_sequential_drafted(
            Arc::clone(&model),
            draft.clone(),
            &tight,
            seed,
        );
        drafted += run.drafted;
        accepted += run.accepted;
        preempted += run.preemptions;
    }
    (drafted, accepted, preempted)
}

/// Speculative decoding changes nothing either: on a model that mostly repeats itself, every
/// draft prompt lookup finds is verified (many accepted, many rejected mid-draft), across
/// random chunk sizes, batch mixes, preemptions and cancels, greedy and seeded sampling,
/// stop strings and full logprobs, and every request's tokens and log-probabilities are
/// those of the plain sequential run to the bit.
#[test]
fn speculative_equals_plain_under_random_arrivals_and_preemption() {
    let model = Arc::new(Probe::recording(FakeModel::repeating()));
    let (drafted, accepted, preempted) = speculate_under_load(model, None);
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

/// A draft model's guesses change nothing either. The draft is a second fake model that
/// agrees with the target most of the time (a weaker pull to repeat), so its guesses are
/// often right and often wrong mid-draft; its KV is its own, trimmed back after every
/// rejection and dropped on preemption, and every request still equals its plain sequential
/// run to the bit.
#[test]
fn draft_model_speculation_equals_plain_under_random_arrivals_and_preemption() {
    let model = Arc::new(Probe::recording(FakeModel::repeating()));
    let draft = Arc::new(Probe::recording(FakeModel {
        logits: FakeLogits::Repeating {
            period: 7,
            bonus: 4.0,
        },
        ..FakeModel::hash()
    }));
    let (drafted, accepted, preempted) = speculate_under_load(model, Some(draft));
    assert!(
        accepted > 300,
        "too few drafts accepted: {accepted} of {drafted}"
    );
    assert!(
        drafted > accepted + 200,
        "too few drafts rejected: {accepted} of {drafted}"
    );
    assert!(preempted > 10, "too few preemptions exercised: {preempted}");
}

/// A model drafting for itself is right on every greedy guess: only a stop can cut a draft
/// short. So a greedy row's drafts are all accepted unless the draft's KV bookkeeping (its
/// catch-up, its roll-back after a stop, its table per row) is wrong somewhere.
#[test]
fn a_model_drafting_for_itself_is_accepted_on_every_greedy_guess() {
    let model = Arc::new(FakeModel::hash());
    let requests: Vec<GenerationRequest> = (0..6u32)
        .map(|i| GenerationRequest {
            stop: StopConfig {
                ignore_eos: true,
                ..StopConfig::default()
            },
            logprobs: Some(4),
            ..GenerationRequest::greedy((1..=5 + 3 * i).collect(), 30 + i as usize)
        })
        .collect();
    let (drafted, accepted) = props::speculative_equals_plain(
        Arc::clone(&model),
        Some(Arc::clone(&model)),
        &requests,
        200,
    );
    assert!(drafted > 100, "too few drafts verified: {drafted}");
    assert_eq!(
        accepted, drafted,
        "a model's own greedy guesses were rejected"
    );
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
