//! Failures never hang a caller: a panicking forward fails every request the worker holds
//! and the worker carries on; a failing forward fails the rows in that step; a worker that
//! could not start refuses with `WorkerGone`.

mod common;

use std::sync::Arc;

use common::{config, long, wait_for};
use ferrox_engine::kv::{KvShape, SeqChunk};
use ferrox_sched::testkit::{FakeKv, FakeModel, Probe};
use ferrox_sched::{FinishReason, Refusal, Scheduler, StepModel};

fn is_error(reason: &FinishReason, needle: &str) -> bool {
    matches!(reason, FinishReason::Error(m) if m.contains(needle))
}

#[test]
fn a_panic_fails_every_held_request_and_the_worker_carries_on() {
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(2, 16, 100)).unwrap();
    let running = handle.submit(long(vec![1; 4], 30)).unwrap();
    model.allow(2);
    model.wait_until_blocked(); // `running` is decoding
    let poisoned = handle
        .submit(long(vec![2, 3, FakeModel::POISON], 5))
        .unwrap();
    let queued = handle.submit(long(vec![4; 4], 5)).unwrap(); // no seat: waits
    model.open();
    for s in [running, poisoned, queued] {
        let c = s.collect_blocking().completion;
        assert!(
            is_error(&c.finish_reason, "panicked: fake model: poison"),
            "{c:?}"
        );
    }
    wait_for(&handle, "the restart", |s| s.worker_restarts == 1);
    let s = handle.status();
    assert!(s.healthy);
    assert_eq!(s.blocks_free, s.blocks_total);
    assert_eq!(s.finished.error, 3);
    // And it serves the next request normally.
    let c = handle
        .submit(long(vec![5; 4], 5))
        .unwrap()
        .collect_blocking();
    assert_eq!(c.completion.finish_reason, FinishReason::Length);
}

#[test]
fn a_failed_forward_fails_the_rows_of_that_step_only() {
    let model = Arc::new(Probe::gated(FakeModel::hash()));
    let handle = Scheduler::start(Arc::clone(&model), config(2, 16, 100)).unwrap();
    let running = handle.submit(long(vec![1; 4], 30)).unwrap();
    model.allow(2);
    model.wait_until_blocked();
    let bad = handle.submit(long(vec![2, FakeModel::ERROR], 5)).unwrap();
    let queued = handle.submit(long(vec![4; 4], 5)).unwrap();
    model.open();
    for s in [running, bad] {
        let c = s.collect_blocking().completion;
        assert!(
            is_error(&c.finish_reason, "forward failed: fake model: error token"),
            "{c:?}"
        );
    }
    // The queued request was not in that step: it runs normally afterwards.
    let c = queued.collect_blocking().completion;
    assert_eq!(c.finish_reason, FinishReason::Length);
    assert_eq!(handle.status().worker_restarts, 0);
}

/// A model whose KV cache cannot be built: the worker thread dies while starting.
struct NoKv(FakeModel);

impl StepModel for NoKv {
    type Kv = FakeKv;
    type Error = String;
    fn kv_shape(&self) -> KvShape {
        self.0.kv_shape()
    }
    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }
    fn max_context(&self) -> usize {
        self.0.max_context()
    }
    fn new_kv(&self, _: KvShape, _: usize, _: usize) -> FakeKv {
        panic!("no memory for the KV cache");
    }
    fn copy_kv(&self, _: &mut FakeKv, _: u32, _: u32, _: usize) {}
    fn hidden_size(&self) -> usize {
        self.0.hidden_size()
    }
    fn forward(
        &self,
        kv: &mut FakeKv,
        chunks: &[SeqChunk<'_>],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), String> {
        self.0.forward(kv, chunks, logits, hidden)
    }
    fn is_eog(&self, id: u32) -> bool {
        self.0.is_eog(id)
    }
    fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        self.0.token_bytes(id, out)
    }
}

#[test]
fn a_dead_worker_refuses_with_worker_gone() {
    let handle = Scheduler::start(Arc::new(NoKv(FakeModel::hash())), config(2, 16, 100)).unwrap();
    wait_for(&handle, "the worker to die", |s| !s.healthy);
    assert_eq!(
        handle.submit(long(vec![1], 1)).unwrap_err(),
        Refusal::WorkerGone
    );
    assert_eq!(handle.status().refusals.worker_gone, 1);
}
