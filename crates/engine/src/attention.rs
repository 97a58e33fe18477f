//! Attention of each query over its own sequence's paged KV.
//!
//! Every query (one token of one sequence) is computed by the same function whether it comes
//! from a decode step, a prefill chunk of 7 tokens or a whole prompt: scores against the f16
//! keys already in the cache (including its own, written before this runs), softmax, weighted
//! sum of the f16 values. That is what makes chunk size and batch composition invisible in the
//! logits — the cache is the single source of K/V, never a fresh f32 copy for some paths.
//! Sliding-window layers read only the last `window` positions.

use std::cell::RefCell;

use ferrox_kernels::{axpy_f16_f32, dot_f16_f32, ThreadPool};

use crate::kv::{BlockId, KvCache};
use crate::ops::softmax;

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
// SAFETY: each task writes a disjoint `head_dim` slice of the output (one (query, head) pair).
unsafe impl Sync for OutPtr {}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[r, h, :] = softmax(q[r, h, :] · K[..=pos]) · V[..=pos]` for every query row `r` and
/// head `h`. `q` is already scaled and rotated; K/V for every position are in `kv`.
pub(crate) fn attend(
    pool: &ThreadPool,
    kv: &KvCache,
    shape: AttnShape,
    queries: &[Query],
    q: &[f32],
    out: &mut [f32],
) {
    let AttnShape {
        layer,
        n_head,
        n_head_kv,
        head_dim,
        window,
    } = shape;
    let q_dim = n_head * head_dim;
    assert_eq!(q.len(), queries.len() * q_dim);
    assert_eq!(out.len(), q.len());
    let group = n_head / n_head_kv;
    let out_ptr = OutPtr(out.as_mut_ptr());
    let task = |t: usize| {
        let (r, h) = (t / n_head, t % n_head);
        let query = queries[r];
        let lo = window.map_or(0, |w| (query.pos + 1).saturating_sub(w));
        let q_h = &q[r * q_dim + h * head_dim..][..head_dim];
        let kv_off = (h / group) * head_dim;
        // SAFETY: task t alone writes out[t*head_dim..(t+1)*head_dim] (t = r * n_head + h).
        let o = unsafe {
            let _ = &out_ptr;
            std::slice::from_raw_parts_mut(out_ptr.0.add(t * head_dim), head_dim)
        };
        o.fill(0.0);
        SCORES.with(|cell| {
            let mut scores = cell.borrow_mut();
            scores.clear();
            for p in lo..=query.pos {
                let (k, _) = kv.rows(kv.offset(layer, query.blocks, p));
                scores.push(dot_f16_f32(&k[kv_off..kv_off + head_dim], q_h));
            }
            softmax(&mut scores);
            for (i, p) in (lo..=query.pos).enumerate() {
                let (_, v) = kv.rows(kv.offset(layer, query.blocks, p));
                axpy_f16_f32(o, scores[i], &v[kv_off..kv_off + head_dim]);
            }
        });
    };
    pool.for_each(queries.len() * n_head, &task);
}
