//! KV grows on demand and preemption: a generous `max_tokens` reserves nothing, a small
//! request is never stuck behind a big one, and a preempted row loses nothing — it continues
//! token-identically and every block comes back.

mod common;

use std::sync::Arc;

use common::{
    assert_same_run, chunks_of, cold_config, config, long, random_request, run_alone, wait_for,
};
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{Event, GenerationRequest, Scheduler};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// 16 requests asking for 30,000 tokens each, on a pool that holds one such table (7,501
/// blocks of 4) and a little more: reserving the worst case would run them one at a time.
/// Growing on demand, all 16 run in one step; each client stops reading after 100 tokens.
#[test]
fn sixteen_requests_with_max_tokens_30000_run_at_once() {
    let mut fake = FakeModel::hash();
    fake.max_context = 40_000;
    let model = Arc::new(Probe::gated(fake));
    let mut cfg = config(16, 64, 7_600);
    cfg.max_context_tokens = Some(40_000);
    let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
    let readers: Vec<_> = (0..16)
        .map(|i| {
            let mut stream = handle.submit(long(vec![1 + i; 4], 30_000)).unwrap();
            std::thread::spawn(move || {
                let mut got = 0;
                while got < 100 {
                    match stream.blocking_recv() {
                        Some(Event::Token(_)) => got += 1,
                        other => panic!("ended early: {other:?}"),
                    }
                }
                // Dropping the stream cancels the request.
            })
        })
        .collect();
    model.open();
    for r in readers {
        r.join().unwrap();
    }
    let widest = model.calls().iter().map(Vec::len).max().unwrap();
    assert_eq!(widest, 16, "the 16 requests never ran in one step");
    let total = handle.status().blocks_total;
    wait_for(&handle, "every block back", |s| {
        s.blocks_free == total && s.running + s.prefilling + s.preempted == 0
    });
    assert_eq!(handle.status().preemptions, 0);
}

/// A request that may generate 30,000 tokens holds only the blocks it has filled, so a small
/// request behind it is admitted at once and served in as many steps as it has tokens, on a
/// pool where the big one's worst case would leave it no room.
#[test]
fn a_small_request_behind_a_big_one_is_served_within_a_few_steps() {
    let mut fake = FakeModel::hash();
    fake.max_context = 40_000;
    let model = Arc::new(Probe::gated(fake));
    let mut cfg = config(4, 64, 7_502);
    cfg.max_context_tokens = Some(40_000);
    let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
    let big = handle.submit(long(vec![1; 4], 30_000)).unwrap();
    model.allow(20);
    model.wait_until_blocked(); // the big one is decoding
    let before = model.calls().len();
    let small = handle.submit(long(vec![2; 2], 3)).unwrap();
    model.open();
    let small = small.collect_blocking();
    assert_eq!(small.tokens.len(), 3);
    drop(big);
    let calls = model.calls();
    let of_small: Vec<usize> = (before..calls.len())
        .filter(|&i| calls[i].iter().any(|c| c.tokens.starts_with(&[2, 2])))
        .collect();
    // The call the worker was blocked in was planned before the small one arrived; the next
    // one carries its prompt beside the big one's decode.
    assert!(
        of_small.first().is_some_and(|&i| i <= before + 1),
        "the small request waited: prompt at call {of_small:?}, submitted at {before}"
    );
    assert_eq!(calls[of_small[0]].len(), 2, "not beside the big one");
}

/// A storm on a pool that holds only a little more than the largest table: rows preempt each
/// other all the time. Every request — random sampling, stop strings, logprobs — must equal
/// its run alone on a pool where nothing is preempted, with the prefix cache on (a resumed
/// row attaches what is still cached) and off (it recomputes everything); the oldest row is
/// never preempted; every block comes back.
#[test]
fn a_storm_with_forced_preemption_matches_unpreempted_runs() {
    for caching in [true, false] {
        let mut rng = StdRng::seed_from_u64(11);
        let requests: Vec<GenerationRequest> = (0..14)
            .map(|_| {
                let mut r = random_request(
                    &mut rng,
                    FakeModel::VOCAB as u32,
                    &[FakeModel::ERROR, FakeModel::POISON],
                    30,
                    40,
                    Some(FakeModel::VOCAB),
                );
                r.max_tokens = rng.gen_range(20..=40);
                r
            })
            .collect();
        let reference = run_alone(Arc::new(FakeModel::hash()), &requests);
        // The largest table: 30 + 40 positions, 18 blocks of 4.
        let cfg = if caching {
            config(8, 16, 20)
        } else {
            cold_config(8, 16, 20)
        };
        let model = Arc::new(Probe::recording(FakeModel::hash()));
        let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
        let streams: Vec<_> = requests
            .iter()
            .map(|r| handle.submit(r.clone()).unwrap())
            .collect();
        for (i, s) in streams.into_iter().enumerate() {
            let what = format!("caching {caching}, request {i}");
            assert_same_run(&s.collect_blocking(), &reference[i], &what);
        }
        // The last `Done` is sent before its row's blocks drop and the status is published.
        wait_for(&handle, "every block back", |s| {
            s.blocks_free == s.blocks_total && s.running + s.prefilling + s.preempted == 0
        });
        let s = handle.status();
        assert!(s.preemptions >= 10, "caching {caching}: {s:?}");
        let counts = handle.audit_blocks().unwrap();
        assert_eq!((counts.referenced, counts.refs), (0, 0));
        // The first request, admitted first, ran one position a step from its first decode
        // to its end: never preempted, never stalled.
        let first = &requests[0];
        let calls = model.calls();
        let b0 = calls[0]
            .iter()
            .find(|c| c.start_pos == 0 && first.prompt_ids.starts_with(&c.tokens))
            .expect("the first call prefills the first request")
            .first_block;
        let per_call = chunks_of(&calls, b0);
        let p = first.prompt_ids.len();
        let start = per_call
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.start_pos == p))
            .expect("the first request decoded");
        for k in 0..reference[0].completion.token_ids.len() - 1 {
            let at = per_call[start + k].as_ref().map(|c| c.start_pos);
            assert_eq!(
                at,
                Some(p + k),
                "caching {caching}: the oldest row at call {}",
                start + k
            );
        }
    }
}
