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
//!
//! Each format writes only [`KAvx2::block`] (one super-block's lane vectors); the loops, the
//! horizontal sums and the float step are shared, here and by `kquants_avx512`. At one
//! activation row (decode) four super-blocks are summed together and their float terms
//! computed as four lanes, then added one at a time in order ([`row_dot`]): the horizontal
//! sums cost about as much as the products on AVX-512 (on AVX2 it is level, within 2 %).

use crate::block::prefetch_ahead;
use crate::kquants::{
    k_accumulate, unpack_scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K,
    KQuant,
};
use std::arch::x86_64::*;

/// A K format with an AVX2 kernel.
pub trait KAvx2: KQuant {
    /// One super-block times `R` activation blocks: per row two vectors whose lanes sum to
    /// `Σ_g sc_g Σ u x` and `Σ_g b_g bsum_g` (the mins, or the scales of a signed format's
    /// offset), and `d`, `dmin` in f32 lanes 0 and 1 (`dmin` 0 without mins).
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128);
}

/// `k_accumulate` for one super-block and activation row from its two lane-sum vectors
/// (`Σ_g sc_g Σ u x` and `Σ_g b_g bsum_g`) and `d`, `dmin` in lanes 0 and 1 of `dd`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn k_step<B: KQuant>(acc: f32, dd: __m128, dx: f32, v: __m256i, b: __m256i) -> f32 {
    let (raw, bias) = hsum2_epi32(v, b);
    let (sumi, summ) = if B::HAS_MIN {
        (raw, bias)
    } else {
        (raw - B::Q_OFFSET * bias, 0)
    };
    let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
    k_accumulate::<B>(acc, d, dmin, dx, sumi, summ)
}

/// `R` dots of one weight row; callers checked that every `xs[r]` covers `w`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_impl<B: KAvx2, const R: usize>(w: &[B], xs: [&[BlockQ8K]; R]) -> [f32; R] {
    let mut acc = [0.0f32; R];
    for (i, b) in w.iter().enumerate() {
        prefetch_ahead((b as *const B).cast::<u8>(), size_of::<B>());
        let x = units(&xs, i);
        // SAFETY: AVX2, FMA and F16C are enabled in this function.
        let (v, dd) = unsafe { b.block(x) };
        for r in 0..R {
            acc[r] = k_step::<B>(acc[r], dd, x[r].d, v[r][0], v[r][1]);
        }
    }
    acc
}

/// One weight row times one activation row (decode): four super-blocks' lane sums reduced
/// together and their float terms computed as four lanes (each `k_accumulate`'s operations),
/// then added to the row's sum one at a time, in order. Same bits as [`dot_impl`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_dot<B: KAvx2>(row: &[B], x: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (blocks, xs) in row.chunks(4).zip(x.chunks(4)) {
        let mut v = [_mm256_setzero_si256(); 8];
        let mut dd = [_mm_setzero_ps(); 4];
        let mut dx = [0.0f32; 4];
        for (k, (b, x)) in blocks.iter().zip(xs).enumerate() {
            prefetch_ahead((b as *const B).cast::<u8>(), size_of::<B>());
            // SAFETY: AVX2, FMA and F16C are enabled in this function.
            let (bv, bd) = unsafe { b.block([x]) };
            (v[k], v[4 + k], dd[k], dx[k]) = (bv[0][0], bv[0][1], bd, x.d);
        }
        let (raw, bias) = reduce8(v);
        acc = k_step4::<B>(acc, blocks.len(), dd, dx, raw, bias);
    }
    acc
}

/// Lane sums of eight vectors: `(Σv0, Σv1, Σv2, Σv3)` and `(Σv4, .., Σv7)`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce8(v: [__m256i; 8]) -> (__m128i, __m128i) {
    // Pairs of lanes, then quads, within each 128-bit half (hadd would cost two shuffles and
    // an add each).
    let pair = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
    };
    let quad = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b))
    };
    let lo = quad(pair(v[0], v[1]), pair(v[2], v[3]));
    let hi = quad(pair(v[4], v[5]), pair(v[6], v[7]));
    (
        _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)),
        _mm_add_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)),
    )
}

/// `k_accumulate` for the first `count` of four super-blocks: their terms computed as lanes
/// (`dd[k]` holds block k's `d`, `dmin`; `dx[k]` its activation scale; `raw`, `bias` its lane
/// sums), then added to `acc` one at a time, in order, as `k_accumulate` adds them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn k_step4<B: KQuant>(
    mut acc: f32,
    count: usize,
    dd: [__m128; 4],
    dx: [f32; 4],
    raw: __m128i,
    bias: __m128i,
) -> f32 {
    let mut terms = [0.0f32; 4];
    // SAFETY: 16 writable bytes.
    unsafe { _mm_storeu_ps(terms.as_mut_ptr(), k_terms::<B>(dd, dx, raw, bias)) };
    for &t in &terms[..count] {
        acc += t;
    }
    acc
}

/// `k_accumulate`'s term for four super-blocks as lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_terms<B: KQuant>(dd: [__m128; 4], dx: [f32; 4], raw: __m128i, bias: __m128i) -> __m128 {
    let (d01, d23) = (_mm_unpacklo_ps(dd[0], dd[1]), _mm_unpacklo_ps(dd[2], dd[3]));
    let (d, dmin) = (_mm_movelh_ps(d01, d23), _mm_movehl_ps(d23, d01));
    // SAFETY: 16 readable bytes.
    let dx = unsafe { _mm_loadu_ps(dx.as_ptr()) };
    if B::HAS_MIN {
        _mm_sub_ps(
            _mm_mul_ps(_mm_mul_ps(d, dx), _mm_cvtepi32_ps(raw)),
            _mm_mul_ps(_mm_mul_ps(dmin, dx), _mm_cvtepi32_ps(bias)),
        )
    } else {
        let sumi = _mm_sub_epi32(raw, _mm_mullo_epi32(bias, _mm_set1_epi32(B::Q_OFFSET)));
        _mm_mul_ps(_mm_mul_ps(d, dx), _mm_cvtepi32_ps(sumi))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn rows_impl<B: KAvx2, const R: usize>(
    w: &[B],
    bpr: usize,
    xs: [&[BlockQ8K]; R],
    out: &mut [[f32; R]],
) {
    for (row, o) in w.chunks_exact(bpr).zip(out.iter_mut()) {
        if R == 1 {
            o[0] = row_dot(row, xs[0]);
        } else {
            *o = dot_impl(row, xs);
        }
    }
}

/// `R` dots for each consecutive weight row of `bpr` blocks.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[inline]
pub unsafe fn dot_rows<B: KAvx2, const R: usize>(
    w: &[B],
    bpr: usize,
    xs: [&[BlockQ8K]; R],
    out: &mut [[f32; R]],
) {
    for x in &xs {
        assert!(x.len() >= bpr, "activation row too short");
    }
    // SAFETY: forwarded from the caller.
    unsafe { rows_impl(w, bpr, xs, out) }
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
    unsafe { dot_impl(w, xs) }
}

/// Super-block `i` of each activation row. (A loop in a function with the kernels' target
/// features: an `array::from_fn` closure would not be inlined into them.)
#[inline]
#[target_feature(enable = "avx2")]
fn units<'a, const R: usize>(xs: &[&'a [BlockQ8K]; R], i: usize) -> [&'a BlockQ8K; R] {
    let mut x = [&xs[0][i]; R];
    for (r, u) in x.iter_mut().enumerate().skip(1) {
        *u = &xs[r][i];
    }
    x
}

/// Horizontal sums of two i32 vectors: `(Σa, Σb)`. Unpacks and adds rather than `hadd`
/// (which costs two shuffles and an add per use; this was a quarter of the 512-bit decode
/// kernel's time).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum2_epi32(a: __m256i, b: __m256i) -> (i32, i32) {
    // Per 128-bit half: a0+a2, a1+a3, b0+b2, b1+b3.
    let u = _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
    // a0+a2, b0+b2, a1+a3, b1+b3; then lanes 0-1 plus lanes 2-3.
    let p = _mm256_shuffle_epi32(u, 0b11_01_10_00);
    let v = _mm256_add_epi32(p, _mm256_unpackhi_epi64(p, p));
    let w = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    (_mm_cvtsi128_si32(w), _mm_extract_epi32(w, 1))
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

/// Sixteen i16 scales `s0..s15` as two vectors, `[s0..s7 | s0..s7]` and `[s8..s15 | s8..s15]`,
/// from which [`Scales16::pair`] picks with one shuffle.
#[derive(Clone, Copy)]
struct Scales16 {
    lo: __m256i,
    hi: __m256i,
}

impl Scales16 {
    /// From 16 i16 lanes in scale order.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new(s16: __m256i) -> Scales16 {
        Scales16 {
            lo: _mm256_permute4x64_epi64(s16, 0b01_00_01_00),
            hi: _mm256_permute4x64_epi64(s16, 0b11_10_11_10),
        }
    }

    /// i16 lanes: scale `a` for the first 16 values of a 32-value chunk, scale `b` for the
    /// second (the layout `madd` after `maddubs` needs). `a` and `b` lie in the same half
    /// (both < 8 or both >= 8). The shuffle control comes from a table, so this is one load
    /// and one shuffle even when the caller's loop is not unrolled.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pair(self, a: usize, b: usize) -> __m256i {
        assert!(
            a / 8 == b / 8 && b < 16,
            "scale pair ({a}, {b}) spans halves"
        );
        let src = if a < 8 { self.lo } else { self.hi };
        let ctrl = &PAIR_CTRL[a % 8][b % 8];
        // SAFETY: 32 readable bytes.
        _mm256_shuffle_epi8(src, unsafe { _mm256_loadu_si256(ctrl.as_ptr().cast()) })
    }
}

/// `PAIR_CTRL[a][b]`: bytes selecting i16 lane `a` into every lane of the low 128 bits and
/// lane `b` into every lane of the high 128 bits.
static PAIR_CTRL: [[[u8; 32]; 8]; 8] = pair_ctrl_table();

const fn pair_ctrl_table() -> [[[u8; 32]; 8]; 8] {
    let mut t = [[[0u8; 32]; 8]; 8];
    let mut a = 0;
    while a < 8 {
        let mut b = 0;
        while b < 8 {
            let mut i = 0;
            while i < 16 {
                t[a][b][i] = (2 * a + i % 2) as u8;
                t[a][b][16 + i] = (2 * b + i % 2) as u8;
                i += 1;
            }
            b += 1;
        }
        a += 1;
    }
    t
}

/// `v >> bits` in 16-bit lanes with an immediate shift (`bits` is a constant once the
/// callers' small loops are unrolled, so the match folds away).
#[inline]
#[target_feature(enable = "avx2")]
fn shift_right(v: __m256i, bits: usize) -> __m256i {
    match bits {
        0 => v,
        1 => _mm256_srli_epi16(v, 1),
        2 => _mm256_srli_epi16(v, 2),
        3 => _mm256_srli_epi16(v, 3),
        4 => _mm256_srli_epi16(v, 4),
        5 => _mm256_srli_epi16(v, 5),
        6 => _mm256_srli_epi16(v, 6),
        7 => _mm256_srli_epi16(v, 7),
        _ => _mm256_srl_epi16(v, _mm_cvtsi32_si128(bits as i32)),
    }
}

/// Moves bit `k` (0..8) of every byte to bit 4 of the same byte, other bits left unmasked.
#[inline]
#[target_feature(enable = "avx2")]
fn bit_to_4(v: __m256i, k: usize) -> __m256i {
    match k {
        0 => _mm256_slli_epi16(v, 4),
        1 => _mm256_slli_epi16(v, 3),
        2 => _mm256_slli_epi16(v, 2),
        3 => _mm256_slli_epi16(v, 1),
        _ => shift_right(v, k - 4),
    }
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
        let xq = &xs[r].qs[off..off + 32];
        // SAFETY: 32 readable bytes.
        let x = unsafe { _mm256_loadu_si256(xq.as_ptr().cast()) };
        acc[r] = _mm256_add_epi32(
            acc[r],
            _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scales),
        );
    }
}

/// The 16 bytes Q4_K and Q5_K both start with: `d`, `dmin` (f16) and the 12 bytes that pack
/// eight 6-bit scales and eight 6-bit mins.
pub(crate) trait K4Head: Sized {
    /// # Safety
    /// Implemented only for blocks that start with those 16 bytes (checked below).
    #[inline(always)]
    fn head(&self) -> __m128i {
        // SAFETY: the block is at least 16 bytes (see the impls).
        unsafe { _mm_loadu_si128((self as *const Self).cast()) }
    }
}
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(BlockQ4K, d) == 0 && offset_of!(BlockQ4K, dmin) == 2);
    assert!(offset_of!(BlockQ4K, scales) == 4);
    assert!(offset_of!(BlockQ5K, d) == 0 && offset_of!(BlockQ5K, dmin) == 2);
    assert!(offset_of!(BlockQ5K, scales) == 4);
};
impl K4Head for BlockQ4K {}
impl K4Head for BlockQ5K {}

/// A Q4_K/Q5_K header decoded in registers: bytes 0..8 the eight scales, 8..16 the eight mins
/// (`unpack_scale_min_k4`'s), and `(d, dmin)` in f32 lanes 0 and 1. Scale/min `j < 4` is the
/// low six bits of byte `j` / `j + 4`; `j >= 4` takes its low four bits from a nibble of
/// byte `j + 4` and its top two from the top bits of byte `j - 4` / `j`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn k4_head(head: __m128i) -> (__m128i, __m128) {
    // The packed bytes sit at 4..16: p[k] = head[4 + k].
    const Z: i8 = -1; // shuffle to zero
    let a = _mm_shuffle_epi8(
        head,
        _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15),
    ); // p0..3 | p8..11 | p4..7 | p8..11
    let b = _mm_shuffle_epi8(
        head,
        _mm_setr_epi8(Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z, 8, 9, 10, 11),
    ); // 0 | p0..3 | 0 | p4..7
    let low = _mm_and_si128(
        a,
        _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0),
    );
    let high_nibbles = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_set1_epi8(0x0F));
    let low = _mm_blend_epi32(low, high_nibbles, 0b1000);
    // The top two bits of p0..3 / p4..7 to bits 4-5 (16-bit shift: the bits it brings in from
    // the next byte land in bits 6-7 and are masked off).
    let top = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
    (_mm_or_si128(low, top), _mm_cvtph_ps(head))
}

/// Q4_K/Q5_K scales and mins from [`k4_head`]'s bytes: as [`Scales16`] (sub-block k's scale at
/// index k, its min at 8 + k), and the mins as 16 i16 lanes, each twice (one per 16-value
/// activation group, to `madd` with the bsums).
#[inline]
#[target_feature(enable = "avx2")]
fn scales_k4(v: __m128i) -> (Scales16, __m256i) {
    let dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    (
        Scales16::new(_mm256_cvtepu8_epi16(v)),
        _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, dup)),
    )
}

impl KAvx2 for BlockQ4K {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128) {
        let m4 = _mm256_set1_epi8(0x0F);
        let (packed, dd) = k4_head(self.head());
        let (sc, mins) = scales_k4(packed);
        let mut ai = [_mm256_setzero_si256(); R];
        for j in 0..4 {
            let q = load32u(&self.qs[32 * j..]);
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            accumulate(&mut ai, lo, sc.pair(2 * j, 2 * j), &x, 64 * j);
            accumulate(&mut ai, hi, sc.pair(2 * j + 1, 2 * j + 1), &x, 64 * j + 32);
        }
        (with_bias(ai, &x, mins), dd)
    }
}

impl KAvx2 for BlockQ5K {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128) {
        let m4 = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        let (packed, dd) = k4_head(self.head());
        let (sc, mins) = scales_k4(packed);
        let qh = load32u(&self.qh);
        let mut ai = [_mm256_setzero_si256(); R];
        for j in 0..4 {
            let q = load32u(&self.qs[32 * j..]);
            // Bit 2j of qh[l] is the fifth bit of value 64j + l, bit 2j+1 of 64j + 32 + l;
            // moved to bit 4 of the same byte.
            let h_lo = _mm256_and_si256(bit_to_4(qh, 2 * j), bit4);
            let h_hi = _mm256_and_si256(bit_to_4(qh, 2 * j + 1), bit4);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), h_lo);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h_hi);
            accumulate(&mut ai, lo, sc.pair(2 * j, 2 * j), &x, 64 * j);
            accumulate(&mut ai, hi, sc.pair(2 * j + 1, 2 * j + 1), &x, 64 * j + 32);
        }
        (with_bias(ai, &x, mins), dd)
    }
}

/// Pairs each row's sum vector with `madd(bsums, b)`, the bias term's.
#[inline]
#[target_feature(enable = "avx2")]
fn with_bias<const R: usize>(
    ai: [__m256i; R],
    x: &[&BlockQ8K; R],
    b: __m256i,
) -> [[__m256i; 2]; R] {
    let mut v = [[_mm256_setzero_si256(); 2]; R];
    for r in 0..R {
        v[r] = [ai[r], _mm256_madd_epi16(load_bsums(x[r]), b)];
    }
    v
}

/// `d` (and `dmin`, if any) as f32 lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn dd_lanes(d: [u8; 2], dmin: [u8; 2]) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
        d[0], d[1], dmin[0], dmin[1],
    ])))
}

/// Q6_K values `128n .. 128n + 128` as four vectors of 32 unsigned bytes (0..63), in order.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn q6k_values(b: &BlockQ6K, n: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x30);
    let ql0 = load32u(&b.ql[64 * n..]);
    let ql1 = load32u(&b.ql[64 * n + 32..]);
    let qh = load32u(&b.qh[32 * n..]);
    [
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
    ]
}

impl KAvx2 for BlockQ6K {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128) {
        // SAFETY: 16 readable bytes.
        let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(self.scales.as_ptr().cast()) });
        let sc = Scales16::new(sc16);
        let mut ai = [_mm256_setzero_si256(); R];
        for n in 0..2 {
            let q = q6k_values(self, n);
            for (k, &qk) in q.iter().enumerate() {
                let g = 8 * n + 2 * k;
                accumulate(&mut ai, qk, sc.pair(g, g + 1), &x, 128 * n + 32 * k);
            }
        }
        (with_bias(ai, &x, sc16), dd_lanes(self.d, [0, 0]))
    }
}

impl KAvx2 for BlockQ2K {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128) {
        let m3 = _mm256_set1_epi8(3);
        // SAFETY: 16 readable bytes.
        let raw = unsafe { _mm_loadu_si128(self.scales.as_ptr().cast()) };
        let sc = Scales16::new(_mm256_cvtepu8_epi16(_mm_and_si128(
            raw,
            _mm_set1_epi8(0x0F),
        )));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
        let mut ai = [_mm256_setzero_si256(); R];
        for n in 0..2 {
            let qb = load32u(&self.qs[32 * n..]);
            for j in 0..4 {
                let q = _mm256_and_si256(shift_right(qb, 2 * j), m3);
                let g = 8 * n + 2 * j;
                accumulate(&mut ai, q, sc.pair(g, g + 1), &x, 128 * n + 32 * j);
            }
        }
        (with_bias(ai, &x, mins), dd_lanes(self.d, self.dmin))
    }
}

impl KAvx2 for BlockQ3K {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const R: usize>(&self, x: [&BlockQ8K; R]) -> ([[__m256i; 2]; R], __m128) {
        let m3 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let scales = unpack_scales_q3k(&self.scales);
        // SAFETY: 16 readable bytes.
        let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(scales.as_ptr().cast()) });
        let sc = Scales16::new(sc16);
        let hm = load32u(&self.hmask);
        let mut ai = [_mm256_setzero_si256(); R];
        for n in 0..2 {
            let qb = load32u(&self.qs[32 * n..]);
            for j in 0..4 {
                let low = _mm256_and_si256(shift_right(qb, 2 * j), m3);
                let high = _mm256_and_si256(shift_right(hm, 4 * n + j), one);
                let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                let g = 8 * n + 2 * j;
                accumulate(&mut ai, q, sc.pair(g, g + 1), &x, 128 * n + 32 * j);
            }
        }
        (with_bias(ai, &x, sc16), dd_lanes(self.d, [0, 0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kquants::unpack_scale_min_k4;

    /// The register decode of a Q4_K header gives `unpack_scale_min_k4`'s bytes and the two
    /// f16 scales, over random headers (every bit pattern of the packed bytes is valid).
    #[test]
    fn k4_head_matches_bytes() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("f16c") {
            return;
        }
        let mut state = 12345u32;
        let mut byte = || {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (state >> 16) as u8
        };
        for _ in 0..10_000 {
            let mut b = BlockQ4K {
                d: [0; 2],
                dmin: [0; 2],
                scales: [0; 12],
                qs: [0; 128],
            };
            b.scales = std::array::from_fn(|_| byte());
            b.d = crate::block::f32_to_f16(byte() as f32 / 7.0);
            b.dmin = crate::block::f32_to_f16(-(byte() as f32) / 3.0);
            // SAFETY: AVX2 and F16C were detected above.
            let (v, dd) = unsafe { k4_head(b.head()) };
            let mut bytes = [0u8; 16];
            // SAFETY: 16 writable bytes; SSE2 is part of x86-64.
            unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), v) };
            let (sc, mn) = unpack_scale_min_k4(&b.scales);
            assert_eq!(bytes[..8], sc);
            assert_eq!(bytes[8..], mn);
            let mut f = [0.0f32; 4];
            // SAFETY: 16 writable bytes.
            unsafe { _mm_storeu_ps(f.as_mut_ptr(), dd) };
            assert_eq!(f[0], crate::block::f16_to_f32(b.d));
            assert_eq!(f[1], crate::block::f16_to_f32(b.dmin));
        }
    }
}
