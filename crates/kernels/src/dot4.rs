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
//! scalar reference where the CPU has VNNI).
//!
//! Measured 2026-12-01 on this project's 2-vCPU Xeon (AVX-512 VNNI, AVX-VNNI): see
//! docs/PERFORMANCE.md.

use std::arch::x86_64::*;
use std::sync::atomic::{AtomicU8, Ordering};

/// How a kernel computes `acc + Σ₄ a·b` per i32 lane (`a` unsigned, `b` signed bytes).
pub(crate) trait Dot4 {
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
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI, as the caller promised.
        unsafe { _mm256_dpbusd_avx_epi32(acc, a, b) }
    }
}

/// 0 = not probed yet, 1 = no, 2 = yes. `FERROX_NO_VNNI=1` forces the AVX2 spelling (to
/// measure the two side by side).
static VNNI: AtomicU8 = AtomicU8::new(0);

/// Whether this CPU has AVX-VNNI (probed once).
pub(crate) fn has_vnni() -> bool {
    let mut v = VNNI.load(Ordering::Relaxed);
    if v == 0 {
        let off = std::env::var_os("FERROX_NO_VNNI").is_some_and(|s| s != "0");
        v = if !off && is_x86_feature_detected!("avxvnni") {
            2
        } else {
            1
        };
        VNNI.store(v, Ordering::Relaxed);
    }
    v == 2
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
