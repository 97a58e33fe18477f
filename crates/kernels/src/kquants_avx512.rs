//! AVX-512 kernels for Q4_K, Q5_K and Q6_K at small batches (decode: fewer activation rows
//! than `kgemm` takes), bit-identical to `kquants::dot_k_scalar`.
//!
//! Why: at one activation row a matmul should run at memory speed, but the AVX2 kernel
//! (`kquants_avx2`) takes about as long to compute a block as memory takes to deliver it
//! (one thread: Q4_K ~24 GB/s from cache, 14–20 GB/s from memory against a 30 GB/s plain
//! read), so the two add up. Here one 512-bit vector holds 64 consecutive values of a
//! super-block, laid out so the activations load straight with no shuffle: a 32-byte run of
//! nibbles (or Q6_K's high bits) is broadcast to both halves of the vector and each half
//! shifted by its own count (`vpsrlvw` / `vpsllvw`). Per 64 values and activation row that
//! leaves two integer operations, `vpmaddubsw` (u8 × i8 → i16 pairs) and `vpdpwssd` with the
//! group scales (i16 pairs × i16 → i32, accumulated); each scale vector is one `vpermw`
//! (AVX2: three operations per 32 values, plus a shuffle per scale pair).
//!
//! Numbers: per super-block and activation row the same exact integers as the AVX2 kernel,
//! `Σ_g sc_g Σ u x` and `Σ_g b_g bsum_g` (mins, or the signed formats' scales for their
//! offset), then `k_accumulate`'s one float step. `vpmaddubsw`'s pairs stay below 2·63·128
//! (no saturation) and every i32 sum below 2^24.

use std::arch::x86_64::*;

use crate::block::prefetch_ahead;
use crate::kquants::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, KQuant};
use crate::kquants_avx2::{dd_lanes, k4_head, k_step, k_step4, K4Head};

/// One super-block decoded for the kernel.
#[derive(Clone, Copy)]
pub(crate) struct Decoded512 {
    /// Values `64c .. 64c + 64` as unsigned bytes.
    q: [__m512i; 4],
    /// For each i16 lane of `maddubs(q[c], x)` (values `2l, 2l + 1`), its group's scale.
    sc: [__m512i; 4],
    /// One i16 per 16-value group, to `madd` with the activation block sums: the group's min
    /// (formats with mins) or scale (signed formats; times `Q_OFFSET` afterwards).
    bias: __m256i,
    /// `d` in lane 0, `dmin` in lane 1 (Q6_K: 0).
    dd: __m128,
}

/// A K format with a 512-bit decode.
pub(crate) trait KAvx512: KQuant {
    /// # Safety
    /// AVX-512 F/BW/VL, AVX2 and F16C must be available.
    unsafe fn decode512(&self) -> Decoded512;
}

/// `R` dots for each consecutive weight row of `bpr` blocks: `out[i]` = row `i`'s.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available (`Isa::is_avx512`).
#[inline]
pub(crate) unsafe fn dot_rows<B: KAvx512, const R: usize>(
    w: &[B],
    bpr: usize,
    xs: [&[BlockQ8K]; R],
    out: &mut [[f32; R]],
) {
    for x in &xs {
        assert!(x.len() >= bpr, "activation row too short");
    }
    assert!(out.len() * bpr >= w.len(), "one output per weight row");
    // SAFETY: forwarded from the caller.
    unsafe { rows_impl(w, bpr, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_impl<B: KAvx512, const R: usize>(
    w: &[B],
    bpr: usize,
    xs: [&[BlockQ8K]; R],
    out: &mut [[f32; R]],
) {
    if R == 1 {
        for (row, o) in w.chunks_exact(bpr).zip(out.iter_mut()) {
            o[0] = row_dot(row, xs[0]);
        }
        return;
    }
    for (row, o) in w.chunks_exact(bpr).zip(out.iter_mut()) {
        let mut acc = [0.0f32; R];
        for (i, b) in row.iter().enumerate() {
            prefetch_ahead((b as *const B).cast::<u8>(), size_of::<B>());
            // SAFETY: the features `decode512` needs are enabled in this function.
            let dec = unsafe { b.decode512() };
            for (a, x) in acc.iter_mut().zip(&xs) {
                let x = &x[i];
                let z = block_vector(&dec, x);
                let (lo, hi) = (_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));
                *a = k_step::<B>(*a, dec.dd, x.d, lo, hi);
            }
        }
        *o = acc;
    }
}

/// One weight row times one activation row (decode). The horizontal sums cost about as much
/// as the products, so four super-blocks' integers are reduced together and their float
/// terms computed as four lanes, each lane `k_accumulate`'s operations for its super-block;
/// the terms are then added to the row's sum one at a time, in order, as `k_accumulate`
/// does. (Four weight rows side by side, reduced the same way, computed faster from cache
/// but read memory as four streams per thread: the 4B shape's head fell from ~40 to ~30 GB/s.)
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn row_dot<B: KAvx512>(row: &[B], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (blocks, xs) in row.chunks(4).zip(x.chunks(4)) {
        let mut z = [_mm512_setzero_si512(); 4];
        let mut dd = [_mm_setzero_ps(); 4];
        let mut dx = [0.0f32; 4];
        for (k, (b, x)) in blocks.iter().zip(xs).enumerate() {
            prefetch_ahead((b as *const B).cast::<u8>(), size_of::<B>());
            // SAFETY: the features `decode512` needs are enabled in this function.
            let dec = unsafe { b.decode512() };
            z[k] = block_vector(&dec, x);
            dd[k] = dec.dd;
            dx[k] = x.d;
        }
        let (raw, bias) = reduce4(z);
        acc = k_step4::<B>(acc, blocks.len(), dd, dx, raw, bias);
    }
    acc
}

/// Four vectors' sums: `(Σ low half of z[k], Σ high half of z[k])` for k = 0..4, as lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
fn reduce4(z: [__m512i; 4]) -> (__m128i, __m128i) {
    // Per 128-bit lane: [Σ2 z0, Σ2 z1, Σ2 z0, Σ2 z1] (elements 0+2, 1+3), same for z2, z3.
    let u01 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(z[0], z[1]),
        _mm512_unpackhi_epi32(z[0], z[1]),
    );
    let u23 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(z[2], z[3]),
        _mm512_unpackhi_epi32(z[2], z[3]),
    );
    // Per 128-bit lane: [Σ4 z0, Σ4 z1, Σ4 z2, Σ4 z3].
    let v = _mm512_add_epi32(
        _mm512_unpacklo_epi64(u01, u23),
        _mm512_unpackhi_epi64(u01, u23),
    );
    // 128-bit lanes 0 + 1 (the low halves), 2 + 3 (the high halves).
    let w = _mm512_add_epi32(v, _mm512_shuffle_i64x2(v, v, 0b10_11_00_01));
    (_mm512_castsi512_si128(w), _mm512_extracti32x4_epi32(w, 2))
}

/// One decoded super-block and one activation block: the low half's lanes sum to
/// `Σ_g sc_g Σ u x`, the high half's to `Σ_g b_g bsum_g`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
fn block_vector(dec: &Decoded512, x: &BlockQ8K) -> __m512i {
    let xv = |c: usize| {
        let xq = &x.qs[64 * c..64 * c + 64];
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(xq.as_ptr().cast()) }
    };
    let p = |c: usize| _mm512_maddubs_epi16(dec.q[c], xv(c));
    // Two chains of two, so the accumulations overlap.
    let s01 = _mm512_dpwssd_epi32(_mm512_madd_epi16(p(0), dec.sc[0]), p(1), dec.sc[1]);
    let s23 = _mm512_dpwssd_epi32(_mm512_madd_epi16(p(2), dec.sc[2]), p(3), dec.sc[3]);
    let s = _mm512_add_epi32(s01, s23);
    let s = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    // SAFETY: 16 i16 = 32 readable bytes.
    let bsums = unsafe { _mm256_loadu_si256(x.bsums.as_ptr().cast()) };
    _mm512_inserti64x4(
        _mm512_castsi256_si512(s),
        _mm256_madd_epi16(bsums, dec.bias),
        1,
    )
}

/// 32 bytes from `p`, in both halves of a vector.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn broadcast32(p: &[u8]) -> __m512i {
    assert!(p.len() >= 32);
    // SAFETY: 32 readable bytes.
    _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(p.as_ptr().cast()) })
}

/// i16 lanes: `lo` in the low half of the vector, `hi` in the high half (per-half shift
/// counts for `vpsrlvw` / `vpsllvw`).
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn halves(lo: i16, hi: i16) -> __m512i {
    _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi16(lo)),
        _mm256_set1_epi16(hi),
        1,
    )
}

/// `vpermw` controls: `Q4K_SC[c]` picks i16 lane `2c` of the scales for the low half and
/// `2c + 1` for the high half (Q4_K/Q5_K: one scale per 32 values); `Q6K_SC[c]` picks lane
/// `4c + l / 8` for lane `l` (Q6_K: one scale per 16 values, 8 i16 lanes). (Gathering each
/// 128-bit lane's four scales with one `vpermw` and spreading them with an in-lane `vpshufb`
/// per chunk was slower.)
static Q4K_SC: [[u16; 32]; 4] = sc_ctrl(32);
static Q6K_SC: [[u16; 32]; 4] = sc_ctrl(16);

const fn sc_ctrl(group_values: usize) -> [[u16; 32]; 4] {
    let lanes = group_values / 2;
    let mut t = [[0u16; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut l = 0;
        while l < 32 {
            t[c][l] = ((64 / group_values) * c + l / lanes) as u16;
            l += 1;
        }
        c += 1;
    }
    t
}

/// Scale vectors for the four 64-value chunks from the group scales in i16 lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
fn scale_vectors(s16: __m256i, ctrl: &[[u16; 32]; 4]) -> [__m512i; 4] {
    let s = _mm512_castsi256_si512(s16);
    // SAFETY: 64 readable bytes per control.
    let perm = |c: usize| unsafe {
        _mm512_permutexvar_epi16(_mm512_loadu_si512(ctrl[c].as_ptr().cast()), s)
    };
    [perm(0), perm(1), perm(2), perm(3)]
}

/// Q4_K/Q5_K decoded: chunk `c` holds the low nibbles of `qs[32c..32c+32]` (values
/// `64c..64c+32`), then their high nibbles (`64c+32..64c+64`), OR'd with `high[c]` (Q5_K's
/// fifth bits; zero for Q4_K); the scale vectors, the mins as 16 i16 lanes (each twice: one
/// per 16-value activation group), and `d`, `dmin` in lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw")]
fn decode_k4<B: K4Head>(b: &B, qs: &[u8; 128], high: [__m512i; 4]) -> Decoded512 {
    let (v, dd) = k4_head(b.head());
    let dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let (m4, nib) = (_mm512_set1_epi8(0x0F), halves(0, 4));
    let q = |c: usize| {
        let low = _mm512_and_si512(_mm512_srlv_epi16(broadcast32(&qs[32 * c..]), nib), m4);
        _mm512_or_si512(low, high[c])
    };
    Decoded512 {
        q: [q(0), q(1), q(2), q(3)],
        sc: scale_vectors(_mm256_cvtepu8_epi16(v), &Q4K_SC),
        bias: _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, dup)),
        dd,
    }
}

impl KAvx512 for BlockQ4K {
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn decode512(&self) -> Decoded512 {
        decode_k4(self, &self.qs, [_mm512_setzero_si512(); 4])
    }
}

/// Q5_K: bit `2c` of `qh[l]` (low half) and bit `2c + 1` (high half) moved to bit 4 of the
/// same byte, other bits left unmasked. The shifts are 16-bit, but by at most four places
/// left or three right, so no bit crossing between the two bytes of a lane reaches bit 4.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
fn q5_high(qh: __m512i, c: usize) -> __m512i {
    match c {
        0 => _mm512_sllv_epi16(qh, halves(4, 3)),
        1 => _mm512_sllv_epi16(qh, halves(2, 1)),
        2 => _mm512_srlv_epi16(qh, halves(0, 1)),
        _ => _mm512_srlv_epi16(qh, halves(2, 3)),
    }
}

impl KAvx512 for BlockQ5K {
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn decode512(&self) -> Decoded512 {
        let bit4 = _mm512_set1_epi8(0x10);
        let qh = broadcast32(&self.qh);
        let high = |c: usize| _mm512_and_si512(q5_high(qh, c), bit4);
        decode_k4(self, &self.qs, [high(0), high(1), high(2), high(3)])
    }
}

impl KAvx512 for BlockQ6K {
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn decode512(&self) -> Decoded512 {
        let m4 = _mm512_set1_epi8(0x0F);
        let m2 = _mm512_set1_epi8(0x30);
        // Half n (values 128n..128n+128): ql[64n..64n+64] holds the low four bits, low
        // nibbles for values 0..64 of the half, high nibbles for 64..128; qh[32n..32n+32]
        // the top two, at bits 0-1, 2-3, 4-5, 6-7 for values 0.., 32.., 64.., 96...
        let half = |n: usize| {
            // SAFETY: 64 readable bytes.
            let ql = unsafe { _mm512_loadu_si512(self.ql[64 * n..64 * n + 64].as_ptr().cast()) };
            let qh = broadcast32(&self.qh[32 * n..]);
            let lo = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_and_si512(_mm512_sllv_epi16(qh, halves(4, 2)), m2),
            );
            let hi = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, halves(0, 2)), m2),
            );
            (lo, hi)
        };
        let (q0, q1) = half(0);
        let (q2, q3) = half(1);
        // SAFETY: 16 readable bytes.
        let s16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(self.scales.as_ptr().cast()) });
        Decoded512 {
            q: [q0, q1, q2, q3],
            sc: scale_vectors(s16, &Q6K_SC),
            bias: s16,
            dd: dd_lanes(self.d, [0, 0]),
        }
    }
}
