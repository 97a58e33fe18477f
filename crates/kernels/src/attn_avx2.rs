//! The AVX2 spellings of `attn`'s kernels (scores, value sums, `exp`, the gates), and the
//! scalar tail of the value sums that every SIMD spelling finishes with. `attn` dispatches
//! here; `attn_avx512` finishes its vectors' remainders here, lane for lane the same.

use std::arch::x86_64::*;

use half::f16;

use crate::vmath::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
pub fn exp8(x: __m256) -> __m256 {
    let xc = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)),
        _mm256_set1_ps(EXP_MAX),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        xc,
        _mm256_set1_ps(LOG2E),
    ));
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
            flat[(j * R + r) / 4][(j * R + r) % 4] = _mm256_add_ps(half[0][j][r], half[1][j][r]);
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
pub fn gate(gate: &mut [f32], up: &[f32], f8: impl Fn(__m256) -> __m256, f1: impl Fn(f32) -> f32) {
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

/// Elements `from..d` of the value sums of `R` rows (rows of `d` in `acc`, `vs.len()` weights
/// per row in `p`), one at a time: the fused sequence every SIMD kernel's lanes follow, for
/// the columns past their last full vector.
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
