//! Prompts joining the batch cost running decodes at most one chunk's worth of prompt tokens
//! per tick, never a whole prompt: counted in forward steps, not time. Under either prefill order: the oldest prompt first
//! (the default), or round-robin. And one request's `n` choices hold at most half the rows,
//! so a request behind them is served at once.

mod common;

use std::sync::Arc;

use common::{chunks_of, config, long};
use ferrox_sched::testkit::{FakeModel, Probe};
use ferrox_sched::{GenerationRequest, PrefillOrder, Scheduler, SchedulerConfig};

#[test]
fn long_prompts_joining_delay_each_decode_by_at_most_one_chunk() {
    // B (100 tokens) and C (60) arrive together: 160 prompt tokens, 20 steps of 8. Oldest
    // first, B's last 4 tokens share a step with C's first 4 (`+`: both in one step).
    one_order(PrefillOrder::Oldest, "BBBBBBBBBBBB+CCCCCCC");
    one_order(PrefillOrder::RoundRobin, "BCBCBCBCBCBCBCB+BBBB");
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
    // Every step carries at most CHUNK prompt tokens in all: the most a joining prompt
    // delays the decodes.
    let mut prefill_steps = 0;
    for call in &calls {
        let prompt_tokens: usize = call
            .iter()
            .filter(|ch| ch.tokens.len() > 1)
            .map(|ch| ch.tokens.len())
            .sum();
        assert!(
            prompt_tokens <= CHUNK,
            "{prompt_tokens} prompt tokens in one step"
        );
        prefill_steps += usize::from(prompt_tokens > 0);
    }
    // A's prompt (one step), then B and C's 160 tokens: 20 full steps.
    assert_eq!(prefill_steps, 1 + 20);
    let order: Vec<char> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, _)| {
            let b = b_steps[i].as_ref().filter(|ch| ch.tokens.len() > 1);
            let c = c_steps[i].as_ref().filter(|ch| ch.tokens.len() > 1);
            match (b, c) {
                (Some(_), Some(_)) => Some('+'),
                (Some(_), None) => Some('B'),
                (None, Some(_)) => Some('C'),
                (None, None) => None,
            }
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

#[test]
fn the_choices_of_one_request_hold_half_the_rows_and_the_rest_is_served() {
    // Four rows; a request of eight long choices, then a small request.
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(4, 64, 400)).unwrap();
    let choice = |_| GenerationRequest {
        group: Some(7),
        ..long(vec![1, 2, 3], 40)
    };
    let choices: Vec<_> = (0..8).map(|i| handle.submit(choice(i)).unwrap()).collect();
    model.allow(2);
    model.wait_until_blocked();
    let st = handle.status();
    // Half the rows, though four were free: the others wait in their place.
    assert_eq!((st.running + st.prefilling, st.queued), (2, 6), "{st:?}");
    let calls_before = model.calls().len();
    let small = handle.submit(long(vec![9, 9], 3)).unwrap();
    model.open();
    let small = small.collect_blocking();
    assert_eq!(small.completion.usage.completion_tokens, 3);
    // Every choice still runs to its end, two at a time.
    for c in choices {
        assert_eq!(c.collect_blocking().completion.usage.completion_tokens, 40);
    }
    // The status is published after the tick that sent the last Done.
    common::wait_settled(&handle, 9);
    let st = handle.status();
    assert_eq!(
        (st.running, st.queued, st.blocks_free),
        (0, 0, st.blocks_total)
    );
    let calls = model.calls();
    let small_block = calls
        .iter()
        .flatten()
        .find(|ch| ch.tokens == [9, 9] && ch.start_pos == 0)
        .unwrap()
        .first_block;
    let small_steps = chunks_of(&calls, small_block);
    // Admitted beside the choices at once: its prompt and three tokens took a few steps
    // after it came, not the choices' forty.
    // (Its first block may be reused once it is gone: its own steps are the first run.)
    let first = small_steps.iter().position(Option::is_some).unwrap();
    let run = small_steps[first..]
        .iter()
        .take_while(|c| c.is_some())
        .count();
    let last = first + run - 1;
    assert!(
        last - calls_before < 6,
        "the small request ended {} steps after it came",
        last - calls_before
    );
    assert_eq!(run, 3, "a prompt step and two decodes");
    // No step carried more than two of the choices' rows.
    for (i, call) in calls.iter().enumerate() {
        let small_here = (first..=last).contains(&i);
        let choice_rows = call
            .iter()
            .filter(|ch| !(small_here && ch.first_block == small_block))
            .count();
        assert!(choice_rows <= 2, "step {i}: {call:?}");
    }
}

/// A step with no decode row delays nobody, so it takes the larger idle budget: one long
/// prompt alone runs in fewer, larger steps (each reads every weight once). Once a row
/// decodes, a joining prompt goes back to the small chunk.
#[test]
fn steps_without_decodes_take_the_idle_budget() {
    const CHUNK: usize = 8;
    const IDLE: usize = 32;
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let config = SchedulerConfig {
        prefill_chunk_idle_tokens: IDLE,
        ..config(4, CHUNK, 200)
    };
    let handle = Scheduler::start(Arc::clone(&model), config).unwrap();
    let a = handle.submit(long(vec![1; 100], 30)).unwrap();
    model.allow(4);
    model.wait_until_blocked(); // A's prompt is computed; it decodes from here on
    let b = handle.submit(long(vec![2; 60], 4)).unwrap();
    model.open();
    for s in [a, b] {
        s.collect_blocking();
    }
    let calls = model.calls();
    let prompt_steps = |t: u32, len: usize| -> Vec<usize> {
        let first = calls
            .iter()
            .flatten()
            .find(|ch| ch.tokens[0] == t && ch.start_pos == 0)
            .unwrap()
            .first_block;
        chunks_of(&calls, first)
            .into_iter()
            .flatten()
            .filter(|ch| ch.start_pos < len)
            .map(|ch| ch.tokens.len())
            .collect()
    };
    assert_eq!(
        prompt_steps(1, 100),
        [32, 32, 32, 4],
        "A alone: the idle budget"
    );
    assert_eq!(
        prompt_steps(2, 60),
        [8, 8, 8, 8, 8, 8, 8, 4],
        "B beside A's decodes: the chunk"
    );
}
