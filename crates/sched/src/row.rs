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

use std::cell::RefCell;

use ferrox_engine::kv::SeqChunk;
use ferrox_engine::sampler::{logprobs, Sampler, TokenLogprobs};
use tokio::sync::mpsc::UnboundedSender;

use crate::blocks::KvLease;
use crate::model::StepModel;
use crate::queue::Pending;
use crate::request::{Completion, Event, FinishReason, RequestId, StopMatch, TokenEvent, Usage};
use crate::stop::StopMatcher;

#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) id: RequestId,
    /// Prompt, then every sampled token.
    tokens: Vec<u32>,
    prompt_tokens: usize,
    /// Positions `0..computed` have their KV written.
    computed: usize,
    max_tokens: usize,
    logprobs: Option<usize>,
    sampler: Sampler,
    stop: StopMatcher,
    /// Text released to the client so far.
    text: String,
    events: UnboundedSender<Event>,
    lease: KvLease,
}

/// A row's draw in one step ([`Row::sample`]).
pub(crate) struct Sampled {
    id: u32,
    logprobs: Option<TokenLogprobs>,
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

impl Row {
    /// Admits a waiting request onto its leased blocks; its queue slot is released here.
    pub(crate) fn admit(pending: Pending, lease: KvLease) -> Self {
        let Pending {
            id,
            request,
            blocks_needed: _,
            events,
            slot: _,
        } = pending;
        let prompt_tokens = request.prompt_ids.len();
        let mut tokens = request.prompt_ids;
        tokens.reserve(request.max_tokens);
        Self {
            id,
            tokens,
            prompt_tokens,
            computed: 0,
            max_tokens: request.max_tokens,
            logprobs: request.logprobs,
            sampler: Sampler::new(request.sampling),
            stop: StopMatcher::new(&request.stop),
            text: String::new(),
            events,
            lease,
        }
    }

    /// Still computing its prompt.
    pub(crate) fn is_prefilling(&self) -> bool {
        self.computed < self.prompt_tokens
    }

    /// Has sampled a token that is not yet in the KV: the next step decodes it.
    pub(crate) fn is_decoding(&self) -> bool {
        !self.is_prefilling() && self.computed + 1 == self.tokens.len()
    }

    /// The next uncomputed tokens, at most `limit` of them; logits are wanted when the chunk
    /// reaches the last token held (the end of the prompt, or the token just sampled).
    pub(crate) fn next_chunk(&self, limit: usize) -> SeqChunk<'_> {
        let end = self.tokens.len().min(self.computed + limit);
        SeqChunk {
            tokens: &self.tokens[self.computed..end],
            start_pos: self.computed,
            blocks: self.lease.blocks(),
            want_logits: end == self.tokens.len(),
        }
    }

    /// Records that the forward wrote `n` more positions.
    pub(crate) fn advance(&mut self, n: usize) {
        self.computed += n;
        debug_assert!(self.computed <= self.tokens.len());
    }

    pub(crate) fn generated_tokens(&self) -> usize {
        self.tokens.len() - self.prompt_tokens
    }

    /// Phase one of a step's delivery: draws this row's next token from its logits (and its
    /// log-probabilities, when wanted, from a copy of the unmodified row: sampling changes
    /// the row in place). Touches only this row, so a step's rows run it in parallel.
    pub(crate) fn sample(&mut self, logits: &mut [f32]) -> Sampled {
        let Some(n) = self.logprobs else {
            let id = self.sampler.sample(logits, &self.tokens);
            return Sampled { id, logprobs: None };
        };
        RAW_LOGITS.with(|raw| {
            let mut raw = raw.borrow_mut();
            raw.clear();
            raw.extend_from_slice(logits);
            let id = self.sampler.sample(logits, &self.tokens);
            Sampled {
                id,
                logprobs: Some(logprobs(&raw, id, n)),
            }
        })
    }

    /// Phase two, in step order: records the sampled token, runs it through the stop matcher
    /// and sends its event. Returns how the row ends, if it does.
    pub(crate) fn accept<M: StepModel>(
        &mut self,
        sampled: Sampled,
        model: &M,
        bytes: &mut Vec<u8>,
    ) -> Option<Finish> {
        let id = sampled.id;
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
        if step.stopped_by.is_some() {
            return Some(Finish {
                reason: FinishReason::Stop,
                stopped_by: step.stopped_by,
            });
        }
        (self.generated_tokens() == self.max_tokens).then(|| Finish::new(FinishReason::Length))
    }

    /// Ends the row: flushes held text and sends the final event. The lease drops with `self`.
    pub(crate) fn finish(mut self, finish: Finish) {
        let flushed_text = match finish.stopped_by {
            Some(StopMatch::String(_)) => String::new(),
            _ => self.stop.finish(),
        };
        self.text.push_str(&flushed_text);
        let completion = Completion {
            finish_reason: finish.reason,
            stopped_by: finish.stopped_by,
            usage: Usage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.generated_tokens(),
            },
            token_ids: self.tokens[self.prompt_tokens..].to_vec(),
            text: self.text,
            flushed_text,
        };
        // A client that is gone has nobody to tell.
        let _ = self.events.send(Event::Done(completion));
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
        },
        token_ids: Vec::new(),
        text: String::new(),
        flushed_text: String::new(),
    };
    let _ = pending.events.send(Event::Done(completion));
}
