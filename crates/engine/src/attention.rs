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
//! Work is split into tasks of (a tile of up to [`TILE`] consecutive queries of one sequence,
//! one KV head). A task widens the f16 keys and values it needs to f32 once, and every query
//! and every query head of the KV head's group reuses them: with Gemma 3's 4 query heads per KV
//! head and 16-query tiles, a prefill converts each K/V row 1/64th as often as a per-(query,
//! head) loop would. Conversion is exact, so tiling changes no number.

use std::cell::RefCell;

use ferrox_kernels::{dot_f32, ThreadPool};
use half::slice::HalfFloatSliceExt;

use crate::kv::{BlockId, KvCache};
use crate::ops::softmax;

/// Most queries of one sequence handled by one task.
const TILE: usize = 16;

/// One query row: the position it sits at and its sequence's block table.
#[derive(Clone, Copy)]
pub(crate) struct Query<'a> {
    pub pos: usize,
    pub blocks: &'a [BlockId],
}

/// Geometry of one attention call.
#[derive(Clone, Copy)]
pub(crate) struct AttnShape {
    pub layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Attend to at most this many most recent positions (sliding-window layers).
    pub window: Option<usize>,
}

struct OutPtr(*mut f32);
// SAFETY: each task writes the disjoint output slices of its own (query, head) pairs.
unsafe impl Sync for OutPtr {}

/// Per-thread scratch: widened keys and values of a task's range, and one score row.
#[derive(Default)]
struct Scratch {
    k: Vec<f32>,
    v: Vec<f32>,
    scores: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `out[r, h, :] = softmax(q[r, h, :] · K[lo..=pos]) · V[lo..=pos]` for every query row `r`
/// and head `h`. `q` is already scaled and rotated; K/V for every position are in `kv`.
pub(crate) fn attend(
    pool: &ThreadPool,
    kv: &KvCache,
    shape: AttnShape,
    queries: &[Query],
    q: &[f32],
    out: &mut [f32],
) {
    let q_dim = shape.n_head * shape.head_dim;
    assert_eq!(q.len(), queries.len() * q_dim);
    assert_eq!(out.len(), q.len());
    let tiles = tiles(queries);
    let out_ptr = OutPtr(out.as_mut_ptr());
    let task = |t: usize| {
        let _ = &out_ptr;
        let (tile, g) = (tiles[t / shape.n_head_kv].clone(), t % shape.n_head_kv);
        SCRATCH.with(|s| {
            attend_tile(
                kv,
                shape,
                queries,
                tile,
                g,
                q,
                &out_ptr,
                &mut s.borrow_mut(),
            )
        });
    };
    pool.for_each(tiles.len() * shape.n_head_kv, &task);
}

/// Splits the queries into runs of at most [`TILE`] consecutive rows of one sequence.
fn tiles(queries: &[Query]) -> Vec<std::ops::Range<usize>> {
    let mut tiles = Vec::new();
    let mut start = 0;
    for i in 1..=queries.len() {
        let same_seq = i < queries.len()
            && std::ptr::eq(queries[i].blocks, queries[start].blocks)
            && queries[i].pos == queries[i - 1].pos + 1;
        if !same_seq || i - start == TILE {
            tiles.push(start..i);
            start = i;
        }
    }
    tiles
}

fn lowest_pos(shape: &AttnShape, pos: usize) -> usize {
    shape.window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

#[allow(clippy::too_many_arguments)]
fn attend_tile(
    kv: &KvCache,
    shape: AttnShape,
    queries: &[Query],
    tile: std::ops::Range<usize>,
    g: usize,
    q: &[f32],
    out: &OutPtr,
    s: &mut Scratch,
) {
    let hd = shape.head_dim;
    let group = shape.n_head / shape.n_head_kv;
    let q_dim = shape.n_head * hd;
    let first = queries[tile.start];
    let last = queries[tile.end - 1];
    let lo = lowest_pos(&shape, first.pos);
    let n_keys = last.pos + 1 - lo;
    s.k.resize(n_keys * hd, 0.0);
    s.v.resize(n_keys * hd, 0.0);
    for (j, p) in (lo..=last.pos).enumerate() {
        let (k, v) = kv.rows(kv.offset(shape.layer, first.blocks, p));
        k[g * hd..(g + 1) * hd].convert_to_f32_slice(&mut s.k[j * hd..(j + 1) * hd]);
        v[g * hd..(g + 1) * hd].convert_to_f32_slice(&mut s.v[j * hd..(j + 1) * hd]);
    }
    for r in tile {
        let pos = queries[r].pos;
        let (from, to) = (lowest_pos(&shape, pos) - lo, pos + 1 - lo);
        for h in g * group..(g + 1) * group {
            let q_h = &q[r * q_dim + h * hd..][..hd];
            s.scores.clear();
            for j in from..to {
                s.scores.push(dot_f32(&s.k[j * hd..(j + 1) * hd], q_h));
            }
            softmax(&mut s.scores);
            // SAFETY: (r, h) is written by this task only: r is in this task's tile and h in
            // its KV head's group; tiles are disjoint and each (tile, g) is one task.
            let o = unsafe { std::slice::from_raw_parts_mut(out.0.add(r * q_dim + h * hd), hd) };
            o.fill(0.0);
            for (i, j) in (from..to).enumerate() {
                let w = s.scores[i];
                for (a, &b) in o.iter_mut().zip(&s.v[j * hd..(j + 1) * hd]) {
                    *a += w * b;
                }
            }
        }
    }
}
