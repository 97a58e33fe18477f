//! The mixture-of-experts feed-forward block: route each token to its top-k experts, run
//! each chosen expert once per step over all the tokens routed to it, and sum the outputs.
//!
//! Why grouped by expert: an expert's three matrices are what a step reads from memory.
//! Looping token by token would read each chosen expert once per token; grouping reads it
//! once per step, so batched decode and prefill of an MoE scale like a dense model's (the
//! kernels see one matrix times m rows, lane-major from eight rows on).
//!
//! Routing is llama.cpp's `build_moe_ffn` for softmax gating: router logits, softmax over
//! all experts, the `n_used` largest probabilities (ties to the lower expert index),
//! optionally renormalised to sum to one (the sum clamped below at f16's smallest normal, as
//! llama.cpp does) and scaled. A token's output is `Σ_k w_k · expert_k(h)` summed in the
//! order the experts were chosen.
//!
//! Batch invariance holds because each step here is per row with a fixed order: the router
//! and the expert matmuls are batch invariant (`ferrox_kernels::matmul`), the gathered rows
//! are the same bits as the originals, and a row's k outputs are kept apart and summed in
//! its own selection order, whatever other rows shared its experts.

use ferrox_gguf::GgufFile;
use ferrox_kernels::{matmul, matmul_acts, silu_mul, ActKind, Activations, ThreadPool};

use crate::config::{ExpertAct, Gating, MoeConfig};
use crate::ops::par_rows;
use crate::weights::MoeWeights;

/// Reusable buffers of the MoE block (sized on use; contents never carried between steps).
#[derive(Default)]
pub(crate) struct MoeScratch {
    logits: Vec<f32>,
    /// Per row, its `n_used` (expert, weight) pairs in selection order.
    routes: Vec<(usize, f32)>,
    /// Per expert, the (row, slot) pairs routed to it.
    members: Vec<Vec<(usize, usize)>>,
    xe: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
    /// Expert outputs: row r's slot k at `(r * n_used + k) * d`.
    y: Vec<f32>,
    /// The shared expert's output, `n * d`.
    shared: Vec<f32>,
    acts: Activations,
}

/// Picks a token's experts from its router logits: `(expert, weight)` in selection order.
pub(crate) fn route(logits: &[f32], cfg: &MoeConfig, out: &mut Vec<(usize, f32)>) {
    let softmax = |xs: &mut [f32]| {
        let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        xs.iter_mut().for_each(|x| *x = (*x - max).exp());
        let sum: f32 = xs.iter().sum();
        xs.iter_mut().for_each(|x| *x /= sum);
    };
    let mut probs = logits.to_vec();
    if cfg.gating == Gating::Softmax {
        softmax(&mut probs);
    }
    let mut order: Vec<usize> = (0..probs.len()).collect();
    // Stable: equal probabilities keep the lower index first.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    let chosen = &order[..cfg.n_used];
    if cfg.gating == Gating::SoftmaxOfChosen {
        // The chosen logits' own softmax (monotonic, so the choice above is the same).
        let mut w: Vec<f32> = chosen.iter().map(|&e| probs[e]).collect();
        softmax(&mut w);
        for (&e, w) in chosen.iter().zip(w) {
            probs[e] = w;
        }
    }
    let mut scale = 1.0;
    if cfg.norm_weights {
        let total: f32 = chosen.iter().map(|&e| probs[e]).sum();
        scale = 1.0 / total.max(6.103_515_6e-5);
    }
    for &e in chosen {
        let mut w = probs[e];
        if cfg.norm_weights {
            w *= scale;
        }
        if cfg.weights_scale != 0.0 && cfg.weights_scale != 1.0 {
            w *= cfg.weights_scale;
        }
        out.push((e, w));
    }
}

/// Adds row `e` of a bias table (rows of `width`) to every row of `x`, if there is a table.
fn add_row_bias(x: &mut [f32], table: Option<&[f32]>, e: usize, width: usize) {
    if let Some(t) = table {
        let b = &t[e * width..(e + 1) * width];
        for row in x.chunks_exact_mut(width) {
            row.iter_mut().zip(b).for_each(|(v, &c)| *v += c);
        }
    }
}

/// gpt-oss's expert activation, in place over `g`: `x · σ(alpha·x) · (y + 1)` with
/// `x = min(g, limit)`, `y = clamp(u, -limit, limit)` (llama.cpp's `swiglu_oai`).
fn swiglu_clamped(g: &mut [f32], u: &[f32], alpha: f32, limit: f32) {
    for (g, &u) in g.iter_mut().zip(u) {
        let x = g.min(limit);
        let y = u.clamp(-limit, limit);
        *g = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
    }
}

/// `out = MoE(h)` for the `n` rows of `h` (each `d` values).
#[allow(clippy::too_many_arguments)]
pub(crate) fn moe_ffn(
    pool: &ThreadPool,
    file: &GgufFile,
    w: &MoeWeights,
    cfg: &MoeConfig,
    h: &[f32],
    n: usize,
    d: usize,
    out: &mut [f32],
    s: &mut MoeScratch,
) {
    let (n_expert, k, ff) = (cfg.n_expert, cfg.n_used, cfg.n_ff_exp);
    s.logits.resize(n * n_expert, 0.0);
    matmul(pool, &w.router.view(file), h, n, &mut s.logits);
    add_row_bias(&mut s.logits, w.router_bias.as_deref(), 0, n_expert);
    s.routes.clear();
    for r in 0..n {
        route(
            &s.logits[r * n_expert..(r + 1) * n_expert],
            cfg,
            &mut s.routes,
        );
    }
    s.members.resize_with(n_expert, Vec::new);
    s.members.iter_mut().for_each(Vec::clear);
    for (i, &(e, _)) in s.routes.iter().enumerate() {
        s.members[e].push((i / k, i % k));
    }
    s.y.resize(n * k * d, 0.0);
    for (e, rows) in s.members.iter().enumerate() {
        let m = rows.len();
        if m == 0 {
            continue;
        }
        s.xe.clear();
        for &(r, _) in rows {
            s.xe.extend_from_slice(&h[r * d..(r + 1) * d]);
        }
        let (gate, up, down) = (
            w.gate.view(file, e),
            w.up.view(file, e),
            w.down.view(file, e),
        );
        s.gate.resize(m * ff, 0.0);
        s.up.resize(m * ff, 0.0);
        if ActKind::for_weights(gate.ty) == ActKind::for_weights(up.ty)
            && ActKind::for_weights(gate.ty) != ActKind::F32
        {
            // One quantization of the expert's input for both matrices (the same bits each
            // matmul would make).
            s.acts.quantize(pool, gate.ty, &s.xe, m, d);
            matmul_acts(pool, &gate, &s.acts, &mut s.gate);
            matmul_acts(pool, &up, &s.acts, &mut s.up);
        } else {
            matmul(pool, &gate, &s.xe, m, &mut s.gate);
            matmul(pool, &up, &s.xe, m, &mut s.up);
        }
        add_row_bias(&mut s.gate, w.gate_bias.as_deref(), e, ff);
        add_row_bias(&mut s.up, w.up_bias.as_deref(), e, ff);
        let upv = &s.up;
        let act = cfg.act;
        par_rows(pool, &mut s.gate, ff, &|r, g| {
            let u = &upv[r * ff..(r + 1) * ff];
            match act {
                ExpertAct::Silu => silu_mul(g, u),
                ExpertAct::SwigluClamped { alpha, limit } => swiglu_clamped(g, u, alpha, limit),
            }
        });
        s.down.resize(m * d, 0.0);
        matmul(pool, &down, &s.gate, m, &mut s.down);
        add_row_bias(&mut s.down, w.down_bias.as_deref(), e, d);
        for (i, &(r, slot)) in rows.iter().enumerate() {
            let at = (r * k + slot) * d;
            s.y[at..at + d].copy_from_slice(&s.down[i * d..(i + 1) * d]);
        }
    }
    if let Some(sh) = &w.shared {
        // The shared expert: a dense SiLU-gated FFN over every row (row by row, like any
        // dense layer, so batch-invariant).
        let width = cfg.n_ff_shared;
        s.gate.resize(n * width, 0.0);
        s.up.resize(n * width, 0.0);
        matmul(pool, &sh.gate.view(file), h, n, &mut s.gate);
        matmul(pool, &sh.up.view(file), h, n, &mut s.up);
        let upv = &s.up;
        par_rows(pool, &mut s.gate, width, &|r, g| {
            silu_mul(g, &upv[r * width..(r + 1) * width])
        });
        s.shared.resize(n * d, 0.0);
        matmul(pool, &sh.down.view(file), &s.gate, n, &mut s.shared);
    }
    let (y, routes, shared) = (&s.y, &s.routes, &s.shared);
    par_rows(pool, &mut out[..n * d], d, &|r, o| {
        for slot in 0..k {
            let wk = routes[r * k + slot].1;
            let yk = &y[(r * k + slot) * d..(r * k + slot + 1) * d];
            if slot == 0 {
                o.iter_mut().zip(yk).for_each(|(o, &v)| *o = v * wk);
            } else {
                o.iter_mut().zip(yk).for_each(|(o, &v)| *o += v * wk);
            }
        }
        if let Some(sh) = &w.shared {
            // Added after the routed experts' sum; Qwen 2 MoE's scaled by
            // sigmoid(x · gate_inp) first.
            let ys = &shared[r * d..(r + 1) * d];
            match &sh.gate_inp {
                Some(gi) => {
                    let x = &h[r * d..(r + 1) * d];
                    let g: f32 = x.iter().zip(gi).map(|(a, b)| a * b).sum();
                    let gate = 1.0 / (1.0 + (-g).exp());
                    o.iter_mut().zip(ys).for_each(|(o, &v)| *o += v * gate);
                }
                None => o.iter_mut().zip(ys).for_each(|(o, &v)| *o += v),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n_used: usize, norm: bool, scale: f32) -> MoeConfig {
        MoeConfig {
            n_expert: 4,
            n_used,
            n_ff_exp: 8,
            norm_weights: norm,
            weights_scale: scale,
            gating: Gating::Softmax,
            act: ExpertAct::Silu,
            n_ff_shared: 0,
        }
    }

    #[test]
    fn routes_pick_the_largest_probabilities_in_order() {
        let logits = [0.5, 2.0, -1.0, 1.0];
        let mut out = Vec::new();
        route(&logits, &cfg(2, false, 1.0), &mut out);
        let e: Vec<usize> = out.iter().map(|p| p.0).collect();
        assert_eq!(e, [1, 3]);
        let z: f32 = logits.iter().map(|&l| (l - 2.0f32).exp()).sum();
        assert!((out[0].1 - 1.0 / z).abs() < 1e-6);
        assert!((out[1].1 - (-1.0f32).exp() / z).abs() < 1e-6);

        out.clear();
        route(&logits, &cfg(2, true, 2.0), &mut out);
        assert!((out[0].1 + out[1].1 - 2.0).abs() < 1e-6, "{out:?}");

        // Ties go to the lower index.
        out.clear();
        route(&[1.0, 3.0, 3.0, 0.0], &cfg(1, true, 1.0), &mut out);
        assert_eq!(out, [(1, 1.0)]);

        // gpt-oss: the chosen logits' own softmax.
        out.clear();
        let oss = MoeConfig {
            gating: Gating::SoftmaxOfChosen,
            ..cfg(2, false, 1.0)
        };
        route(&logits, &oss, &mut out);
        let e: Vec<usize> = out.iter().map(|p| p.0).collect();
        assert_eq!(e, [1, 3]);
        let w1 = 1.0 / (1.0 + (-1.0f32).exp());
        assert!(
            (out[0].1 - w1).abs() < 1e-6 && (out[1].1 - (1.0 - w1)).abs() < 1e-6,
            "{out:?}"
        );
    }
}
