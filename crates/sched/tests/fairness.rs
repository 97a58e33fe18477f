//! Prompts joining the batch cost running decodes one chunk per tick, never a whole prompt:
//! counted in forward steps, not time. Under either prefill order: the oldest prompt first
//! (the default), or round-robin.

mod common;

use std::sync::Arc;

use common::{chunks_of, config, long};
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{PrefillOrder, Scheduler, SchedulerConfig};

#[test]
fn long_prompts_joining_delay_each_decode_by_at_most_one_chunk() {
    // B (100 tokens) and C (60) arrive together: ceil(100/8) = 13 chunks and 8 chunks.
    one_order(PrefillOrder::Oldest, "BBBBBBBBBBBBBCCCCCCCC");
    one_order(PrefillOrder::RoundRobin, "BCBCBCBCBCBCBCBCBBBBB");
}

fn one_order(prefill_order: PrefillOrder, want: &str) {
    const CHUNK: usize = 8;
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let config = SchedulerConfig {
        prefill_order,
        ..config(4, CHUNK, 200)
    };
    let handle = Scheduler::start(Arc::clone(&model), config).unwrap();
    let a = handle.submit(long(vec![1; 4], 60)).unwrap();
    model.allow(3);
    model.wait_until_blocked(); // A is decoding
                                // Two long prompts arrive together.
    let b = handle.submit(long(vec![2; 100], 4)).unwrap();
    let c = handle.submit(long(vec![3; 60], 4)).unwrap();
    model.open();
    for s in [a, b, c] {
        s.collect_blocking();
    }

    let calls = model.calls();
    let first_block = |t: u32| {
        calls
            .iter()
            .flatten()
            .find(|ch| ch.tokens[0] == t && ch.start_pos == 0)
            .unwrap()
            .first_block
    };
    let a_steps = chunks_of(&calls, first_block(1));
    let b_steps = chunks_of(&calls, first_block(2));
    let c_steps = chunks_of(&calls, first_block(3));
    let a_first = a_steps.iter().position(Option::is_some).unwrap();
    let a_last = a_steps.iter().rposition(Option::is_some).unwrap();
    // A ran in every step from its first to its last: no step skipped its decode.
    assert!(
        a_steps[a_first..=a_last].iter().all(Option::is_some),
        "A missed a step"
    );
    // Its positions advance by exactly one a step after its prompt: one token per step.
    let positions: Vec<usize> = a_steps[a_first + 1..=a_last]
        .iter()
        .map(|c| c.as_ref().unwrap().start_pos)
        .collect();
    assert!(
        positions.windows(2).all(|w| w[1] == w[0] + 1),
        "{positions:?}"
    );
    // Every step carries at most one prompt chunk, of at most CHUNK tokens.
    let mut prefill_steps = 0;
    for call in &calls {
        let prompt_chunks: Vec<_> = call.iter().filter(|ch| ch.tokens.len() > 1).collect();
        assert!(prompt_chunks.len() <= 1, "two prompt chunks in one step");
        assert!(prompt_chunks.iter().all(|ch| ch.tokens.len() <= CHUNK));
        prefill_steps += prompt_chunks.len();
    }
    // A's prompt (one chunk), then B and C: 13 + 8 steps of prefill, in the order's order.
    assert_eq!(prefill_steps, 1 + 13 + 8);
    let order: Vec<char> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, _)| {
            let b = b_steps[i].as_ref().filter(|ch| ch.tokens.len() > 1);
            let c = c_steps[i].as_ref().filter(|ch| ch.tokens.len() > 1);
            b.map(|_| 'B').or(c.map(|_| 'C'))
        })
        .collect();
    let s: String = order.iter().collect();
    assert_eq!(s, want, "{prefill_order:?}");
    // While B and C were prefilling, A still decoded in each of those steps.
    let a_during_prefill = calls
        .iter()
        .enumerate()
        .filter(|(i, call)| call.iter().any(|ch| ch.tokens.len() > 1) && *i > a_first)
        .all(|(i, _)| a_steps[i].is_some() || i > a_last);
    assert!(a_during_prefill);
}
