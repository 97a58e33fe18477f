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

use crate::config::MoeConfig;
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
    acts: Activations,
}

/// Picks a token's experts from its router logits: `(expert, weight)` in selection order.
pub(crate) fn route(logits: &[f32], cfg: &MoeConfig, out: &mut Vec<(usize, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    let mut order: Vec<usize> = (0..probs.len()).collect();
    // Stable: equal probabilities keep the lower index first.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
    let chosen = &order[..cfg.n_used];
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
        let upv = &s.up;
        par_rows(pool, &mut s.gate, ff, &|r, g| {
            silu_mul(g, &upv[r * ff..(r + 1) * ff])
        });
        s.down.resize(m * d, 0.0);
        matmul(pool, &down, &s.gate, m, &mut s.down);
        for (i, &(r, slot)) in rows.iter().enumerate() {
            let at = (r * k + slot) * d;
            s.y[at..at + d].copy_from_slice(&s.down[i * d..(i + 1) * d]);
        }
    }
    let (y, routes) = (&s.y, &s.routes);
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
    }
}
