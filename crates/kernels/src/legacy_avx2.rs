//! AVX2 kernels for the 32-value formats; bit-identical to `legacy::dot_legacy_scalar`.
//!
//! Per group of four weight blocks: each block is decoded once into 32 bytes (unsigned
//! nibbles for Q4/Q5, signed bytes for Q8), then for each of the `R` activation rows one
//! `maddubs` + `madd` gives eight i32 partial sums per block. Two `hadd` rounds and a lane
//! fold turn the four blocks' partials into one `[sumi0..sumi3]` vector (exact integers), and
//! the float term of `legacy::block_term` is applied to all four lanes at once. The offset
//! formats (Q4_0: q-8, Q5_0: q-16) multiply the unsigned quant and subtract `offset * isum`
//! afterwards, which saves the sign instruction per row that the signed formats need.
//!
//! `maddubs` saturates at i16: unsigned quants are at most 31 and activations at most 127 in
//! magnitude (2*31*127 fits); for Q8 weights `|w| <= 128` and `|x| <= 127` (2*128*127 fits).

use crate::block::fold4;
use crate::legacy::{
    add_block_terms, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, BlockQ8x4,
    Legacy32,
};
use std::arch::x86_64::*;

/// How a block decodes for the AVX2 kernel.
pub trait LegacyAvx2: Legacy32 {
    /// Quants are signed i8 (Q8): use |w| and sign(x, w).
    const SIGNED: bool;
    /// Subtracted from the unsigned quant (8 for Q4_0, 16 for Q5_0, else 0).
    const OFFSET: i32;
    /// The 32 quants in element order (unsigned unless `SIGNED`).
    ///
    /// # Safety
    /// AVX2 must be available.
    unsafe fn load_q(&self) -> __m256i;
}

#[inline]
#[target_feature(enable = "avx2")]
fn unpack_nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: 16 readable bytes.
    let b = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// 0x10 in byte j where bit j of `qh` is set, else 0.
#[inline]
#[target_feature(enable = "avx2")]
fn high_bit_bytes(qh: [u8; 4]) -> __m256i {
    let v = _mm256_set1_epi32(i32::from_le_bytes(qh));
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let hit = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), bit), bit);
    _mm256_and_si256(hit, _mm256_set1_epi8(0x10))
}

impl LegacyAvx2 for BlockQ4_0 {
    const SIGNED: bool = false;
    const OFFSET: i32 = 8;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        unpack_nibbles(&self.qs)
    }
}
impl LegacyAvx2 for BlockQ4_1 {
    const SIGNED: bool = false;
    const OFFSET: i32 = 0;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        unpack_nibbles(&self.qs)
    }
}
impl LegacyAvx2 for BlockQ5_0 {
    const SIGNED: bool = false;
    const OFFSET: i32 = 16;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        _mm256_or_si256(unpack_nibbles(&self.qs), high_bit_bytes(self.qh))
    }
}
impl LegacyAvx2 for BlockQ5_1 {
    const SIGNED: bool = false;
    const OFFSET: i32 = 0;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        _mm256_or_si256(unpack_nibbles(&self.qs), high_bit_bytes(self.qh))
    }
}
impl LegacyAvx2 for BlockQ8_0 {
    const SIGNED: bool = true;
    const OFFSET: i32 = 0;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        // SAFETY: 32 readable bytes.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) }
    }
}
impl LegacyAvx2 for BlockQ8_1 {
    const SIGNED: bool = true;
    const OFFSET: i32 = 0;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        // SAFETY: 32 readable bytes.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) }
    }
}

/// Four f16 scales → f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16x4(bits: [[u8; 2]; 4]) -> __m128 {
    let v = _mm_setr_epi16(
        i16::from_le_bytes(bits[0]),
        i16::from_le_bytes(bits[1]),
        i16::from_le_bytes(bits[2]),
        i16::from_le_bytes(bits[3]),
        0,
        0,
        0,
        0,
    );
    _mm_cvtph_ps(v)
}

/// Partial i32 dot (8 lanes) of one decoded block with one activation block.
#[inline]
#[target_feature(enable = "avx2")]
fn partial<B: LegacyAvx2>(wq: __m256i, wa: __m256i, x: &[i8; 32]) -> __m256i {
    // SAFETY: 32 readable bytes.
    let xv = unsafe { _mm256_loadu_si256(x.as_ptr().cast()) };
    let xv = if B::SIGNED {
        _mm256_sign_epi8(xv, wq)
    } else {
        xv
    };
    _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), _mm256_set1_epi16(1))
}

/// `R` rows of `dot(w, xs[r])`, bit-identical to the scalar reference.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_legacy<B: LegacyAvx2, const R: usize>(
    w: &[B],
    xs: [&[BlockQ8x4]; R],
) -> [f32; R] {
    let groups = w.len() / 4;
    for x in &xs {
        assert!(x.len() >= w.len().div_ceil(4), "activation row too short");
    }
    let mut acc = [_mm_setzero_ps(); R];
    for (g, wg) in w.chunks_exact(4).enumerate() {
        let dw = f16x4([
            wg[0].d_bits(),
            wg[1].d_bits(),
            wg[2].d_bits(),
            wg[3].d_bits(),
        ]);
        let mw = if B::HAS_MIN {
            f16x4([
                wg[0].m_bits(),
                wg[1].m_bits(),
                wg[2].m_bits(),
                wg[3].m_bits(),
            ])
        } else {
            _mm_setzero_ps()
        };
        // SAFETY: AVX2 is enabled in this function.
        let q0 = unsafe { wg[0].load_q() };
        let q1 = unsafe { wg[1].load_q() };
        let a0 = if B::SIGNED { _mm256_abs_epi8(q0) } else { q0 };
        let a1 = if B::SIGNED { _mm256_abs_epi8(q1) } else { q1 };
        let mut h01 = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let u = &xs[r][g];
            let p0 = partial::<B>(q0, a0, &u.qs[0]);
            let p1 = partial::<B>(q1, a1, &u.qs[1]);
            h01[r] = _mm256_hadd_epi32(p0, p1);
        }
        // SAFETY: AVX2 is enabled in this function.
        let q2 = unsafe { wg[2].load_q() };
        let q3 = unsafe { wg[3].load_q() };
        let a2 = if B::SIGNED { _mm256_abs_epi8(q2) } else { q2 };
        let a3 = if B::SIGNED { _mm256_abs_epi8(q3) } else { q3 };
        for r in 0..R {
            let u = &xs[r][g];
            let p2 = partial::<B>(q2, a2, &u.qs[2]);
            let p3 = partial::<B>(q3, a3, &u.qs[3]);
            let h = _mm256_hadd_epi32(h01[r], _mm256_hadd_epi32(p2, p3));
            let mut sumi = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            // SAFETY (loads below): the arrays have 4 lanes of 4 bytes.
            if B::OFFSET != 0 {
                let isum = unsafe { _mm_loadu_si128(u.isum.as_ptr().cast()) };
                sumi = _mm_sub_epi32(sumi, _mm_mullo_epi32(isum, _mm_set1_epi32(B::OFFSET)));
            }
            let dx = unsafe { _mm_loadu_ps(u.d.as_ptr()) };
            let mut t = _mm_mul_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(sumi));
            if B::HAS_MIN {
                let sx = unsafe { _mm_loadu_ps(u.s.as_ptr()) };
                t = _mm_add_ps(t, _mm_mul_ps(mw, sx));
            }
            acc[r] = _mm_add_ps(acc[r], t);
        }
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let mut lanes = [0.0f32; 4];
        // SAFETY: `lanes` holds 4 floats.
        unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc[r]) };
        add_block_terms(w, xs[r], groups * 4, &mut lanes);
        out[r] = fold4(lanes);
    }
    out
}
