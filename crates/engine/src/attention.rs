//! Attention of each query over its own sequence's paged KV.
//!
//! Every query (one token of one sequence) is computed by the same sequence of float
//! operations whether it comes from a decode step, a prefill chunk of 7 tokens or a whole
//! prompt: scores against the keys already in the cache (including its own, written before
//! this runs), softmax, weighted sum of the values. The cache is the single source of K/V —
//! never a fresh f32 copy on some paths — which is what makes chunk size and batch composition
//! invisible in the logits (pinned by `tests/batch_invariance.rs`). Sliding-window layers read
//! only the last `window` positions.
//!
//! # Blocking
//! Work is split into tasks of (a tile of up to [`TILE`] consecutive queries of one sequence,
//! one KV head). A task walks the keys in blocks of [`KEY_BLOCK`] positions whose boundaries
//! sit at multiples of `KEY_BLOCK` in ABSOLUTE position, and for each block runs every query of
//! the tile over the part of the block inside that query's range `[lo, pos]`, with an online
//! (flash-style) softmax: per query head a running max `m`, a running sum `l` and an
//! accumulator `acc`; a block's scores `s` give `m' = max(m, max s)`, `acc = acc · e^(m−m') +
//! Σ e^(s−m') v`, `l = l · e^(m−m') + Σ e^(s−m')`; at the end `out = acc · (1/l)`.
//!
//! Why this keeps invariance: the blocks a query visits, and the keys in each, depend only on
//! its own `lo` and `pos` (absolute boundaries, clipped to its range), never on where its
//! tile or chunk starts or which other queries share the task. Within a block every number is
//! a fixed function of that query's own inputs: `ferrox_kernels::attn_scores_f16` computes
//! each (head, key) score with one lane layout whatever the number of rows and keys, and
//! `attn_accumulate_f16` updates each accumulator element by fused multiply-adds in key order.
//! Blocks aligned to the chunk start would break this: a query's keys would be split
//! differently at chunk size 7 than at 512, changing the rescaling sequence (and the test
//! catches it).
//!
//! Why this shape: the K/V rows are read straight from the f16 cache (F16C widens them in
//! registers; no widened copy), the tile's queries reuse each key block while it is in L1/L2,
//! and the kernels handle the 4 query heads that share a Gemma 3 KV head together, so each
//! key/value load feeds 4 (scores: 8) FMAs. Two queries that see the same whole key block go
//! to the kernels as one call of twice the rows (AVX-512 runs eight rows per pass). Tiles are
//! handed out longest first (the last tiles of a causal prefill see the most keys) so the two
//! threads finish together.
//!
//! Measured 2026-11-30 on the shared 2-vCPU Zen 3 (AVX2/F16C), Gemma 3 270M q4_K_M, perf
//! samples (CPU time) of `ferrox bench -p 512 -n 0 -r 1`: attention 1.40 s → 0.24 s per
//! 512-token prefill. The replaced version widened K/V to f32 per tile, then per (query,
//! head) took a full score row with `dot_f32`, a scalar softmax and a scalar value sum.

use std::cell::RefCell;

use ferrox_kernels::{
    attn_accumulate_f16, attn_accumulate_int8, attn_scores_f16, attn_scores_int8, exp_f32,
    exp_shift_sum, prefetch_span, quantize_kv, BlockQ4_0, BlockQ8_0, ThreadPool,
};
use half::f16;

use crate::kv::{BlockId, KvCache, KvElem, KvType};

/// How queries meet keys of one storage type.
trait Keys: KvElem {
    /// Appends what the scores need of a query (`q`, already scaled): nothing for f16 keys,
    /// its q8_0 blocks for q8_0 keys.
    fn quantize_query(q: &[f32], out: &mut Vec<BlockQ8_0>);
    /// `out[r * keys.len() + j]` = score of query head `r` of `q` (or of `q8`, its
    /// [`Keys::quantize_query`]) with key `j`.
    fn scores(q: &[f32], q8: &[BlockQ8_0], hd: usize, keys: &[&[Self]], out: &mut [f32]);
}

impl Keys for f16 {
    fn quantize_query(_: &[f32], _: &mut Vec<BlockQ8_0>) {}
    fn scores(q: &[f32], _: &[BlockQ8_0], hd: usize, keys: &[&[f16]], out: &mut [f32]) {
        attn_scores_f16(q, hd, keys, out);
    }
}

/// Keys and values of the 32-value block types: queries as q8_0 blocks, the int8 kernels.
macro_rules! block_kv {
    ($block:ty) => {
        impl Keys for $block {
            fn quantize_query(q: &[f32], out: &mut Vec<BlockQ8_0>) {
                let at = out.len();
                out.resize(at + q.len() / 32, BlockQ8_0::default());
                quantize_kv(q, &mut out[at..]);
            }
            fn scores(_: &[f32], q8: &[BlockQ8_0], hd: usize, keys: &[&[Self]], out: &mut [f32]) {
                attn_scores_int8(q8, hd / 32, keys, out);
            }
        }

        impl Values for $block {
            fn accumulate(acc: &mut [f32], hd: usize, p: &[f32], vs: &[&[Self]]) {
                attn_accumulate_int8(acc, hd, p, vs);
            }
        }
    };
}

block_kv!(BlockQ8_0);
block_kv!(BlockQ4_0);

/// How probabilities weigh values of one storage type.
trait Values: KvElem {
    /// `acc[r] += Σ_j p[r * vs.len() + j] · vs[j]`, rows of `hd`.
    fn accumulate(acc: &mut [f32], hd: usize, p: &[f32], vs: &[&[Self]]);
}

impl Values for f16 {
    fn accumulate(acc: &mut [f32], hd: usize, p: &[f32], vs: &[&[f16]]) {
        attn_accumulate_f16(acc, hd, p, vs);
    }
}

/// Most queries of one sequence handled by one task.
const TILE: usize = 16;

/// Keys per online-softmax block; block `b` holds absolute positions
/// `[b * KEY_BLOCK, (b + 1) * KEY_BLOCK)`.
const KEY_BLOCK: usize = 32;

/// One query row: the position it sits at and its sequence's block table.
#[derive(Clone, Copy)]
pub(crate) struct Query<'a> {
    pub pos: usize,
    pub blocks: &'a [BlockId],
}

/// Geometry of one attention call.
#[derive(Clone, Copy)]
pub(crate) struct AttnShape<'a> {
    pub layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Attend to at most this many most recent positions (sliding-window layers).
    pub window: Option<usize>,
    /// Soft-cap the scores: `cap · tanh(s / cap)` (Gemma 2).
    pub softcap: Option<f32>,
    /// Per query head, a logit that joins the softmax with no value (gpt-oss's sinks): the
    /// online softmax starts from it (`max = sink`, `sum = 1`) instead of from nothing.
    pub sinks: Option<&'a [f32]>,
}

struct OutPtr(*mut f32);
// SAFETY: each task writes the disjoint output slices of its own (query, head) pairs.
unsafe impl Sync for OutPtr {}

/// Per-thread online-softmax state of one task: for each (query of the tile, head of the
/// group) the running max, running sum and `head_dim` accumulator; and one block of scores.
#[derive(Default)]
struct Scratch {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
    scores: Vec<f32>,
    /// The tile's queries as q8_0 blocks, for q8_0 keys.
    q8: Vec<BlockQ8_0>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `out[r, h, :] = softmax(q[r, h, :] · K[lo..=pos]) · V[lo..=pos]` for every query row `r`
/// and head `h`. `q` is already scaled and rotated; K/V for every position are in `kv`.
pub(crate) fn attend(
    pool: &ThreadPool,
    kv: &KvCache,
    shape: AttnShape<'_>,
    queries: &[Query],
    q: &[f32],
    out: &mut [f32],
) {
    let q_dim = shape.n_head * shape.head_dim;
    assert_eq!(q.len(), queries.len() * q_dim);
    assert_eq!(out.len(), q.len());
    assert!(
        shape.n_head_kv > 0 && shape.n_head.is_multiple_of(shape.n_head_kv),
        "query heads must split evenly over KV heads"
    );
    // A short chunk would make fewer tasks than threads (a 14-token chunk of a one-KV-head
    // model is ONE task, and attention over a long context ran on one thread): split its
    // tiles so every thread gets work. Each query's arithmetic does not depend on its tile.
    let tasks_at_full_tiles = queries.len().div_ceil(TILE) * shape.n_head_kv;
    let tile = if tasks_at_full_tiles < pool.n_threads() {
        let per_head = pool.n_threads().div_ceil(shape.n_head_kv);
        queries.len().div_ceil(per_head).clamp(1, TILE)
    } else {
        TILE
    };
    let mut tiles = tiles(queries, tile);
    // Longest first: the cost of a tile grows with its last position.
    tiles.sort_by_key(|t| std::cmp::Reverse(queries[t.end - 1].pos));
    let types = (kv.shape().k_type, kv.shape().v_type);
    let out_ptr = OutPtr(out.as_mut_ptr());
    let task = |t: usize| {
        let _ = &out_ptr;
        let (tile, g) = (tiles[t / shape.n_head_kv].clone(), t % shape.n_head_kv);
        let job = Job {
            kv,
            shape,
            queries,
            q,
            out: &out_ptr,
        };
        SCRATCH.with(|s| {
            let s = &mut s.borrow_mut();
            match types.0 {
                KvType::F16 => job.tile_k::<f16>(types.1, tile, g, s),
                KvType::Q8_0 => job.tile_k::<BlockQ8_0>(types.1, tile, g, s),
                KvType::Q4_0 => job.tile_k::<BlockQ4_0>(types.1, tile, g, s),
            }
        });
    };
    pool.for_each(tiles.len() * shape.n_head_kv, &task);
}

/// What every task of one attention call reads, and where it writes.
struct Job<'a> {
    kv: &'a KvCache,
    shape: AttnShape<'a>,
    queries: &'a [Query<'a>],
    q: &'a [f32],
    out: &'a OutPtr,
}

/// Splits the queries into runs of at most `tile` (≤ [`TILE`]) consecutive rows of one
/// sequence.
fn tiles(queries: &[Query], tile: usize) -> Vec<std::ops::Range<usize>> {
    let mut tiles = Vec::new();
    let mut start = 0;
    for i in 1..=queries.len() {
        let same_seq = i < queries.len()
            && std::ptr::eq(queries[i].blocks, queries[start].blocks)
            && queries[i].pos == queries[i - 1].pos + 1;
        if !same_seq || i - start == tile {
            tiles.push(start..i);
            start = i;
        }
    }
    tiles
}

fn lowest_pos(shape: &AttnShape<'_>, pos: usize) -> usize {
    shape.window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

impl Job<'_> {
    /// [`Job::tile`] with keys stored as `K` and values as `v`.
    fn tile_k<K: Keys>(&self, v: KvType, tile: std::ops::Range<usize>, g: usize, s: &mut Scratch) {
        match v {
            KvType::F16 => self.tile::<K, f16>(tile, g, s),
            KvType::Q8_0 => self.tile::<K, BlockQ8_0>(tile, g, s),
            KvType::Q4_0 => self.tile::<K, BlockQ4_0>(tile, g, s),
        }
    }

    /// One task: the queries of `tile` over KV head `g`, with keys stored as `K` and values as
    /// `V`.
    fn tile<K: Keys, V: Values>(&self, tile: std::ops::Range<usize>, g: usize, s: &mut Scratch) {
        let Job {
            kv,
            shape,
            queries,
            q,
            out,
        } = *self;
        let hd = shape.head_dim;
        let group = shape.n_head / shape.n_head_kv;
        let q_dim = shape.n_head * hd;
        let first = queries[tile.start];
        let last = queries[tile.end - 1];
        let n_rows = tile.len() * group;
        s.max.clear();
        s.max.resize(n_rows, f32::NEG_INFINITY);
        s.sum.clear();
        s.sum.resize(n_rows, 0.0);
        if let Some(sinks) = shape.sinks {
            for (row, (m, l)) in s.max.iter_mut().zip(s.sum.iter_mut()).enumerate() {
                *m = sinks[g * group + row % group];
                *l = 1.0;
            }
        }
        s.acc.clear();
        s.acc.resize(n_rows * hd, 0.0);

        // Each query's heads of this group, as the keys' type needs them.
        s.q8.clear();
        for r in tile.clone() {
            K::quantize_query(&q[r * q_dim + g * group * hd..][..group * hd], &mut s.q8);
        }
        let q8_per_query = s.q8.len() / tile.len();
        // This KV head's part of a K (V) row, in elements of its type.
        let (kh, vh) = (hd / K::VALUES, hd / V::VALUES);
        // Queries of a tile are consecutive positions, so their ranges [lo, pos] both grow.
        let lo_first = lowest_pos(&shape, first.pos);
        let mut k_rows: [&[K]; KEY_BLOCK] = [&[]; KEY_BLOCK];
        let mut v_rows: [&[V]; KEY_BLOCK] = [&[]; KEY_BLOCK];
        for b in lo_first / KEY_BLOCK..=last.pos / KEY_BLOCK {
            let b_start = b * KEY_BLOCK;
            let from = b_start.max(lo_first);
            let to = (b_start + KEY_BLOCK).min(last.pos + 1);
            for p in from..to {
                let slot = kv.slot(shape.layer, first.blocks, p);
                k_rows[p - b_start] = &kv.k_row::<K>(slot)[g * kh..(g + 1) * kh];
                v_rows[p - b_start] = &kv.v_row::<V>(slot)[g * vh..(g + 1) * vh];
            }
            // The next key block's rows, fetched while this one computes: a decode step reads
            // every sequence's whole K/V (tens of MB at 16 sequences), scattered over KV blocks
            // that the hardware prefetcher picks up late (perf: the key loads were the hot spot).
            for p in
                (b_start + KEY_BLOCK).max(lo_first)..(b_start + 2 * KEY_BLOCK).min(last.pos + 1)
            {
                let slot = kv.slot(shape.layer, first.blocks, p);
                let (k, v) = (kv.k_row::<K>(slot), kv.v_row::<V>(slot));
                prefetch_span(k[g * kh..].as_ptr().cast(), kh * size_of::<K>());
                prefetch_span(v[g * vh..].as_ptr().cast(), vh * size_of::<V>());
            }
            // Each query's keys in this block, `a..e`.
            let mut seen = [(0, 0); TILE];
            for (i, r) in tile.clone().enumerate() {
                let pos = queries[r].pos;
                seen[i] = (
                    b_start.max(lowest_pos(&shape, pos)),
                    (b_start + KEY_BLOCK).min(pos + 1),
                );
            }
            let mut i = 0;
            while i < tile.len() {
                let (a, e) = seen[i];
                if a >= e {
                    i += 1;
                    continue;
                }
                // Two queries that see the same whole block run as one call of twice the rows
                // (the AVX-512 kernels widen each key and value row once for both); every
                // number of each is the same either way.
                let count = if e - a == KEY_BLOCK && i + 1 < tile.len() && seen[i + 1] == (a, e) {
                    2
                } else {
                    1
                };
                let r = tile.start + i;
                let rows = i * group..(i + count) * group;
                let keys = &k_rows[a - b_start..e - b_start];
                let n = keys.len();
                s.scores.resize(count * group * n, 0.0);
                let scores = &mut s.scores[..count * group * n];
                let q8 = &s.q8[i * q8_per_query..(i + count) * q8_per_query];
                if shape.n_head_kv == 1 {
                    // One KV head: the queries' rows are back to back in `q`.
                    K::scores(&q[r * q_dim..(r + count) * q_dim], q8, hd, keys, scores);
                } else {
                    for c in 0..count {
                        K::scores(
                            &q[(r + c) * q_dim + g * group * hd..][..group * hd],
                            &q8[c * q8_per_query..(c + 1) * q8_per_query],
                            hd,
                            keys,
                            &mut scores[c * group * n..(c + 1) * group * n],
                        );
                    }
                }
                if let Some(cap) = shape.softcap {
                    for x in scores.iter_mut() {
                        *x = cap * (*x / cap).tanh();
                    }
                }
                for (h, row) in rows.clone().enumerate() {
                    let sc = &mut scores[h * n..(h + 1) * n];
                    let m_old = s.max[row];
                    let m_new = sc.iter().copied().fold(m_old, f32::max);
                    let block_sum = exp_shift_sum(sc, m_new);
                    if m_new != m_old {
                        // exp(-inf) = 0 on the first block; multiplying by 1 is skipped as exact.
                        let scale = exp_f32(m_old - m_new);
                        s.sum[row] *= scale;
                        s.acc[row * hd..(row + 1) * hd]
                            .iter_mut()
                            .for_each(|x| *x *= scale);
                    }
                    s.sum[row] += block_sum;
                    s.max[row] = m_new;
                }
                V::accumulate(
                    &mut s.acc[rows.start * hd..rows.end * hd],
                    hd,
                    scores,
                    &v_rows[a - b_start..e - b_start],
                );
                i += count;
            }
        }

        for (i, r) in tile.enumerate() {
            for h in 0..group {
                let row = i * group + h;
                let inv = 1.0 / s.sum[row];
                // SAFETY: (r, head) is written by this task only: r is in this task's tile and the
                // head in its KV head's group; tiles are disjoint and each (tile, g) is one task.
                let o = unsafe {
                    std::slice::from_raw_parts_mut(out.0.add(r * q_dim + (g * group + h) * hd), hd)
                };
                for (o, &a) in o.iter_mut().zip(&s.acc[row * hd..(row + 1) * hd]) {
                    *o = a * inv;
                }
            }
        }
    }
}
