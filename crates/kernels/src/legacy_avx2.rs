//! AVX2 kernels for the 32-value formats; bit-identical to `legacy::dot_legacy_scalar`.
//!
//! Per group of four weight blocks: the four f16 scales (and `m` terms) are converted once,
//! each block is decoded once into 32 bytes (unsigned nibbles for Q4/Q5, signed bytes for
//! Q8), and for each of the `R` activation rows one `maddubs` + `madd` per block gives eight
//! exact i32 partial sums; three `hadd`s and one add fold the four blocks' partials into
//! their four exact block integers, side by side, and one `cvt` + `fmadd` adds them into the
//! row's four f32 lanes with the blocks' scales `d*dx` (lane `b % 4`, `legacy`'s order).
//!
//! `maddubs` saturates at i16: unsigned quants are at most 31 and activations at most 127 in
//! magnitude (2*31*127 fits); for Q8 weights `|w| <= 128` and `|x| <= 127` (2*128*127 fits).

use crate::block::{f16_to_f32, prefetch_span, PREFETCH_DISTANCE};
use crate::legacy::{
    finish, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, BlockQ8x4, Legacy32,
    MTerm,
};
use std::arch::x86_64::*;

/// How a block decodes for the AVX2 kernel.
pub trait LegacyAvx2: Legacy32 {
    /// Quants are signed i8 (Q8): use |w| and sign(x, w).
    const SIGNED: bool;
    /// The scale is an f16 (`d_bits`); otherwise the lane-major kernels read
    /// [`Legacy32::d`] in f32 (MXFP4's power of two).
    const F16_SCALE: bool = true;
    /// The 32 quants in element order (unsigned unless `SIGNED`).
    ///
    /// # Safety
    /// AVX2 must be available.
    unsafe fn load_q(&self) -> __m256i;

    /// The scales of four consecutive blocks as f32 lanes: their f16 `d`s converted, unless
    /// a format stores its scale otherwise.
    ///
    /// # Safety
    /// AVX2 and F16C must be available.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales4(g: &[Self]) -> __m128 {
        f16x4([g[0].d_bits(), g[1].d_bits(), g[2].d_bits(), g[3].d_bits()])
    }
}

/// 32 nibble values, low nibbles first: the 16 bytes broadcast to both halves (a load), the
/// upper half shifted right by 4, masked.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: 16 readable bytes.
    let b = unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(qs.as_ptr().cast())) };
    let both = _mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4));
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
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        unpack_nibbles(&self.qs)
    }
}
impl LegacyAvx2 for BlockQ4_1 {
    const SIGNED: bool = false;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        unpack_nibbles(&self.qs)
    }
}
impl LegacyAvx2 for BlockQ5_0 {
    const SIGNED: bool = false;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        _mm256_or_si256(unpack_nibbles(&self.qs), high_bit_bytes(self.qh))
    }
}
impl LegacyAvx2 for BlockQ5_1 {
    const SIGNED: bool = false;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        _mm256_or_si256(unpack_nibbles(&self.qs), high_bit_bytes(self.qh))
    }
}
impl LegacyAvx2 for BlockQ8_0 {
    const SIGNED: bool = true;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_q(&self) -> __m256i {
        // SAFETY: 32 readable bytes.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) }
    }
}
impl LegacyAvx2 for BlockQ8_1 {
    const SIGNED: bool = true;
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

/// The eight exact i32 partial sums (four products each) of one decoded block with one
/// activation block.
#[inline]
#[target_feature(enable = "avx2")]
fn ilanes<B: LegacyAvx2>(wq: __m256i, wa: __m256i, x: &[i8; 32]) -> __m256i {
    // SAFETY: 32 readable bytes.
    let xv = unsafe { _mm256_loadu_si256(x.as_ptr().cast()) };
    let xv = if B::SIGNED {
        _mm256_sign_epi8(xv, wq)
    } else {
        xv
    };
    _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xv), _mm256_set1_epi16(1))
}

/// [`ilanes`] as f32 (for the formats that keep a float step per four products).
#[inline]
#[target_feature(enable = "avx2")]
fn lanes<B: LegacyAvx2>(wq: __m256i, wa: __m256i, x: &[i8; 32]) -> __m256 {
    _mm256_cvtepi32_ps(ilanes::<B>(wq, wa, x))
}

/// The totals of four vectors of eight i32 partial sums, in lanes 0..4 (exact).
#[inline]
#[target_feature(enable = "avx2")]
fn sum4(v: [__m256i; 4]) -> __m128i {
    // Interleave and add (single-µop steps; `hadd` costs three): pairs of lanes, then
    // pairs of pairs, then the two 128-bit halves.
    let b01 = _mm256_add_epi32(
        _mm256_unpacklo_epi32(v[0], v[1]),
        _mm256_unpackhi_epi32(v[0], v[1]),
    );
    let b23 = _mm256_add_epi32(
        _mm256_unpacklo_epi32(v[2], v[3]),
        _mm256_unpackhi_epi32(v[2], v[3]),
    );
    let c = _mm256_add_epi32(
        _mm256_unpacklo_epi64(b01, b23),
        _mm256_unpackhi_epi64(b01, b23),
    );
    _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1))
}

/// [`lanes`] for signed quants `q` (`a = |q|`), for kernels outside this module.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lanes_signed(q: __m256i, a: __m256i, x: &[i8; 32]) -> __m256 {
    lanes::<BlockQ8_0>(q, a, x)
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
    for x in &xs {
        assert!(x.len() >= w.len().div_ceil(4), "activation row too short");
    }
    dot_tile::<B, 1, R>([w], xs)[0]
}

/// [`dot_legacy`] for consecutive weight rows of `bpr` blocks: `out[i]` = the dots of row `i`.
/// With few activation rows, several weight rows go through the kernel together so that
/// their independent FMA chains overlap (one row alone waits on FMA latency); each row's
/// operations are unchanged.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_legacy_rows<B: LegacyAvx2, const R: usize>(
    w: &[B],
    bpr: usize,
    xs: [&[BlockQ8x4]; R],
    out: &mut [[f32; R]],
) {
    for x in &xs {
        assert!(x.len() >= bpr.div_ceil(4), "activation row too short");
    }
    let n_rows = w.len() / bpr;
    let row = |k: usize| &w[k * bpr..(k + 1) * bpr];
    let mut k = 0;
    if R == 1 {
        while k + 4 <= n_rows {
            let res = dot_tile::<B, 4, R>([row(k), row(k + 1), row(k + 2), row(k + 3)], xs);
            for (j, v) in res.into_iter().enumerate() {
                out[k + j] = v;
            }
            k += 4;
        }
    } else if R == 2 {
        while k + 2 <= n_rows {
            let res = dot_tile::<B, 2, R>([row(k), row(k + 1)], xs);
            out[k] = res[0];
            out[k + 1] = res[1];
            k += 2;
        }
    }
    while k < n_rows {
        out[k] = dot_tile::<B, 1, R>([row(k)], xs)[0];
        k += 1;
    }
}

/// The kernel body: `WR` weight rows × `R` activation rows; callers checked that every
/// `xs[r]` covers the rows. Each `(weight row, activation row)` pair runs the same operation
/// sequence whatever `WR` and `R` are.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_tile<B: LegacyAvx2, const WR: usize, const R: usize>(
    ws: [&[B]; WR],
    xs: [&[BlockQ8x4]; R],
) -> [[f32; R]; WR] {
    let stored_m = B::M == MTerm::Stored;
    let nb = ws[0].len();
    for w in &ws {
        assert_eq!(w.len(), nb, "weight rows of one tile differ in length");
    }
    let groups = nb / 4;
    let mut acc = [[_mm_setzero_ps(); R]; WR];
    let mut accm = [[_mm_setzero_ps(); R]; WR];
    for g in 0..groups {
        // Per activation row: `o · Σx` of the group's four blocks (offset formats).
        let mut off = [_mm_setzero_si128(); R];
        if let MTerm::Offset(o) = B::M {
            for (r, off) in off.iter_mut().enumerate() {
                // SAFETY: the array holds 4 i32s.
                let isum = unsafe { _mm_loadu_si128(xs[r][g].isum.as_ptr().cast()) };
                *off = _mm_mullo_epi32(isum, _mm_set1_epi32(o));
            }
        }
        for wi in 0..WR {
            let wg = &ws[wi][4 * g..4 * g + 4];
            // The tile reads its rows side by side, so the bytes `PREFETCH_DISTANCE` ahead
            // of it lie `ahead` blocks further along each row or, past the row's end, in the
            // row `WR` rows down: the next tile's, where the rows are consecutive
            // (`dot_legacy_rows`). A short row (gpt-oss: 2,880 values) would otherwise hint
            // only lines this tile is already reading.
            let ahead = 4 * g + (PREFETCH_DISTANCE / (WR * size_of::<B>())).max(4);
            let at = if ahead < nb {
                ahead
            } else {
                ahead - nb + WR * nb
            };
            prefetch_span(
                ws[wi].as_ptr().wrapping_add(at).cast::<u8>(),
                4 * size_of::<B>(),
            );
            // SAFETY: AVX2 and F16C are enabled in this function.
            let dw = unsafe { B::scales4(wg) };
            let m = if stored_m {
                f16x4([
                    wg[0].m_bits(),
                    wg[1].m_bits(),
                    wg[2].m_bits(),
                    wg[3].m_bits(),
                ])
            } else {
                _mm_setzero_ps()
            };
            // (Arrays spelled out: closures would not inherit this function's features.)
            // SAFETY: AVX2 is enabled in this function.
            let q = unsafe {
                [
                    wg[0].load_q(),
                    wg[1].load_q(),
                    wg[2].load_q(),
                    wg[3].load_q(),
                ]
            };
            let mut a = q;
            if B::SIGNED {
                for a in &mut a {
                    *a = _mm256_abs_epi8(*a);
                }
            }
            for r in 0..R {
                let u = &xs[r][g];
                let p = sum4([
                    ilanes::<B>(q[0], a[0], &u.qs[0]),
                    ilanes::<B>(q[1], a[1], &u.qs[1]),
                    ilanes::<B>(q[2], a[2], &u.qs[2]),
                    ilanes::<B>(q[3], a[3], &u.qs[3]),
                ]);
                let p = _mm_sub_epi32(p, off[r]);
                // SAFETY: the arrays hold 4 floats.
                unsafe {
                    let dx = _mm_loadu_ps(u.d.as_ptr());
                    let s = _mm_mul_ps(dw, dx);
                    acc[wi][r] = _mm_fmadd_ps(s, _mm_cvtepi32_ps(p), acc[wi][r]);
                    if stored_m {
                        let sx = _mm_loadu_ps(u.s.as_ptr());
                        accm[wi][r] = _mm_add_ps(accm[wi][r], _mm_mul_ps(m, sx));
                    }
                }
            }
        }
    }
    let mut out = [[0.0f32; R]; WR];
    for wi in 0..WR {
        for r in 0..R {
            let mut lane = [0.0f32; 4];
            let mut lane_m = [0.0f32; 4];
            // SAFETY: the arrays hold 4 floats.
            unsafe {
                _mm_storeu_ps(lane.as_mut_ptr(), acc[wi][r]);
                _mm_storeu_ps(lane_m.as_mut_ptr(), accm[wi][r]);
            }
            // The blocks past the last whole group (a row of 2,880 values has two), one at a
            // time: `add_block_scalar`'s operations exactly (the block's exact integer, then
            // one FMA with `d * dx` into lane `b % 4`; the stored `m` term into its lane).
            for (b, wb) in ws[wi].iter().enumerate().skip(groups * 4) {
                let (u, k) = (&xs[r][b / 4], b % 4);
                // SAFETY: AVX2 is enabled in this function.
                let q = unsafe { wb.load_q() };
                let abs = if B::SIGNED { _mm256_abs_epi8(q) } else { q };
                let z = _mm256_setzero_si256();
                let mut p = _mm_cvtsi128_si32(sum4([ilanes::<B>(q, abs, &u.qs[k]), z, z, z]));
                if let MTerm::Offset(o) = B::M {
                    p -= o * u.isum[k];
                }
                let s = _mm_set_ss(wb.d() * u.d[k]);
                let f = _mm_fmadd_ss(s, _mm_set_ss(p as f32), _mm_set_ss(lane[k]));
                lane[k] = _mm_cvtss_f32(f);
                if stored_m {
                    lane_m[k] += f16_to_f32(wb.m_bits()) * u.s[k];
                }
            }
            out[wi][r] = finish::<B>(lane, lane_m);
        }
    }
    out
}
