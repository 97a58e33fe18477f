//! The worker: one thread that owns the batch, the KV cache and the block pool, and runs the
//! tick. Nothing else ever touches them, so there is no lock on the batch and no second
//! decode path: a single request is a batch of one.
//!
//! One tick, in this order (docs/SCHEDULER.md says why each rule is what it is):
//! 1. **drain the inbox**: new requests join the queue, cancels are honoured wherever the
//!    request is (queued: removed; in the batch: retired) before anything else runs, so a
//!    cancelled prompt never gets another chunk;
//! 2. **admit** while a row is free (`max_seqs`): first the preempted rows, oldest first, then
//!    the front of the queue, each when the blocks for the tokens it holds can be leased with
//!    one block left over for every row already running — the longest cached run of its full
//!    blocks is attached, the rest leased fresh; stop at the first that cannot (strict FIFO).
//!    The choices of one request hold at most half the rows: past that share a choice is
//!    passed over, keeping its place, and the requests behind it are admitted;
//! 3. **grow**: a decoding row whose next position starts a new block leases one; when the
//!    pool has none, the most recently admitted row is preempted (its blocks go back, it waits
//!    to resume, it loses nothing) until the growing row fits — never an older row, so the
//!    oldest always runs and FIFO's no-starvation guarantee survives;
//! 4. **plan**: every decoding row contributes its one new token; prompt chunks of at most
//!    `prefill_chunk_tokens` in all (`prefill_chunk_idle_tokens` when no row decodes, since
//!    then no one waits on a longer step) come from the prefilling rows in turn (the oldest
//!    first, or round-robin; a short prompt leaves the rest of the budget to the next), each
//!    of which first attaches any of its next prompt blocks that are cached by now; a row
//!    whose next block an older row is computing waits for it instead of computing it too;
//! 5. **forward**: one model call carries the decode rows and the prompt chunks together;
//! 6. **sample, stop, deliver**: each row that got logits samples with its own sampler, runs
//!    its stop matcher and sends its token;
//! 7. **retire** finished rows through [`Worker::retire`], the one exit, which sends `Done` and
//!    drops the row with its KV lease.
//!
//! Only a worker with no rows and no queue blocks on the inbox. A panic anywhere in a tick is
//! caught in [`Worker::run`]: every request the worker holds gets `FinishReason::Error`, and the
//! worker carries on with an empty batch (the KV cache and pool stay: every block came back
//! when the rows dropped, and a block's old contents are always overwritten before they are
//! read).

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferrox_engine::kv::SeqChunk;

use crate::admission::Limits;
use crate::blocks::{BlockPool, KvLease};
use crate::config::{PrefillOrder, SchedulerConfig, SpecConfig};
use crate::draft_model::DraftModel;
use crate::model::StepModel;
use crate::prefix::{BlockHash, BlockHasher};
use crate::queue::{Pending, WaitQueue};
use crate::request::{FinishReason, RequestId};
use crate::row::{finish_pending, Drawn, Finish, Row, RowSettings};
use crate::speculate::StepCosts;
use crate::status::{Shared, WorkerStats};

mod drafts;

/// A message to the worker. Cancels travel the same channel as submissions, so a cancel is
/// always seen after the submission it names.
#[derive(Debug)]
pub(crate) enum Command {
    Submit(Box<Pending>),
    Cancel(RequestId),
}

/// One tick's work, by request id.
#[derive(Debug, Default)]
struct StepPlan {
    /// Every chunk's row and token count: decode rows in admission order, then the prompt
    /// chunks.
    chunks: Vec<(RequestId, usize)>,
    /// Rows whose logits come back, in chunk order, with how many rows of logits each (more
    /// than one: a decode row verifying a draft).
    sampled: Vec<(RequestId, usize)>,
    decode_rows: usize,
    /// The prompt chunks' rows and token counts, at most `prefill_chunk_tokens` in all.
    prefills: Vec<(RequestId, usize)>,
    /// Tokens whose hidden states come back (the chunks of embedding rows).
    hidden_rows: usize,
}

/// One row's share of [`Worker::sample_rows`]: the row, its logits, its draws.
struct SampleTask<'a> {
    row: &'a mut Row,
    logits: &'a mut [f32],
    out: Option<Drawn>,
}

thread_local! {
    /// One token's bytes, for the stop matcher of the row being drawn on this thread.
    static TOKEN_BYTES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) struct Worker<M: StepModel> {
    model: Arc<M>,
    limits: Limits,
    prefill_chunk_tokens: usize,
    /// The prompt budget of a step without decode rows: at least `prefill_chunk_tokens`.
    prefill_chunk_idle_tokens: usize,
    /// The model is an encoder: each prompt is computed whole, in one step.
    whole_prompts: bool,
    prefill_order: PrefillOrder,
    log_every_decode_steps: u64,
    /// Names full blocks for the prefix cache; `None` with it off.
    hasher: Option<BlockHasher>,
    kv: M::Kv,
    pool: BlockPool,
    queue: WaitQueue,
    /// The batch, keyed by request id.
    rows: HashMap<RequestId, Row>,
    /// Row ids in admission order (ascending `seq`): decode rows are planned in this order,
    /// prefill round-robin walks it, and preemption takes from its end.
    order: Vec<RequestId>,
    /// Preempted rows waiting to resume, by admission order; they resume before anything
    /// new is admitted.
    parked: BTreeMap<u64, Row>,
    /// The next row's admission number.
    next_seq: u64,
    /// The row that got the last prompt chunk; with round-robin, the next chunk goes to the
    /// next prefilling row after it in `order`.
    last_prefilled: Option<RequestId>,
    /// Speculative decoding, and what decode steps have measured to cost
    /// (`crate::speculate`).
    spec: SpecConfig,
    step_costs: StepCosts,
    /// The draft model, when one proposes the drafts (`crate::draft_model`).
    draft: Option<DraftModel<M>>,
    stats: WorkerStats,
    shared: Arc<Shared>,
    /// Scratch reused every step: the step's logits and hidden states.
    logits: Vec<f32>,
    hidden: Vec<f32>,
    last_log: (Instant, u64),
}

impl<M: StepModel> Worker<M> {
    pub(crate) fn new(
        model: Arc<M>,
        limits: Limits,
        config: &SchedulerConfig,
        pool: BlockPool,
        hasher: Option<BlockHasher>,
        shared: Arc<Shared>,
        draft: Option<Arc<M>>,
    ) -> Self {
        let kv = model.new_kv(
            limits.kv_shape,
            limits.block_size_tokens,
            limits.total_blocks,
        );
        let whole_prompts = !model.causal();
        let stats = WorkerStats::initial(&limits);
        Self {
            model,
            limits,
            prefill_chunk_tokens: config.prefill_chunk_tokens,
            prefill_chunk_idle_tokens: config
                .prefill_chunk_idle_tokens
                .max(config.prefill_chunk_tokens),
            whole_prompts,
            prefill_order: config.prefill_order,
            log_every_decode_steps: config.log_every_decode_steps,
            hasher,
            kv,
            pool,
            queue: WaitQueue::default(),
            rows: HashMap::new(),
            order: Vec::new(),
            parked: BTreeMap::new(),
            next_seq: 0,
            last_prefilled: None,
            spec: config.speculation,
            step_costs: StepCosts::default(),
            draft: draft.map(|d| DraftModel::new(d, limits.block_size_tokens, limits.total_blocks)),
            stats,
            shared,
            logits: Vec::new(),
            hidden: Vec::new(),
            last_log: (Instant::now(), 0),
        }
    }

    /// Serves until every sender (handles and streams) is gone and no work is left,
    /// recovering from panics.
    pub(crate) fn run(mut self, inbox: Receiver<Command>) {
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.serve(&inbox))) {
                Ok(()) => return,
                Err(payload) => {
                    let msg = format!("scheduler worker panicked: {}", panic_text(&*payload));
                    tracing::error!("{msg}; failing every request it held and restarting");
                    self.fail_everything(&msg);
                    self.stats.worker_restarts += 1;
                    self.publish();
                }
            }
        }
    }

    fn serve(&mut self, inbox: &Receiver<Command>) {
        loop {
            if self.rows.is_empty() && self.parked.is_empty() && self.queue.is_empty() {
                self.publish();
                match inbox.recv() {
                    Ok(cmd) => self.accept(cmd),
                    Err(_) => return, // nobody can send work any more
                }
            }
            // Disconnected just means no new work: finish what is here.
            while let Ok(cmd) = inbox.try_recv() {
                self.accept(cmd);
            }
            self.admit();
            self.step();
            self.publish();
        }
    }

    fn accept(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(p) => self.queue.push(*p),
            Command::Cancel(id) => self.cancel(id),
        }
    }

    /// Honours a cancel wherever the request is; an unknown id (already finished) is ignored.
    fn cancel(&mut self, id: RequestId) {
        if self.rows.contains_key(&id) || self.parked.values().any(|r| r.id == id) {
            self.retire(id, Finish::new(FinishReason::Cancelled));
        } else if let Some(p) = self.queue.remove(id) {
            self.stats.finished.cancelled += 1;
            finish_pending(p, FinishReason::Cancelled);
        }
    }

    /// Strict FIFO: resumes preempted rows (oldest first), then admits from the front of the
    /// queue, while the next one fits; stops at the first that does not. Each is placed on
    /// the blocks for the tokens it holds, its longest cached run of full blocks attached
    /// (they cost it no new block), with one block left available for every row already in
    /// the batch, so that placing it never forces a preemption on the next step. On an empty
    /// batch the next one always fits (a refused-at-submit request never gets here), so an
    /// idle worker never spins.
    fn admit(&mut self) {
        while self.rows.len() < self.limits.max_seqs {
            if let Some((&seq, row)) = self.parked.first_key_value() {
                let Some((lease, attached)) = self.place(row.attachable_chain(), row.held_tokens())
                else {
                    return;
                };
                // Its own blocks found again are not prompt tokens served from the cache:
                // the counters cover each prompt once, like `Usage::cached_tokens`.
                let mut row = self.parked.remove(&seq).expect("the row was just seen");
                row.resume(lease, attached);
                let at = self.order.partition_point(|o| self.rows[o].seq < row.seq);
                self.order.insert(at, row.id);
                self.rows.insert(row.id, row);
                continue;
            }
            // The oldest request that may take a row: a choice whose siblings hold their
            // group's share already waits in its place.
            let group_cap = (self.limits.max_seqs / 2).max(1);
            let rows = &self.rows;
            let may_run = |p: &Pending| match p.request.group {
                None => true,
                Some(g) => rows.values().filter(|r| r.group == Some(g)).count() < group_cap,
            };
            let Some((at, front)) = self.queue.first(may_run) else {
                return;
            };
            let prompt_tokens = front.request.prompt_ids.len();
            let chain = front.request.reuses_cache().then(|| {
                let n = Row::attachable_blocks(prompt_tokens, self.limits.block_size_tokens);
                &front.chain[..n.min(front.chain.len())]
            });
            let looked_up = chain.is_some();
            let Some((lease, attached)) = self.place(chain, prompt_tokens) else {
                return;
            };
            self.count_lookup(looked_up, prompt_tokens, attached);
            let pending = self.queue.take(at).expect("front was just seen");
            let settings = RowSettings {
                block_size: self.limits.block_size_tokens,
                hasher: self.hasher.as_ref(),
                vocab_size: self.limits.vocab_size,
                spec: &self.spec,
            };
            let row = Row::admit(pending, lease, attached, self.next_seq, &settings);
            self.next_seq += 1;
            self.order.push(row.id);
            self.rows.insert(row.id, row);
            self.stats.requests_admitted += 1;
        }
    }

    /// The lease for a row holding `tokens` whose leading full blocks are named `chain`
    /// (`None`: it takes nothing from the cache), and how many of them were attached; `None`
    /// when it does not fit beside the running rows yet.
    fn place(&self, chain: Option<&[BlockHash]>, tokens: usize) -> Option<(KvLease, usize)> {
        let hits = match (chain, &self.hasher) {
            (Some(chain), Some(_)) => self.pool.lookup(chain),
            _ => Vec::new(),
        };
        let fresh = self.limits.blocks_for(tokens) - hits.len();
        let lease = self
            .pool
            .lease_leaving(&hits, fresh, self.rows.len())
            .ok()?;
        Some((lease, hits.len()))
    }

    /// Counts a placed row's prefix-cache lookup: `tokens` queried, `attached` blocks hit.
    fn count_lookup(&mut self, looked_up: bool, tokens: usize, attached: usize) {
        if looked_up && self.hasher.is_some() {
            self.stats.prefix_cache_queries += tokens as u64;
            self.stats.prefix_cache_hits += (attached * self.limits.block_size_tokens) as u64;
        }
    }

    /// Gives every decoding row that has reached the end of its block table one more block,
    /// oldest row first. When the pool has none, preempts the most recently admitted row and
    /// tries again, until the block is found or the growing row is itself the one preempted.
    /// The oldest row therefore always gets its block: with every younger row preempted, all
    /// the blocks it does not hold are available, and its whole table fits the pool (or it
    /// would have been refused at submit).
    fn grow(&mut self) {
        for id in self.order.clone() {
            while let Some(row) = self.rows.get_mut(&id) {
                if !row.needs_block() || row.grow().is_ok() {
                    break;
                }
                let newest = *self.order.last().expect("the growing row is in the batch");
                self.preempt(newest);
            }
        }
    }

    /// Takes row `id` out of the batch to wait for blocks ([`Row::preempt`]).
    fn preempt(&mut self, id: RequestId) {
        let mut row = self
            .rows
            .remove(&id)
            .expect("preempting a row in the batch");
        self.order.retain(|&o| o != id);
        row.preempt();
        if let Some(draft) = &mut self.draft {
            draft.forget(id);
        }
        self.stats.preemptions += 1;
        self.parked.insert(row.seq, row);
    }

    /// The prefilling row that gets this tick's next prompt chunk (`planned` already have
    /// one): the oldest, or with round-robin the next after the last one served. Each
    /// candidate first attaches whatever of its next
    /// prompt blocks is cached by now; a candidate whose next block an older prefilling row
    /// is about to compute waits (the older row is never waiting on it, so some row always
    /// runs). That is how requests arriving together with one new prefix — `n` choices, a
    /// burst of users with one system prompt — compute it once.
    fn next_prefill(&mut self, planned: &[RequestId]) -> Option<RequestId> {
        let start = match self.prefill_order {
            PrefillOrder::Oldest => 0,
            PrefillOrder::RoundRobin => self
                .last_prefilled
                .and_then(|last| self.order.iter().position(|&id| id == last))
                .map_or(0, |i| i + 1),
        };
        let n = self.order.len();
        for k in 0..n {
            let at = (start + k) % n;
            let id = self.order[at];
            let row = self
                .rows
                .get_mut(&id)
                .expect("ordered rows are in the batch");
            if !row.is_prefilling() || planned.contains(&id) {
                continue;
            }
            let attached = row.attach_cached() as u64;
            if !row.resumed() {
                self.stats.prefix_cache_hits += attached;
            }
            let row = &self.rows[&id];
            let waits = self.order[..at]
                .iter()
                .any(|older| row.waits_for(&self.rows[older]));
            if !waits {
                self.copy_partial(id);
                return Some(id);
            }
        }
        None
    }

    /// When prefilling row `id` is at a block boundary and a cached block under the same
    /// parent starts with the row's next tokens (a conversation's answer that ended
    /// mid-block, the last block of a prompt another choice just computed), copies those
    /// positions instead of computing them — never the last prompt token. Only once the row
    /// is about to compute (not at admission): a copy of part of a block leaves the row
    /// mid-block, where it can no longer attach whole blocks, so it must not happen while an
    /// older row may still publish this very block. The source is named, so nobody writes it.
    fn copy_partial(&mut self, id: RequestId) {
        let row = self.rows.get_mut(&id).expect("the row is in the batch");
        let Some((to, parent, want)) = row.copy_target() else {
            return;
        };
        let Some((from, n)) = self.pool.best_prefix(parent, want) else {
            return;
        };
        self.model.copy_kv(&mut self.kv, from, to, n);
        row.copied(n);
        if !row.resumed() {
            self.stats.prefix_cache_hits += n as u64;
        }
    }

    /// What this tick runs: every decoding row's one token (and its draft), then prompt
    /// chunks of at most `prefill_chunk_tokens` in all — the next prefilling row's, and while tokens of that
    /// budget are left (its prompt ended short of it), the next row's, and so on. A step with
    /// no decode row delays nobody, so its budget is `prefill_chunk_idle_tokens`.
    fn plan(&mut self) -> Option<StepPlan> {
        self.grow();
        let mut plan = StepPlan::default();
        for (id, drafted) in self.plan_drafts() {
            plan.chunks.push((id, 1 + drafted));
            plan.sampled.push((id, 1 + drafted));
            plan.decode_rows += 1;
        }
        let mut budget = if plan.decode_rows == 0 {
            self.prefill_chunk_idle_tokens
        } else {
            self.prefill_chunk_tokens
        };
        let mut planned = Vec::new();
        while budget > 0 {
            let Some(id) = self.next_prefill(&planned) else {
                break;
            };
            // An encoder's prompt goes whole: alone in a step if it is longer than the
            // budget, else after the prompts before it only if it fits beside them.
            let take = if self.whole_prompts {
                let left = self.rows[&id].next_chunk(usize::MAX).tokens.len();
                if left > budget && !planned.is_empty() {
                    break;
                }
                left
            } else {
                budget
            };
            let chunk = self.rows[&id].next_chunk(take);
            let n = chunk.tokens.len();
            plan.chunks.push((id, n));
            if chunk.logit_rows > 0 {
                plan.sampled.push((id, chunk.logit_rows));
            }
            if self.rows[&id].wants_hidden() {
                plan.hidden_rows += n;
            }
            plan.prefills.push((id, n));
            planned.push(id);
            budget = budget.saturating_sub(n);
        }
        (!plan.chunks.is_empty()).then_some(plan)
    }

    /// Runs ONE forward for the plan, then samples, delivers and retires.
    fn step(&mut self) {
        let Some(plan) = self.plan() else {
            return;
        };
        debug_assert!(
            plan.chunks
                .iter()
                .all(|&(id, n)| self.rows[&id].may_write(n)),
            "a step would write a block another request holds or may attach"
        );
        let chunks: Vec<SeqChunk<'_>> = plan
            .chunks
            .iter()
            .map(|&(id, n)| self.rows[&id].next_chunk(n))
            .collect();
        let mut logits = std::mem::take(&mut self.logits);
        let mut hidden = std::mem::take(&mut self.hidden);
        let started = Instant::now();
        let result = self
            .model
            .forward(&mut self.kv, &chunks, &mut logits, &mut hidden);
        drop(chunks);
        self.stats.steps += 1;
        if let Some(&(id, _)) = plan.prefills.last() {
            self.last_prefilled = Some(id);
        }
        let vocab = self.limits.vocab_size;
        let hidden_rows = plan.hidden_rows;
        let hidden_ok = hidden.len() == hidden_rows * self.model.hidden_size();
        let logit_rows: usize = plan.sampled.iter().map(|&(_, n)| n).sum();
        match result {
            Ok(()) if logits.len() == logit_rows * vocab && hidden_ok => {
                self.deliver(&plan, &mut logits, &hidden);
                if plan.prefills.is_empty() {
                    let positions = plan.chunks.iter().map(|&(_, n)| n).sum();
                    let secs = started.elapsed().as_secs_f64();
                    self.step_costs.record(positions, secs);
                }
            }
            Ok(()) if !hidden_ok => {
                let msg = format!(
                    "model returned {} hidden values for {hidden_rows} rows of {}",
                    hidden.len(),
                    self.model.hidden_size()
                );
                self.fail_rows(&plan, &msg);
            }
            Ok(()) => {
                let msg = format!(
                    "model returned {} logits for {logit_rows} rows of {vocab}",
                    logits.len()
                );
                self.fail_rows(&plan, &msg);
            }
            Err(e) => self.fail_rows(&plan, &format!("forward failed: {e}")),
        }
        self.logits = logits;
        self.hidden = hidden;
    }

    /// After a forward: records the written positions, pools the hidden states of embedding
    /// rows (retiring those that are done), samples every row that got logits, sends its
    /// token, and retires the rows that finished.
    fn deliver(&mut self, plan: &StepPlan, logits: &mut [f32], hidden: &[f32]) {
        let d = self.model.hidden_size();
        let mut embedded = Vec::new();
        let mut at = 0;
        for &(id, n) in &plan.chunks {
            let row = self
                .rows
                .get_mut(&id)
                .expect("planned rows are in the batch");
            row.advance(row.written_before_draws(n));
            if row.wants_hidden() {
                row.pool(&hidden[at..at + n * d], d);
                at += n * d;
                if row.embedded() {
                    embedded.push(id);
                }
            }
        }
        for id in embedded {
            self.retire(id, Finish::new(FinishReason::Stop));
        }
        self.stats.tokens_prefilled += plan.prefills.iter().map(|&(_, n)| n).sum::<usize>() as u64;
        if plan.decode_rows > 0 {
            self.stats.decode_steps += 1;
        }
        let drawn = self.sample_rows(plan, logits);
        // Decode rows come first in `sampled`: each decoded its token and its matched draft.
        for (i, (&(id, _), drawn)) in plan.sampled.iter().zip(drawn).enumerate() {
            let row = self
                .rows
                .get_mut(&id)
                .expect("sampled rows are in the batch");
            row.settle(&drawn);
            if let Some(draft) = self.draft.as_mut().filter(|_| drawn.drafted > 0) {
                draft.record(drawn.compared(), drawn.matched);
            }
            self.stats.spec_drafted += drawn.drafted as u64;
            self.stats.spec_accepted += drawn.matched as u64;
            if i < plan.decode_rows {
                self.stats.tokens_decoded += drawn.matched as u64 + 1;
            }
            if let Some(finish) = drawn.finish {
                self.retire(id, finish);
            }
        }
        if plan.decode_rows > 0 {
            self.maybe_log();
        }
    }

    /// Every sampled row draws its tokens from its logits rows ([`Row::draw`]), on the
    /// model's threads ([`StepModel::run_parallel`]): each row owns its sampler, stop matcher
    /// and stream, so the order does not matter, and a 16-row greedy step spends ~3 ms in
    /// argmax over 16 x 262,144 logits (more with temperature sampling), which the other
    /// thread would spend waiting. Returns the draws in `plan.sampled` order.
    fn sample_rows(&mut self, plan: &StepPlan, logits: &mut [f32]) -> Vec<Drawn> {
        let vocab = self.limits.vocab_size;
        let at: HashMap<RequestId, usize> = plan
            .sampled
            .iter()
            .enumerate()
            .map(|(i, &(id, _))| (id, i))
            .collect();
        let mut rows: Vec<Option<&mut Row>> = plan.sampled.iter().map(|_| None).collect();
        for (id, row) in self.rows.iter_mut() {
            if let Some(&i) = at.get(id) {
                rows[i] = Some(row);
            }
        }
        let mut rest = logits;
        let mut slices = Vec::with_capacity(plan.sampled.len());
        for &(_, n) in &plan.sampled {
            let (mine, others) = rest.split_at_mut(n * vocab);
            slices.push(mine);
            rest = others;
        }
        let model = &*self.model;
        let tasks: Vec<Mutex<SampleTask>> = rows
            .into_iter()
            .zip(slices)
            .map(|(row, logits)| {
                let row = row.expect("sampled rows are in the batch");
                Mutex::new(SampleTask {
                    row,
                    logits,
                    out: None,
                })
            })
            .collect();
        self.model.run_parallel(tasks.len(), &|i| {
            let mut task = tasks[i].lock().expect("a sampling task is not poisoned");
            let t = &mut *task;
            t.out = Some(
                TOKEN_BYTES
                    .with(|bytes| t.row.draw(t.logits, vocab, model, &mut bytes.borrow_mut())),
            );
        });
        tasks
            .into_iter()
            .map(|t| {
                let t = t.into_inner().expect("a sampling task is not poisoned");
                t.out.expect("every row was sampled")
            })
            .collect()
    }

    /// The one exit from the batch: keeps the row's last, partly computed block cached as a
    /// tail (unless the row failed: its KV is suspect), publishes the counts, sends `Done`,
    /// drops the row and with it the KV lease.
    fn retire(&mut self, id: RequestId, finish: Finish) {
        let parked = self
            .parked
            .iter()
            .find(|(_, r)| r.id == id)
            .map(|(&s, _)| s);
        let row = match parked {
            Some(seq) => self.parked.remove(&seq),
            None => self.rows.remove(&id),
        };
        let Some(mut row) = row else {
            return;
        };
        if let Some(draft) = &mut self.draft {
            draft.forget(id);
        }
        if !matches!(finish.reason, FinishReason::Error(_)) {
            row.keep_tail();
        }
        self.order.retain(|&o| o != id);
        let f = &mut self.stats.finished;
        match finish.reason {
            FinishReason::Stop => f.stop += 1,
            FinishReason::Length => f.length += 1,
            FinishReason::Cancelled => f.cancelled += 1,
            FinishReason::Error(_) => f.error += 1,
        }
        // The row and its blocks are gone, the counts published, and only then does `Done`
        // go out: a client that has its reply and then reads the status finds its tokens and
        // its blocks counted (the tick's own publish comes after every retire).
        let done = row.finish(finish);
        self.publish();
        done.send();
    }

    /// A failed forward: every row in the step gets the error (their KV is suspect).
    fn fail_rows(&mut self, plan: &StepPlan, msg: &str) {
        tracing::error!("{msg}");
        for &(id, _) in &plan.chunks {
            self.retire(id, Finish::new(FinishReason::Error(msg.to_owned())));
        }
    }

    /// After a panic: every row and every queued request gets the error.
    fn fail_everything(&mut self, msg: &str) {
        let ids = self.order.clone();
        for id in ids {
            self.retire(id, Finish::new(FinishReason::Error(msg.to_owned())));
        }
        // Rows the panic left half-registered (in the map, not yet in the order).
        let stray: Vec<RequestId> = self.rows.keys().copied().collect();
        for id in stray {
            self.retire(id, Finish::new(FinishReason::Error(msg.to_owned())));
        }
        let parked: Vec<RequestId> = self.parked.values().map(|r| r.id).collect();
        for id in parked {
            self.retire(id, Finish::new(FinishReason::Error(msg.to_owned())));
        }
        for p in self.queue.drain() {
            self.stats.finished.error += 1;
            finish_pending(p, FinishReason::Error(msg.to_owned()));
        }
        self.last_prefilled = None;
    }

    fn publish(&mut self) {
        let s = &mut self.stats;
        s.running = self.rows.values().filter(|r| !r.is_prefilling()).count();
        s.prefilling = self.rows.len() - s.running;
        s.preempted = self.parked.len();
        let pool = self.pool.stats();
        s.blocks_free = pool.available;
        s.blocks_cached = pool.cached;
        s.prefix_cache_evictions = pool.evictions;
        s.blocks_peak_used = pool.peak_used;
        self.shared.publish(&self.stats);
    }

    fn maybe_log(&mut self) {
        let every = self.log_every_decode_steps;
        // Every `every` steps; never when `every` is 0.
        if self.stats.decode_steps.checked_rem(every) != Some(0) {
            return;
        }
        let (since, decoded_then) = self.last_log;
        let secs = since.elapsed().as_secs_f64().max(1e-9);
        let tok_s = (self.stats.tokens_decoded - decoded_then) as f64 / secs;
        tracing::info!(
            decode_steps = self.stats.decode_steps,
            running = self.rows.values().filter(|r| !r.is_prefilling()).count(),
            prefilling = self.rows.values().filter(|r| r.is_prefilling()).count(),
            queued = self.queue.len(),
            preempted = self.parked.len(),
            preemptions = self.stats.preemptions,
            blocks_free = self.stats.blocks_free,
            blocks_cached = self.stats.blocks_cached,
            blocks_total = self.limits.total_blocks,
            prefix_hit_tokens = self.stats.prefix_cache_hits,
            prefix_query_tokens = self.stats.prefix_cache_queries,
            decode_tok_s = format_args!("{tok_s:.1}"),
            "scheduler"
        );
        self.last_log = (Instant::now(), self.stats.tokens_decoded);
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(non-string panic payload)"
    }
}
