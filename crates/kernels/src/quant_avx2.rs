//! AVX2 activation quantizers, bit-identical to `legacy::quantize32` and
//! `BlockQ8K::from_f32`: the same `amax` (max is exact; NaN is skipped because the running
//! maximum is always the second operand of `max_ps`), the same scalar `d` and `1/d`, products
//! rounded with `round_ps` to nearest-even, NaN quantized to 0 (the scalar `as i32` does that),
//! and exact integer sums. ±inf cannot reach the conversion: it makes `amax` infinite and
//! `1/d` zero, so every product is 0 or NaN.

use crate::block::inv_or_zero;
use crate::kquants::BlockQ8K;
use std::arch::x86_64::*;

/// Largest |x| over `v`, NaN skipped.
#[inline]
#[target_feature(enable = "avx2")]
fn amax_ps(v: &[__m256]) -> f32 {
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for &x in v {
        m = _mm256_max_ps(_mm256_andnot_ps(sign, x), m);
    }
    let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_max_ss(h, _mm_movehdup_ps(h));
    _mm_cvtss_f32(h)
}

/// `round(x * id)` as i32 lanes, NaN → 0.
#[inline]
#[target_feature(enable = "avx2")]
fn quant8(x: __m256, id: __m256) -> __m256i {
    let p = _mm256_mul_ps(x, id);
    let r = _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    let ordered = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_ORD_Q));
    _mm256_and_si256(_mm256_cvtps_epi32(r), ordered)
}

/// Four vectors of i32 (each within -127..=127) → 32 i8 in element order.
#[inline]
#[target_feature(enable = "avx2")]
fn pack32(q: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(q[0], q[1]);
    let b = _mm256_packs_epi32(q[2], q[3]);
    let bytes = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

#[inline]
#[target_feature(enable = "avx2")]
fn load8(x: &[f32]) -> __m256 {
    assert!(x.len() >= 8);
    // SAFETY: 8 readable floats.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// `legacy::quantize32` for a full block.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize32(x: &[f32; 32]) -> (f32, [i8; 32], i32) {
    let v = [
        load8(&x[0..]),
        load8(&x[8..]),
        load8(&x[16..]),
        load8(&x[24..]),
    ];
    let d = amax_ps(&v) / 127.0;
    let id = _mm256_set1_ps(inv_or_zero(d));
    let q = [
        quant8(v[0], id),
        quant8(v[1], id),
        quant8(v[2], id),
        quant8(v[3], id),
    ];
    let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    let mut qs = [0i8; 32];
    // SAFETY: 32 writable bytes.
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), pack32(q)) };
    (d, qs, hsum_epi32(sum))
}

/// `BlockQ8K::from_f32` for a full super-block.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_q8k(x: &[f32; 256], out: &mut BlockQ8K) {
    // (Loops, not `array::from_fn`: its closures would not be inlined here.)
    let mut v = [_mm256_setzero_ps(); 32];
    for (i, vi) in v.iter_mut().enumerate() {
        *vi = load8(&x[8 * i..]);
    }
    let d = amax_ps(&v) / 127.0;
    let id = _mm256_set1_ps(inv_or_zero(d));
    out.d = d;
    // Group sums: group g (16 values) is vectors 2g and 2g+1.
    let mut groups = [_mm256_setzero_si256(); 16];
    for c in 0..8 {
        let q = [
            quant8(v[4 * c], id),
            quant8(v[4 * c + 1], id),
            quant8(v[4 * c + 2], id),
            quant8(v[4 * c + 3], id),
        ];
        groups[2 * c] = _mm256_add_epi32(q[0], q[1]);
        groups[2 * c + 1] = _mm256_add_epi32(q[2], q[3]);
        // SAFETY: 32 writable bytes at offset 32c of the 256.
        unsafe { _mm256_storeu_si256(out.qs.as_mut_ptr().add(32 * c).cast(), pack32(q)) };
    }
    for (s, g) in out.bsums.iter_mut().zip(groups) {
        *s = hsum_epi32(g) as i16;
    }
    out.fill_sums32();
}
