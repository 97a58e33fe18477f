//! The prefix cache: what a hit saves, that it never changes a number, that shared blocks are
//! counted once, that salts keep tenants apart, and that every block comes back whatever
//! happens. On the fake model, whose logits depend on every token of the sequence as read
//! back from its KV blocks, so a wrong attach shows up as different logits.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{
    assert_same_run, cold_config, config, end_at_random, random_request, run_alone, wait_for,
    wait_settled,
};
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{
    Collected, FinishReason, GenerationRequest, PrefillOrder, SamplingParams, Scheduler,
    SchedulerConfig, StopConfig,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 4;

/// A request that never stops early, with every logprob.
fn long(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        logprobs: Some(FakeModel::VOCAB),
        ..GenerationRequest::greedy(prompt, max_tokens)
    }
}

fn tokens(seed: u64, n: usize) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(1..60)).collect()
}

#[test]
fn a_conversation_reuses_its_history_and_answers_as_if_cold() {
    let model = Arc::new(FakeModel::hash());
    let handle = Scheduler::start(Arc::clone(&model), config(4, 7, 400)).unwrap();
    let mut prompt = tokens(1, 30);
    let mut requests = Vec::new();
    let mut runs: Vec<Collected> = Vec::new();
    for turn in 0..4u64 {
        let req = long(prompt.clone(), 12);
        let run = handle.submit(req.clone()).unwrap().collect_blocking();
        // The next turn resends everything: the prompt, this answer, a new question.
        prompt.extend(&run.completion.token_ids);
        prompt.extend(tokens(100 + turn, 5));
        requests.push(req);
        runs.push(run);
    }
    let cold = run_alone(model, &requests);
    for (turn, (run, cold)) in runs.iter().zip(&cold).enumerate() {
        let what = format!("turn {turn}");
        assert_same_run(run, cold, &what);
        assert_eq!(cold.completion.usage.cached_tokens, 0);
    }
    // Turn k reuses every position turn k-1 computed — its prompt and its answer but the
    // last sampled token, which never went through the model: the full blocks attached, the
    // partly computed last block copied from the tail turn k-1 left.
    assert_eq!(runs[0].completion.usage.cached_tokens, 0);
    for k in 1..4 {
        let before = &requests[k - 1];
        let computed = before.prompt_ids.len() + before.max_tokens - 1;
        assert_ne!(computed % BLOCK, 0, "turn {k} should end mid-block");
        assert_eq!(runs[k].completion.usage.cached_tokens, computed, "turn {k}");
    }
    let s = handle.status();
    let hits: usize = runs.iter().map(|r| r.completion.usage.cached_tokens).sum();
    assert_eq!(s.prefix_cache_hits, hits as u64);
    let queried: usize = requests.iter().map(|r| r.prompt_ids.len()).sum();
    assert_eq!(s.prefix_cache_queries, queried as u64);
    // Computed = everything asked minus what was attached.
    assert_eq!(s.tokens_prefilled, (queried - hits) as u64);
}

/// The same prompt twice: everything but its last token is reused, the part of the last
/// block by copying it from the first request's block, and the answer is the same.
#[test]
fn a_resent_prompt_recomputes_only_its_last_token() {
    let model = Arc::new(FakeModel::hash());
    let handle = Scheduler::start(Arc::clone(&model), config(4, 16, 200)).unwrap();
    for len in [33, 34, 36] {
        let req = long(tokens(len as u64, len), 3);
        let first = handle.submit(req.clone()).unwrap().collect_blocking();
        let again = handle.submit(req.clone()).unwrap().collect_blocking();
        assert_same_run(&again, &first, &format!("length {len}"));
        assert_eq!(
            again.completion.usage.cached_tokens,
            len - 1,
            "length {len}"
        );
    }
    let s = handle.status();
    assert_eq!(s.tokens_prefilled, (33 + 34 + 36 + 3) as u64);
}

/// Four requests arrive together with one prompt (`n` = 4, in effect) and four users with
/// one system prompt and their own questions: the shared part is computed once.
#[test]
fn requests_arriving_together_compute_a_new_prefix_once() {
    for order in [PrefillOrder::Oldest, PrefillOrder::RoundRobin] {
        let model = Arc::new(Probe::gated(FakeModel::hash()));
        let cfg = SchedulerConfig {
            prefill_order: order,
            ..config(8, 8, 400)
        };
        let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
        let same = tokens(2, 100);
        let system = tokens(3, 64);
        let mut requests: Vec<GenerationRequest> = (0..4)
            .map(|i| GenerationRequest {
                sampling: SamplingParams {
                    temperature: 0.8,
                    seed: i,
                    ..SamplingParams::default()
                },
                ..long(same.clone(), 6)
            })
            .collect();
        requests.extend((0..4).map(|i| {
            let mut p = system.clone();
            p.extend(tokens(10 + i, 10));
            long(p, 6)
        }));
        // All queued before the first step runs.
        let streams: Vec<_> = requests
            .iter()
            .map(|r| handle.submit(r.clone()).unwrap())
            .collect();
        model.open();
        let runs: Vec<Collected> = streams.into_iter().map(|s| s.collect_blocking()).collect();
        let cold = run_alone(Arc::clone(&model), &requests);
        for (i, (run, cold)) in runs.iter().zip(&cold).enumerate() {
            assert_same_run(run, cold, &format!("{order:?} request {i}"));
        }
        // The 100-token prompt once, then each later copy only its last token (always
        // computed, for its logits: the rest of its last block is copied from the first
        // copy's); the system prompt (16 whole blocks) once, then each later user only
        // their 10 own tokens. Round-robin may hand a later copy its last block before the
        // first copy has published it: then that copy computes the whole block (4 tokens).
        let s = handle.status();
        let cached: Vec<usize> = runs
            .iter()
            .map(|r| r.completion.usage.cached_tokens)
            .collect();
        let exact = (100 + 3) + (74 + 3 * 10);
        match order {
            PrefillOrder::Oldest => {
                assert_eq!(s.tokens_prefilled, exact as u64, "{s:?}");
                assert_eq!(cached, [0, 99, 99, 99, 0, 64, 64, 64]);
            }
            PrefillOrder::RoundRobin => {
                assert!(s.tokens_prefilled <= (exact + 3 * 3) as u64, "{s:?}");
                assert!(cached[1..4].iter().all(|&c| c >= 96), "{cached:?}");
                assert_eq!(cached[5..], [64, 64, 64]);
            }
        }
    }
}

/// A warm-up request shares the first 3 tokens of a system prompt (a chat template's
/// header) and leaves its blocks cached; then four users arrive together behind that system
/// prompt. The first copies the 3 tokens and computes the rest; the others still attach the
/// system prompt's whole blocks (a partial copy at admission used to leave them mid-block,
/// unable to attach, and each computed the whole system prompt again).
#[test]
fn a_partial_match_does_not_keep_later_requests_from_attaching() {
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(8, 8, 400)).unwrap();
    let system = tokens(8, 64);
    let mut warm = system[..3].to_vec();
    warm.extend([61, 61, 61]);
    model.allow(4); // the warm-up's prefill and 3 decode steps
    handle.submit(long(warm, 4)).unwrap().collect_blocking();
    let streams: Vec<_> = (0..4)
        .map(|i| {
            let mut p = system.clone();
            p.extend(tokens(20 + i, 10));
            handle.submit(long(p, 3)).unwrap()
        })
        .collect();
    model.open(); // all four are queued before the first of them runs
    let cached: Vec<usize> = streams
        .into_iter()
        .map(|s| s.collect_blocking().completion.usage.cached_tokens)
        .collect();
    assert_eq!(cached[0], 3);
    assert!(cached[1..].iter().all(|&c| c >= 64), "{cached:?}");
    assert_eq!(handle.status().tokens_prefilled, (6 + 71 + 3 * 10) as u64);
}

/// 20 blocks of 4. A holds 15 (40 prompt tokens + 20); B shares A's 10 prompt blocks and
/// needs 15 in all, so 5 new ones: it fits beside A only because shared blocks are counted
/// once. With the cache off it must wait for A to finish.
#[test]
fn shared_blocks_are_not_counted_twice_at_admission() {
    for caching in [true, false] {
        let model = Arc::new(Probe::gated(FakeModel::hash()));
        let cfg = if caching {
            config(4, 64, 20)
        } else {
            cold_config(4, 64, 20)
        };
        let handle = Scheduler::start(Arc::clone(&model), cfg).unwrap();
        let prompt = tokens(4, 40);
        let a = handle.submit(long(prompt.clone(), 20)).unwrap();
        model.allow(2);
        model.wait_until_blocked(); // A's prompt is computed, its first token sampled
        let mut b_prompt = prompt.clone();
        b_prompt.push(7);
        let b = handle.submit(long(b_prompt, 16)).unwrap();
        model.open();
        let (a, b) = (a.collect_blocking(), b.collect_blocking());
        assert_eq!(a.completion.finish_reason, FinishReason::Length);
        let calls = model.calls();
        // B's first chunk: the first after A's first two steps that starts where B can
        // start (A is past position 40 by then).
        let (at, b_first) = calls
            .iter()
            .enumerate()
            .skip(2)
            .find_map(|(i, call)| {
                call.iter()
                    .find(|c| c.start_pos == 0 || c.start_pos == 40)
                    .map(|c| (i, c.clone()))
            })
            .expect("B ran");
        let beside_a = calls[at].len() == 2;
        if caching {
            assert_eq!(
                b_first.start_pos, 40,
                "prefill starts at the first uncached position"
            );
            assert_eq!(b_first.tokens, [7]);
            assert!(beside_a, "B waited although its shared blocks fit");
            assert_eq!(b.completion.usage.cached_tokens, 40);
        } else {
            assert_eq!(b_first.start_pos, 0);
            assert!(!beside_a, "B ran beside A without the blocks for it");
            assert_eq!(b.completion.usage.cached_tokens, 0);
        }
    }
}

#[test]
fn a_salt_keeps_tenants_apart() {
    let handle = Scheduler::start(Arc::new(FakeModel::hash()), config(4, 16, 200)).unwrap();
    let prompt = tokens(5, 33);
    let cached = |salt: Option<&str>| {
        let req = GenerationRequest {
            cache_salt: salt.map(str::to_owned),
            ..long(prompt.clone(), 2)
        };
        handle
            .submit(req)
            .unwrap()
            .collect_blocking()
            .completion
            .usage
            .cached_tokens
    };
    assert_eq!(cached(Some("tenant-a")), 0);
    assert_eq!(cached(Some("tenant-b")), 0, "b saw a's prefix");
    assert_eq!(cached(None), 0, "no salt saw a salted prefix");
    assert_eq!(cached(Some("tenant-a")), 32);
    assert_eq!(cached(None), 32);
}

#[test]
fn a_request_that_declines_reuse_computes_its_whole_prompt_and_answers_the_same() {
    let handle = Scheduler::start(Arc::new(FakeModel::hash()), config(4, 16, 200)).unwrap();
    let prompt = tokens(8, 41);
    let run = |reuse: bool| {
        let req = GenerationRequest {
            reuse_cached_prompt: reuse,
            ..long(prompt.clone(), 4)
        };
        handle.submit(req).unwrap().collect_blocking().completion
    };
    let cold = run(true);
    let declined = run(false);
    assert_eq!(declined.usage.cached_tokens, 0, "reused though told not to");
    assert_eq!(declined.token_ids, cold.token_ids);
    assert_eq!(handle.status().tokens_prefilled, 82);
    // Its blocks were still published: a request that does reuse finds them.
    assert_eq!(run(true).usage.cached_tokens, 40);
}

#[test]
fn with_the_cache_off_nothing_is_looked_up_or_shared() {
    let handle = Scheduler::start(Arc::new(FakeModel::hash()), cold_config(4, 16, 200)).unwrap();
    for _ in 0..2 {
        let run = handle
            .submit(long(tokens(6, 40), 3))
            .unwrap()
            .collect_blocking();
        assert_eq!(run.completion.usage.cached_tokens, 0);
    }
    let s = handle.status();
    assert_eq!((s.prefix_cache_queries, s.prefix_cache_hits), (0, 0));
    assert_eq!((s.blocks_cached, s.tokens_prefilled), (0, 80));
}

/// A panic while a request sits on cached blocks: the worker fails what it held, every
/// block comes back, and the cached prefix is still there and still right.
#[test]
fn a_panic_on_cached_blocks_returns_them_and_keeps_the_cache_right() {
    let model = Arc::new(FakeModel::hash());
    let handle = Scheduler::start(Arc::clone(&model), config(4, 16, 100)).unwrap();
    let prefix = tokens(7, 40);
    handle
        .submit(long(prefix.clone(), 4))
        .unwrap()
        .collect_blocking();
    let mut poisoned = prefix.clone();
    poisoned.extend([5, FakeModel::POISON]);
    let run = handle.submit(long(poisoned, 4)).unwrap().collect_blocking();
    assert!(matches!(
        run.completion.finish_reason,
        FinishReason::Error(_)
    ));
    wait_for(&handle, "the restart", |s| s.worker_restarts == 1);
    let counts = handle.audit_blocks().unwrap();
    assert_eq!((counts.referenced, counts.refs), (0, 0));
    let mut again = prefix;
    again.extend([5, 6]);
    let req = long(again, 5);
    let hit = handle.submit(req.clone()).unwrap().collect_blocking();
    assert_eq!(hit.completion.usage.cached_tokens, 40);
    assert_same_run(&hit, &run_alone(model, &[req])[0], "after the panic");
}

/// Thousands of random requests with shared prefixes from four threads, cancelled at every
/// stage or read to the end, on a pool small enough that the cache evicts all the time; a
/// fifth thread audits the pool throughout. Afterwards every block is free or cached with no
/// reference left, every request finished exactly once, and none failed (the worker checks,
/// in debug builds, that no step writes a block another request holds).
#[test]
fn a_storm_with_eviction_keeps_every_block_accounted_for() {
    let model = Arc::new(FakeModel::hash());
    let mut cfg = config(6, 9, 40);
    cfg.max_queue = 64;
    let handle = Scheduler::start(model, cfg).unwrap();
    let prefixes: Arc<Vec<Vec<u32>>> = Arc::new((0..4).map(|i| tokens(50 + i, 48)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let auditor = {
        let (handle, done) = (handle.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut audits = 0;
            while !done.load(Ordering::Acquire) {
                let c = handle.audit_blocks().expect("the pool is consistent");
                assert_eq!(c.free + c.cached_unreferenced + c.referenced, c.total);
                audits += 1;
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            audits
        })
    };
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (handle, prefixes) = (handle.clone(), Arc::clone(&prefixes));
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                let mut accepted = 0u64;
                for _ in 0..500 {
                    let mut req = random_request(&mut rng, 62, &[], 24, 30, None);
                    let p = &prefixes[rng.gen_range(0..prefixes.len())];
                    let mut prompt = p[..rng.gen_range(1..=p.len())].to_vec();
                    prompt.extend(&req.prompt_ids);
                    req.prompt_ids = prompt;
                    if rng.gen_bool(0.2) {
                        req.cache_salt = Some(format!("t{}", rng.gen_range(0..2)));
                    }
                    let Ok(stream) = handle.submit(req) else {
                        continue;
                    };
                    accepted += 1;
                    end_at_random(&mut rng, stream);
                }
                accepted
            })
        })
        .collect();
    let accepted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    wait_settled(&handle, accepted);
    done.store(true, Ordering::Release);
    assert!(auditor.join().unwrap() > 10);
    let s = handle.status();
    assert_eq!(s.finished.error, 0, "{s:?}");
    assert_eq!(s.blocks_free, s.blocks_total, "{s:?}");
    assert_eq!((s.running, s.prefilling, s.queued), (0, 0, 0));
    let c = handle.audit_blocks().unwrap();
    assert_eq!((c.referenced, c.refs), (0, 0), "{c:?}");
    assert!(accepted > 1000, "{accepted}");
    assert!(
        s.prefix_cache_hits > 0 && s.prefix_cache_evictions > 0,
        "{s:?}"
    );
}
