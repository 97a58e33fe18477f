//! The AVX-512 twin of `attn`'s value-sum kernel, bit-identical to the AVX2 one: the sums
//! are element-wise (`acc = fma(p, v, acc)` over the keys in order), so sixteen elements per
//! vector instead of eight changes nothing but the count of instructions (default model,
//! pp512: +3 %).
//!
//! Not here: the scores. A 512-bit score kernel that keeps the AVX2 bits (two keys per
//! vector, each half taking the AVX2 8-lane sequence, folded by the same `reduce4`) was
//! built and measured slower (default model pp512 1,601 → 1,315–1,550 tok/s, interleaved):
//! joining two keys' halves and broadcasting the query row cost more than the FMAs saved.

use std::arch::x86_64::*;

use half::f16;

const ALL: i32 = -1;

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
    crate::attn::accumulate_tail::<R>(acc, d, p, vs, i);
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
