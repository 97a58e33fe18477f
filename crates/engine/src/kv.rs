//! Paged KV cache.
//!
//! The cache is a pool of fixed-size blocks, each holding `block_size` token positions of K
//! and V for every layer. It owns only storage: which blocks belong to which sequence (the
//! block table) is the scheduler's business, passed into each forward step.

/// Index of one KV block in a [`KvCache`].
pub type BlockId = u32;

use ferrox_kernels::{quantize_kv, BlockQ4_0, BlockQ8_0};
use half::f16;

/// How the cache stores K or V values (llama-server's `--cache-type-k` / `--cache-type-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// Two bytes a value: what the forward computes, rounded once.
    #[default]
    F16,
    /// Blocks of 32 int8 values and one f16 scale, 34 bytes per 32 values (0.53× f16):
    /// llama.cpp's q8_0, near-lossless for K and V.
    Q8_0,
    /// Blocks of 32 four-bit values (`q − 8`) and one f16 scale, 18 bytes per 32 values
    /// (0.28× f16): llama.cpp's q4_0, for contexts that must fit at a visible cost in fidelity.
    Q4_0,
}

impl KvType {
    /// The names `--cache-type-k/-v` take.
    pub const NAMES: &'static str = "f16, q8_0, q4_0";

    pub fn parse(name: &str) -> Option<KvType> {
        match name.trim().to_ascii_lowercase().as_str() {
            "f16" => Some(KvType::F16),
            "q8_0" => Some(KvType::Q8_0),
            "q4_0" => Some(KvType::Q4_0),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// Bytes of one row of `values` values (a whole number of 32-value blocks for q8_0).
    pub fn row_bytes(self, values: usize) -> usize {
        match self {
            KvType::F16 => 2 * values,
            KvType::Q8_0 => values / 32 * 34,
            KvType::Q4_0 => values / 32 * 18,
        }
    }

    /// Whether a head of `head_dim` values can be stored this way: the block types need
    /// whole blocks per head, since attention reads each head's part of a row on its own.
    pub fn fits_head(self, head_dim: usize) -> bool {
        match self {
            KvType::F16 => true,
            KvType::Q8_0 | KvType::Q4_0 => head_dim.is_multiple_of(32),
        }
    }
}

/// The geometry of one token's KV entry: what a position costs in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub k_type: KvType,
    pub v_type: KvType,
}

impl KvShape {
    /// A cache of f16 K and V (the default).
    pub fn f16(n_layers: usize, n_kv_heads: usize, head_dim: usize) -> KvShape {
        KvShape {
            n_layers,
            n_kv_heads,
            head_dim,
            k_type: KvType::F16,
            v_type: KvType::F16,
        }
    }

    /// The same geometry stored as `k_type` / `v_type`.
    pub fn with_types(self, k_type: KvType, v_type: KvType) -> KvShape {
        KvShape {
            k_type,
            v_type,
            ..self
        }
    }

    /// Values in one layer's K (or V) row of one position.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// The first of its storage types its heads cannot be stored as (not whole blocks).
    pub fn unfit_type(&self) -> Option<KvType> {
        [self.k_type, self.v_type]
            .into_iter()
            .find(|ty| !ty.fits_head(self.head_dim))
    }

    /// Bytes of K and V for one token position across all layers.
    pub fn bytes_per_token(&self) -> usize {
        let d = self.kv_dim();
        self.n_layers * (self.k_type.row_bytes(d) + self.v_type.row_bytes(d))
    }
}

/// A type a K or V row is stored as, viewed over the cache's 16-bit words (every row is a
/// whole number of them: an f16 is one, a q8_0 block 17).
pub trait KvElem: Copy + Sync + 'static {
    const TYPE: KvType;
    /// Values one element holds.
    const VALUES: usize;
    fn view(words: &[u16]) -> &[Self];
    fn view_mut(words: &mut [u16]) -> &mut [Self];
    /// Stores `x` (a whole row) as this type.
    fn store(x: &[f32], out: &mut [Self]);
}

impl KvElem for f16 {
    const TYPE: KvType = KvType::F16;
    const VALUES: usize = 1;
    fn view(words: &[u16]) -> &[f16] {
        use half::slice::HalfBitsSliceExt;
        words.reinterpret_cast::<f16>()
    }
    fn view_mut(words: &mut [u16]) -> &mut [f16] {
        use half::slice::HalfBitsSliceExt;
        words.reinterpret_cast_mut::<f16>()
    }
    fn store(x: &[f32], out: &mut [f16]) {
        ferrox_kernels::f32_to_f16_slice(x, out);
    }
}

/// The 32-value block types: views over whole blocks, written by their quantizer.
macro_rules! block_elem {
    ($block:ty, $ty:expr) => {
        impl KvElem for $block {
            const TYPE: KvType = $ty;
            const VALUES: usize = 32;
            fn view(words: &[u16]) -> &[Self] {
                assert!((2 * words.len()).is_multiple_of(size_of::<Self>()));
                // SAFETY: the block is plain bytes with alignment 1, and the words hold whole
                // blocks.
                unsafe {
                    std::slice::from_raw_parts(
                        words.as_ptr().cast(),
                        2 * words.len() / size_of::<Self>(),
                    )
                }
            }
            fn view_mut(words: &mut [u16]) -> &mut [Self] {
                assert!((2 * words.len()).is_multiple_of(size_of::<Self>()));
                // SAFETY: as in `view`, and the borrow is exclusive.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        words.as_mut_ptr().cast(),
                        2 * words.len() / size_of::<Self>(),
                    )
                }
            }
            fn store(x: &[f32], out: &mut [Self]) {
                quantize_kv(x, out);
            }
        }
    };
}

block_elem!(BlockQ8_0, KvType::Q8_0);
block_elem!(BlockQ4_0, KvType::Q4_0);

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

/// Stores one row `x` as `ty` into its words.
fn store(ty: KvType, x: &[f32], words: &mut [u16]) {
    match ty {
        KvType::F16 => f16::store(x, f16::view_mut(words)),
        KvType::Q8_0 => BlockQ8_0::store(x, BlockQ8_0::view_mut(words)),
        KvType::Q4_0 => BlockQ4_0::store(x, BlockQ4_0::view_mut(words)),
    }
}

/// KV storage for every layer, in blocks of `block_size` positions.
///
/// Layout: for layer `l`, block `b`, slot `s`, the K (and separately V) row of one position
/// is slot number `(l * n_blocks + b) * block_size + s`, `k_words` (`v_words`) 16-bit words
/// from slot times that: `kv_dim` f16 values, or `kv_dim / 32` q8_0 blocks. Storage is
/// allocated zeroed, so pages the scheduler never hands out cost no resident memory.
pub struct KvCache {
    shape: KvShape,
    block_size: usize,
    n_blocks: usize,
    k_words: usize,
    v_words: usize,
    k: Vec<u16>,
    v: Vec<u16>,
}

impl KvCache {
    /// A cache of `n_blocks` blocks of `block_size` positions for a model of `shape`.
    pub fn new(shape: KvShape, block_size: usize, n_blocks: usize) -> KvCache {
        assert!(block_size > 0, "KV block size must be positive");
        if let Some(ty) = shape.unfit_type() {
            panic!("{} KV needs heads of whole blocks", ty.name());
        }
        let slots = shape.n_layers * n_blocks * block_size;
        let k_words = shape.k_type.row_bytes(shape.kv_dim()) / 2;
        let v_words = shape.v_type.row_bytes(shape.kv_dim()) / 2;
        KvCache {
            shape,
            block_size,
            n_blocks,
            k_words,
            v_words,
            k: vec![0u16; slots * k_words],
            v: vec![0u16; slots * v_words],
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
        for layer in 0..self.shape.n_layers {
            let src = self.slot(layer, &[from], 0);
            let dst = self.slot(layer, &[to], 0);
            let (kw, vw) = (self.k_words, self.v_words);
            self.k
                .copy_within(src * kw..(src + positions) * kw, dst * kw);
            self.v
                .copy_within(src * vw..(src + positions) * vw, dst * vw);
        }
    }

    /// The slot of (layer, position) for a sequence whose block table is `blocks`. Callers
    /// have validated the table against the position.
    #[inline]
    pub(crate) fn slot(&self, layer: usize, blocks: &[BlockId], pos: usize) -> usize {
        let block = blocks[pos / self.block_size] as usize;
        (layer * self.n_blocks + block) * self.block_size + pos % self.block_size
    }

    /// Stores one position's K and V rows (`kv_dim` values each) at `slot`, in the cache's
    /// types.
    pub(crate) fn store(&mut self, slot: usize, k: &[f32], v: &[f32]) {
        let (kw, vw) = (self.k_words, self.v_words);
        store(
            self.shape.k_type,
            k,
            &mut self.k[slot * kw..(slot + 1) * kw],
        );
        store(
            self.shape.v_type,
            v,
            &mut self.v[slot * vw..(slot + 1) * vw],
        );
    }

    /// The K row at `slot`, as `K` (which must be the cache's K type).
    #[inline]
    pub(crate) fn k_row<K: KvElem>(&self, slot: usize) -> &[K] {
        debug_assert_eq!(K::TYPE, self.shape.k_type);
        K::view(&self.k[slot * self.k_words..(slot + 1) * self.k_words])
    }

    /// The V row at `slot`, as `V` (which must be the cache's V type).
    #[inline]
    pub(crate) fn v_row<V: KvElem>(&self, slot: usize) -> &[V] {
        debug_assert_eq!(V::TYPE, self.shape.v_type);
        V::view(&self.v[slot * self.v_words..(slot + 1) * self.v_words])
    }
}
