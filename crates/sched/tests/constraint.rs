//! Constrained rows on the one decode path: a constrained row draws only what its constraint
//! allows and stops when it is complete; it changes nothing for the unconstrained rows beside
//! it (they equal their runs alone); a constraint that fails or allows nothing ends its row
//! with an error, never a token it ruled out; each choice starts its own state.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{assert_same_run, config, run_alone};
use ferrox_sched::testkit::FakeModel;
use ferrox_sched::{
    Constraint, ConstraintFactory, FinishReason, GenerationRequest, SamplingParams, Scheduler,
    StopConfig, TokenConstraint,
};

/// Allows, at step `i`, the tokens of `script[i]`; complete after the last step.
struct Script {
    steps: Vec<Vec<u32>>,
    at: usize,
}

impl TokenConstraint for Script {
    fn allowed(&mut self, allowed: &mut [u32]) -> Result<(), String> {
        let step = self.steps.get(self.at).ok_or("past the end")?;
        for &t in step {
            allowed[t as usize / 32] |= 1 << (t % 32);
        }
        Ok(())
    }

    fn advance(&mut self, token: u32) -> Result<bool, String> {
        if !self.steps[self.at].contains(&token) {
            return Err(format!("token {token} was not allowed"));
        }
        self.at += 1;
        Ok(self.at == self.steps.len())
    }
}

struct Scripted {
    steps: Vec<Vec<u32>>,
    started: AtomicUsize,
}

impl ConstraintFactory for Scripted {
    fn start(&self) -> Box<dyn TokenConstraint> {
        self.started.fetch_add(1, Ordering::Relaxed);
        Box::new(Script {
            steps: self.steps.clone(),
            at: 0,
        })
    }
}

fn scripted(steps: Vec<Vec<u32>>) -> (Constraint, Arc<Scripted>) {
    let f = Arc::new(Scripted {
        steps,
        started: AtomicUsize::new(0),
    });
    (Constraint(f.clone()), f)
}

fn request(prompt: Vec<u32>, seed: u64) -> GenerationRequest {
    GenerationRequest {
        sampling: SamplingParams {
            temperature: 1.0,
            seed,
            ..SamplingParams::default()
        },
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        logprobs: Some(4),
        ..GenerationRequest::greedy(prompt, 12)
    }
}

#[test]
fn constrained_rows_follow_their_constraint_and_leave_the_others_alone() {
    let model = Arc::new(FakeModel::hash());
    let steps: Vec<Vec<u32>> = (0..6).map(|i| vec![10 + i, 40 + i, 50]).collect();
    let (constraint, factory) = scripted(steps.clone());
    let free: Vec<GenerationRequest> = (0..3)
        .map(|i| request(vec![3, 4, 5 + i], 7 + i as u64))
        .collect();
    let alone = run_alone(Arc::clone(&model), &free);
    // The constrained prompts unconstrained: the model's own first distribution.
    let twins: Vec<GenerationRequest> = (0..3)
        .map(|i| request(vec![9, 8, 7 + i as u32], 100 + i as u64))
        .collect();
    let twins = run_alone(Arc::clone(&model), &twins);
    let handle = Scheduler::start(model, config(8, 4, 400)).unwrap();
    let mut streams = Vec::new();
    for (i, r) in free.iter().enumerate() {
        streams.push(handle.submit(r.clone()).unwrap());
        let constrained = GenerationRequest {
            constraint: Some(constraint.clone()),
            ..request(vec![9, 8, 7 + i as u32], 100 + i as u64)
        };
        streams.push(handle.submit(constrained).unwrap());
    }
    let runs: Vec<_> = streams.into_iter().map(|s| s.collect_blocking()).collect();
    for (i, run) in runs.iter().enumerate() {
        if i % 2 == 0 {
            assert_same_run(
                run,
                &alone[i / 2],
                "an unconstrained row beside constrained ones",
            );
            continue;
        }
        let c = &run.completion;
        assert_eq!(
            c.finish_reason,
            FinishReason::Stop,
            "complete constraint: stop"
        );
        assert_eq!(c.token_ids.len(), steps.len());
        for (t, allowed) in c.token_ids.iter().zip(&steps) {
            assert!(allowed.contains(t), "drew {t}, allowed {allowed:?}");
        }
        // Logprobs are the model's own distribution: exactly the unconstrained prompt's,
        // alternatives the mask ruled out included.
        let top = &run.tokens[0].top_logprobs;
        assert_eq!(top.len(), 4);
        assert_eq!(top, &twins[i / 2].tokens[0].top_logprobs);
        assert!(
            top.iter().any(|(id, _)| !steps[0].contains(id)),
            "{top:?} holds only allowed tokens {:?}",
            steps[0]
        );
    }
    assert_eq!(
        factory.started.load(Ordering::Relaxed),
        3,
        "one state per row"
    );
    common::wait_settled(&handle, 6);
    let s = handle.status();
    assert_eq!(s.blocks_free, s.blocks_total, "every block came back");
}

#[test]
fn a_constraint_that_allows_nothing_or_fails_ends_only_its_row() {
    let model = Arc::new(FakeModel::hash());
    let handle = Scheduler::start(Arc::clone(&model), config(4, 16, 200)).unwrap();
    let (dead_end, _) = scripted(vec![vec![12], vec![]]);
    let (past_end, _) = scripted(vec![vec![12]]);
    let free = request(vec![1, 2, 3], 5);
    let alone = run_alone(model, std::slice::from_ref(&free));
    let a = handle
        .submit(GenerationRequest {
            constraint: Some(dead_end),
            ..request(vec![1, 2, 3], 1)
        })
        .unwrap();
    let b = handle.submit(free).unwrap();
    let a = a.collect_blocking();
    match &a.completion.finish_reason {
        FinishReason::Error(e) => assert!(e.contains("allows no token"), "{e}"),
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(
        a.completion.token_ids,
        [12],
        "nothing drawn past the dead end"
    );
    assert_same_run(
        &b.collect_blocking(),
        &alone[0],
        "the row beside a failing one",
    );
    // Complete after one token even with ignore_eos and budget left: the row stops.
    let c = handle
        .submit(GenerationRequest {
            constraint: Some(past_end),
            ..request(vec![1, 2, 3], 1)
        })
        .unwrap()
        .collect_blocking();
    assert_eq!(
        (c.completion.finish_reason, c.completion.token_ids),
        (FinishReason::Stop, vec![12])
    );
}
