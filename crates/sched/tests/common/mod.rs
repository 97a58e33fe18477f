//! Helpers shared by the scheduler's integration tests.
#![allow(dead_code)] // each test file uses its own subset

pub mod props;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_sched::testkit::ChunkRecord;
use ferrox_sched::{
    Collected, Event, GenerationRequest, KvBudget, RequestStream, SamplingParams, Scheduler,
    SchedulerConfig, SchedulerHandle, SpecConfig, SpecKind, StepModel, StopConfig, TokenEvent,
};
use rand::rngs::StdRng;
use rand::Rng;

/// A greedy request that never stops early.
pub fn long(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        ..GenerationRequest::greedy(prompt, max_tokens)
    }
}

/// A config with small blocks and logging off; tests adjust the rest. Every draft prompt
/// lookup finds is verified, whatever the step costs (`adaptive: false`): speculation runs
/// under every test that uses this, and must change nothing.
pub fn config(max_seqs: usize, prefill_chunk_tokens: usize, kv_blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_seqs,
        prefill_chunk_tokens,
        // Every step's prompt budget is the one the test names (`fairness.rs`'s
        // `steps_without_decodes_take_the_idle_budget` tests the larger one).
        prefill_chunk_idle_tokens: 0,
        max_queue: 10_000,
        kv_block_size_tokens: 4,
        kv_budget: KvBudget::Blocks(kv_blocks),
        max_context_tokens: None,
        log_every_decode_steps: 0,
        speculation: SpecConfig {
            adaptive: false,
            n_max: 6,
            ..SpecConfig::default()
        },
        ..SchedulerConfig::default()
    }
}

/// [`config`] with the prefix cache and speculation off: every prompt computed in full,
/// every token decoded in a step of its own (the cold, plain reference).
pub fn cold_config(
    max_seqs: usize,
    prefill_chunk_tokens: usize,
    kv_blocks: usize,
) -> SchedulerConfig {
    SchedulerConfig {
        prefix_cache: false,
        speculation: SpecConfig {
            kind: SpecKind::None,
            ..SpecConfig::default()
        },
        ..config(max_seqs, prefill_chunk_tokens, kv_blocks)
    }
}

/// A random request over `vocab` (avoiding `avoid`): greedy or seeded sampling with random
/// filters and penalties, random stop settings, full logprobs when `logprobs` is set.
pub fn random_request(
    rng: &mut StdRng,
    vocab: u32,
    avoid: &[u32],
    max_prompt: usize,
    max_new: usize,
    logprobs: Option<usize>,
) -> GenerationRequest {
    let prompt_len = rng.gen_range(1..=max_prompt);
    let prompt_ids = (0..prompt_len)
        .map(|_| loop {
            let t = rng.gen_range(0..vocab);
            if !avoid.contains(&t) {
                break t;
            }
        })
        .collect();
    let sampling = if rng.gen_bool(0.3) {
        SamplingParams::greedy()
    } else {
        SamplingParams {
            temperature: rng.gen_range(0.3..1.5),
            top_k: if rng.gen_bool(0.5) {
                rng.gen_range(1..40)
            } else {
                0
            },
            top_p: if rng.gen_bool(0.5) {
                rng.gen_range(0.3..1.0)
            } else {
                1.0
            },
            min_p: if rng.gen_bool(0.3) { 0.05 } else { 0.0 },
            repetition_penalty: if rng.gen_bool(0.3) { 1.3 } else { 1.0 },
            presence_penalty: if rng.gen_bool(0.3) { 0.5 } else { 0.0 },
            frequency_penalty: if rng.gen_bool(0.3) { 0.3 } else { 0.0 },
            penalty_last_n: 16,
            logit_bias: if rng.gen_bool(0.2) {
                vec![(5, 2.0)]
            } else {
                vec![]
            },
            seed: rng.gen(),
        }
    };
    GenerationRequest {
        prompt_ids,
        max_tokens: rng.gen_range(1..=max_new),
        sampling,
        stop: StopConfig {
            stop_strings: if rng.gen_bool(0.2) {
                vec!["ab".into()]
            } else {
                vec![]
            },
            stop_token_ids: vec![],
            ignore_eos: rng.gen_bool(0.5),
        },
        logprobs,
        cache_salt: None,
        reuse_cached_prompt: true,
        constraint: None,
        embedding: None,
        group: None,
        speculation: Default::default(),
    }
}

/// Makes about 60% of `requests` start with one of three shared prefixes (cut at a random
/// length, so some share whole blocks and some end mid-block), keeping each prompt within
/// `max_prompt`: what a chat server sees, many prompts that open with the same system text.
pub fn share_prefixes(
    rng: &mut StdRng,
    requests: &mut [GenerationRequest],
    vocab: u32,
    avoid: &[u32],
    max_prompt: usize,
) {
    let token = |rng: &mut StdRng| loop {
        let t = rng.gen_range(0..vocab);
        if !avoid.contains(&t) {
            break t;
        }
    };
    let prefixes: Vec<Vec<u32>> = (0..3)
        .map(|_| {
            let len = rng.gen_range(max_prompt.div_ceil(4)..=max_prompt);
            (0..len).map(|_| token(rng)).collect()
        })
        .collect();
    for r in requests.iter_mut() {
        if rng.gen_bool(0.6) {
            let prefix = &prefixes[rng.gen_range(0..3)];
            let mut prompt = prefix[..rng.gen_range(1..=prefix.len())].to_vec();
            prompt.extend_from_slice(&r.prompt_ids);
            prompt.truncate(max_prompt);
            r.prompt_ids = prompt;
        }
    }
}

/// Each request alone, one after another, on a fresh scheduler that runs one sequence at a
/// time, prefills whole prompts, caches nothing and never speculates: the sequential, cold,
/// plain reference.
pub fn run_alone<M: StepModel>(model: Arc<M>, requests: &[GenerationRequest]) -> Vec<Collected> {
    let blocks = requests
        .iter()
        .map(|r| (r.prompt_ids.len() + r.max_tokens).div_ceil(4))
        .max()
        .unwrap_or(1);
    let handle = Scheduler::start(model, cold_config(1, usize::MAX, blocks)).unwrap();
    requests
        .iter()
        .map(|r| handle.submit(r.clone()).unwrap().collect_blocking())
        .collect()
}

/// `prefix` is where `full` starts (ids, texts, logprobs bit for bit). Reports the first
/// difference only, not two whole runs.
pub fn assert_token_prefix(prefix: &[TokenEvent], full: &[TokenEvent], what: &str) {
    assert!(
        prefix.len() <= full.len(),
        "{what}: {} tokens, the reference has {}",
        prefix.len(),
        full.len()
    );
    if let Some(i) = prefix.iter().zip(full).position(|(a, b)| a != b) {
        let (a, b) = (&prefix[i], &full[i]);
        panic!(
            "{what}: token {i} differs: id {} vs {}, text {:?} vs {:?}, logprob {:?} vs {:?}, \
             top logprobs equal: {}",
            a.id,
            b.id,
            a.text,
            b.text,
            a.logprob,
            b.logprob,
            a.top_logprobs == b.top_logprobs
        );
    }
}

/// Two runs are the same, token for token and logprob for logprob; only how many prompt
/// tokens came from the prefix cache, and how many drafted tokens were verified, may differ.
pub fn assert_same_run(got: &Collected, want: &Collected, what: &str) {
    assert_eq!(
        got.tokens.len(),
        want.tokens.len(),
        "{what}: token count ({:?} vs {:?})",
        got.completion.finish_reason,
        want.completion.finish_reason
    );
    assert_token_prefix(&got.tokens, &want.tokens, what);
    let mut completion = got.completion.clone();
    completion.usage.cached_tokens = want.completion.usage.cached_tokens;
    completion.usage.draft_tokens = want.completion.usage.draft_tokens;
    completion.usage.draft_accepted = want.completion.usage.draft_accepted;
    assert_eq!(completion, want.completion, "{what}: completion");
}

/// What a storm does with an accepted request, at random: cancel it at once, drop its
/// stream, read a few events and cancel, or read it to the end.
pub fn end_at_random(rng: &mut StdRng, mut stream: RequestStream) {
    match rng.gen_range(0..4) {
        0 => stream.cancel(),
        1 => drop(stream),
        2 => {
            for _ in 0..rng.gen_range(0..5) {
                if let Some(Event::Done(_)) = stream.blocking_recv() {
                    break;
                }
            }
            stream.cancel();
        }
        _ => {
            stream.collect_blocking();
        }
    }
}

/// Waits until every one of `accepted` requests has finished, whatever the reason.
pub fn wait_settled(handle: &SchedulerHandle, accepted: u64) {
    wait_for(handle, "the storm to settle", |s| {
        let f = s.finished;
        f.stop + f.length + f.cancelled + f.error == accepted
    });
}

/// Waits (polling) until `cond` holds on the handle's status, or panics after 20 s.
pub fn wait_for(
    handle: &SchedulerHandle,
    what: &str,
    cond: impl Fn(&ferrox_sched::SchedulerStatus) -> bool,
) {
    let start = Instant::now();
    while !cond(&handle.status()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}: {:?}",
            handle.status()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Per forward call, the chunks whose sequence starts at block `first_block`.
pub fn chunks_of(calls: &[Vec<ChunkRecord>], first_block: u32) -> Vec<Option<ChunkRecord>> {
    calls
        .iter()
        .map(|call| call.iter().find(|c| c.first_block == first_block).cloned())
        .collect()
}
