//! The caller's side: [`Scheduler::start`], the cheap clonable [`SchedulerHandle`], and the
//! [`RequestStream`] each accepted request returns.
//!
//! `submit` decides synchronously, on the caller's thread, before anything is queued: it
//! checks the request against the shared [`Limits`] (invalid, context, KV budget), then takes a
//! queue slot (queue full), and only then sends it to the worker. So a refusal never costs the
//! worker anything and is never delayed behind a forward pass.
//!
//! A stream ends with exactly one `Done`. If the worker is gone without sending one (it
//! cannot be, short of a bug or an abort in the panic handler), the stream makes one up with
//! `FinishReason::Error`, so no caller ever waits on a stream that will not end. Dropping a
//! stream before its `Done` cancels the request: its `Drop` sends the cancel to the worker's
//! inbox.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::admission::{Limits, Refusal};
use crate::blocks::{BlockPool, PoolCounts};
use crate::config::{ConfigError, SchedulerConfig, SpecKind};
use crate::draft_model::vocab_mismatch;
use crate::model::StepModel;
use crate::prefix::BlockHasher;
use crate::queue::{Pending, QueueSlots};
use crate::request::{
    Completion, Event, FinishReason, GenerationRequest, RequestId, TokenEvent, Usage,
};
use crate::status::{SchedulerStatus, Shared};
use crate::worker::{Command, Worker};

/// Starts schedulers.
pub struct Scheduler;

impl Scheduler {
    /// Spawns the worker thread for `model` (which builds its KV cache there) and returns the
    /// handle that feeds it. The worker runs until every handle and stream is dropped.
    pub fn start<M: StepModel>(
        model: Arc<M>,
        config: SchedulerConfig,
    ) -> Result<SchedulerHandle, ConfigError> {
        Self::start_with_draft(model, None, config)
    }

    /// [`Scheduler::start`] with a draft model for speculation type `draft`
    /// (`crate::draft_model`): same vocabulary (every token's bytes and end-of-generation
    /// flag), checked here. A draft with another speculation type, or that type without
    /// one, is refused.
    pub fn start_with_draft<M: StepModel>(
        model: Arc<M>,
        draft: Option<Arc<M>>,
        config: SchedulerConfig,
    ) -> Result<SchedulerHandle, ConfigError> {
        let kind = config.speculation.kind;
        match (&draft, kind) {
            (None, SpecKind::Draft) => return Err(ConfigError::NoDraftModel),
            (Some(_), SpecKind::None | SpecKind::Ngram) => {
                return Err(ConfigError::DraftUnused { kind })
            }
            (Some(d), SpecKind::Draft) => {
                if let Some(why) = vocab_mismatch(&*model, &**d) {
                    return Err(ConfigError::DraftVocab(why));
                }
            }
            (None, _) => {}
        }
        let limits = Limits::with_draft(
            &config,
            model.kv_shape(),
            draft.as_ref().map(|d| d.kv_shape()),
            model.max_context(),
            model.vocab_size(),
        )?;
        let shared = Arc::new(Shared::default());
        // The pool's size is known now: a status read before the worker's first tick shows
        // it, not zeros.
        shared.publish(&crate::status::WorkerStats::initial(&limits));
        let (inbox, commands) = mpsc::channel();
        let worker_shared = Arc::clone(&shared);
        // One set of secret keys per pool: the handle names a prompt's blocks on the
        // submitter's thread, the worker names the blocks generation fills.
        let hasher = config.prefix_cache.then(BlockHasher::new);
        let worker_hasher = hasher.clone();
        let worker_config = config.clone();
        // Built here so the handle can audit it; the worker is the only one that leases.
        let pool = BlockPool::new(limits.total_blocks, config.prefix_cache);
        let worker_pool = pool.clone();
        // Healthy from before the first submit can see it; cleared when the thread ends.
        shared.healthy.store(true, Ordering::Release);
        std::thread::Builder::new()
            .name("ferrox-sched".into())
            .spawn(move || {
                let _alive = AliveGuard(Arc::clone(&worker_shared));
                let worker = Worker::new(
                    model,
                    limits,
                    &worker_config,
                    worker_pool,
                    worker_hasher,
                    worker_shared,
                    draft,
                );
                // Consumes the worker: the KV cache and every step buffer are freed here.
                worker.run(commands);
                ferrox_engine::release_freed_memory();
            })?;
        Ok(SchedulerHandle {
            inner: Arc::new(HandleInner {
                inbox,
                limits,
                slots: QueueSlots::new(limits.max_queue),
                hasher,
                pool,
                next_id: AtomicU64::new(0),
                shared,
            }),
        })
    }
}

/// Marks the scheduler unhealthy when the worker thread ends, however it ends.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.healthy.store(false, Ordering::Release);
    }
}

/// Submits, cancels and observes; clone it freely (one `Arc`).
#[derive(Clone)]
pub struct SchedulerHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    inbox: Sender<Command>,
    limits: Limits,
    slots: QueueSlots,
    hasher: Option<BlockHasher>,
    pool: BlockPool,
    next_id: AtomicU64,
    shared: Arc<Shared>,
}

impl SchedulerHandle {
    /// Accepts the request (it is queued, and its stream returned) or refuses it with a typed
    /// reason; see [`crate::admission`] for the order of the checks.
    pub fn submit(&self, request: GenerationRequest) -> Result<RequestStream, Refusal> {
        let inner = &*self.inner;
        let refuse = |r: Refusal| {
            inner.shared.count_refusal(&r);
            r
        };
        if !inner.shared.healthy.load(Ordering::Acquire) {
            return Err(refuse(Refusal::WorkerGone));
        }
        inner.limits.check(&request).map_err(refuse)?;
        let slot = inner.slots.acquire().map_err(refuse)?;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let prompt_tokens = request.prompt_ids.len();
        let (events, rx) = unbounded_channel();
        let (root, chain) = match &inner.hasher {
            Some(h) => {
                let root = h.root(request.cache_salt.as_deref());
                let mut chain = Vec::new();
                h.extend(
                    root,
                    &request.prompt_ids,
                    inner.limits.block_size_tokens,
                    &mut chain,
                );
                (root, chain)
            }
            None => (0, Vec::new()),
        };
        let pending = Pending {
            id,
            request,
            root,
            chain,
            events,
            slot,
        };
        inner
            .inbox
            .send(Command::Submit(Box::new(pending)))
            .map_err(|_| refuse(Refusal::WorkerGone))?;
        Ok(RequestStream {
            id,
            events: rx,
            inbox: inner.inbox.clone(),
            finished: false,
            prompt_tokens,
            token_ids: Vec::new(),
            text: String::new(),
        })
    }

    /// Asks the worker to end request `id` with `Cancelled` at the top of its next tick,
    /// wherever it is. Unknown or finished ids are ignored.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.inner.inbox.send(Command::Cancel(id));
    }

    /// Checks the KV block pool's invariants (every block in exactly one state, reference
    /// counts equal to the leases holding them, shared blocks named, the cache's index
    /// consistent) and counts its blocks by state. For tests and diagnostics: it takes the
    /// pool's lock once.
    pub fn audit_blocks(&self) -> Result<PoolCounts, String> {
        self.inner.pool.audit()
    }

    pub fn status(&self) -> SchedulerStatus {
        self.inner.shared.snapshot(self.inner.slots.taken())
    }

    /// The ceilings requests are checked against (context, blocks, bytes per block, ...).
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }
}

/// One request's events: `Token`s, then exactly one `Done`. Usable from async code
/// ([`recv`](Self::recv)) and from plain threads ([`blocking_recv`](Self::blocking_recv),
/// which must not be called inside a tokio runtime).
#[derive(Debug)]
pub struct RequestStream {
    id: RequestId,
    events: UnboundedReceiver<Event>,
    inbox: Sender<Command>,
    finished: bool,
    prompt_tokens: usize,
    /// What has passed through, to build a `Done` if the worker vanishes without one.
    token_ids: Vec<u32>,
    text: String,
}

/// Everything a request produced, collected.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    pub tokens: Vec<TokenEvent>,
    pub completion: Completion,
}

impl RequestStream {
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next event; `None` after `Done`.
    pub async fn recv(&mut self) -> Option<Event> {
        if self.finished {
            return None;
        }
        let event = self.events.recv().await;
        Some(self.observe(event))
    }

    /// The next event, blocking the thread; `None` after `Done`.
    pub fn blocking_recv(&mut self) -> Option<Event> {
        if self.finished {
            return None;
        }
        let event = self.events.blocking_recv();
        Some(self.observe(event))
    }

    /// Blocks until `Done`, collecting every event.
    pub fn collect_blocking(mut self) -> Collected {
        let mut tokens = Vec::new();
        while let Some(event) = self.blocking_recv() {
            match event {
                Event::Token(t) => tokens.push(t),
                Event::Done(completion) => return Collected { tokens, completion },
            }
        }
        unreachable!("a stream always ends with Done")
    }

    /// Same as [`SchedulerHandle::cancel`] for this request.
    pub fn cancel(&self) {
        let _ = self.inbox.send(Command::Cancel(self.id));
    }

    fn observe(&mut self, event: Option<Event>) -> Event {
        match event {
            Some(Event::Token(t)) => {
                self.token_ids.push(t.id);
                self.text.push_str(&t.text);
                Event::Token(t)
            }
            Some(done @ Event::Done(_)) => {
                self.finished = true;
                done
            }
            None => {
                self.finished = true;
                Event::Done(Completion {
                    finish_reason: FinishReason::Error("the scheduler worker stopped".into()),
                    stopped_by: None,
                    usage: Usage {
                        prompt_tokens: self.prompt_tokens,
                        completion_tokens: self.token_ids.len(),
                        cached_tokens: 0,
                        ..Usage::default()
                    },
                    token_ids: std::mem::take(&mut self.token_ids),
                    text: std::mem::take(&mut self.text),
                    flushed_text: String::new(),
                    embedding: None,
                })
            }
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.inbox.send(Command::Cancel(self.id));
        }
    }
}
