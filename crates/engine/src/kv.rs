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
    /// How many of the chunk's last tokens the step returns logits for: 0 (a prompt chunk
    /// that does not end the prompt), 1 (a prompt's last chunk, a decode) or `k + 1` (a
    /// decode row verifying `k` drafted tokens: every drafted position's next-token
    /// distribution, bit for bit what decoding them one at a time would give). At most
    /// `tokens.len()`.
    pub logit_rows: usize,
    /// Whether the step should return the final hidden state (after the output norm) of
    /// every token of the chunk: what an embedding pools.
    pub want_hidden: bool,
}

/// KV storage for every layer, in blocks of `block_size` positions.
///
/// Layout: for layer `l`, block `b`, slot `s`, the K (and separately V) row of `kv_dim` f16
/// values starts at `((l * n_blocks + b) * block_size + s) * kv_dim`. Storage is allocated
/// zeroed, so pages the scheduler never hands out cost no resident memory.
pub struct KvCache {
    shape: KvShape,
    block_size: usize,
    n_blocks: usize,
    k: Vec<u16>,
    v: Vec<u16>,
}

impl KvCache {
    /// A cache of `n_blocks` blocks of `block_size` positions for a model of `shape`.
    pub fn new(shape: KvShape, block_size: usize, n_blocks: usize) -> KvCache {
        assert!(block_size > 0, "KV block size must be positive");
        let n = shape.n_layers * n_blocks * block_size * shape.n_kv_heads * shape.head_dim;
        KvCache {
            shape,
            block_size,
            n_blocks,
            k: vec![0u16; n],
            v: vec![0u16; n],
        }
    }

    pub fn shape(&self) -> KvShape {
        self.shape
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Copies the K and V of the first `positions` slots of block `from` into block `to`, in
    /// every layer: the prefix cache's way to reuse part of a block another sequence owns
    /// (the values are the same bits a forward would write there).
    pub fn copy_positions(&mut self, from: BlockId, to: BlockId, positions: usize) {
        assert!(
            positions <= self.block_size,
            "a block holds {} positions",
            self.block_size
        );
        assert!((from as usize) < self.n_blocks && (to as usize) < self.n_blocks);
        if from == to {
            return;
        }
        let d = self.kv_dim();
        let n = positions * d;
        for layer in 0..self.shape.n_layers {
            let src = self.offset(layer, &[from], 0);
            let dst = self.offset(layer, &[to], 0);
            self.k.copy_within(src..src + n, dst);
            self.v.copy_within(src..src + n, dst);
        }
    }

    fn kv_dim(&self) -> usize {
        self.shape.n_kv_heads * self.shape.head_dim
    }

    /// Element offset of (layer, position) for a sequence whose block table is `blocks`.
    /// Callers have validated the table against the position.
    #[inline]
    pub(crate) fn offset(&self, layer: usize, blocks: &[BlockId], pos: usize) -> usize {
        let block = blocks[pos / self.block_size] as usize;
        ((layer * self.n_blocks + block) * self.block_size + pos % self.block_size) * self.kv_dim()
    }

    /// The K and V rows (f16) at `offset`, for writing.
    #[inline]
    pub(crate) fn rows_mut(&mut self, offset: usize) -> (&mut [half::f16], &mut [half::f16]) {
        use half::slice::HalfBitsSliceExt;
        let d = self.kv_dim();
        let k = self.k[offset..offset + d].reinterpret_cast_mut::<half::f16>();
        let v = self.v[offset..offset + d].reinterpret_cast_mut::<half::f16>();
        (k, v)
    }

    /// The K and V rows (f16) at `offset`.
    #[inline]
    pub(crate) fn rows(&self, offset: usize) -> (&[half::f16], &[half::f16]) {
        use half::slice::HalfBitsSliceExt;
        let d = self.kv_dim();
        let k = self.k[offset..offset + d].reinterpret_cast::<half::f16>();
        let v = self.v[offset..offset + d].reinterpret_cast::<half::f16>();
        (k, v)
    }
}
