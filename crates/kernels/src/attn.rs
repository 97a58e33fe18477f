//! f32 vector math for the engine's attention and activations: scores of several query rows
//! against f16 keys, weighted sums of f16 values into several accumulator rows, `exp` for
//! softmax, and the GELU/SiLU gates of the feed-forward block.
//!
//! # Why each result is a fixed function of its own inputs
//! The engine's batch invariance needs every number a query produces to be computed by the
//! same float operations however the work around it is tiled. So each kernel here processes
//! several rows/keys at once only for register reuse, never by mixing them:
//! - [`attn_scores_f16`]: the score of (row r, key j) is one 16-lane FMA accumulator over
//!   the first `d / 16 · 16` elements (lane `l` takes elements `l, l+16, …` in order),
//!   folded as `m_l = L_l + L_{l+8}` and then `((m0+m1)+(m2+m3)) + ((m4+m5)+(m6+m7))`, plus
//!   the remaining elements in order — whatever the number of rows or keys in the call, and
//!   the same bits in the AVX2 spelling (two passes of eight lanes) and the AVX-512 one.
//! - [`attn_accumulate_f16`]: element (r, i) is `acc = fma(p[r][j], v[j][i], acc)` over the keys
//!   in call order; lanes never interact.
//! - [`exp_shift_sum`]: a fixed lane/tail split of the slice it is given.
//!
//! The AVX2 `exp` (and the gates built on it) and its scalar twin use the same range
//! reduction and the same fused polynomial, so they are bit-identical; the dot and
//! weighted-sum kernels agree with their in-order scalar references within float
//! reassociation (tests below). As in the rest of the crate, one ISA serves a whole process.
//!
//! The AVX2 spellings live in `attn_avx2`, the AVX-512 ones in `attn_avx512`, `exp`'s method
//! and the scalar twins in `vmath`; this module picks one per call (`Isa`) and holds the tests
//! that compare them.

#[cfg(target_arch = "x86_64")]
use crate::attn_avx2 as avx2;
use crate::block::Isa;
pub use crate::vmath::exp_f32;
use crate::vmath::{gelu_scalar, silu_scalar};
use half::f16;

/// Rows handled together by the score and accumulate kernels (register budget: 4 rows × 2
/// keys of 8-lane accumulators, or 4 rows × 16 values).
const ROWS: usize = 4;

/// The same on AVX-512, whose 32 registers hold 8 rows × 2 keys of 16-lane accumulators, or
/// 8 rows × 32 values: two queries' four heads (Gemma 3) per pass, each key or value row
/// widened from f16 once for both.
const ROWS_AVX512: usize = 8;

/// `out[r * keys.len() + j] = q[r] · keys[j]` for every row `r` of `q` (rows of `d`), on `isa`.
/// Each score is the same function of its row and key whatever else is in the call.
pub fn attn_scores_f16_isa(isa: Isa, q: &[f32], d: usize, keys: &[&[f16]], out: &mut [f32]) {
    assert!(
        d > 0 && q.len().is_multiple_of(d),
        "q is not whole rows of {d}"
    );
    let (rows, n) = (q.len() / d, keys.len());
    assert_eq!(out.len(), rows * n, "score buffer size");
    for k in keys {
        assert!(k.len() >= d, "key shorter than d");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        let step = if isa.is_avx512() { ROWS_AVX512 } else { ROWS };
        let mut r0 = 0;
        while r0 < rows {
            let rr = (rows - r0).min(step);
            let qr = &q[r0 * d..(r0 + rr) * d];
            let o = &mut out[r0 * n..(r0 + rr) * n];
            // SAFETY: an AVX2 `Isa` proves the CPU features (an AVX-512 one those too).
            unsafe {
                match rr {
                    8 => crate::attn_avx512::scores_rows::<8>(qr, d, keys, o),
                    7 => crate::attn_avx512::scores_rows::<7>(qr, d, keys, o),
                    6 => crate::attn_avx512::scores_rows::<6>(qr, d, keys, o),
                    5 => crate::attn_avx512::scores_rows::<5>(qr, d, keys, o),
                    4 if isa.is_avx512() => crate::attn_avx512::scores_rows::<4>(qr, d, keys, o),
                    3 if isa.is_avx512() => crate::attn_avx512::scores_rows::<3>(qr, d, keys, o),
                    2 if isa.is_avx512() => crate::attn_avx512::scores_rows::<2>(qr, d, keys, o),
                    1 if isa.is_avx512() => crate::attn_avx512::scores_rows::<1>(qr, d, keys, o),
                    4 => avx2::scores_rows::<4>(qr, d, keys, o),
                    3 => avx2::scores_rows::<3>(qr, d, keys, o),
                    2 => avx2::scores_rows::<2>(qr, d, keys, o),
                    _ => avx2::scores_rows::<1>(qr, d, keys, o),
                }
            }
            r0 += rr;
        }
        return;
    }
    let _ = isa;
    for r in 0..rows {
        let qr = &q[r * d..(r + 1) * d];
        for (j, k) in keys.iter().enumerate() {
            let mut s = 0.0f32;
            for (kv, &qv) in k[..d].iter().zip(qr) {
                s += kv.to_f32() * qv;
            }
            out[r * n + j] = s;
        }
    }
}

/// `acc[r] += Σ_j p[r * vs.len() + j] · vs[j]` for every row `r` of `acc` (rows of `d`), keys
/// in order, on `isa`. Each element is the same function of its own inputs whatever the
/// number of rows.
pub fn attn_accumulate_f16_isa(isa: Isa, acc: &mut [f32], d: usize, p: &[f32], vs: &[&[f16]]) {
    assert!(
        d > 0 && acc.len().is_multiple_of(d),
        "acc is not whole rows of {d}"
    );
    let (rows, n) = (acc.len() / d, vs.len());
    assert_eq!(p.len(), rows * n, "weight buffer size");
    for v in vs {
        assert!(v.len() >= d, "value shorter than d");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        let step = if isa.is_avx512() { ROWS_AVX512 } else { ROWS };
        let mut r0 = 0;
        while r0 < rows {
            let rr = (rows - r0).min(step);
            let a = &mut acc[r0 * d..(r0 + rr) * d];
            let pr = &p[r0 * n..(r0 + rr) * n];
            // SAFETY: an AVX2 `Isa` proves the CPU features (an AVX-512 one those too).
            unsafe {
                match rr {
                    8 => crate::attn_avx512::accumulate::<8>(a, d, pr, vs),
                    7 => crate::attn_avx512::accumulate::<7>(a, d, pr, vs),
                    6 => crate::attn_avx512::accumulate::<6>(a, d, pr, vs),
                    5 => crate::attn_avx512::accumulate::<5>(a, d, pr, vs),
                    4 if isa.is_avx512() => crate::attn_avx512::accumulate::<4>(a, d, pr, vs),
                    3 if isa.is_avx512() => crate::attn_avx512::accumulate::<3>(a, d, pr, vs),
                    2 if isa.is_avx512() => crate::attn_avx512::accumulate::<2>(a, d, pr, vs),
                    1 if isa.is_avx512() => crate::attn_avx512::accumulate::<1>(a, d, pr, vs),
                    4 => avx2::accumulate::<4>(a, d, pr, vs),
                    3 => avx2::accumulate::<3>(a, d, pr, vs),
                    2 => avx2::accumulate::<2>(a, d, pr, vs),
                    _ => avx2::accumulate::<1>(a, d, pr, vs),
                }
            }
            r0 += rr;
        }
        return;
    }
    let _ = isa;
    for r in 0..rows {
        for (j, v) in vs.iter().enumerate() {
            let w = p[r * n + j];
            for (a, x) in acc[r * d..(r + 1) * d].iter_mut().zip(&v[..d]) {
                *a += w * x.to_f32();
            }
        }
    }
}

/// `x[i] = exp(x[i] - shift)` in place; returns `Σ x[i]` (8 lane sums, then the tail in
/// order), on `isa`.
pub fn exp_shift_sum_isa(isa: Isa, x: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::exp_shift_sum(x, shift) };
    }
    let _ = isa;
    let mut s = 0.0;
    for v in x.iter_mut() {
        *v = exp_f32(*v - shift);
        s += *v;
    }
    s
}

/// `gate[i] = gelu_tanh(gate[i]) * up[i]` on `isa` (bit-identical across ISAs).
pub fn gelu_tanh_mul_isa(isa: Isa, gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() {
        // SAFETY: an AVX-512 `Isa` proves the CPU features.
        return unsafe { crate::attn_avx512::gelu_tanh_mul(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::gate(gate, up, |x| avx2::gelu8(x), gelu_scalar) };
    }
    let _ = isa;
    assert_eq!(gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_scalar(*g) * u;
    }
}

/// `gate[i] = silu(gate[i]) * up[i]` on `isa` (bit-identical across ISAs).
pub fn silu_mul_isa(isa: Isa, gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx512() {
        // SAFETY: an AVX-512 `Isa` proves the CPU features.
        return unsafe { crate::attn_avx512::silu_mul(gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::gate(gate, up, |x| avx2::silu8(x), silu_scalar) };
    }
    let _ = isa;
    assert_eq!(gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu_scalar(*g) * u;
    }
}

/// [`attn_scores_f16_isa`] on the best ISA.
pub fn attn_scores_f16(q: &[f32], d: usize, keys: &[&[f16]], out: &mut [f32]) {
    attn_scores_f16_isa(Isa::best(), q, d, keys, out)
}

/// [`attn_accumulate_f16_isa`] on the best ISA.
pub fn attn_accumulate_f16(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[f16]]) {
    attn_accumulate_f16_isa(Isa::best(), acc, d, p, vs)
}

/// [`exp_shift_sum_isa`] on the best ISA.
pub fn exp_shift_sum(x: &mut [f32], shift: f32) -> f32 {
    exp_shift_sum_isa(Isa::best(), x, shift)
}

/// [`gelu_tanh_mul_isa`] on the best ISA.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    gelu_tanh_mul_isa(Isa::best(), gate, up)
}

/// [`silu_mul_isa`] on the best ISA.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    silu_mul_isa(Isa::best(), gate, up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmath::{GELU_CUBIC, SQRT_2_OVER_PI};

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 2001) as f32
                    / 1000.0
                    - 1.0
            })
            .collect()
    }

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp_f32(x), x.exp());
            worst = worst.max(ulps(a, b));
            x += 0.0137;
        }
        assert!(worst <= 3, "exp off by {worst} ulp");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(1000.0).is_finite());
    }

    #[test]
    fn exp_and_gates_are_bit_identical_across_isas() {
        for (isa, n) in Isa::available()
            .into_iter()
            .skip(1)
            .flat_map(|isa| [0, 1, 7, 8, 9, 16, 24, 33, 100].map(|n| (isa, n)))
        {
            let x: Vec<f32> = data(n, 3).iter().map(|v| v * 90.0).collect();
            let (mut a, mut b) = (x.clone(), x.clone());
            let sa = exp_shift_sum_isa(isa, &mut a, 1.5);
            let sb = exp_shift_sum_isa(Isa::scalar(), &mut b, 1.5);
            assert_eq!(a, b, "exp {} n={n}", isa.name());
            assert!((sa - sb).abs() <= 1e-6 * sb.abs(), "sum n={n}");
            let up = data(n, 4);
            let g: Vec<f32> = data(n, 5).iter().map(|v| v * 8.0).collect();
            let (mut a, mut b) = (g.clone(), g.clone());
            gelu_tanh_mul_isa(isa, &mut a, &up);
            gelu_tanh_mul_isa(Isa::scalar(), &mut b, &up);
            assert_eq!(bits(&a), bits(&b), "gelu {} n={n}", isa.name());
            let (mut a, mut b) = (g.clone(), g.clone());
            silu_mul_isa(isa, &mut a, &up);
            silu_mul_isa(Isa::scalar(), &mut b, &up);
            assert_eq!(bits(&a), bits(&b), "silu {} n={n}", isa.name());
        }
    }

    #[test]
    fn gelu_matches_tanh_form() {
        for i in -400..400 {
            let x = i as f32 / 40.0;
            let mut g = [x];
            gelu_tanh_mul_isa(Isa::best(), &mut g, &[1.0]);
            let want = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)).tanh());
            assert!((g[0] - want).abs() <= 2e-7 * (1.0 + x.abs()), "x={x}");
        }
    }

    fn halves(v: &[f32]) -> Vec<f16> {
        v.iter().map(|&x| f16::from_f32(x)).collect()
    }

    #[test]
    fn scores_and_accumulate_match_scalar() {
        let Some(isa) = Isa::avx2() else { return };
        for d in [8, 12, 16, 40, 256] {
            for rows in 1..=6 {
                for n in [1, 2, 3, 5] {
                    let q = data(rows * d, 1);
                    let keys: Vec<Vec<f16>> =
                        (0..n).map(|j| halves(&data(d, 10 + j as u32))).collect();
                    let kr: Vec<&[f16]> = keys.iter().map(|k| &k[..]).collect();
                    let mut s1 = vec![0.0; rows * n];
                    let mut s2 = vec![0.0; rows * n];
                    attn_scores_f16_isa(isa, &q, d, &kr, &mut s1);
                    attn_scores_f16_isa(Isa::scalar(), &q, d, &kr, &mut s2);
                    for (a, b) in s1.iter().zip(&s2) {
                        assert!(
                            (a - b).abs() <= 1e-5 * d as f32,
                            "scores d={d} rows={rows} n={n}"
                        );
                    }
                    let mut a1 = data(rows * d, 7);
                    let mut a2 = a1.clone();
                    attn_accumulate_f16_isa(isa, &mut a1, d, &s1, &kr);
                    attn_accumulate_f16_isa(Isa::scalar(), &mut a2, d, &s1, &kr);
                    for (a, b) in a1.iter().zip(&a2) {
                        assert!(
                            (a - b).abs() <= 1e-5 * d as f32,
                            "acc d={d} rows={rows} n={n}"
                        );
                    }
                }
            }
        }
    }

    /// Every SIMD spelling the machine has gives the AVX2 kernels' bits, scores and value
    /// sums (AVX-512's: 32, 16, then single elements) at sizes that reach every branch.
    #[test]
    fn scores_and_accumulate_are_bit_identical_across_spellings() {
        let Some(avx2) = Isa::avx2() else { return };
        for isa in Isa::available().into_iter().skip(2) {
            for d in [8, 12, 16, 40, 48, 256, 264] {
                for rows in 1..=11 {
                    for n in [1, 3, 4, 6, 9] {
                        let q = data(rows * d, 3);
                        let keys: Vec<Vec<f16>> =
                            (0..n).map(|j| halves(&data(d, 30 + j as u32))).collect();
                        let kr: Vec<&[f16]> = keys.iter().map(|k| &k[..]).collect();
                        let mut s1 = vec![0.0; rows * n];
                        let mut s2 = vec![0.0; rows * n];
                        attn_scores_f16_isa(avx2, &q, d, &kr, &mut s1);
                        attn_scores_f16_isa(isa, &q, d, &kr, &mut s2);
                        let what = format!("{} d={d} rows={rows} n={n}", isa.name());
                        assert_eq!(bits(&s1), bits(&s2), "scores {what}");
                        let mut a1 = data(rows * d, 8);
                        let mut a2 = a1.clone();
                        attn_accumulate_f16_isa(avx2, &mut a1, d, &s1, &kr);
                        attn_accumulate_f16_isa(isa, &mut a2, d, &s1, &kr);
                        assert_eq!(bits(&a1), bits(&a2), "value sums {what}");
                    }
                }
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn a_row_does_not_depend_on_its_neighbours() {
        // Row 0 alone, and row 0 among 5 rows and 3 keys, give bit-identical results.
        let d = 40;
        let q = data(5 * d, 1);
        let keys: Vec<Vec<f16>> = (0..3).map(|j| halves(&data(d, 20 + j))).collect();
        let kr: Vec<&[f16]> = keys.iter().map(|k| &k[..]).collect();
        let mut all = vec![0.0; 15];
        attn_scores_f16(&q, d, &kr, &mut all);
        for j in 0..3 {
            let mut one = [0.0];
            attn_scores_f16(&q[..d], d, &kr[j..j + 1], &mut one);
            assert_eq!(one[0], all[j]);
        }
        let mut acc_all = data(5 * d, 9);
        let mut acc_one = acc_all[..d].to_vec();
        attn_accumulate_f16(&mut acc_all, d, &all, &kr);
        attn_accumulate_f16(&mut acc_one, d, &all[..3], &kr);
        assert_eq!(acc_one, acc_all[..d]);
    }
}
