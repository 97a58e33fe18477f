//! Stop tokens and stop strings through the whole scheduler, with a scripted model: matches
//! across token boundaries, withheld tails, UTF-8 characters split across tokens.

mod common;

use std::sync::Arc;

use ferrox_sched::testkit::FakeModel;
use ferrox_sched::{
    Collected, FinishReason, GenerationRequest, KvBudget, Scheduler, SchedulerConfig, StopConfig,
    StopMatch,
};

/// Runs a greedy request on a model scripted to continue `script` after its first `n`
/// tokens (the prompt).
fn run(script: Vec<u32>, n: usize, max_tokens: usize, stop: StopConfig) -> Collected {
    let prompt = script[..n].to_vec();
    let model = Arc::new(FakeModel::script(script));
    let config = SchedulerConfig {
        kv_budget: KvBudget::Blocks(64),
        log_every_decode_steps: 0,
        ..SchedulerConfig::default()
    };
    let handle = Scheduler::start(model, config).unwrap();
    let req = GenerationRequest {
        stop,
        ..GenerationRequest::greedy(prompt, max_tokens)
    };
    handle.submit(req).unwrap().collect_blocking()
}

fn texts(c: &Collected) -> Vec<&str> {
    c.tokens.iter().map(|t| t.text.as_str()).collect()
}

fn strings(stops: &[&str]) -> StopConfig {
    StopConfig {
        stop_strings: stops.iter().map(|s| s.to_string()).collect(),
        ..StopConfig::default()
    }
}

#[test]
fn stop_string_across_token_boundaries_is_withheld_then_dropped() {
    let script = FakeModel::encode("the end is near");
    let c = run(script, 4, 20, strings(&["d is n"]));
    assert_eq!(texts(&c), vec!["e", "n", "", "", "", "", "", ""]);
    assert_eq!(c.completion.finish_reason, FinishReason::Stop);
    assert_eq!(
        c.completion.stopped_by,
        Some(StopMatch::String("d is n".into()))
    );
    assert_eq!(c.completion.text, "en");
    assert_eq!(c.completion.token_ids, FakeModel::encode("end is n"));
    assert_eq!(c.completion.usage.completion_tokens, 8);
}

#[test]
fn a_withheld_tail_is_released_once_ruled_out_or_at_the_end() {
    let script = FakeModel::encode("the end is near");
    let c = run(script.clone(), 4, 20, strings(&["d iz"]));
    // "d", "d ", "d i" could become "d iz"; "d is" cannot.
    assert_eq!(texts(&c)[..6], ["e", "n", "", "", "", "d is"]);
    // Ending on a possible prefix: 18 tokens stop at "...the end", the "d" is flushed.
    let c = run(script, 4, 18, strings(&["d iz"]));
    assert_eq!(c.completion.finish_reason, FinishReason::Length);
    assert_eq!(c.completion.flushed_text, "d");
    assert_eq!(c.completion.text, "end is nearthe end");
    let streamed: String = texts(&c).concat() + &c.completion.flushed_text;
    assert_eq!(streamed, c.completion.text);
}

#[test]
fn utf8_characters_split_across_tokens_are_never_broken() {
    // a, then € (3 one-byte tokens), 😀 (4), é, space.
    let script = vec![1, 30, 31, 32, 33, 34, 35, 36, 37, 27];
    let c = run(script.clone(), 1, 9, StopConfig::default());
    assert_eq!(texts(&c), vec!["", "", "€", "", "", "", "😀", "é", " "]);
    assert_eq!(c.completion.text, "€😀é ");
    // A stop string made of a split character.
    let c = run(script, 1, 9, strings(&["😀"]));
    assert_eq!(texts(&c), vec!["", "", "€", "", "", "", ""]);
    assert_eq!(c.completion.text, "€");
    assert_eq!(c.completion.token_ids.len(), 7);
}

#[test]
fn eos_stops_unless_ignored_and_stop_ids_always_stop() {
    let script = [
        FakeModel::encode("ab"),
        vec![FakeModel::EOS],
        FakeModel::encode("cd"),
    ]
    .concat();
    let c = run(script.clone(), 1, 10, StopConfig::default());
    assert_eq!(
        c.completion.stopped_by,
        Some(StopMatch::TokenId(FakeModel::EOS))
    );
    assert_eq!(c.completion.text, "b");
    assert_eq!(c.completion.token_ids, vec![2, FakeModel::EOS]);
    assert_eq!(c.tokens.len(), 1, "a stop token sends no token event");
    let ignore = StopConfig {
        ignore_eos: true,
        stop_token_ids: vec![4],
        ..StopConfig::default()
    };
    let c = run(script, 1, 10, ignore);
    assert_eq!(c.completion.stopped_by, Some(StopMatch::TokenId(4)));
    assert_eq!(c.completion.text, "b<eos>c");
}
