//! Admission ceilings and typed refusals.
//!
//! [`Limits`] is the one ceiling object: the handle checks every request against it
//! synchronously, before anything is queued or allocated, and the worker's block arithmetic
//! uses the same [`Limits::blocks_for`], so the two can never disagree about what fits.
//!
//! Refusal order (each with its own counter in the status):
//! 1. **invalid** (empty prompt, `max_tokens` 0, a token outside the vocabulary, a sampling
//!    parameter out of range): the request is wrong whatever the load. HTTP 400.
//! 2. **`context_length_exceeded`**: `prompt + max_tokens` beyond the context limit. HTTP 400.
//! 3. **`device_memory_budget_exceeded`**: needs more KV blocks than the whole pool, so it could
//!    never be admitted even on an idle server. HTTP 400.
//! 4. **`queue_full`**: would fit, but `max_queue` requests are already waiting. HTTP 503
//!    with Retry-After. (Checked by the handle, which owns the queue slots.)
//!
//! A request that fits the pool but not the blocks free *right now* is not refused: it waits
//! in strict FIFO order. Never-fits comes before queue-full so that a client retrying a
//! request that can never succeed is told so, instead of being told to retry.
//!
//! Both byte-carrying refusals are checkable by hand: `estimated_bytes` is the request's
//! blocks times `bytes_per_block`, and `bytes_per_block` is `kv_block_size` times
//! `KvShape::bytes_per_token` (layers × KV heads × head dim × 2 (K and V) × element bytes).

use ferrox_engine::kv::KvShape;
use ferrox_engine::sampler::SamplingError;

use crate::config::{ConfigError, KvBudget, SchedulerConfig};
use crate::request::GenerationRequest;

/// The numbers every admission decision is made from, fixed when the scheduler starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest `prompt + max_tokens`: the configured limit, capped at the model's context.
    pub max_context_tokens: usize,
    pub block_size_tokens: usize,
    /// Blocks in the KV pool.
    pub total_blocks: usize,
    /// KV bytes of one block: `block_size_tokens × KvShape::bytes_per_token()`, plus the
    /// draft model's for the same positions when one drafts (its pool has as many blocks).
    pub bytes_per_block: u64,
    /// The model's KV geometry in the configured storage types.
    pub kv_shape: KvShape,
    /// The server's speculation, which a request's own limits override.
    pub speculation: crate::config::SpecConfig,
    pub max_queue: usize,
    pub max_seqs: usize,
    pub vocab_size: usize,
}

/// Why a request was not accepted. Each variant carries the numbers behind the decision.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("invalid request: {0}")]
    Invalid(#[from] InvalidRequest),
    #[error(
        "context_length_exceeded: prompt ({prompt_tokens}) + max_tokens ({max_tokens}) = \
         {requested_tokens} tokens, over the limit of {limit_tokens} \
         (KV {estimated_bytes} bytes, limit {limit_bytes} bytes)"
    )]
    ContextLengthExceeded {
        prompt_tokens: usize,
        max_tokens: usize,
        requested_tokens: usize,
        limit_tokens: usize,
        /// KV bytes the request would need.
        estimated_bytes: u64,
        /// KV bytes of a request of exactly `limit_tokens`.
        limit_bytes: u64,
    },
    #[error(
        "device_memory_budget_exceeded: needs {requested_blocks} KV blocks \
         ({estimated_bytes} bytes), the whole pool is {limit_blocks} blocks ({limit_bytes} bytes)"
    )]
    KvBudgetExceeded {
        requested_blocks: usize,
        limit_blocks: usize,
        estimated_bytes: u64,
        /// The whole KV pool in bytes.
        limit_bytes: u64,
    },
    #[error("queue_full: {queued} requests waiting, the cap is {cap}")]
    QueueFull { queued: usize, cap: usize },
    #[error("the scheduler worker has stopped")]
    WorkerGone,
}

/// A request that is wrong whatever the load.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidRequest {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    #[error(
        "prompt token {token} at position {position} is outside the vocabulary of {vocab_size}"
    )]
    TokenOutOfVocab {
        position: usize,
        token: u32,
        vocab_size: usize,
    },
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// The request's speculative draft limits (its own, or the server's where it gave none)
    /// cannot both hold.
    #[error(
        "speculative.n_min {n_min} and speculative.n_max {n_max}: need n_min <= n_max <= {}",
        crate::config::MAX_DRAFT_TOKENS
    )]
    DraftLimits { n_min: usize, n_max: usize },
}

impl Refusal {
    /// A stable machine-readable name, for error bodies and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Invalid(_) => "invalid_request",
            Refusal::ContextLengthExceeded { .. } => "context_length_exceeded",
            Refusal::KvBudgetExceeded { .. } => "device_memory_budget_exceeded",
            Refusal::QueueFull { .. } => "queue_full",
            Refusal::WorkerGone => "worker_gone",
        }
    }
}

impl Limits {
    /// Derives the ceilings from the config and the model's geometry.
    pub fn new(
        config: &SchedulerConfig,
        kv_shape: KvShape,
        model_max_context: usize,
        vocab_size: usize,
    ) -> Result<Self, ConfigError> {
        Self::with_draft(config, kv_shape, None, model_max_context, vocab_size)
    }

    /// [`Limits::new`] for a model with a draft model whose KV (f16, `draft_kv`) is kept
    /// beside its own: a block is priced in both models' bytes.
    pub fn with_draft(
        config: &SchedulerConfig,
        kv_shape: KvShape,
        draft_kv: Option<KvShape>,
        model_max_context: usize,
        vocab_size: usize,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let kv_shape = kv_shape.with_types(config.cache_type_k, config.cache_type_v);
        if let Some(ty) = kv_shape.unfit_type() {
            return Err(ConfigError::KvType {
                ty: ty.name(),
                head_dim: kv_shape.head_dim,
            });
        }
        let per_token = kv_shape.bytes_per_token() + draft_kv.map_or(0, |d| d.bytes_per_token());
        let bytes_per_block = (config.kv_block_size_tokens * per_token) as u64;
        let total_blocks = match config.kv_budget {
            KvBudget::Blocks(n) => n,
            KvBudget::Bytes(budget_bytes) => {
                let n = budget_bytes / bytes_per_block.max(1);
                if n == 0 {
                    return Err(ConfigError::BudgetBelowOneBlock {
                        budget_bytes,
                        bytes_per_block,
                    });
                }
                n as usize
            }
        };
        let max_context_tokens = config
            .max_context_tokens
            .map_or(model_max_context, |c| c.min(model_max_context));
        Ok(Self {
            max_context_tokens,
            block_size_tokens: config.kv_block_size_tokens,
            total_blocks,
            bytes_per_block,
            kv_shape,
            speculation: config.speculation,
            max_queue: config.max_queue,
            max_seqs: config.max_seqs,
            vocab_size,
        })
    }

    /// Blocks covering `tokens` positions.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size_tokens)
    }

    /// Bytes of the whole KV pool.
    pub fn pool_bytes(&self) -> u64 {
        self.total_blocks as u64 * self.bytes_per_block
    }

    /// Checks everything that does not depend on the current load (refusals 1–3 of the
    /// module docs, in that order) and returns the blocks of the request's whole table
    /// (prompt + `max_tokens`), the most it can ever hold.
    pub fn check(&self, req: &GenerationRequest) -> Result<usize, Refusal> {
        if req.prompt_ids.is_empty() {
            return Err(InvalidRequest::EmptyPrompt.into());
        }
        if req.max_tokens == 0 {
            return Err(InvalidRequest::ZeroMaxTokens.into());
        }
        let vocab_size = self.vocab_size;
        if let Some((position, &token)) = req
            .prompt_ids
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab_size)
        {
            return Err(InvalidRequest::TokenOutOfVocab {
                position,
                token,
                vocab_size,
            }
            .into());
        }
        req.sampling
            .validate(vocab_size)
            .map_err(InvalidRequest::from)?;
        let spec = &req.speculation;
        let n_max = spec.n_max.unwrap_or(self.speculation.n_max);
        let n_min = spec.n_min.unwrap_or(self.speculation.n_min);
        if spec.enabled && (n_max > crate::config::MAX_DRAFT_TOKENS || n_min > n_max) {
            return Err(InvalidRequest::DraftLimits { n_min, n_max }.into());
        }
        // An embedding generates nothing: its prompt is all it holds.
        let generated = if req.embedding.is_some() {
            0
        } else {
            req.max_tokens
        };
        let requested_tokens = req.prompt_ids.len().saturating_add(generated);
        let requested_blocks = self.blocks_for(requested_tokens);
        let estimated_bytes = (requested_blocks as u64).saturating_mul(self.bytes_per_block);
        if requested_tokens > self.max_context_tokens {
            return Err(Refusal::ContextLengthExceeded {
                prompt_tokens: req.prompt_ids.len(),
                max_tokens: generated,
                requested_tokens,
                limit_tokens: self.max_context_tokens,
                estimated_bytes,
                limit_bytes: self.blocks_for(self.max_context_tokens) as u64 * self.bytes_per_block,
            });
        }
        if requested_blocks > self.total_blocks {
            return Err(Refusal::KvBudgetExceeded {
                requested_blocks,
                limit_blocks: self.total_blocks,
                estimated_bytes,
                limit_bytes: self.pool_bytes(),
            });
        }
        Ok(requested_blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        // 2 layers × 1 KV head × 4 dims × 2 (K, V) × 2 bytes = 32 bytes a token; 4-token
        // blocks are 128 bytes; 10 blocks, 40 positions, 1280 bytes.
        let shape = KvShape::f16(2, 1, 4);
        let config = SchedulerConfig {
            kv_block_size_tokens: 4,
            kv_budget: KvBudget::Bytes(1300),
            max_context_tokens: Some(100),
            ..SchedulerConfig::default()
        };
        Limits::new(&config, shape, 64, 50).unwrap()
    }

    #[test]
    fn ceilings_follow_the_shape() {
        let l = limits();
        assert_eq!((l.bytes_per_block, l.total_blocks), (128, 10));
        assert_eq!(l.max_context_tokens, 64, "capped at the model's context");
        assert_eq!(l.check(&GenerationRequest::greedy(vec![1; 30], 10)), Ok(10));
    }

    #[test]
    fn refusals_carry_exact_numbers_in_order() {
        let l = limits();
        let e = l
            .check(&GenerationRequest::greedy(vec![1; 60], 10))
            .unwrap_err();
        assert_eq!(
            e,
            Refusal::ContextLengthExceeded {
                prompt_tokens: 60,
                max_tokens: 10,
                requested_tokens: 70,
                limit_tokens: 64,
                estimated_bytes: 18 * 128,
                limit_bytes: 16 * 128,
            }
        );
        assert_eq!(e.code(), "context_length_exceeded");
        let e = l
            .check(&GenerationRequest::greedy(vec![1; 30], 11))
            .unwrap_err();
        assert_eq!(
            e,
            Refusal::KvBudgetExceeded {
                requested_blocks: 11,
                limit_blocks: 10,
                estimated_bytes: 11 * 128,
                limit_bytes: 1280,
            }
        );
        assert_eq!(e.code(), "device_memory_budget_exceeded");
        // Invalid beats never-fits.
        let mut r = GenerationRequest::greedy(vec![1, 50], 1000);
        assert_eq!(
            l.check(&r).unwrap_err(),
            Refusal::Invalid(InvalidRequest::TokenOutOfVocab {
                position: 1,
                token: 50,
                vocab_size: 50
            })
        );
        r.prompt_ids.clear();
        assert_eq!(l.check(&r).unwrap_err().code(), "invalid_request");
    }
}
