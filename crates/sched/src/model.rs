//! The narrow view the scheduler has of a model: [`StepModel`].
//!
//! The scheduler needs seven things from a model: its KV geometry (for the byte arithmetic of
//! admission), its vocabulary size (to validate requests), its trained context, a KV cache of
//! a given number of blocks, ONE forward over a batch of [`SeqChunk`]s, a copy of part of one
//! block into another (the prefix cache), and per-token facts for the stop matcher (end-of-generation? which bytes does it add?). Everything else about
//! the model stays on its side of this trait, which is why the scheduler can be tested against
//! [`crate::testkit::FakeModel`] — a model whose "attention" reads every position of its
//! sequence back from its KV blocks, so any batching or block-table mistake shows up — and
//! run in production against `ferrox_engine::Model` without a line of difference.

use ferrox_engine::kv::{BlockId, KvShape, SeqChunk};

/// A model the scheduler can step. Shared as `Arc<M>` between the handle (which reads its
/// geometry to refuse requests) and the one worker thread (which runs it).
pub trait StepModel: Send + Sync + 'static {
    /// The model's KV cache, owned by the worker thread.
    type Kv: Send + 'static;
    /// What a failed forward reports; its text reaches the affected requests as
    /// `FinishReason::Error`.
    type Error: std::fmt::Display;

    /// Bytes of one token position in the KV cache.
    fn kv_shape(&self) -> KvShape;
    fn vocab_size(&self) -> usize;
    /// The context length the model was trained for, in tokens.
    fn max_context(&self) -> usize;
    /// A cache of `n_blocks` blocks of `block_size_tokens` positions each, ids `0..n_blocks`,
    /// storing K and V as `shape` says (the model's [`StepModel::kv_shape`] in the configured
    /// types, which admission checked the model's heads can take).
    fn new_kv(&self, shape: KvShape, block_size_tokens: usize, n_blocks: usize) -> Self::Kv;
    /// Values in one token's final hidden state (what an embedding pools).
    fn hidden_size(&self) -> usize;
    /// Whether a token attends only to earlier ones. An encoder (false) attends to its whole
    /// sequence, so the worker gives each of its prompts to the forward whole, in one step,
    /// never in chunks.
    fn causal(&self) -> bool {
        true
    }
    /// One step over every chunk: writes each chunk's K/V into its blocks, sets `logits` to
    /// one row of `vocab_size` logits for each of the last `logit_rows` tokens of every chunk,
    /// in chunk and token order, flat (a row verifying drafted tokens asks for several), and
    /// `hidden` to one row of `hidden_size` values per token of every chunk with
    /// `want_hidden`, in chunk and token order. The worker passes the same buffers every
    /// step (no fresh 16 MB allocation per step).
    fn forward(
        &self,
        kv: &mut Self::Kv,
        chunks: &[SeqChunk<'_>],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), Self::Error>;
    /// Copies the KV of the first `positions` slots of block `from` into block `to` (the
    /// prefix cache reuses part of a block this way; `from == to` is a no-op).
    fn copy_kv(&self, kv: &mut Self::Kv, from: BlockId, to: BlockId, positions: usize);
    /// Runs `f(0)`, ..., `f(n - 1)` on the model's threads (the worker samples a step's rows
    /// this way) and returns when all are done; a panic in one is re-raised here. The
    /// default runs them in order on the calling thread.
    fn run_parallel(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f);
    }
    /// Whether `id` ends generation (EOS, end-of-turn): a stop token unless `ignore_eos`.
    fn is_eog(&self, id: u32) -> bool;
    /// Appends the bytes token `id` adds to the output text (possibly part of a UTF-8
    /// character).
    fn token_bytes(&self, id: u32, out: &mut Vec<u8>);
}
