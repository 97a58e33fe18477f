//! What the scheduler reports about itself: a [`SchedulerStatus`] snapshot for the metrics
//! endpoint, and (from the worker) a log line every N decode steps.
//!
//! The numbers have three writers, each writing only its own: the worker publishes its
//! counters under one lock at the end of every tick (one uncontended lock a tick, nothing per
//! token); the handles count refusals in atomics, since refusals never reach the worker; the
//! queue slots count themselves. A snapshot reads all three, so it is consistent within each
//! part, not across parts — fine for metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::admission::Refusal;

/// A point-in-time view of the scheduler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerStatus {
    /// The worker thread is alive. After a panic it recovers and stays healthy (see
    /// `worker_restarts`); false only if the thread itself is gone.
    pub healthy: bool,
    /// Rows in the batch that are generating.
    pub running: usize,
    /// Rows in the batch still computing their prompt.
    pub prefilling: usize,
    /// Requests holding a queue slot (submitted, not yet admitted).
    pub queued: usize,
    /// Rows preempted for KV blocks, waiting to resume.
    pub preempted: usize,
    /// Preemptions so far (a row preempted twice counts twice).
    pub preemptions: u64,
    pub blocks_total: usize,
    /// Token positions per KV block.
    pub block_size_tokens: usize,
    /// Blocks no request holds: free ones and cached ones that can be reclaimed.
    pub blocks_free: usize,
    /// Blocks holding a cached prefix (held by requests or not).
    pub blocks_cached: usize,
    /// The most KV blocks ever held at once.
    pub blocks_peak_used: usize,
    /// Prompt tokens looked up in the prefix cache (each admitted prompt, once).
    pub prefix_cache_queries: u64,
    /// Prompt tokens whose KV was attached from the cache instead of computed.
    pub prefix_cache_hits: u64,
    /// Cached blocks reclaimed for new KV.
    pub prefix_cache_evictions: u64,
    pub refusals: RefusalCounts,
    pub requests_admitted: u64,
    pub finished: FinishCounts,
    pub tokens_prefilled: u64,
    pub tokens_decoded: u64,
    /// Forward passes run.
    pub steps: u64,
    /// Forward passes that carried at least one decode row.
    pub decode_steps: u64,
    /// Panics the worker recovered from (each failed the requests it held).
    pub worker_restarts: u64,
    /// Drafted tokens verified by speculative decoding, and how many of them were accepted.
    pub spec_drafted: u64,
    pub spec_accepted: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalCounts {
    pub invalid_request: u64,
    pub context_length_exceeded: u64,
    pub device_memory_budget_exceeded: u64,
    pub queue_full: u64,
    pub worker_gone: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinishCounts {
    pub stop: u64,
    pub length: u64,
    pub cancelled: u64,
    pub error: u64,
}

/// The worker's part of the status, published once a tick.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerStats {
    pub(crate) running: usize,
    pub(crate) prefilling: usize,
    pub(crate) preempted: usize,
    pub(crate) preemptions: u64,
    pub(crate) blocks_total: usize,
    pub(crate) block_size_tokens: usize,
    pub(crate) blocks_free: usize,
    pub(crate) blocks_cached: usize,
    pub(crate) blocks_peak_used: usize,
    pub(crate) prefix_cache_queries: u64,
    pub(crate) prefix_cache_hits: u64,
    pub(crate) prefix_cache_evictions: u64,
    pub(crate) requests_admitted: u64,
    pub(crate) finished: FinishCounts,
    pub(crate) tokens_prefilled: u64,
    pub(crate) tokens_decoded: u64,
    pub(crate) steps: u64,
    pub(crate) decode_steps: u64,
    pub(crate) worker_restarts: u64,
    pub(crate) spec_drafted: u64,
    pub(crate) spec_accepted: u64,
}

impl WorkerStats {
    /// Before the first tick: an empty pool of the configured size.
    pub(crate) fn initial(limits: &crate::admission::Limits) -> Self {
        WorkerStats {
            blocks_total: limits.total_blocks,
            block_size_tokens: limits.block_size_tokens,
            blocks_free: limits.total_blocks,
            ..WorkerStats::default()
        }
    }
}

/// State shared by the handles and the worker.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Set by the worker thread on start, cleared by a guard when the thread ends.
    pub(crate) healthy: AtomicBool,
    pub(crate) worker: Mutex<WorkerStats>,
    refusals: [AtomicU64; 5],
}

impl Shared {
    pub(crate) fn count_refusal(&self, r: &Refusal) {
        let i = match r {
            Refusal::Invalid(_) => 0,
            Refusal::ContextLengthExceeded { .. } => 1,
            Refusal::KvBudgetExceeded { .. } => 2,
            Refusal::QueueFull { .. } => 3,
            Refusal::WorkerGone => 4,
        };
        self.refusals[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn publish(&self, stats: &WorkerStats) {
        *self.worker.lock().unwrap_or_else(|p| p.into_inner()) = stats.clone();
    }

    pub(crate) fn snapshot(&self, queued: usize) -> SchedulerStatus {
        let w = self
            .worker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let r = |i: usize| self.refusals[i].load(Ordering::Relaxed);
        SchedulerStatus {
            healthy: self.healthy.load(Ordering::Acquire),
            running: w.running,
            prefilling: w.prefilling,
            queued,
            preempted: w.preempted,
            preemptions: w.preemptions,
            blocks_total: w.blocks_total,
            block_size_tokens: w.block_size_tokens,
            blocks_free: w.blocks_free,
            blocks_cached: w.blocks_cached,
            blocks_peak_used: w.blocks_peak_used,
            prefix_cache_queries: w.prefix_cache_queries,
            prefix_cache_hits: w.prefix_cache_hits,
            prefix_cache_evictions: w.prefix_cache_evictions,
            refusals: RefusalCounts {
                invalid_request: r(0),
                context_length_exceeded: r(1),
                device_memory_budget_exceeded: r(2),
                queue_full: r(3),
                worker_gone: r(4),
            },
            requests_admitted: w.requests_admitted,
            finished: w.finished,
            tokens_prefilled: w.tokens_prefilled,
            tokens_decoded: w.tokens_decoded,
            steps: w.steps,
            decode_steps: w.decode_steps,
            worker_restarts: w.worker_restarts,
            spec_drafted: w.spec_drafted,
            spec_accepted: w.spec_accepted,
        }
    }
}
