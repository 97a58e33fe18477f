//! The scheduler's numerical properties, written once over any [`StepModel`], so the same
//! checks run on the fake model, on random-weight engine models and on the default model.

use std::sync::Arc;

use ferrox_sched::testkit::Probe;
use ferrox_sched::{
    Collected, Event, FinishReason, GenerationRequest, SamplingParams, Scheduler, SchedulerConfig,
    SpecKind, StepModel, StopConfig,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    assert_same_run, assert_token_prefix, config, random_request, run_alone, share_prefixes,
    wait_for,
};

/// The shape of a randomized run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub vocab: u32,
    /// Token ids prompts must not contain.
    pub avoid: Vec<u32>,
    pub requests: usize,
    pub max_prompt: usize,
    pub max_new: usize,
    pub logprobs: Option<usize>,
    pub kv_blocks: usize,
}

/// What a [`batched_equals_sequential`] run exercised, so a caller can check that it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exercised {
    /// Requests that ended cancelled.
    pub cancelled: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    /// Rows preempted for KV blocks (and resumed).
    pub preemptions: u64,
    /// Drafted tokens verified, and accepted.
    pub drafted: u64,
    pub accepted: u64,
}

/// Batched and cached == sequential and cold, token for token and logit for logit (every
/// logprob bit for bit), under random arrival steps, prompt lengths, shared prompt prefixes,
/// max_tokens, batch caps, chunk sizes and cancels, on a pool small enough to evict and to
/// preempt (a preempted row resumes by recomputing, and must continue token-identically). The
/// reference runs each request alone with the prefix cache and speculation off (the batched
/// run verifies every draft prompt lookup finds). A cancelled request's tokens
/// are a prefix of its sequential run. Afterwards every block is back and the pool's
/// invariants hold.
pub fn batched_equals_sequential<M: StepModel>(
    model: Arc<Probe<M>>,
    spec: &Spec,
    seed: u64,
) -> Exercised {
    batched_equals_sequential_drafted(model, None, spec, seed)
}

/// [`batched_equals_sequential`] with `draft` (if any) proposing the drafts instead of prompt
/// lookup (speculation type `draft`).
pub fn batched_equals_sequential_drafted<M: StepModel>(
    model: Arc<Probe<M>>,
    draft: Option<Arc<Probe<M>>>,
    spec: &Spec,
    seed: u64,
) -> Exercised {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut requests: Vec<GenerationRequest> = (0..spec.requests)
        .map(|_| {
            random_request(
                &mut rng,
                spec.vocab,
                &spec.avoid,
                spec.max_prompt,
                spec.max_new,
                spec.logprobs,
            )
        })
        .collect();
    share_prefixes(
        &mut rng,
        &mut requests,
        spec.vocab,
        &spec.avoid,
        spec.max_prompt,
    );
    let reference = run_alone(Arc::clone(&model), &requests);
    let calls_before = model.calls().len();

    let chunk = [1, 7, 128, usize::MAX][rng.gen_range(0..4)];
    let max_seqs = rng.gen_range(2..=8);
    let handle = Scheduler::start_with_draft(
        Arc::clone(&model),
        draft.clone(),
        drafted_config(draft.is_some(), config(max_seqs, chunk, spec.kv_blocks)),
    )
    .expect("config is valid");
    let mut arrivals: Vec<u64> = (0..requests.len()).map(|_| rng.gen_range(0..40)).collect();
    arrivals.sort_unstable();
    let mut readers = Vec::new();
    for (i, req) in requests.iter().enumerate() {
        // Arrive once the worker has run `arrivals[i]` steps, or at once if it is idle.
        wait_for(&handle, "an arrival step", |s| {
            s.steps >= arrivals[i] || s.running + s.prefilling + s.queued + s.preempted == 0
        });
        // A quarter of the requests are cancelled: half of those at once (while queued or
        // prefilling; such a cancel lands whatever the machine's load), the rest after some
        // number of tokens (which a busy reader thread may see only after the end).
        let cancel_after = rng.gen_bool(0.25).then(|| {
            if rng.gen_bool(0.5) {
                0
            } else {
                rng.gen_range(1..=req.max_tokens)
            }
        });
        let mut stream = handle.submit(req.clone()).expect("accepted");
        if cancel_after == Some(0) {
            // Right behind the submission on the worker's channel, not from the reader
            // thread, which a loaded machine may start only after the request has finished.
            stream.cancel();
        }
        readers.push(std::thread::spawn(move || {
            let mut tokens = Vec::new();
            loop {
                match stream.blocking_recv().expect("a stream ends with Done") {
                    Event::Token(t) => {
                        tokens.push(t);
                        if cancel_after == Some(tokens.len()) {
                            stream.cancel();
                        }
                    }
                    Event::Done(completion) => return Collected { tokens, completion },
                }
            }
        }));
    }
    let mut cancelled = 0;
    for (i, reader) in readers.into_iter().enumerate() {
        let got = reader.join().expect("reader thread");
        let want = &reference[i];
        let what = format!("seed {seed} request {i} (chunk {chunk}, max_seqs {max_seqs})");
        if got.completion.finish_reason == FinishReason::Cancelled {
            cancelled += 1;
            assert_token_prefix(&got.tokens, &want.tokens, &what);
            let ids: Vec<u32> = got.tokens.iter().map(|t| t.id).collect();
            assert_eq!(got.completion.token_ids, ids, "{what}");
            assert!(want.completion.token_ids.starts_with(&ids), "{what}");
        } else {
            assert_same_run(&got, want, &what);
        }
    }
    // The run batched for real, and every block came back.
    let calls = model.calls();
    let widest = calls[calls_before..]
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    assert!(
        widest >= 2,
        "seed {seed}: no step ever carried two sequences"
    );
    let total = handle.status().blocks_total;
    wait_for(&handle, "every block back", |s| {
        s.blocks_free == total && s.running + s.prefilling + s.queued + s.preempted == 0
    });
    let counts = handle.audit_blocks().expect("the pool is consistent");
    assert_eq!((counts.referenced, counts.refs), (0, 0), "seed {seed}");
    let status = handle.status();
    Exercised {
        cancelled,
        cached_tokens: status.prefix_cache_hits,
        preemptions: status.preemptions,
        drafted: status.spec_drafted,
        accepted: status.spec_accepted,
    }
}

/// Chunk sizes 1, 7, 128 and whole-prompt give identical logits and tokens, with the rows
/// batched together.
pub fn chunk_sizes_agree<M: StepModel>(model: Arc<M>, spec: &Spec, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let requests: Vec<GenerationRequest> = (0..spec.requests)
        .map(|_| {
            let mut r = random_request(
                &mut rng,
                spec.vocab,
                &spec.avoid,
                spec.max_prompt,
                spec.max_new,
                spec.logprobs,
            );
            // Long prompts of one length, so that every chunk size cuts them differently and
            // the rows reach decode together; no early stop, so their decodes overlap.
            while r.prompt_ids.len() < spec.max_prompt {
                r.prompt_ids.extend_from_within(..);
            }
            r.prompt_ids.truncate(spec.max_prompt);
            r.max_tokens = spec.max_new;
            r.stop = StopConfig {
                ignore_eos: true,
                ..StopConfig::default()
            };
            r
        })
        .collect();
    let whole = run_alone(Arc::clone(&model), &requests);
    // Blocks for every request at once (4-position blocks), so all of them run together.
    let kv_blocks = requests.len() * (spec.max_prompt + spec.max_new).div_ceil(4);
    for chunk in [1, 7, 128] {
        let handle = Scheduler::start(Arc::clone(&model), config(4, chunk, kv_blocks)).unwrap();
        let streams: Vec<_> = requests
            .iter()
            .map(|r| handle.submit(r.clone()).unwrap())
            .collect();
        for (i, s) in streams.into_iter().enumerate() {
            let what = format!("chunk {chunk}, request {i}");
            assert_same_run(&s.collect_blocking(), &whole[i], &what);
        }
    }
}

/// A seeded request gives the same tokens alone and amid concurrent load.
pub fn seed_is_independent_of_load<M: StepModel>(model: Arc<M>, spec: &Spec, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let subject = GenerationRequest {
        prompt_ids: (0..spec.max_prompt.min(12))
            .map(|i| 1 + i as u32 % (spec.vocab - 1))
            .filter(|t| !spec.avoid.contains(t))
            .collect(),
        max_tokens: spec.max_new,
        sampling: SamplingParams {
            temperature: 0.9,
            top_p: 0.95,
            top_k: 40,
            seed: 1234,
            ..SamplingParams::default()
        },
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        logprobs: spec.logprobs,
        cache_salt: None,
        reuse_cached_prompt: true,
        constraint: None,
        embedding: None,
        group: None,
        speculation: Default::default(),
    };
    let alone = run_alone(Arc::clone(&model), std::slice::from_ref(&subject)).remove(0);
    let handle = Scheduler::start(Arc::clone(&model), config(8, 7, spec.kv_blocks)).unwrap();
    let mut load = Vec::new();
    for _ in 0..spec.requests / 2 {
        let r = random_request(
            &mut rng,
            spec.vocab,
            &spec.avoid,
            spec.max_prompt,
            spec.max_new,
            None,
        );
        load.push(handle.submit(r).unwrap());
    }
    let subject_stream = handle.submit(subject).unwrap();
    for _ in 0..spec.requests / 2 {
        let r = random_request(
            &mut rng,
            spec.vocab,
            &spec.avoid,
            spec.max_prompt,
            spec.max_new,
            None,
        );
        load.push(handle.submit(r).unwrap());
    }
    assert_same_run(
        &subject_stream.collect_blocking(),
        &alone,
        "the seeded request",
    );
    for s in load {
        s.collect_blocking();
    }
}

/// `requests` submitted together to a scheduler that verifies every draft prompt lookup finds
/// give the tokens, text and log-probabilities of each run alone without speculation.
/// Returns the drafted and accepted token counts, for the caller to check that drafts ran.
pub fn speculative_equals_plain<M: StepModel>(
    model: Arc<M>,
    draft: Option<Arc<M>>,
    requests: &[GenerationRequest],
    kv_blocks: usize,
) -> (u64, u64) {
    let plain = run_alone(Arc::clone(&model), requests);
    let config = drafted_config(draft.is_some(), config(requests.len(), 16, kv_blocks));
    let handle = Scheduler::start_with_draft(model, draft, config).unwrap();
    let streams: Vec<_> = requests
        .iter()
        .map(|r| handle.submit(r.clone()).unwrap())
        .collect();
    for (i, (stream, want)) in streams.into_iter().zip(&plain).enumerate() {
        let got = stream.collect_blocking();
        assert_same_run(&got, want, &format!("request {i} with speculation"));
    }
    let status = handle.status();
    (status.spec_drafted, status.spec_accepted)
}

/// `config` with speculation type `draft` when a draft model is given.
fn drafted_config(drafted: bool, mut config: SchedulerConfig) -> SchedulerConfig {
    if drafted {
        config.speculation.kind = SpecKind::Draft;
    }
    config
}
