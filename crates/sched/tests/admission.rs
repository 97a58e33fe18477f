//! Admission: strict FIFO on the block budget, `max_seqs`, queue slots held until admission,
//! typed refusals with exact numbers, and every block back after a storm.

mod common;

use std::sync::Arc;

use common::{config, end_at_random, long, random_request, wait_for, wait_settled};
use ferrox_engine::sampler::SamplingError;
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{InvalidRequest, Refusal, SamplingParams, Scheduler};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The index of the first forward call that carried a chunk starting at position 0 with
/// `prompt`'s first tokens: when that request was admitted and started.
fn first_call_of(calls: &[Vec<ferrox_sched::testkit::ChunkRecord>], prompt: &[u32]) -> usize {
    calls
        .iter()
        .position(|call| {
            call.iter()
                .any(|c| c.start_pos == 0 && prompt.starts_with(&c.tokens))
        })
        .unwrap_or_else(|| panic!("prompt {prompt:?} never ran"))
}

#[test]
fn fifo_a_large_request_is_admitted_before_later_small_ones() {
    // 20 blocks of 4 positions. A holds 9 for its prompt and grows to 10 as it decodes; B's
    // prompt needs 14, plus one spare for A, and must wait; five small requests of one block
    // each would fit beside A at once, but queued after B they wait too.
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(8, 64, 20)).unwrap();
    let a = handle.submit(long(vec![1; 36], 4)).unwrap();
    model.allow(3);
    model.wait_until_blocked(); // A is decoding, holding 10 blocks
    let b = handle.submit(long(vec![2; 56], 4)).unwrap();
    let small: Vec<_> = (0..5)
        .map(|i| handle.submit(long(vec![10 + i; 2], 6)).unwrap())
        .collect();
    model.open();
    for s in std::iter::once(a).chain(std::iter::once(b)).chain(small) {
        s.collect_blocking();
    }
    let calls = model.calls();
    let b_at = first_call_of(&calls, &[2; 56]);
    for i in 0..5 {
        let s_at = first_call_of(&calls, &[10 + i; 2]);
        // No earlier than B (they may share B's first step: its prompt leaves them part of
        // the step's prompt budget), so never beside A.
        assert!(
            b_at <= s_at,
            "small request {i} started at call {s_at}, before B at {b_at}"
        );
    }
    // B only started once A had finished and given its blocks back.
    assert!(calls[b_at].iter().all(|c| c.tokens[0] != 1));
}

#[test]
fn max_seqs_caps_sequences_in_flight() {
    // Gated, so that all six are queued before the first can finish: with an ungated fake
    // model a loaded machine could run each request to its end before the next arrived, and
    // "two at once" would never happen (seen once in a CI dry run).
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(2, 3, 100)).unwrap();
    let streams: Vec<_> = (0..6)
        .map(|i| handle.submit(long(vec![1 + i; 9], 5)).unwrap())
        .collect();
    model.open();
    for s in streams {
        s.collect_blocking();
    }
    let calls = model.calls();
    assert!(
        calls.iter().all(|c| c.len() <= 2),
        "a step carried more than 2 sequences"
    );
    assert!(calls.iter().any(|c| c.len() == 2), "never two at once");
}

#[test]
fn each_refusal_is_typed_with_exact_numbers_and_counted() {
    // 64 bytes a position (FakeModel), blocks of 4 positions: 256 bytes a block; 10 blocks,
    // 2560 bytes; context capped at 64 tokens.
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let mut cfg = config(1, 64, 10);
    cfg.max_context_tokens = Some(64);
    cfg.max_queue = 2;
    let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
    assert_eq!(handle.limits().bytes_per_block, 256);

    let e = handle.submit(long(vec![1; 60], 10)).unwrap_err();
    assert_eq!(
        e,
        Refusal::ContextLengthExceeded {
            prompt_tokens: 60,
            max_tokens: 10,
            requested_tokens: 70,
            limit_tokens: 64,
            estimated_bytes: 18 * 256, // ceil(70 / 4) blocks
            limit_bytes: 16 * 256,     // 64 / 4 blocks
        }
    );
    assert_eq!(
        e.to_string(),
        "context_length_exceeded: prompt (60) + max_tokens (10) = 70 tokens, over the limit \
         of 64 (KV 4608 bytes, limit 4096 bytes)"
    );
    let e = handle.submit(long(vec![1; 30], 14)).unwrap_err();
    assert_eq!(
        e,
        Refusal::KvBudgetExceeded {
            requested_blocks: 11,
            limit_blocks: 10,
            estimated_bytes: 11 * 256,
            limit_bytes: 2560,
        }
    );
    assert_eq!(e.code(), "device_memory_budget_exceeded");
    assert_eq!(
        handle.submit(long(vec![], 4)).unwrap_err(),
        Refusal::Invalid(InvalidRequest::EmptyPrompt)
    );
    let mut bad = long(vec![1], 4);
    bad.sampling = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::default()
    };
    match handle.submit(bad).unwrap_err() {
        Refusal::Invalid(InvalidRequest::Sampling(SamplingError::OutOfRange {
            parameter, ..
        })) => assert_eq!(parameter, "temperature"),
        other => panic!("{other:?}"),
    }

    // Queue full: A runs (max_seqs 1), B and C wait in the two slots.
    let a = handle.submit(long(vec![1; 4], 8)).unwrap();
    model.wait_until_blocked();
    let b = handle.submit(long(vec![2; 4], 8)).unwrap();
    let _c = handle.submit(long(vec![3; 4], 8)).unwrap();
    assert_eq!(
        handle.submit(long(vec![4; 4], 8)).unwrap_err(),
        Refusal::QueueFull { queued: 2, cap: 2 }
    );
    // The worker reads B and C off its inbox at the next tick; they still hold their slots.
    model.allow(1);
    model.wait_until_blocked();
    assert_eq!(handle.status().queued, 2);
    assert!(matches!(
        handle.submit(long(vec![4; 4], 8)),
        Err(Refusal::QueueFull { queued: 2, cap: 2 })
    ));
    // A cancelled waiting request gives its slot back.
    b.cancel();
    model.allow(1);
    wait_for(&handle, "B's slot back", |s| s.queued == 1);
    let d = handle.submit(long(vec![4; 4], 8)).unwrap();
    model.open();
    a.collect_blocking();
    d.collect_blocking();

    let r = handle.status().refusals;
    assert_eq!(
        (
            r.invalid_request,
            r.context_length_exceeded,
            r.device_memory_budget_exceeded,
            r.queue_full
        ),
        (2, 1, 1, 2)
    );
}

/// A random storm: four threads submit requests (some refused as too long or too big), and
/// cancel them, drop their streams or read them to the end at random moments. Afterwards
/// every block is free, no row or queue slot is left, and every accepted request finished
/// exactly once.
#[test]
fn every_block_comes_back_after_a_random_storm() {
    let model = Arc::new(FakeModel::hash());
    // 30 blocks hold 120 positions; the context limit is 150 tokens.
    let mut cfg = config(5, 5, 30);
    cfg.max_context_tokens = Some(150);
    cfg.max_queue = 30;
    let handle = Scheduler::start(model, cfg).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut accepted = 0;
                for _ in 0..60 {
                    // Up to 160 + 40 tokens: some over the context, some over the 30 blocks.
                    let req = random_request(&mut rng, 62, &[], 160, 40, None);
                    let Ok(stream) = handle.submit(req) else {
                        continue;
                    };
                    accepted += 1;
                    end_at_random(&mut rng, stream);
                    if rng.gen_bool(0.1) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                accepted
            })
        })
        .collect();
    let accepted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    wait_settled(&handle, accepted);
    let s = handle.status();
    assert_eq!(s.blocks_free, s.blocks_total, "{s:?}");
    assert_eq!((s.running, s.prefilling, s.queued), (0, 0, 0), "{s:?}");
    assert_eq!(s.finished.error, 0);
    assert!(s.finished.cancelled > 0 && s.finished.length + s.finished.stop > 0);
    assert!(s.refusals.context_length_exceeded > 0 && s.refusals.device_memory_budget_exceeded > 0);
}
