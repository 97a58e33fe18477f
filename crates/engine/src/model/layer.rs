//! One transformer block over a step's rows ([`Model::layer`]), the per-row operations it is
//! made of, and the step's scratch buffers.
//!
//! Split from `model.rs`, which loads a model and runs the step around the blocks: embed,
//! every layer, then the head for the rows that asked for logits.

use ferrox_kernels::{Activations, ThreadPool};

use super::Model;
use crate::attention::{attend, AttnShape, Query};
use crate::config::{Activation, ModelConfig, QkNorm};
use crate::kv::KvCache;
use crate::moe::{moe_ffn, MoeScratch};
use crate::ops::{par_rows, rms_norm, rope_with, RopeTable};
use crate::weights::{Ffn, LayerWeights};

impl Model {
    /// One transformer block over all `n` rows of `s.x`, in place. With `keep` (the last
    /// layer), every row writes its K/V, then only the rows `keep` (ascending) go on through
    /// attention and the feed-forward block, and `s.x` ends holding just those: nothing reads
    /// the others' outputs (llama.cpp prunes the same rows). A row's numbers are its own
    /// whatever rows share the step, so the kept rows' bits do not change.
    pub(super) fn layer(
        &self,
        il: usize,
        lw: &LayerWeights,
        kv: &mut KvCache,
        queries: &[Query],
        keep: Option<&[usize]>,
        s: &mut Scratch,
    ) {
        let cfg = &self.config;
        let pool = &*self.pool;
        let n = queries.len();
        let (d, hd, qd, kvd) = (cfg.n_embd, cfg.head_dim, cfg.q_dim(), cfg.kv_dim());
        let eps = cfg.rms_eps;

        // Attention block.
        normed(pool, &mut s.h, &s.x, d, lw.attn_norm.as_deref(), eps);
        self.matmul_shared(
            &mut s.acts,
            &s.h,
            n,
            [(&lw.wq, &mut s.q), (&lw.wk, &mut s.k), (&lw.wv, &mut s.v)],
        );
        add_bias(&mut s.q, lw.bq.as_deref());
        add_bias(&mut s.k, lw.bk.as_deref());
        add_bias(&mut s.v, lw.bv.as_deref());
        let sliding = cfg.is_sliding(il);
        let rope = if sliding { &s.rope_swa } else { &s.rope_global };
        let ropes = cfg.ropes(il);
        let style = cfg.rope_style;
        let (mut q_norm, mut k_norm) = (lw.q_norm.as_deref(), lw.k_norm.as_deref());
        if cfg.arch.qk_norm() == Some(QkNorm::Whole) {
            // OLMoE: one RMSNorm over each token's whole Q and K, before RoPE splits heads.
            if let (Some(qn), Some(kn)) = (q_norm.take(), k_norm.take()) {
                par_rows(pool, &mut s.q, qd, &|_, row| rms_norm(row, qn, eps));
                par_rows(pool, &mut s.k, kvd, &|_, row| rms_norm(row, kn, eps));
            }
        }
        par_rows(pool, &mut s.q, qd, &|r, row| {
            rope_heads(
                row,
                hd,
                ropes.then(|| rope.row(r)),
                q_norm,
                Some(cfg.attn_scale * cfg.query_temperature(queries[r].pos)),
                eps,
                style,
            )
        });
        par_rows(pool, &mut s.k, kvd, &|r, row| {
            rope_heads(
                row,
                hd,
                ropes.then(|| rope.row(r)),
                k_norm,
                None,
                eps,
                style,
            )
        });
        for (r, query) in queries.iter().enumerate() {
            let slot = kv.slot(il, query.blocks, query.pos);
            let rows = r * kvd..(r + 1) * kvd;
            kv.store(slot, &s.k[rows.clone()], &s.v[rows]);
        }
        let kept: Vec<Query>;
        let (queries, n) = match keep {
            Some(keep) => {
                compact_rows(&mut s.q, qd, keep);
                compact_rows(&mut s.x, d, keep);
                s.resize(cfg, keep.len());
                kept = keep.iter().map(|&r| queries[r]).collect();
                (&kept[..], keep.len())
            }
            None => (queries, n),
        };
        if n == 0 {
            return;
        }
        let shape = AttnShape {
            layer: il,
            n_head: cfg.n_head,
            n_head_kv: cfg.n_head_kv,
            head_dim: hd,
            window: sliding.then_some(cfg.sliding_window),
            softcap: cfg.attn_softcap,
            sinks: lw.sinks.as_deref(),
        };
        attend(pool, kv, shape, queries, &s.q, &mut s.att);
        self.matmul(&lw.wo, &s.att, n, &mut s.o);
        add_bias(&mut s.o, lw.bo.as_deref());
        residual(
            pool,
            &mut s.x,
            &mut s.o,
            d,
            lw.post_attn_norm.as_deref(),
            eps,
            cfg.residual_scale,
        );

        // Feed-forward block.
        normed(pool, &mut s.h, &s.x, d, lw.ffn_norm.as_deref(), eps);
        match &lw.ffn {
            Ffn::Dense { gate, up, down } => {
                self.matmul_shared(&mut s.acts, &s.h, n, [(gate, &mut s.gate), (up, &mut s.up)]);
                let (up, ff) = (&s.up, cfg.n_ff);
                par_rows(pool, &mut s.gate, ff, &|r, g| {
                    let u = &up[r * ff..(r + 1) * ff];
                    match cfg.activation {
                        Activation::GeluTanh => ferrox_kernels::gelu_tanh_mul(g, u),
                        Activation::Silu => ferrox_kernels::silu_mul(g, u),
                    }
                });
                self.matmul(down, &s.gate, n, &mut s.o);
            }
            Ffn::Moe(mw) => {
                let moe = cfg
                    .moe
                    .as_ref()
                    .expect("MoE weights come with an MoE config");
                moe_ffn(pool, &self.file, mw, moe, &s.h, n, d, &mut s.o, &mut s.moe);
            }
        }
        residual(
            pool,
            &mut s.x,
            &mut s.o,
            d,
            lw.post_ffn_norm.as_deref(),
            eps,
            cfg.residual_scale,
        );
    }
}

/// `h = norm(x)`, row by row: a block's input (`x` itself where the family norms none).
fn normed(pool: &ThreadPool, h: &mut [f32], x: &[f32], d: usize, w: Option<&[f32]>, eps: f32) {
    par_rows(pool, h, d, &|r, h| {
        h.copy_from_slice(&x[r * d..(r + 1) * d]);
        if let Some(w) = w {
            rms_norm(h, w, eps);
        }
    });
}

/// One row of queries or keys, head by head: the head's norm (Gemma 3, Qwen 3), RoPE (but in
/// SmolLM 3's layers without it), and for the queries the attention scale.
fn rope_heads(
    row: &mut [f32],
    hd: usize,
    rotation: Option<(&[f32], &[f32])>,
    norm: Option<&[f32]>,
    scale: Option<f32>,
    eps: f32,
    style: crate::config::RopeStyle,
) {
    for head in row.chunks_exact_mut(hd) {
        if let Some(w) = norm {
            rms_norm(head, w, eps);
        }
        if let Some((cos, sin)) = rotation {
            rope_with(head, cos, sin, style);
        }
        if let Some(a) = scale {
            head.iter_mut().for_each(|v| *v *= a);
        }
    }
}

/// `x += norm(o)`, row by row: the block's output, normed where the architecture has a post
/// norm (Gemma), scaled where it has a residual multiplier (Granite), added to the residual
/// stream.
#[allow(clippy::too_many_arguments)]
fn residual(
    pool: &ThreadPool,
    x: &mut [f32],
    o: &mut [f32],
    d: usize,
    norm: Option<&[f32]>,
    eps: f32,
    scale: Option<f32>,
) {
    if let Some(w) = norm {
        par_rows(pool, o, d, &|_, row| rms_norm(row, w, eps));
    }
    if let Some(k) = scale {
        par_rows(pool, o, d, &|_, row| row.iter_mut().for_each(|v| *v *= k));
    }
    let o = &*o;
    par_rows(pool, x, d, &|r, row| {
        row.iter_mut()
            .zip(&o[r * d..(r + 1) * d])
            .for_each(|(a, &b)| *a += b)
    });
}

/// Per-step activation buffers, sized for `n` rows by [`Scratch::resize`], and the step's
/// RoPE rotations (one row per query, shared by every layer of the same kind).
#[derive(Default)]
pub(super) struct Scratch {
    /// The residual stream, a row per token.
    pub(super) x: Vec<f32>,
    pub(super) rope_global: RopeTable,
    pub(super) rope_swa: RopeTable,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// `h` quantized once for the matrices that read it together (`Model::matmul_shared`).
    acts: Activations,
    /// The expert layers' buffers (an MoE model's).
    moe: MoeScratch,
}

impl Scratch {
    /// Sizes every buffer for `n` rows. Contents are left as they are: each buffer is fully
    /// overwritten (embedding, copy or matmul output) before it is read in a step.
    pub(super) fn resize(&mut self, cfg: &ModelConfig, n: usize) {
        let sizes = [
            (&mut self.x, cfg.n_embd),
            (&mut self.h, cfg.n_embd),
            (&mut self.q, cfg.q_dim()),
            (&mut self.k, cfg.kv_dim()),
            (&mut self.v, cfg.kv_dim()),
            (&mut self.att, cfg.q_dim()),
            (&mut self.o, cfg.n_embd),
            (&mut self.gate, cfg.n_ff),
            (&mut self.up, cfg.n_ff),
        ];
        for (buf, width) in sizes {
            buf.resize(n * width, 0.0);
        }
    }
}

/// Moves rows `keep` (ascending) of `buf` (rows of `width`) to its front, in order.
fn compact_rows(buf: &mut [f32], width: usize, keep: &[usize]) {
    for (i, &r) in keep.iter().enumerate() {
        debug_assert!(r >= i, "rows to keep must ascend");
        if r != i {
            buf.copy_within(r * width..(r + 1) * width, i * width);
        }
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, &c)| *v += c);
        }
    }
}
