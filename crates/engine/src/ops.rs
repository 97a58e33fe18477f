//! Row-wise operations of the forward pass: RMSNorm and RoPE. (Matmul, attention and the
//! GELU/SiLU gates are vector kernels in `ferrox_kernels`.)
//!
//! Each works on one row at a time with a fixed order of float operations, so a row's result
//! never depends on which other rows share the step (batch invariance). [`par_rows`] spreads
//! such a row operation over the thread pool: it decides only which thread computes a row.

use ferrox_kernels::ThreadPool;

use crate::config::{RopeStyle, Yarn};

/// Rows from which [`par_rows`] hands the work to the pool (below, one thread does it: a
/// decode step's few rows cost less than waking the pool).
const PAR_MIN_ROWS: usize = 4;

/// `f(r, row)` for every row `r` of `x` (rows of `width` values), the rows split into one
/// contiguous range per pool thread. Between the big matmuls of a prefill step these row
/// operations (norms, RoPE, the FFN gate) were the only serial work, ~9 % of the default
/// model's prefill with the second thread waiting.
pub fn par_rows(
    pool: &ThreadPool,
    x: &mut [f32],
    width: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    assert!(
        width > 0 && x.len().is_multiple_of(width),
        "x is not whole rows of {width}"
    );
    let n = x.len() / width;
    let tasks = pool.n_threads().min(n);
    if n < PAR_MIN_ROWS || tasks <= 1 {
        for (r, row) in x.chunks_exact_mut(width).enumerate() {
            f(r, row);
        }
        return;
    }
    struct Rows(*mut f32);
    // SAFETY: each task touches only its own range of rows (below), disjoint from the others.
    unsafe impl Sync for Rows {}
    let rows = Rows(x.as_mut_ptr());
    let rows = &rows;
    pool.for_each(tasks, &|t| {
        for r in n * t / tasks..n * (t + 1) / tasks {
            // SAFETY: row `r` lies inside `x` (r < n) and belongs to this task alone; `x` is
            // borrowed mutably for the whole call, which returns after every task.
            let row = unsafe { std::slice::from_raw_parts_mut(rows.0.add(r * width), width) };
            f(r, row);
        }
    });
}

/// RMSNorm of `x` in place: x / sqrt(mean(x²) + eps) * w.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let mut sum = 0.0f64;
    for &v in x.iter() {
        sum += (v as f64) * (v as f64);
    }
    let scale = (1.0 / (sum / x.len() as f64 + eps as f64).sqrt()) as f32;
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// RMSNorm of every row of `x` (rows of `w.len()`).
pub fn rms_norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        rms_norm(row, w, eps);
    }
}

/// The rotary frequencies base^(-2i/d) for i in 0..d/2, scaled by `freq_scale`.
pub fn rope_freqs(head_dim: usize, base: f32, freq_scale: f32) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| freq_scale * base.powf(-2.0 * i as f32 / head_dim as f32))
        .collect()
}

/// YaRN's frequencies (llama.cpp's `rope_yarn` with its default extrapolation mix of 1):
/// each pair's angle blends the scaled angle (`freq_scale ·`, interpolation) with the
/// unscaled one (extrapolation) by a ramp that is 1 for the fast-rotating pairs below the
/// dimension where a pair turns `beta_fast` times over the original context, and 0 above the
/// one where it turns `beta_slow` times. Angles are linear in the position, so the blend is a
/// per-pair frequency; YaRN's magnitude factor is [`Yarn::mscale`], applied by
/// [`rope_table`].
pub fn rope_freqs_yarn(head_dim: usize, base: f32, freq_scale: f32, y: &Yarn) -> Vec<f32> {
    let n = head_dim as f32;
    let turns_at = |beta: f32| {
        n * (y.orig_ctx as f32 / (beta * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
    };
    let low = turns_at(y.beta_fast).floor().max(0.0);
    let high = turns_at(y.beta_slow).ceil().min(n - 1.0);
    (0..head_dim / 2)
        .map(|i| {
            let extrapolated = base.powf(-2.0 * i as f32 / n);
            let ramp = 1.0 - ((i as f32 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
            extrapolated * (freq_scale * (1.0 - ramp) + ramp)
        })
        .collect()
}

/// The RoPE rotations of one step: for each query row, `cos` and `sin` of `pos · freq` for
/// every frequency. A step computes them once per row and frequency set and every head of
/// every layer of that kind reuses them (Gemma 3 270M: 18 layers × 5 heads per token, so
/// 90× fewer `sin_cos` calls; same values, so results are unchanged).
#[derive(Default)]
pub struct RopeTable {
    half: usize,
    /// Row `r`: `half` cosines, then `half` sines.
    cs: Vec<f32>,
}

impl RopeTable {
    /// The cosines and sines of row `r`.
    pub fn row(&self, r: usize) -> (&[f32], &[f32]) {
        let row = &self.cs[2 * r * self.half..2 * (r + 1) * self.half];
        row.split_at(self.half)
    }
}

/// Fills `table` for rows at `positions` with `freqs` from [`rope_freqs`] (or
/// [`rope_freqs_yarn`]), cos and sin multiplied by `mscale` (1 but for YaRN).
pub fn rope_table(table: &mut RopeTable, positions: &[usize], freqs: &[f32], mscale: f32) {
    table.half = freqs.len();
    table.cs.resize(2 * positions.len() * freqs.len(), 0.0);
    for (row, &pos) in table.cs.chunks_exact_mut(2 * freqs.len()).zip(positions) {
        let (cos, sin) = row.split_at_mut(freqs.len());
        for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(freqs) {
            (*s, *c) = (pos as f32 * f).sin_cos();
            if mscale != 1.0 {
                *s *= mscale;
                *c *= mscale;
            }
        }
    }
}

/// Rotates the pairs of one head vector by the angles whose `cos`/`sin` are given (a row of a
/// [`RopeTable`]): the first `2 · cos.len()` values (the whole head, or GLM-4's first half),
/// the rest left as they are.
pub fn rope_with(x: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    let half = cos.len().min(x.len() / 2);
    for (i, (&cos, &sin)) in cos.iter().zip(sin).enumerate().take(half) {
        let (a, b) = match style {
            RopeStyle::Neox => (i, i + half),
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * cos - x1 * sin;
        x[b] = x0 * sin + x1 * cos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(x: &mut [f32], pos: usize, freqs: &[f32], style: RopeStyle) {
        let mut table = RopeTable::default();
        rope_table(&mut table, &[pos], freqs, 1.0);
        let (cos, sin) = table.row(0);
        rope_with(x, cos, sin, style);
    }

    #[test]
    fn rms_norm_unit_rows() {
        let mut x = vec![3.0, 4.0];
        rms_norm(&mut x, &[1.0, 2.0], 0.0);
        let s = (12.5f32).sqrt();
        assert!((x[0] - 3.0 / s).abs() < 1e-6 && (x[1] - 8.0 / s).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs_by_style() {
        // At position 1 with a single pair, the pair rotates by 1 radian.
        let mut neox = vec![1.0, 0.0];
        rope(&mut neox, 1, &rope_freqs(2, 10000.0, 1.0), RopeStyle::Neox);
        assert!((neox[0] - 1f32.cos()).abs() < 1e-6 && (neox[1] - 1f32.sin()).abs() < 1e-6);
        // Four dims: NeoX pairs (0,2),(1,3); interleaved pairs (0,1),(2,3).
        let mut a = vec![1.0, 0.0, 0.0, 0.0];
        let f4 = rope_freqs(4, 10000.0, 1.0);
        rope(&mut a, 1, &f4, RopeStyle::Neox);
        assert!(a[1] == 0.0 && a[2] != 0.0);
        let mut b = vec![1.0, 0.0, 0.0, 0.0];
        rope(&mut b, 1, &f4, RopeStyle::Interleaved);
        assert!(b[1] != 0.0 && b[2] == 0.0);
    }
}
