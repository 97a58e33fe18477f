//! One admitted request in the batch: its tokens, its KV lease, its sampler and stop matcher.
//!
//! A row does not know whether it is "prefilling" or "decoding" as a mode: like vLLM v1's
//! scheduler it counts the tokens it holds (`tokens`: prompt, then generated) and the
//! positions whose KV is already computed (`computed`), and each step closes part of the gap.
//! A prompt closes it a chunk at a time; a generated token is a gap of exactly one. The
//! position of the next chunk is `computed`, always — never a second counter kept beside it.
//!
//! After its prompt is computed the gap is zero until the first token is sampled; from then
//! on every step feeds the last sampled token (gap one) and samples the next, until the stop
//! matcher or `max_tokens` ends the row. Everything a request owns lives here, so retiring a
//! row (dropping it) releases its blocks through the lease.
//!
//! The prefix cache enters in two places. A row may start with `computed` > 0: its leading
//! full blocks were found cached at admission and attached. And every time `computed` crosses
//! a block boundary, the block just filled — prompt or generated — is published under its
//! name, so the next request that starts with the same tokens (the next turn of a
//! conversation, another choice of the same prompt) can attach it. A prefilling row may also
//! attach blocks later ([`Row::attach_cached`]), when a row ahead of it has just computed them.
//!
//! A row's lease holds blocks for the tokens it holds and grows by one as decoding crosses a
//! block boundary ([`Row::grow`]). When the pool runs dry the worker may *preempt* a row
//! ([`Row::preempt`]): its blocks go back (the full ones stay cached, its last partial one as
//! a tail), `computed` drops to 0, and everything else — tokens, sampler state, stop matcher,
//! constraint state, text sent — stays in the row. Resumed, the row is a prefilling row again
//! whose "prompt" is every token it holds: it attaches what is still cached, recomputes the
//! rest in chunks (the same bits a decode step would write: chunking is not numerical), and the
//! chunk that reaches its last token brings the logits its next draw needs. So a preempted
//! request continues with exactly the tokens it would have drawn, and the client sees nothing
//! but a pause.

use std::cell::RefCell;

use ferrox_engine::kv::{BlockId, SeqChunk};
use ferrox_engine::sampler::{logprobs, Sampler, TokenLogprobs};
use tokio::sync::mpsc::UnboundedSender;

use crate::blocks::KvLease;
use crate::config::SpecConfig;
use crate::constraint::RowConstraint;
use crate::draft::NgramDrafter;
use crate::model::StepModel;
use crate::pooling::Pooled;
use crate::prefix::{BlockHash, BlockHasher};
use crate::queue::Pending;
use crate::request::{
    Completion, Event, FinishReason, RequestId, SpecParams, StopMatch, TokenEvent, Usage,
};
use crate::speculate::{Acceptance, Candidate};
use crate::stop::StopMatcher;

#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) id: RequestId,
    /// The client request this row is one choice of (`GenerationRequest::group`).
    pub(crate) group: Option<u64>,
    /// Admission order (the worker's counter): preemption takes the highest, resumption
    /// the lowest.
    pub(crate) seq: u64,
    /// Prompt, then every sampled token.
    tokens: Vec<u32>,
    prompt_tokens: usize,
    /// Positions `0..computed` have their KV written (or attached from the cache).
    computed: usize,
    /// Positions per KV block.
    block_size: usize,
    /// Names the blocks as they fill; `None` with the prefix cache off.
    hasher: Option<BlockHasher>,
    root: BlockHash,
    /// Names of the full blocks of `tokens` known so far (the prompt's from the start).
    chain: Vec<BlockHash>,
    /// Whether the row may take its prompt from the cache (attach, copy, wait for a block).
    reuse: bool,
    /// What the row may draw, if the request is constrained (`constraint.rs`).
    constraint: Option<RowConstraint>,
    /// An embedding request's pooled hidden states so far; such a row never samples.
    embedding: Option<Pooled>,
    /// Blocks `0..published` are attached from the cache or published to it.
    published: usize,
    /// Prompt tokens attached from the cache instead of computed, before any preemption
    /// (what a resumed row attaches again is its own work, not a cache hit to report).
    cached_tokens: usize,
    /// Preempted at least once.
    resumed: bool,
    max_tokens: usize,
    logprobs: Option<usize>,
    sampler: Sampler,
    stop: StopMatcher,
    /// Text released to the client so far.
    text: String,
    events: UnboundedSender<Event>,
    lease: KvLease,
    /// Speculative decoding, if the row drafts (`None`: off for it, or an embedding).
    spec: Option<RowSpec>,
}

/// A decoding row's speculation: its drafter, its record, and this step's draft.
#[derive(Debug)]
struct RowSpec {
    /// Prompt lookup, or `None` when a draft model proposes (the worker offers its guess,
    /// [`Row::offer_draft`]).
    ngram: Option<NgramDrafter>,
    acceptance: Acceptance,
    n_max: usize,
    n_min: usize,
    p_min: f64,
    /// This step's chunk while it verifies a draft: the last sampled token, then the
    /// drafted tokens (empty when the row decodes one token).
    verify: Vec<u32>,
    /// Scratch for the drafter's proposal.
    proposal: Vec<u32>,
    /// Drafted tokens verified and accepted so far (the request's usage).
    drafted: usize,
    accepted: usize,
}

impl RowSpec {
    /// The row's speculation under the server's `config` and the request's `params`; `None`
    /// when either turns it off, or for an embedding (which never draws).
    fn new(config: &SpecConfig, params: &SpecParams, embedding: bool) -> Option<Self> {
        let on = config.kind != crate::config::SpecKind::None && params.enabled && !embedding;
        let n_max = params.n_max.unwrap_or(config.n_max);
        (on && n_max > 0).then(|| Self {
            ngram: (config.kind == crate::config::SpecKind::Ngram).then(NgramDrafter::default),
            acceptance: Acceptance::default(),
            n_max,
            n_min: params.n_min.unwrap_or(config.n_min),
            p_min: f64::from(params.p_min.unwrap_or(0.0)),
            verify: Vec::new(),
            proposal: Vec::new(),
            drafted: 0,
            accepted: 0,
        })
    }
}

/// What a row's draws in one step came to ([`Row::draw`]).
pub(crate) struct Drawn {
    /// Drafted tokens that matched the model's draws: the chunk positions after its first
    /// that hold accepted tokens, whose KV is therefore valid.
    pub(crate) matched: usize,
    /// Drafted tokens verified.
    pub(crate) drafted: usize,
    /// How the row ends, if it does.
    pub(crate) finish: Option<Finish>,
}

impl Drawn {
    /// Drafted tokens compared with the model's draws: the matched ones, and the first
    /// mismatch if the row went on (those after it never are).
    pub(crate) fn compared(&self) -> usize {
        if self.finish.is_none() && self.matched < self.drafted {
            self.matched + 1
        } else {
            self.matched
        }
    }
}

/// A row's draw in one step ([`Row::sample`]).
pub(crate) struct Sampled {
    id: u32,
    logprobs: Option<TokenLogprobs>,
    /// The row's constraint failed or allowed nothing: the row ends with this error.
    failed: Option<String>,
}

thread_local! {
    /// The unmodified logits of the row being sampled on this thread, for its logprobs.
    static RAW_LOGITS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// How a row ended, decided while accepting a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finish {
    pub(crate) reason: FinishReason,
    pub(crate) stopped_by: Option<StopMatch>,
}

impl Finish {
    pub(crate) fn new(reason: FinishReason) -> Self {
        Self {
            reason,
            stopped_by: None,
        }
    }
}

/// What every row of a worker is admitted with.
pub(crate) struct RowSettings<'a> {
    /// Positions per KV block.
    pub(crate) block_size: usize,
    /// Names blocks for the prefix cache; `None` with it off.
    pub(crate) hasher: Option<&'a BlockHasher>,
    pub(crate) vocab_size: usize,
    pub(crate) spec: &'a SpecConfig,
}

impl Row {
    /// Admits a waiting request onto its leased blocks, the first `attached` of which came
    /// from the cache, as the worker's `seq`-th row; its queue slot is released here.
    pub(crate) fn admit(
        pending: Pending,
        lease: KvLease,
        attached: usize,
        seq: u64,
        settings: &RowSettings,
    ) -> Self {
        let &RowSettings {
            block_size,
            hasher,
            vocab_size,
            spec,
        } = settings;
        let hasher = hasher.cloned();
        let Pending {
            id,
            request,
            root,
            chain,
            events,
            slot: _,
        } = pending;
        let prompt_tokens = request.prompt_ids.len();
        let group = request.group;
        let reuse = request.reuses_cache();
        let embedding = request.embedding.map(Pooled::new);
        let constraint = request
            .constraint
            .as_ref()
            .map(|c| RowConstraint::start(c, vocab_size));
        let spec = RowSpec::new(spec, &request.speculation, embedding.is_some());
        let mut tokens = request.prompt_ids;
        tokens.reserve(request.max_tokens);
        Self {
            id,
            group,
            seq,
            tokens,
            prompt_tokens,
            computed: attached * block_size,
            block_size,
            hasher,
            root,
            chain,
            published: attached,
            reuse,
            constraint,
            embedding,
            cached_tokens: attached * block_size,
            resumed: false,
            max_tokens: request.max_tokens,
            logprobs: request.logprobs,
            sampler: Sampler::new(request.sampling),
            stop: StopMatcher::new(&request.stop),
            text: String::new(),
            events,
            lease,
            spec,
        }
    }

    /// Leading prompt blocks a request may attach from the cache: every full block before
    /// the last prompt token, which is always computed so that the request gets its logits.
    pub(crate) fn attachable_blocks(prompt_tokens: usize, block_size: usize) -> usize {
        prompt_tokens.saturating_sub(1) / block_size
    }

    /// The names of the leading blocks this row could attach from the cache when it is
    /// placed (admitted or resumed): every full block before its last token, or none when it
    /// does not reuse cached KV.
    pub(crate) fn attachable_chain(&self) -> Option<&[BlockHash]> {
        let n = Self::attachable_blocks(self.tokens.len(), self.block_size).min(self.chain.len());
        (self.reuse && self.hasher.is_some()).then(|| &self.chain[..n])
    }

    /// Tokens the row holds (prompt and generated): a resumed row needs blocks for all of
    /// them.
    pub(crate) fn held_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// The index of the block the row computes next, when caching is on and the row stands
    /// at its start: only then can the cache supply (part of) it.
    fn at_block_start(&self) -> Option<usize> {
        (self.reuse && self.hasher.is_some() && self.computed.is_multiple_of(self.block_size))
            .then(|| self.computed / self.block_size)
    }

    /// The block a prefilling row computes next, if it could come from the cache: its
    /// index and name. `None` once the rest of the prompt must be computed.
    pub(crate) fn next_attachable(&self) -> Option<(usize, BlockHash)> {
        let b = self.at_block_start()?;
        (b < Self::attachable_blocks(self.tokens.len(), self.block_size))
            .then(|| self.chain.get(b).map(|&name| (b, name)))
            .flatten()
    }

    /// Attaches every next prompt block that is cached now (a row ahead of this one may have
    /// just computed it), returning its private blocks to the pool. Returns the tokens
    /// attached.
    pub(crate) fn attach_cached(&mut self) -> usize {
        let before = self.computed;
        while let Some((b, name)) = self.next_attachable() {
            if !self.lease.attach(b, name) {
                break;
            }
            self.computed += self.block_size;
            self.published = b + 1;
        }
        self.count_cached(self.computed - before);
        self.computed - before
    }

    /// Where a copy of cached positions could go: at a block boundary of the prompt, the
    /// row's own next block, the name it hangs from, and the tokens that could be copied
    /// (up to a block, short of the last token held).
    pub(crate) fn copy_target(&self) -> Option<(BlockId, BlockHash, &[u32])> {
        let b = self.at_block_start()?;
        let upto = (self.computed + self.block_size).min(self.tokens.len().saturating_sub(1));
        (upto > self.computed).then(|| {
            let to = self.lease.blocks()[b];
            (to, self.parent(b), &self.tokens[self.computed..upto])
        })
    }

    /// Records `n` positions copied into the row's next block.
    pub(crate) fn copied(&mut self, n: usize) {
        debug_assert!(self
            .lease
            .writable(self.computed / self.block_size..self.computed / self.block_size + 1));
        self.computed += n;
        self.count_cached(n);
    }

    fn count_cached(&mut self, n: usize) {
        if !self.resumed {
            self.cached_tokens += n;
        }
    }

    /// Whether this prefilling row's next block is one `other` (a row admitted earlier, also
    /// prefilling) will compute — the whole block, or (the last block of a prompt, which is
    /// never attached) the part this row would copy: then waiting and attaching or copying it
    /// is cheaper than computing it twice. Several prompts share a step's budget, so `other`
    /// may be computing that block in this very step.
    pub(crate) fn waits_for(&self, other: &Row) -> bool {
        if !other.is_prefilling() {
            return false;
        }
        if let Some((b, name)) = self.next_attachable() {
            return other.chain.get(b) == Some(&name)
                && other.computed < (b + 1) * other.block_size;
        }
        let Some((_, parent, want)) = self.copy_target() else {
            return false;
        };
        let b = self.computed / self.block_size;
        let start = b * self.block_size;
        let same_parent = b <= other.chain.len() && other.parent(b) == parent;
        same_parent
            && other.computed < start + want.len()
            && other.tokens.get(start..start + want.len()) == Some(want)
    }

    /// Still computing its prompt (or, resumed after a preemption, the tokens it held).
    pub(crate) fn is_prefilling(&self) -> bool {
        !self.is_decoding()
    }

    /// Has sampled a token, and every token before it is in the KV: the next step decodes it.
    pub(crate) fn is_decoding(&self) -> bool {
        self.tokens.len() > self.prompt_tokens && self.computed + 1 == self.tokens.len()
    }

    /// A decoding row whose next position starts a block its table does not have yet.
    pub(crate) fn needs_block(&self) -> bool {
        self.is_decoding() && self.computed / self.block_size >= self.lease.blocks().len()
    }

    /// Leases the block [`Self::needs_block`] asks for, if the pool has one.
    pub(crate) fn grow(&mut self) -> Result<(), crate::blocks::NotEnoughBlocks> {
        self.lease.grow()
    }

    /// Gives every block back and forgets the KV, keeping everything else (module docs):
    /// its full blocks stay cached, its partial last block as a tail, for its own resumption.
    pub(crate) fn preempt(&mut self) {
        self.keep_tail();
        self.lease.clear();
        self.computed = 0;
        self.published = 0;
        self.resumed = true;
        if let Some(spec) = &mut self.spec {
            spec.verify.clear();
        }
        // It will compute (and pool) every position again.
        if let Some(p) = &mut self.embedding {
            *p = Pooled::new(p.pooling);
        }
    }

    /// Places a preempted row on a new lease, the first `attached` blocks of which came from
    /// the cache.
    pub(crate) fn resume(&mut self, lease: KvLease, attached: usize) {
        self.lease = lease;
        self.computed = attached * self.block_size;
        self.published = attached;
    }

    /// The next uncomputed tokens, at most `limit` of them; logits are wanted when the chunk
    /// reaches the last token held (the end of the prompt, or the token just sampled). A
    /// decoding row verifying a draft ([`Self::set_draft`]) gives its last token and the
    /// drafted ones, with logits for every position.
    pub(crate) fn next_chunk(&self, limit: usize) -> SeqChunk<'_> {
        if let Some(verify) = self.verifying() {
            debug_assert_eq!(limit, verify.len());
            return SeqChunk {
                tokens: verify,
                start_pos: self.computed,
                blocks: self.lease.blocks(),
                logit_rows: verify.len(),
                want_hidden: false,
            };
        }
        let end = self.tokens.len().min(self.computed.saturating_add(limit));
        let wants_logits = end == self.tokens.len() && self.embedding.is_none();
        SeqChunk {
            tokens: &self.tokens[self.computed..end],
            start_pos: self.computed,
            blocks: self.lease.blocks(),
            logit_rows: usize::from(wants_logits),
            want_hidden: self.embedding.is_some(),
        }
    }

    /// This step's verify chunk, when the row verifies a draft.
    fn verifying(&self) -> Option<&[u32]> {
        self.spec
            .as_ref()
            .map(|s| s.verify.as_slice())
            .filter(|v| !v.is_empty())
    }

    /// The most tokens a decoding row may have drafted this step: `n_max`, and few enough
    /// that every token it could yield fits `max_tokens`. `None` when the row does not
    /// speculate or is not decoding.
    pub(crate) fn draft_limit(&self) -> Option<usize> {
        let left = self.max_tokens.saturating_sub(self.generated_tokens());
        let spec = self.spec.as_ref()?;
        let decoding =
            self.tokens.len() > self.prompt_tokens && self.computed + 1 == self.tokens.len();
        decoding.then(|| spec.n_max.min(left.saturating_sub(1)))
    }

    /// The row as the allocator sees it before anything is drafted: its acceptance rate and
    /// limits, with `available` drafted tokens.
    pub(crate) fn draft_terms(&self, available: usize) -> Option<Candidate> {
        let spec = self.spec.as_ref()?;
        Some(Candidate {
            rate: spec.acceptance.rate(),
            available,
            n_min: spec.n_min,
            p_min: spec.p_min,
        })
    }

    /// A decoding row's draft for this step, as the allocator sees it: prompt lookup's guess
    /// at what follows the row's tokens, or the draft model's ([`Self::offer_draft`]), at
    /// most [`Self::draft_limit`] long. `None` when the row does not speculate or has no
    /// guess.
    pub(crate) fn draft_candidate(&mut self) -> Option<Candidate> {
        let max = self.draft_limit();
        let spec = self.spec.as_mut()?;
        spec.verify.clear();
        let Some(max) = max else {
            spec.proposal.clear();
            return None;
        };
        match &mut spec.ngram {
            Some(ngram) => ngram.propose(&self.tokens, max, &mut spec.proposal),
            None => spec.proposal.truncate(max),
        }
        match spec.proposal.len() {
            0 => None,
            n => self.draft_terms(n),
        }
    }

    /// Until one of its drafts has been verified, the row's acceptance record is `prior` (a
    /// draft model's record over every row: how often its guesses are right is a property of
    /// the pair of models more than of the request).
    pub(crate) fn adopt_prior(&mut self, prior: &Acceptance) {
        if let Some(spec) = self.spec.as_mut().filter(|s| s.drafted == 0) {
            spec.acceptance = prior.clone();
        }
    }

    /// The draft model's guess at the row's next tokens, for this step's
    /// [`Self::draft_candidate`].
    pub(crate) fn offer_draft(&mut self, guess: &[u32]) {
        if let Some(spec) = &mut self.spec {
            spec.proposal.clear();
            spec.proposal.extend_from_slice(guess);
        }
    }

    /// The row's tokens: prompt, then every sampled token.
    pub(crate) fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Positions past the last token held that the row's blocks already cover.
    pub(crate) fn draft_room(&self) -> usize {
        (self.lease.blocks().len() * self.block_size).saturating_sub(self.tokens.len())
    }

    /// Verifies the first `n` tokens of [`Self::draft_candidate`]'s draft this step (0: decode
    /// one token). The row's blocks must cover them ([`Self::draft_room`]).
    pub(crate) fn set_draft(&mut self, n: usize) {
        let last = self.tokens.last().copied();
        debug_assert!(n <= self.draft_room());
        if let (Some(spec), Some(last)) = (self.spec.as_mut(), last) {
            spec.verify.clear();
            if n > 0 {
                debug_assert!(n <= spec.proposal.len());
                spec.verify.push(last);
                spec.verify.extend_from_slice(&spec.proposal[..n]);
            }
        }
    }

    /// Positions of this step's chunk known to hold the right KV before its draws: all of a
    /// prompt chunk or a plain decode; only the first of a verify chunk (the rest hold
    /// drafted tokens until [`Self::draw`] has compared them, and [`Self::settle`] counts
    /// the ones that matched).
    pub(crate) fn written_before_draws(&self, n: usize) -> usize {
        if self.verifying().is_some() {
            1
        } else {
            n
        }
    }

    /// Preempted at least once (what it reattaches is its own work, not a cache hit).
    pub(crate) fn resumed(&self) -> bool {
        self.resumed
    }

    /// Whether this row's chunks bring back hidden states (an embedding).
    pub(crate) fn wants_hidden(&self) -> bool {
        self.embedding.is_some()
    }

    /// Feeds an embedding row the hidden states of the positions its last chunk computed,
    /// `hidden_size` values each, in position order.
    pub(crate) fn pool(&mut self, rows: &[f32], hidden_size: usize) {
        if let Some(p) = &mut self.embedding {
            rows.chunks_exact(hidden_size).for_each(|r| p.push(r));
        }
    }

    /// An embedding row whose every prompt position is pooled: it is done.
    pub(crate) fn embedded(&self) -> bool {
        self.embedding.is_some() && self.computed == self.prompt_tokens
    }

    /// Records that the forward wrote `n` more positions, and publishes every block that is
    /// now full.
    pub(crate) fn advance(&mut self, n: usize) {
        self.computed += n;
        debug_assert!(self.computed <= self.tokens.len());
        let Some(hasher) = &self.hasher else {
            return;
        };
        let full = self.computed / self.block_size;
        if full <= self.published {
            return;
        }
        hasher.extend(
            self.root,
            &self.tokens[..full * self.block_size],
            self.block_size,
            &mut self.chain,
        );
        for b in self.published..full {
            let tokens = &self.tokens[b * self.block_size..(b + 1) * self.block_size];
            self.lease.publish(b, self.chain[b], self.parent(b), tokens);
        }
        self.published = full;
    }

    /// The name block `b` hangs from.
    fn parent(&self, b: usize) -> BlockHash {
        if b == 0 {
            self.root
        } else {
            self.chain[b - 1]
        }
    }

    /// As the row ends: keeps its partly computed last block cached as a tail, so a request
    /// that resends these tokens (the next turn of a conversation) can copy them.
    pub(crate) fn keep_tail(&mut self) {
        let Some(hasher) = &self.hasher else {
            return;
        };
        let b = self.computed / self.block_size;
        let tokens = &self.tokens[b * self.block_size..self.computed];
        if tokens.is_empty() {
            return;
        }
        let parent = self.parent(b);
        // A tail's name hashes its length too, so it never equals a full block's.
        self.lease
            .publish(b, hasher.block(parent, tokens), parent, tokens);
    }

    /// Whether the blocks the next `n` positions go to belong to this row alone and are
    /// unpublished, so writing them cannot touch another request's KV (debug checks).
    pub(crate) fn may_write(&self, n: usize) -> bool {
        let first = self.computed / self.block_size;
        let last = (self.computed + n).div_ceil(self.block_size);
        self.lease.writable(first..last)
    }

    /// Tokens the row may still generate.
    pub(crate) fn tokens_left(&self) -> usize {
        self.max_tokens.saturating_sub(self.generated_tokens())
    }

    pub(crate) fn generated_tokens(&self) -> usize {
        self.tokens.len() - self.prompt_tokens
    }

    /// A step's draws for this row, one per logits row (`vocab` values each): the first, and
    /// while the token drawn equals the drafted token at that position, the next. Each draw
    /// is sampled with the row's sampler and constraint and accepted (stop matcher, event)
    /// before the next, exactly as consecutive decode steps would draw them: a drafted
    /// token changes how many steps a request takes, never what it draws. Touches only this
    /// row, so a step's rows run it in parallel.
    pub(crate) fn draw<M: StepModel>(
        &mut self,
        logits: &mut [f32],
        vocab: usize,
        model: &M,
        bytes: &mut Vec<u8>,
    ) -> Drawn {
        let rows = logits.len() / vocab;
        let mut drawn = Drawn {
            matched: 0,
            drafted: rows.saturating_sub(1),
            finish: None,
        };
        for (i, row_logits) in logits.chunks_exact_mut(vocab).enumerate() {
            let sampled = self.sample(row_logits);
            let id = sampled.id;
            if let Some(finish) = self.accept(sampled, model, bytes) {
                drawn.finish = Some(finish);
                break;
            }
            let drafted = self.verifying().and_then(|v| v.get(i + 1)).copied();
            if drafted != Some(id) {
                break;
            }
            drawn.matched += 1;
        }
        drawn
    }

    /// After [`Self::draw`]: the matched drafted positions join the computed KV, the row's
    /// acceptance record learns from the step, and the draft is done with.
    pub(crate) fn settle(&mut self, drawn: &Drawn) {
        if drawn.drafted == 0 {
            return;
        }
        self.advance(drawn.matched);
        if let Some(spec) = &mut self.spec {
            spec.acceptance.record(drawn.compared(), drawn.matched);
            spec.drafted += drawn.drafted;
            spec.accepted += drawn.matched;
            spec.verify.clear();
            if spec.ngram.is_none() {
                spec.proposal.clear(); // a model's guess is for one step only
            }
        }
    }

    /// One draw, first half: masks the row's logits to what its constraint allows (if it
    /// has one), then draws its next token (and its log-probabilities, when wanted, from a
    /// copy of the logits as the model gave them: masking and sampling change the row in
    /// place).
    fn sample(&mut self, logits: &mut [f32]) -> Sampled {
        RAW_LOGITS.with(|raw| {
            let mut raw = raw.borrow_mut();
            if self.logprobs.is_some() {
                raw.clear();
                raw.extend_from_slice(logits);
            }
            let failed = |e: String| Sampled {
                id: 0,
                logprobs: None,
                failed: Some(e),
            };
            if let Some(c) = &mut self.constraint {
                if let Err(e) = c.mask(logits) {
                    return failed(e);
                }
            }
            let id = self.sampler.sample(logits, &self.tokens);
            if self.constraint.as_ref().is_some_and(|c| !c.permits(id)) {
                return failed(format!(
                    "the sampler drew token {id}, which the constraint rules out"
                ));
            }
            Sampled {
                id,
                logprobs: self.logprobs.map(|n| logprobs(&raw, id, n)),
                failed: None,
            }
        })
    }

    /// One draw, second half: records the sampled token, runs it through the stop matcher
    /// and sends its event. Returns how the row ends, if it does.
    fn accept<M: StepModel>(
        &mut self,
        sampled: Sampled,
        model: &M,
        bytes: &mut Vec<u8>,
    ) -> Option<Finish> {
        if let Some(e) = sampled.failed {
            return Some(Finish::new(FinishReason::Error(format!(
                "constrained decoding failed: {e}"
            ))));
        }
        let id = sampled.id;
        let complete = match self.constraint.as_mut().map(|c| c.advance(id)) {
            None | Some(Ok(false)) => false,
            Some(Ok(true)) => true,
            Some(Err(e)) => {
                return Some(Finish::new(FinishReason::Error(format!(
                    "constrained decoding failed: {e}"
                ))))
            }
        };
        self.tokens.push(id);
        bytes.clear();
        model.token_bytes(id, bytes);
        let step = self.stop.push(id, model.is_eog(id), bytes);
        if let Some(by @ StopMatch::TokenId(_)) = step.stopped_by {
            return Some(Finish {
                reason: FinishReason::Stop,
                stopped_by: Some(by),
            });
        }
        let (logprob, top_logprobs) = match sampled.logprobs {
            Some(lp) => (Some(lp.chosen), lp.top),
            None => (None, Vec::new()),
        };
        self.text.push_str(&step.released);
        let event = Event::Token(TokenEvent {
            id,
            text: step.released,
            logprob,
            top_logprobs,
        });
        if self.events.send(event).is_err() {
            return Some(Finish::new(FinishReason::Cancelled)); // the client is gone
        }
        if step.stopped_by.is_some() || complete {
            return Some(Finish {
                reason: FinishReason::Stop,
                stopped_by: step.stopped_by,
            });
        }
        (self.generated_tokens() == self.max_tokens).then(|| Finish::new(FinishReason::Length))
    }

    /// Ends the row: flushes held text and builds the final event. The lease drops with
    /// `self` here, before the caller sends the event ([`Done::send`]).
    pub(crate) fn finish(mut self, finish: Finish) -> Done {
        let flushed_text = match finish.stopped_by {
            Some(StopMatch::String(_)) => String::new(),
            _ => self.stop.finish(),
        };
        self.text.push_str(&flushed_text);
        let embedding = match (&finish.reason, &self.embedding) {
            (FinishReason::Stop, Some(p)) if self.embedded() => Some(p.result()),
            _ => None,
        };
        let completion = Completion {
            finish_reason: finish.reason,
            stopped_by: finish.stopped_by,
            usage: Usage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.generated_tokens(),
                cached_tokens: self.cached_tokens,
                draft_tokens: self.spec.as_ref().map_or(0, |s| s.drafted),
                draft_accepted: self.spec.as_ref().map_or(0, |s| s.accepted),
            },
            token_ids: self.tokens[self.prompt_tokens..].to_vec(),
            text: self.text,
            flushed_text,
            embedding,
        };
        Done {
            events: self.events.clone(),
            completion,
        }
    }
}

/// A finished row's last event, built and not sent yet ([`Row::finish`]).
pub(crate) struct Done {
    events: UnboundedSender<Event>,
    completion: Completion,
}

impl Done {
    pub(crate) fn send(self) {
        // A client that is gone has nobody to tell.
        let _ = self.events.send(Event::Done(self.completion));
    }
}

/// Ends a request that never left the queue.
pub(crate) fn finish_pending(pending: Pending, reason: FinishReason) {
    let completion = Completion {
        finish_reason: reason,
        stopped_by: None,
        usage: Usage {
            prompt_tokens: pending.request.prompt_ids.len(),
            completion_tokens: 0,
            cached_tokens: 0,
            ..Usage::default()
        },
        token_ids: Vec::new(),
        text: String::new(),
        flushed_text: String::new(),
        embedding: None,
    };
    let _ = pending.events.send(Event::Done(completion));
}
