//! The integer step every int8 kernel repeats: in each i32 lane, the sum of four u8 × i8
//! products. AVX2 spells it `maddubs` (pairs into i16) then `madd` by ones (into i32); a CPU
//! with AVX-VNNI does it in one `vpdpbusd`, which accumulates as well. The kernels take the
//! spelling as a type parameter ([`Dot4`]), so one body serves both and only its entry point
//! differs by the target features it is compiled for.
//!
//! Why the two give the same bits: `maddubs` saturates at i16, `vpdpbusd` does not, and no
//! pair our formats produce comes near the limit (the largest is 2 × 128 × 127 = 32,512, a
//! Q8_0 weight of −128 against a full activation; the unsigned formats are far below). So
//! every lane holds the same exact integer either way, and every later float step is
//! unchanged: results are bit-identical on either CPU (the kernel tests compare both with the
//! scalar reference on every spelling the CPU has, `Isa::available`).
//!
//! Measured 2026-12-01 on this project's 2-vCPU Xeon (AVX-512 VNNI, AVX-VNNI): see
//! docs/PERFORMANCE.md.

use std::arch::x86_64::*;

/// How a kernel computes `acc + Σ₄ a·b` per i32 lane (`a` unsigned, `b` signed bytes).
pub(crate) trait Dot4 {
    /// True for [`Pairs`]: a lane-major kernel may then add several chunks' `maddubs` i16
    /// pairs before one `madd` (see `Lanes::dot_s`).
    const PAIRS: bool;
    /// # Safety
    /// The CPU has the features of the implementation (AVX2; and AVX-VNNI for [`Vnni`]),
    /// and the caller is compiled with them (the kernels' entry points are).
    unsafe fn dot4(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX2: `maddubs` + `madd` by ones + `add`.
pub(crate) struct Pairs;

/// AVX-VNNI: one `vpdpbusd`.
pub(crate) struct Vnni;

impl Dot4 for Pairs {
    const PAIRS: bool = true;
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: AVX2, as the caller promised.
        unsafe {
            let pairs = _mm256_maddubs_epi16(a, b);
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        }
    }
}

impl Dot4 for Vnni {
    const PAIRS: bool = false;
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI, as the caller promised.
        unsafe { _mm256_dpbusd_avx_epi32(acc, a, b) }
    }
}

/// Activation bytes `4k..4k+4` of a block, in every 32-bit lane (the lane-major kernels'
/// activation operand; also the repacked head's). A function with the kernels' target
/// features rather than a closure, which would not inherit them and would not be inlined.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn broadcast4(q: &[i8; 32], k: usize) -> __m256i {
    let b: &[i8; 4] = q[4 * k..4 * k + 4].try_into().expect("four bytes");
    _mm256_set1_epi32(i32::from_le_bytes(b.map(|v| v as u8)))
}

/// 8x8 transpose of 32-bit words: word `i` of output `k` = word `k` of input `i`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn transpose8(v: [__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
    let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
    let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256(u0, u4, 0x20),
        _mm256_permute2x128_si256(u1, u5, 0x20),
        _mm256_permute2x128_si256(u2, u6, 0x20),
        _mm256_permute2x128_si256(u3, u7, 0x20),
        _mm256_permute2x128_si256(u0, u4, 0x31),
        _mm256_permute2x128_si256(u1, u5, 0x31),
        _mm256_permute2x128_si256(u2, u6, 0x31),
        _mm256_permute2x128_si256(u3, u7, 0x31),
    ]
}
