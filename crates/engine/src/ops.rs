//! Row-wise operations of the forward pass (everything but matmul and attention).
//!
//! Each works on one row at a time with a fixed order of float operations, so a row's result
//! never depends on which other rows share the step (batch invariance).

use crate::config::RopeStyle;

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

/// Rotary position embedding of one head vector at `pos`, with `freqs` from [`rope_freqs`].
pub fn rope(x: &mut [f32], pos: usize, freqs: &[f32], style: RopeStyle) {
    let half = x.len() / 2;
    for (i, &f) in freqs.iter().enumerate().take(half) {
        let theta = pos as f32 * f;
        let (sin, cos) = theta.sin_cos();
        let (a, b) = match style {
            RopeStyle::Neox => (i, i + half),
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
        };
        let (x0, x1) = (x[a], x[b]);
        x[a] = x0 * cos - x1 * sin;
        x[b] = x0 * sin + x1 * cos;
    }
}

/// GELU, tanh approximation.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

/// SiLU: x * sigmoid(x).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

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
