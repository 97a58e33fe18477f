//! Paged KV cache.
//!
//! The cache is a pool of fixed-size blocks, each holding `block_size` token positions of K
//! and V for every layer. It owns only storage: which blocks belong to which sequence (the
//! block table) is the scheduler's business, passed into each forward step.

/// Index of one KV block in a [`KvCache`].
pub type BlockId = u32;

/// The geometry of one token's KV entry: what a position costs in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Bytes per stored element (2 for the default f16 cache).
    pub elem_bytes: usize,
}

impl KvShape {
    /// Bytes of K and V for one token position across all layers.
    pub fn bytes_per_token(&self) -> usize {
        self.n_layers * self.n_kv_heads * self.head_dim * 2 * self.elem_bytes
    }
}

/// One sequence's share of a forward step: `tokens` at positions `start_pos..`, with KV in
/// `blocks` (the sequence's block table, covering at least `start_pos + tokens.len()`
/// positions). A decode step is a chunk of one token; a prefill chunk is several.
#[derive(Debug, Clone, Copy)]
pub struct SeqChunk<'a> {
    pub tokens: &'a [u32],
    pub start_pos: usize,
    pub blocks: &'a [BlockId],
    /// Whether the step should return logits for the chunk's last token.
    pub want_logits: bool,
}
