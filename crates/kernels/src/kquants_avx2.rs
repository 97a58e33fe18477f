//! AVX2 kernels for the K formats; bit-identical to `kquants::dot_k_scalar`.
//!
//! Per super-block the weights are decoded once, 32 values at a time, into unsigned bytes
//! (Q2_K: 0..3, Q3_K: 0..7, Q4_K: 0..15, Q5_K: 0..31, Q6_K: 0..63), and for each of the `R`
//! activation rows `maddubs` (u8 × i8 → i16 pairs) then `madd` with the group scales
//! (i16 × i16 → i32) accumulate `Σ_g sc_g Σ q x` in eight i32 lanes. The signed formats'
//! offsets (Q3_K: q-4, Q6_K: q-32) are removed with the activation group sums:
//! `Σ_g sc_g Σ (u - o) x = Σ_g sc_g Σ u x - o Σ_g sc_g bsum_g`. The mins use the same bsums.
//! All of that is exact integer arithmetic, so the one float step per super-block
//! (`k_accumulate`) sees the same inputs as the scalar kernel.
//!
//! `maddubs` saturates at i16: the largest pair is 2*63*127 (Q6_K), which fits.

use crate::block::f16_to_f32;
use crate::kquants::{
    k_accumulate, unpack_scale_min_k4, unpack_scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K,
    BlockQ6K, BlockQ8K, KQuant,
};
use std::arch::x86_64::*;

/// A K format with an AVX2 kernel.
pub trait KAvx2: KQuant {
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R];
}

/// `R` rows of `dot(w, xs[r])`.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[inline]
pub unsafe fn dot<B: KAvx2, const R: usize>(w: &[B], xs: [&[BlockQ8K]; R]) -> [f32; R] {
    for x in &xs {
        assert!(x.len() >= w.len(), "activation row too short");
    }
    // SAFETY: forwarded from the caller.
    unsafe { B::dot_impl(w, xs) }
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
fn load32(p: &[i8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: at least 32 readable bytes.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn load32u(p: &[u8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: at least 32 readable bytes.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_bsums(x: &BlockQ8K) -> __m256i {
    // SAFETY: 16 i16 = 32 readable bytes.
    unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) }
}

/// i16 lanes: scale `a` for the first 16 values of a 32-value chunk, `b` for the second.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_pair(a: i32, b: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(b as i16), _mm_set1_epi16(a as i16))
}

#[inline]
#[target_feature(enable = "avx2")]
fn shift_right(v: __m256i, bits: usize) -> __m256i {
    _mm256_srl_epi16(v, _mm_cvtsi32_si128(bits as i32))
}

/// `acc[r] += madd(maddubs(q, x_r[off..off+32]), scales)` for every row.
#[inline]
#[target_feature(enable = "avx2")]
fn accumulate<const R: usize>(
    acc: &mut [__m256i; R],
    q: __m256i,
    scales: __m256i,
    xs: &[&BlockQ8K; R],
    off: usize,
) {
    for r in 0..R {
        let x = load32(&xs[r].qs[off..]);
        acc[r] = _mm256_add_epi32(
            acc[r],
            _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scales),
        );
    }
}

impl KAvx2 for BlockQ4K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
        let m4 = _mm256_set1_epi8(0x0F);
        let mut acc = [0.0f32; R];
        for (i, b) in w.iter().enumerate() {
            let (sc, mn) = unpack_scale_min_k4(&b.scales);
            let mins: [i16; 16] = std::array::from_fn(|g| mn[g / 2] as i16);
            // SAFETY: 16 i16 = 32 readable bytes.
            let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
            let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][i]);
            let mut ai = [_mm256_setzero_si256(); R];
            for j in 0..4 {
                let q = load32u(&b.qs[32 * j..]);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                let s = sc[2 * j] as i32;
                accumulate(&mut ai, lo, scale_pair(s, s), &x, 64 * j);
                let s = sc[2 * j + 1] as i32;
                accumulate(&mut ai, hi, scale_pair(s, s), &x, 64 * j + 32);
            }
            let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
            for r in 0..R {
                let summ = hsum_epi32(_mm256_madd_epi16(load_bsums(x[r]), mins));
                acc[r] = k_accumulate::<Self>(acc[r], d, dmin, x[r].d, hsum_epi32(ai[r]), summ);
            }
        }
        acc
    }
}

impl KAvx2 for BlockQ5K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
        let m4 = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        let mut acc = [0.0f32; R];
        for (i, b) in w.iter().enumerate() {
            let (sc, mn) = unpack_scale_min_k4(&b.scales);
            let mins: [i16; 16] = std::array::from_fn(|g| mn[g / 2] as i16);
            // SAFETY: 16 i16 = 32 readable bytes.
            let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
            let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][i]);
            let qh = load32u(&b.qh);
            let mut ai = [_mm256_setzero_si256(); R];
            for j in 0..4 {
                let q = load32u(&b.qs[32 * j..]);
                // Bit 2j of qh[l] is the fifth bit of value 64j + l, bit 2j+1 of 64j + 32 + l.
                let h_lo = _mm256_and_si256(_mm256_slli_epi16(shift_right(qh, 2 * j), 4), bit4);
                let h_hi = _mm256_and_si256(_mm256_slli_epi16(shift_right(qh, 2 * j + 1), 4), bit4);
                let lo = _mm256_or_si256(_mm256_and_si256(q, m4), h_lo);
                let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h_hi);
                let s = sc[2 * j] as i32;
                accumulate(&mut ai, lo, scale_pair(s, s), &x, 64 * j);
                let s = sc[2 * j + 1] as i32;
                accumulate(&mut ai, hi, scale_pair(s, s), &x, 64 * j + 32);
            }
            let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
            for r in 0..R {
                let summ = hsum_epi32(_mm256_madd_epi16(load_bsums(x[r]), mins));
                acc[r] = k_accumulate::<Self>(acc[r], d, dmin, x[r].d, hsum_epi32(ai[r]), summ);
            }
        }
        acc
    }
}

impl KAvx2 for BlockQ6K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x30);
        let mut acc = [0.0f32; R];
        for (i, b) in w.iter().enumerate() {
            let sc = b.scales;
            // SAFETY: 16 readable bytes.
            let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) });
            let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][i]);
            let mut ai = [_mm256_setzero_si256(); R];
            for n in 0..2 {
                let ql0 = load32u(&b.ql[64 * n..]);
                let ql1 = load32u(&b.ql[64 * n + 32..]);
                let qh = load32u(&b.qh[32 * n..]);
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                        _mm256_and_si256(qh, m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2),
                    ),
                ];
                for (k, &qk) in q.iter().enumerate() {
                    let g = 8 * n + 2 * k;
                    let sv = scale_pair(sc[g] as i32, sc[g + 1] as i32);
                    accumulate(&mut ai, qk, sv, &x, 128 * n + 32 * k);
                }
            }
            let d = f16_to_f32(b.d);
            for r in 0..R {
                let corr = hsum_epi32(_mm256_madd_epi16(load_bsums(x[r]), sc16));
                let sumi = hsum_epi32(ai[r]) - 32 * corr;
                acc[r] = k_accumulate::<Self>(acc[r], d, 0.0, x[r].d, sumi, 0);
            }
        }
        acc
    }
}

impl KAvx2 for BlockQ2K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
        let m3 = _mm256_set1_epi8(3);
        let mut acc = [0.0f32; R];
        for (i, b) in w.iter().enumerate() {
            let mins: [i16; 16] = std::array::from_fn(|g| (b.scales[g] >> 4) as i16);
            // SAFETY: 16 i16 = 32 readable bytes.
            let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
            let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][i]);
            let mut ai = [_mm256_setzero_si256(); R];
            for n in 0..2 {
                let qb = load32u(&b.qs[32 * n..]);
                for j in 0..4 {
                    let q = _mm256_and_si256(shift_right(qb, 2 * j), m3);
                    let g = 8 * n + 2 * j;
                    let sv =
                        scale_pair((b.scales[g] & 0x0F) as i32, (b.scales[g + 1] & 0x0F) as i32);
                    accumulate(&mut ai, q, sv, &x, 128 * n + 32 * j);
                }
            }
            let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
            for r in 0..R {
                let summ = hsum_epi32(_mm256_madd_epi16(load_bsums(x[r]), mins));
                acc[r] = k_accumulate::<Self>(acc[r], d, dmin, x[r].d, hsum_epi32(ai[r]), summ);
            }
        }
        acc
    }
}

impl KAvx2 for BlockQ3K {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dot_impl<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
        let m3 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let mut acc = [0.0f32; R];
        for (i, b) in w.iter().enumerate() {
            let sc = unpack_scales_q3k(&b.scales);
            // SAFETY: 16 readable bytes.
            let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) });
            let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][i]);
            let hm = load32u(&b.hmask);
            let mut ai = [_mm256_setzero_si256(); R];
            for n in 0..2 {
                let qb = load32u(&b.qs[32 * n..]);
                for j in 0..4 {
                    let low = _mm256_and_si256(shift_right(qb, 2 * j), m3);
                    let high = _mm256_and_si256(shift_right(hm, 4 * n + j), one);
                    let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                    let g = 8 * n + 2 * j;
                    accumulate(
                        &mut ai,
                        q,
                        scale_pair(sc[g] as i32, sc[g + 1] as i32),
                        &x,
                        128 * n + 32 * j,
                    );
                }
            }
            let d = f16_to_f32(b.d);
            for r in 0..R {
                let corr = hsum_epi32(_mm256_madd_epi16(load_bsums(x[r]), sc16));
                let sumi = hsum_epi32(ai[r]) - 4 * corr;
                acc[r] = k_accumulate::<Self>(acc[r], d, 0.0, x[r].d, sumi, 0);
            }
        }
        acc
    }
}
