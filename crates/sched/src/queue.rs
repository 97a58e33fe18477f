//! The waiting queue and the slot each waiting request holds in it.
//!
//! A request takes a `QueueSlot` in `submit`, before it is sent to the worker, and gives it
//! back when it leaves the queue (admitted, cancelled, or failed) — not when the worker merely
//! reads it off the channel. So `max_queue` bounds requests that are waiting for admission,
//! wherever they are, and a burst cannot slip past the cap while the worker is busy in a
//! forward. The slot is a lease returned in `Drop`, so every exit gives it back.
//!
//! The queue is strict FIFO: the worker admits the oldest request that may run, and stops at
//! the first that does not fit. A large request is therefore never starved by a stream of
//! small ones that would fit in the blocks it is waiting for (pinned by the `fifo` test).
//! The one request passed over is a choice whose siblings already hold their group's share
//! of the batch (`GenerationRequest::group`): it keeps its place and runs when one of them
//! ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use crate::admission::Refusal;
use crate::prefix::BlockHash;
use crate::request::{Event, GenerationRequest, RequestId};

/// Counts the slots taken against `max_queue`; shared by every handle clone.
#[derive(Debug, Clone)]
pub(crate) struct QueueSlots {
    taken: Arc<AtomicUsize>,
    cap: usize,
}

/// One request's place in the queue; returned when dropped.
#[derive(Debug)]
pub(crate) struct QueueSlot {
    taken: Arc<AtomicUsize>,
}

impl QueueSlots {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            taken: Arc::new(AtomicUsize::new(0)),
            cap,
        }
    }

    /// Takes a slot, or refuses with how many are waiting.
    pub(crate) fn acquire(&self) -> Result<QueueSlot, Refusal> {
        let cap = self.cap;
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued < cap).then_some(queued + 1)
            })
            .map(|_| QueueSlot {
                taken: Arc::clone(&self.taken),
            })
            .map_err(|queued| Refusal::QueueFull { queued, cap })
    }

    /// Requests waiting for admission right now.
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A validated request on its way to the batch.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) id: RequestId,
    pub(crate) request: GenerationRequest,
    /// The root of its prompt's block chain and the names of the prompt's full blocks
    /// ([`crate::prefix`]), computed on the submitter's thread; empty with caching off.
    pub(crate) root: BlockHash,
    pub(crate) chain: Vec<BlockHash>,
    pub(crate) events: UnboundedSender<Event>,
    /// Never read: held for its `Drop`, which gives the slot back when the request leaves
    /// the queue.
    #[allow(dead_code)]
    pub(crate) slot: QueueSlot,
}

/// Requests the worker has received but not admitted, oldest first.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    waiting: VecDeque<Pending>,
}

impl WaitQueue {
    pub(crate) fn push(&mut self, p: Pending) {
        self.waiting.push_back(p);
    }

    /// The oldest waiting request that `may_run` lets run, and its place in the queue.
    pub(crate) fn first(&self, may_run: impl Fn(&Pending) -> bool) -> Option<(usize, &Pending)> {
        self.waiting.iter().enumerate().find(|(_, p)| may_run(p))
    }

    /// Takes the request at place `at` (from [`Self::first`]).
    pub(crate) fn take(&mut self, at: usize) -> Option<Pending> {
        self.waiting.remove(at)
    }

    /// Takes a request out of the middle (a cancel).
    pub(crate) fn remove(&mut self, id: RequestId) -> Option<Pending> {
        let at = self.waiting.iter().position(|p| p.id == id)?;
        self.waiting.remove(at)
    }

    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Pending> + '_ {
        self.waiting.drain(..)
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_held_until_dropped() {
        let slots = QueueSlots::new(2);
        let a = slots.acquire().unwrap();
        let b = slots.acquire().unwrap();
        assert_eq!(
            slots.acquire().unwrap_err(),
            Refusal::QueueFull { queued: 2, cap: 2 }
        );
        drop(a);
        let _c = slots.acquire().unwrap();
        drop(b);
        assert_eq!(slots.taken(), 1);
    }

    #[test]
    fn queue_is_fifo_and_removes_by_id() {
        let slots = QueueSlots::new(10);
        let mut q = WaitQueue::default();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        for id in 0..4 {
            q.push(Pending {
                id,
                request: GenerationRequest::greedy(vec![1], 1),
                root: 0,
                chain: Vec::new(),
                events: tx.clone(),
                slot: slots.acquire().unwrap(),
            });
        }
        assert_eq!(q.remove(2).map(|p| p.id), Some(2));
        assert_eq!(q.remove(2).map(|p| p.id), None);
        assert_eq!(slots.taken(), 3);
        let order: Vec<_> = std::iter::from_fn(|| q.take(0).map(|p| p.id)).collect();
        assert_eq!(order, vec![0, 1, 3]);
        assert_eq!(slots.taken(), 0);
    }
}
