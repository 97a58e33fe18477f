//! Deferred cancellation, in each state: queued, mid-prefill, decoding, and by dropping the
//! stream. Each replies `Cancelled` with the tokens produced so far, and no further work runs
//! for a cancelled request.

mod common;

use std::sync::Arc;

use common::{assert_token_prefix, chunks_of, config, run_alone, wait_for};
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{FinishReason, GenerationRequest, Scheduler, StopConfig};

fn long(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        logprobs: Some(3),
        ..GenerationRequest::greedy(prompt, max_tokens)
    }
}

#[test]
fn cancel_in_each_state_replies_cancelled_with_the_tokens_so_far() {
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    // Two seats, prompt chunks of 4 tokens.
    let handle = Scheduler::start(Arc::clone(&model), config(2, 4, 100)).unwrap();
    let d_req = long(vec![1, 2, 3, 4], 50); // will be decoding
    let p_req = long(vec![7; 40], 5); // will be mid-prefill
    let q_req = long(vec![9; 3], 5); // will be queued (no seat)
    let d = handle.submit(d_req.clone()).unwrap();
    let p = handle.submit(p_req).unwrap();
    let q = handle.submit(q_req).unwrap();
    // Step 1: D's whole prompt. Steps 2-5: D decodes, P prefills 4 tokens a step.
    model.allow(4);
    model.wait_until_blocked(); // inside step 5
    for s in [&d, &p, &q] {
        s.cancel();
    }
    model.allow(1); // step 5 completes; the next tick drains the cancels first
    let (d, p, q) = (
        d.collect_blocking(),
        p.collect_blocking(),
        q.collect_blocking(),
    );

    // Decoding: cancelled with the 5 tokens of steps 1-5, a prefix of its run alone.
    assert_eq!(d.completion.finish_reason, FinishReason::Cancelled);
    assert_eq!(d.tokens.len(), 5);
    let ids: Vec<u32> = d.tokens.iter().map(|t| t.id).collect();
    assert_eq!(d.completion.token_ids, ids);
    assert_eq!(d.completion.usage.completion_tokens, 5);
    let alone = run_alone(Arc::new(FakeModel::hash()), &[d_req]).remove(0);
    assert_token_prefix(&d.tokens, &alone.tokens, "cancelled while decoding");

    // Mid-prefill: no token, and no prompt chunk after the one in flight at the cancel.
    assert_eq!(p.completion.finish_reason, FinishReason::Cancelled);
    assert!(p.tokens.is_empty() && p.completion.token_ids.is_empty());
    assert_eq!(p.completion.usage.prompt_tokens, 40);
    let calls = model.calls();
    let p_block = calls
        .iter()
        .flatten()
        .find(|c| c.tokens[0] == 7)
        .unwrap()
        .first_block;
    let p_chunks: Vec<_> = chunks_of(&calls, p_block).into_iter().flatten().collect();
    assert_eq!(p_chunks.len(), 4, "steps 2-5 only");
    assert_eq!(p_chunks.last().unwrap().start_pos, 12);

    // Queued: never ran at all.
    assert_eq!(q.completion.finish_reason, FinishReason::Cancelled);
    assert!(q.tokens.is_empty());
    assert!(calls.iter().flatten().all(|c| c.tokens[0] != 9));

    // Dropping a stream cancels it.
    let e = handle.submit(long(vec![5; 4], 50)).unwrap();
    model.allow(3);
    model.wait_until_blocked();
    drop(e);
    model.open();
    let total = handle.status().blocks_total;
    wait_for(&handle, "the dropped request to retire", |s| {
        s.finished.cancelled == 4 && s.blocks_free == total && s.running == 0
    });
    let e_block = model
        .calls()
        .iter()
        .flatten()
        .find(|c| c.tokens[0] == 5)
        .unwrap()
        .first_block;
    let e_steps = chunks_of(&model.calls(), e_block)
        .into_iter()
        .flatten()
        .count();
    assert!(
        e_steps <= 4,
        "ran {e_steps} steps after a drop during step 4"
    );
}
