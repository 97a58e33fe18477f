//! The AVX-512 twins of `attn`'s AVX2 kernels, bit-identical to them.
//!
//! - Value sums: element-wise (`acc = fma(p, v, acc)` over the keys in order), so sixteen
//!   elements per vector instead of eight changes nothing but the count of instructions
//!   (default model, pp512: +3 %).
//! - Scores: `attn`'s order has sixteen lanes (the AVX2 kernel runs it as two passes of
//!   eight), so here one vector is one score's accumulator, and with 32 registers four keys
//!   share each query load (AVX2: two). The fold adds the two 256-bit halves and then takes
//!   the AVX2 kernel's `reduce4`. (An earlier 512-bit kernel that kept the old 8-lane order
//!   had to join two keys' halves per vector and was slower than AVX2.)
//! - Up to eight rows per pass (AVX2: four), so that two queries' four heads (Gemma 3) widen
//!   each f16 key and value row once between them; at more than four rows, two keys share a
//!   query load. Default model, pp512, `perf`: scores and value sums 16.5 % → 13.4 % of the
//!   CPU time.
//! - The feed-forward gates (GELU, SiLU): `attn`'s `exp` and gate formulas lane for lane,
//!   sixteen values per vector, then the AVX2 lanes and the scalar twin for the rest (all
//!   three give the same bits per value).

use std::arch::x86_64::*;

use half::f16;

use crate::attn_avx2 as avx2;
use crate::vmath::{
    gelu_scalar, silu_scalar, EXP_MAX, EXP_MIN, GELU_CUBIC, LN2_HI, LN2_LO, LOG2E, SQRT_2_OVER_PI,
    TAYLOR,
};

const ALL: i32 = -1;

/// `out[r * keys.len() + j]` = score of row `r` of `q` (`R` rows of `d`) and key `j`: keys
/// four at a time, then two, then one (each score's operations are the same either way).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub fn scores_rows<const R: usize>(q: &[f32], d: usize, keys: &[&[f16]], out: &mut [f32]) {
    let n = keys.len();
    assert!(out.len() >= R * n && q.len() >= R * d);
    for k in keys {
        assert!(k.len() >= d);
    }
    // Four keys share each query load up to four rows; at more rows, two (the accumulators
    // must stay in the 32 registers).
    let per = if R > 4 { 2 } else { 4 };
    let mut j = 0;
    while j < n {
        let take = (n - j).min(per);
        let s: [[f32; R]; 4] = match take {
            4 => scores::<R, 4>(q, d, [keys[j], keys[j + 1], keys[j + 2], keys[j + 3]]),
            3 => widen(scores::<R, 3>(q, d, [keys[j], keys[j + 1], keys[j + 2]])),
            2 => widen(scores::<R, 2>(q, d, [keys[j], keys[j + 1]])),
            _ => widen(scores::<R, 1>(q, d, [keys[j]])),
        };
        for (t, s) in s.iter().enumerate().take(take) {
            for r in 0..R {
                out[r * n + j + t] = s[r];
            }
        }
        j += take;
    }
}

/// `K` keys' scores as four (the rest zero).
#[inline(always)]
fn widen<const R: usize, const K: usize>(s: [[f32; R]; K]) -> [[f32; R]; 4] {
    let mut out = [[0.0; R]; 4];
    out[..K].copy_from_slice(&s);
    out
}

/// Scores of `R` rows of `q` against `K` keys, one 16-lane accumulator each.
// Index loops over the constant `R` and `K`: unrolled, they keep the accumulators in registers.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn scores<const R: usize, const K: usize>(q: &[f32], d: usize, keys: [&[f16]; K]) -> [[f32; R]; K] {
    let d16 = d / 16 * 16;
    let mut acc = [[_mm512_setzero_ps(); R]; K];
    let mut i = 0;
    while i < d16 {
        // SAFETY: i + 16 <= d; `q` holds R rows of d and every key d values (the caller
        // asserted); masked moves with all-ones masks are plain loads.
        unsafe {
            let mut kv = [_mm512_setzero_ps(); K];
            for (x, k) in kv.iter_mut().zip(&keys) {
                let p = k.as_ptr().wrapping_add(i);
                *x = _mm512_cvtph_ps(_mm256_maskload_epi32(p.cast(), _mm256_set1_epi32(ALL)));
            }
            for r in 0..R {
                let qv = _mm512_maskz_loadu_ps(ALL as u16, q.as_ptr().wrapping_add(r * d + i));
                for j in 0..K {
                    acc[j][r] = _mm512_fmadd_ps(kv[j], qv, acc[j][r]);
                }
            }
        }
        i += 16;
    }
    // Each accumulator's two halves added (the AVX2 kernel's two passes), then `reduce4` four
    // at a time, as there.
    let mut flat = [[_mm256_setzero_ps(); 4]; 4];
    for j in 0..K {
        for r in 0..R {
            let a = acc[j][r];
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
            flat[(j * R + r) / 4][(j * R + r) % 4] = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
        }
    }
    let mut sums = [[0.0f32; 4]; 4];
    for (s, f) in sums.iter_mut().zip(&flat).take((K * R).div_ceil(4)) {
        *s = avx2::reduce4(*f);
    }
    let mut out = [[0.0f32; R]; K];
    for j in 0..K {
        for r in 0..R {
            let s = sums[(j * R + r) / 4][(j * R + r) % 4];
            out[j][r] = avx2::score_tail(s, q, r, d, keys[j], d16);
        }
    }
    out
}

/// `acc[r] += Σ_j p[r * n + j] · vs[j]` for `R` rows of `d`, keys in order, 32 elements per
/// step, then 16, then one at a time (the same fused sequence per element as the AVX2 kernel).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub fn accumulate<const R: usize>(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[f16]]) {
    let n = vs.len();
    assert!(acc.len() >= R * d && p.len() >= R * n);
    for v in vs {
        assert!(v.len() >= d);
    }
    let mut i = 0;
    while i + 32 <= d {
        // SAFETY: i + 32 <= d (the contract of `columns`, with the asserts above).
        unsafe { columns::<R, 2>(acc, d, p, vs, i) };
        i += 32;
    }
    if i + 16 <= d {
        // SAFETY: i + 16 <= d, as above.
        unsafe { columns::<R, 1>(acc, d, p, vs, i) };
        i += 16;
    }
    avx2::accumulate_tail::<R>(acc, d, p, vs, i);
}

/// Elements `i .. i + 16 W` of the `R` rows of `acc`, over every key.
///
/// # Safety
/// `i + 16 W <= d`; `acc` holds `R` rows of `d`, `p` `R` rows of `vs.len()`, every value row
/// `d` values; AVX-512 F and F16C must be available.
#[inline(always)]
unsafe fn columns<const R: usize, const W: usize>(
    acc: &mut [f32],
    d: usize,
    p: &[f32],
    vs: &[&[f16]],
    i: usize,
) {
    let n = vs.len();
    // SAFETY: per the contract; masked moves with all-ones masks are plain loads and stores.
    unsafe {
        let mut a = [[_mm512_setzero_ps(); W]; R];
        for (r, a) in a.iter_mut().enumerate() {
            for (w, a) in a.iter_mut().enumerate() {
                *a = _mm512_maskz_loadu_ps(
                    ALL as u16,
                    acc.as_ptr().wrapping_add(r * d + i + 16 * w),
                );
            }
        }
        for (j, v) in vs.iter().enumerate() {
            let mut vv = [_mm512_setzero_ps(); W];
            for (w, x) in vv.iter_mut().enumerate() {
                let vp = v.as_ptr().wrapping_add(i + 16 * w);
                *x = _mm512_cvtph_ps(_mm256_maskload_epi32(vp.cast(), _mm256_set1_epi32(ALL)));
            }
            for (r, a) in a.iter_mut().enumerate() {
                let wt = _mm512_set1_ps(*p.as_ptr().wrapping_add(r * n + j));
                for (a, &x) in a.iter_mut().zip(&vv) {
                    *a = _mm512_fmadd_ps(wt, x, *a);
                }
            }
        }
        for (r, a) in a.iter().enumerate() {
            for (w, &a) in a.iter().enumerate() {
                let row = acc.as_mut_ptr().wrapping_add(r * d + i + 16 * w);
                _mm512_mask_storeu_ps(row, ALL as u16, a);
            }
        }
    }
}

/// `attn`'s AVX2 `exp` on sixteen lanes: the same operations in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn exp16(x: __m512) -> __m512 {
    let xc = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)),
        _mm512_set1_ps(EXP_MAX),
    );
    // Round to nearest even, as `_mm256_round_ps` there.
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(xc, _mm512_set1_ps(LOG2E)),
    );
    let neg_n = _mm512_sub_ps(_mm512_setzero_ps(), n);
    let r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(LN2_HI), xc);
    let r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(TAYLOR[0]);
    for &c in &TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(EXP_MIN));
    _mm512_maskz_mov_ps(keep, y)
}

/// `attn`'s AVX2 GELU (tanh form) on sixteen lanes.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn gelu16(x: __m512) -> __m512 {
    let x2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_CUBIC), x), x);
    let inner = _mm512_fmadd_ps(x2, x, x);
    let y = _mm512_mul_ps(_mm512_set1_ps(SQRT_2_OVER_PI), inner);
    // The sign bit's logic in integers (the float spellings need AVX-512 DQ).
    let sign = _mm512_set1_epi32(i32::MIN);
    let yi = _mm512_castps_si512(y);
    let abs = _mm512_castsi512_ps(_mm512_andnot_si512(sign, yi));
    let abs2 = _mm512_mul_ps(_mm512_set1_ps(2.0), abs);
    let one = _mm512_set1_ps(1.0);
    let q = _mm512_div_ps(_mm512_set1_ps(2.0), _mm512_add_ps(exp16(abs2), one));
    let t = _mm512_castps_si512(_mm512_sub_ps(one, q));
    let t = _mm512_castsi512_ps(_mm512_or_si512(t, _mm512_and_si512(sign, yi)));
    let half_x = _mm512_mul_ps(_mm512_set1_ps(0.5), x);
    _mm512_mul_ps(half_x, _mm512_add_ps(one, t))
}

/// `attn`'s AVX2 SiLU on sixteen lanes.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn silu16(x: __m512) -> __m512 {
    let z = _mm512_sub_ps(_mm512_setzero_ps(), x);
    let one = _mm512_set1_ps(1.0);
    _mm512_div_ps(x, _mm512_add_ps(one, exp16(z)))
}

/// `gate[i] = f(gate[i]) * up[i]`: `f16` on sixteen lanes at a time, the rest through the
/// AVX2 gate (eight lanes, then `f1` one value at a time).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
fn gate(
    gate: &mut [f32],
    up: &[f32],
    f16: impl Fn(__m512) -> __m512,
    f8: impl Fn(__m256) -> __m256,
    f1: impl Fn(f32) -> f32,
) {
    assert_eq!(gate.len(), up.len());
    let n16 = gate.len() / 16 * 16;
    for (g, u) in gate[..n16].chunks_exact_mut(16).zip(up.chunks_exact(16)) {
        // SAFETY: sixteen floats each.
        unsafe {
            let v = f16(_mm512_loadu_ps(g.as_ptr()));
            _mm512_storeu_ps(
                g.as_mut_ptr(),
                _mm512_mul_ps(v, _mm512_loadu_ps(u.as_ptr())),
            );
        }
    }
    avx2::gate(&mut gate[n16..], &up[n16..], f8, f1);
}

/// `attn::gelu_tanh_mul_isa` on AVX-512.
#[target_feature(enable = "avx2,fma,avx512f")]
pub fn gelu_tanh_mul(g: &mut [f32], up: &[f32]) {
    gate(g, up, |x| gelu16(x), |x| avx2::gelu8(x), gelu_scalar)
}

/// `attn::silu_mul_isa` on AVX-512.
#[target_feature(enable = "avx2,fma,avx512f")]
pub fn silu_mul(g: &mut [f32], up: &[f32]) {
    gate(g, up, |x| silu16(x), |x| avx2::silu8(x), silu_scalar)
}
