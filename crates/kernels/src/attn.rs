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
//! # exp
//! `exp(x) = 2^n · p(r)`, `n = round(x·log2 e)`, `r = x − n·ln 2` (Cody–Waite split in two
//! constants, exact for |n| ≤ 128), `p` the degree-6 Taylor polynomial of `e^r` on
//! |r| ≤ ln2/2 (truncation below 1.3e-7 relative). Inputs below −87.3 give 0, inputs above
//! 88.3 are clamped (softmax never sees them: its arguments are ≤ 0). Measured against
//! `f32::exp` in `exp_is_accurate`: within 3 ulp.

use crate::block::Isa;
use half::f16;

pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split: `LN2_HI` has 9 significant bits, so `n * LN2_HI` is exact for |n| ≤ 128.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
pub(crate) const EXP_MIN: f32 = -87.3;
pub(crate) const EXP_MAX: f32 = 88.3;
/// 1/k! for k = 6 down to 0 (Horner order).
pub(crate) const TAYLOR: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
pub(crate) const SQRT_2_OVER_PI: f32 = 0.797_884_6;
pub(crate) const GELU_CUBIC: f32 = 0.044_715;

/// `e^x` by the method in the module doc (bit-identical to the AVX2 lanes).
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let n = (xc * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, xc);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = TAYLOR[0];
    for &c in &TAYLOR[1..] {
        p = p.mul_add(r, c);
    }
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    // `!(x >= MIN)` also sends NaN to 0, as the AVX2 mask does.
    if x >= EXP_MIN {
        p * scale
    } else {
        0.0
    }
}

/// GELU (tanh form) of `x`: `0.5·x·(1 + tanh(y))`, `y = √(2/π)·(x + 0.044715 x³)`, with
/// `tanh` from one `exp`. The algebraically equal `x · sigmoid(2y)` is more accurate for
/// negative `x` (no `1 + tanh` cancellation) but was rejected: on Gemma 3 270M it moved the
/// golden "haiku" continuation's deciding logit gap from +0.20 to −0.11 (llama.cpp: +0.59,
/// f64 reference: +0.60), flipping the token; this form gives +0.30 (2026-11-30).
#[inline]
pub(crate) fn gelu_scalar(x: f32) -> f32 {
    let inner = (GELU_CUBIC * x * x).mul_add(x, x);
    let y = SQRT_2_OVER_PI * inner;
    // tanh(y) = 1 - 2 / (e^(2y) + 1), odd: computed on |y| and given y's sign.
    let t = 1.0 - 2.0 / (exp_f32(2.0 * y.abs()) + 1.0);
    let t = t.copysign(y);
    0.5 * x * (1.0 + t)
}

#[inline]
pub(crate) fn silu_scalar(x: f32) -> f32 {
    x / (1.0 + exp_f32(-x))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp8(x: __m256) -> __m256 {
        let xc = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)),
            _mm256_set1_ps(EXP_MAX),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, _mm256_set1_ps(LOG2E)),
        );
        let neg_n = _mm256_sub_ps(_mm256_setzero_ps(), n);
        let r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(LN2_HI), xc);
        let r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(TAYLOR[0]);
        for &c in &TAYLOR[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
        let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(EXP_MIN));
        _mm256_and_ps(y, keep)
    }

    /// A score's elements past the sixteen-lane part (`from..d`), in order, onto `s`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn score_tail(mut s: f32, q: &[f32], r: usize, d: usize, key: &[f16], from: usize) -> f32 {
        for t in from..d {
            s = key[t].to_f32().mul_add(q[r * d + t], s);
        }
        s
    }

    /// The lane sums of 4 accumulators, each as `((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7))`
    /// whichever slot it is in and whatever the other three hold.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn reduce4(v: [__m256; 4]) -> [f32; 4] {
        let h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
        let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let mut out = [0.0f32; 4];
        // SAFETY: `out` holds 4 f32; the store is unaligned.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), s) };
        out
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Unaligned vector loads and stores written as masked moves with an all-ones mask, at
    /// `wrapping_add` offsets; LLVM folds them into plain `vmovups`/`vcvtph2ps` from memory.
    /// Why not `_mm256_loadu_ps` and `ptr::add`: the workspace's dev profile (the one `ferrox
    /// bench` is built with) keeps debug assertions, and with them the standard library's UB
    /// precondition checks inside `ptr::add`, raw-pointer dereference and the
    /// `copy_nonoverlapping` behind `_mm256_loadu_ps`. In these loops those checks made LLVM
    /// bounce every vector through the stack, and a `repr(packed)` read still paid a null
    /// check per load. Measured 2026-11-30 on the shared Zen 3 (thread CPU time, opt-level 3
    /// with debug assertions, 4 rows × 512 keys × 256 dims): scores 15 → 22-27 GFMA/s per
    /// thread and value sums 17 → 25-31 GFMA/s going from packed reads to masked moves; the
    /// same code without debug assertions runs at 30-35.
    #[inline(always)]
    fn ones() -> __m256i {
        // SAFETY: AVX is enabled in every caller (all are `target_feature` AVX2 functions).
        unsafe { _mm256_set1_epi32(-1) }
    }

    /// # Safety
    /// `p` must point to 8 readable f32; AVX2 must be available.
    #[inline(always)]
    unsafe fn ld(p: *const f32) -> __m256 {
        // SAFETY: per the contract.
        unsafe { _mm256_maskload_ps(p, ones()) }
    }

    /// # Safety
    /// `p` must point to 8 writable f32; AVX2 must be available.
    #[inline(always)]
    unsafe fn st(p: *mut f32, v: __m256) {
        // SAFETY: per the contract.
        unsafe { _mm256_maskstore_ps(p, ones(), v) }
    }

    /// # Safety
    /// `p` must point to 8 readable f16; AVX2 and F16C must be available.
    #[inline(always)]
    unsafe fn ld_f16(p: *const f16) -> __m256 {
        // SAFETY: per the contract.
        unsafe {
            let h = _mm_maskload_epi32(p.cast(), _mm_set1_epi32(-1));
            _mm256_cvtph_ps(h)
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn load_f32(p: &[f32], i: usize) -> __m256 {
        assert!(i + 8 <= p.len());
        // SAFETY: 8 values from i are in bounds (checked above).
        unsafe { ld(p.as_ptr().wrapping_add(i)) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn store_f32(p: &mut [f32], i: usize, v: __m256) {
        assert!(i + 8 <= p.len());
        // SAFETY: 8 values from i are in bounds (checked above).
        unsafe { st(p.as_mut_ptr().wrapping_add(i), v) }
    }

    /// Scores of `R` rows of `q` (each `d` long) against `K` keys (see the module doc).
    ///
    /// Sixteen lanes (the AVX-512 kernel's vector) in two passes of eight: lanes 0..8 take
    /// elements `16c..16c+8`, lanes 8..16 elements `16c+8..16c+16`; eight lanes at a time
    /// keep the `R·K` accumulators in the sixteen AVX2 registers.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scores<const R: usize, const K: usize>(
        q: &[f32],
        d: usize,
        keys: [&[f16]; K],
    ) -> [[f32; R]; K] {
        assert!(q.len() >= R * d);
        for k in &keys {
            assert!(k.len() >= d);
        }
        let d16 = d / 16 * 16;
        // (Loops, not `array::from_fn` / `map`: their closures would not be inlined here.)
        let mut qp = [q.as_ptr(); R];
        for (r, p) in qp.iter_mut().enumerate() {
            *p = q[r * d..].as_ptr();
        }
        let mut kp = [keys[0].as_ptr(); K];
        for (p, k) in kp.iter_mut().zip(keys) {
            *p = k.as_ptr();
        }
        let mut half = [[[_mm256_setzero_ps(); R]; K]; 2];
        for (h, acc) in half.iter_mut().enumerate() {
            let mut i = 8 * h;
            while i < d16 {
                // SAFETY: i + 8 <= d16 <= d, and every key has d values and q has R rows of
                // d (asserted).
                unsafe {
                    let mut kv = [_mm256_setzero_ps(); K];
                    for j in 0..K {
                        kv[j] = ld_f16(kp[j].wrapping_add(i));
                    }
                    for r in 0..R {
                        let qv = ld(qp[r].wrapping_add(i));
                        for j in 0..K {
                            acc[j][r] = _mm256_fmadd_ps(kv[j], qv, acc[j][r]);
                        }
                    }
                }
                i += 16;
            }
        }
        let mut out = [[0.0f32; R]; K];
        let mut flat = [[_mm256_setzero_ps(); 4]; 2];
        for j in 0..K {
            for r in 0..R {
                flat[(j * R + r) / 4][(j * R + r) % 4] =
                    _mm256_add_ps(half[0][j][r], half[1][j][r]);
            }
        }
        let sums = [reduce4(flat[0]), reduce4(flat[1])];
        for j in 0..K {
            for r in 0..R {
                out[j][r] = score_tail(
                    sums[(j * R + r) / 4][(j * R + r) % 4],
                    q,
                    r,
                    d,
                    keys[j],
                    d16,
                );
            }
        }
        out
    }

    /// `out[r * keys.len() + j]` = score of row `r` of `q` (`R` rows) and key `j`, keys in
    /// pairs.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scores_rows<const R: usize>(q: &[f32], d: usize, keys: &[&[f16]], out: &mut [f32]) {
        let n = keys.len();
        assert!(out.len() >= R * n);
        let mut j = 0;
        while j + 2 <= n {
            let s = scores::<R, 2>(q, d, [keys[j], keys[j + 1]]);
            for r in 0..R {
                out[r * n + j] = s[0][r];
                out[r * n + j + 1] = s[1][r];
            }
            j += 2;
        }
        if j < n {
            let s = scores::<R, 1>(q, d, [keys[j]]);
            for r in 0..R {
                out[r * n + j] = s[0][r];
            }
        }
    }

    /// `acc[r] += Σ_j p[r * n + j] · vs[j]` for `R` rows of `d` (see the module doc).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn accumulate<const R: usize>(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[f16]]) {
        let n = vs.len();
        assert!(acc.len() >= R * d && p.len() >= R * n);
        for v in vs {
            assert!(v.len() >= d);
        }
        let d16 = d / 16 * 16;
        let mut ap = [acc.as_mut_ptr(); R];
        for (r, a) in ap.iter_mut().enumerate() {
            *a = acc[r * d..].as_mut_ptr();
        }
        let mut pp = [p.as_ptr(); R];
        for (r, q) in pp.iter_mut().enumerate() {
            *q = p[r * n..].as_ptr();
        }
        let mut i = 0;
        while i < d16 {
            // SAFETY: i + 16 <= d; acc has R rows of d, p has R rows of n, every value row
            // has d values (asserted above).
            unsafe {
                let mut a = [[_mm256_setzero_ps(); 2]; R];
                for (r, a) in a.iter_mut().enumerate() {
                    let row = ap[r].wrapping_add(i);
                    *a = [ld(row), ld(row.wrapping_add(8))];
                }
                for (j, v) in vs.iter().enumerate() {
                    let vp = v.as_ptr().wrapping_add(i);
                    let (v0, v1) = (ld_f16(vp), ld_f16(vp.wrapping_add(8)));
                    for (r, a) in a.iter_mut().enumerate() {
                        let w = _mm256_set1_ps(*pp[r].wrapping_add(j));
                        a[0] = _mm256_fmadd_ps(w, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(w, v1, a[1]);
                    }
                }
                for (r, a) in a.iter().enumerate() {
                    let row = ap[r].wrapping_add(i);
                    st(row, a[0]);
                    st(row.wrapping_add(8), a[1]);
                }
            }
            i += 16;
        }
        // Remainder: the same per-element fused sequence.
        accumulate_tail::<R>(acc, d, p, vs, d16);
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn exp_shift_sum(x: &mut [f32], shift: f32) -> f32 {
        let n8 = x.len() / 8 * 8;
        let sh = _mm256_set1_ps(shift);
        let mut sum = _mm256_setzero_ps();
        let mut i = 0;
        while i < n8 {
            let e = exp8(_mm256_sub_ps(load_f32(x, i), sh));
            store_f32(x, i, e);
            sum = _mm256_add_ps(sum, e);
            i += 8;
        }
        let mut s = hsum(sum);
        for v in &mut x[n8..] {
            *v = exp_f32(*v - shift);
            s += *v;
        }
        s
    }

    /// `gate[i] = f(gate[i]) * up[i]` with `f8` on full lanes and `f1` on the tail.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gate(
        gate: &mut [f32],
        up: &[f32],
        f8: impl Fn(__m256) -> __m256,
        f1: impl Fn(f32) -> f32,
    ) {
        assert_eq!(gate.len(), up.len());
        let n8 = gate.len() / 8 * 8;
        let mut i = 0;
        while i < n8 {
            let g = f8(load_f32(gate, i));
            store_f32(gate, i, _mm256_mul_ps(g, load_f32(up, i)));
            i += 8;
        }
        for (g, &u) in gate[n8..].iter_mut().zip(&up[n8..]) {
            *g = f1(*g) * u;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu8(x: __m256) -> __m256 {
        let x2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_CUBIC), x), x);
        let inner = _mm256_fmadd_ps(x2, x, x);
        let y = _mm256_mul_ps(_mm256_set1_ps(SQRT_2_OVER_PI), inner);
        let sign = _mm256_set1_ps(-0.0);
        let abs2 = _mm256_mul_ps(_mm256_set1_ps(2.0), _mm256_andnot_ps(sign, y));
        let one = _mm256_set1_ps(1.0);
        let q = _mm256_div_ps(_mm256_set1_ps(2.0), _mm256_add_ps(exp8(abs2), one));
        let t = _mm256_sub_ps(one, q);
        let t = _mm256_or_ps(t, _mm256_and_ps(sign, y));
        let half_x = _mm256_mul_ps(_mm256_set1_ps(0.5), x);
        _mm256_mul_ps(half_x, _mm256_add_ps(one, t))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn silu8(x: __m256) -> __m256 {
        let z = _mm256_sub_ps(_mm256_setzero_ps(), x);
        let one = _mm256_set1_ps(1.0);
        _mm256_div_ps(x, _mm256_add_ps(one, exp8(z)))
    }
}

/// Elements `from..d` of the value sums of `R` rows (rows of `d` in `acc`, `vs.len()` weights
/// per row in `p`), one at a time: the fused sequence every SIMD kernel's lanes follow, for
/// the columns past their last full vector.
#[cfg(target_arch = "x86_64")]
pub(crate) fn accumulate_tail<const R: usize>(
    acc: &mut [f32],
    d: usize,
    p: &[f32],
    vs: &[&[f16]],
    from: usize,
) {
    let n = vs.len();
    for r in 0..R {
        for t in from..d {
            let mut s = acc[r * d + t];
            for (j, v) in vs.iter().enumerate() {
                s = p[r * n + j].mul_add(v[t].to_f32(), s);
            }
            acc[r * d + t] = s;
        }
    }
}

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
