//! [`Lanes`]: one vector of per-weight-row i32 or f32 lanes, as the lane-major K kernels
//! (`kgemm`, `krows`) use it: sixteen rows in a 512-bit vector ([`Z512`]) or eight in a
//! 256-bit one ([`Y256`], its int8 step spelled by a [`Dot4`]).
//!
//! Why a trait: the kernels' bodies are written once over it, and only their entry points
//! differ by the target features they are compiled for. Every operation is exact on
//! integers or a single IEEE float operation, so a body gives the same bits whatever the
//! width.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use crate::dot4::Dot4;
use crate::kquants::{BlockQ8K, QK_K};

/// Four bytes of `q` from `4c` as one little-endian i32.
#[inline(always)]
pub(crate) fn word(q: &[i8; QK_K], c: usize) -> i32 {
    let b: [i8; 4] = q[4 * c..4 * c + 4].try_into().expect("four bytes");
    i32::from_le_bytes(b.map(|v| v as u8))
}

/// `acc[r] += Σ₂ w·pair(row r's super-block j)` for every activation row: per-weight-row
/// i16 pairs (mins, scales, offsets) against an i16 pair of the activations' sums, exact in
/// i32. `pair` picks them: [`BlockQ8K::bsums_pair`] (16-value block sums) or
/// [`BlockQ8K::sums32_pair`] (32-value sums, for the formats with one min per 32 values).
///
/// # Safety
/// The features of `L`.
#[inline(always)]
pub(crate) unsafe fn dot_pairs<L: Lanes, const R: usize>(
    acc: &mut [L::I; R],
    w: L::I,
    xs: &[&[BlockQ8K]; R],
    j: usize,
    pair: impl Fn(&BlockQ8K) -> i32,
) {
    for r in 0..R {
        // SAFETY: the features of `L`, as the caller promised.
        acc[r] = unsafe { L::dot2(acc[r], w, pair(&xs[r][j])) };
    }
}

/// A vector of per-weight-row lanes: the operations the kernel body needs, 512 or 256 bits.
pub(crate) trait Lanes {
    type I: Copy;
    type F: Copy;
    /// Weight rows per vector.
    const N: usize;
    unsafe fn zero_i() -> Self::I;
    unsafe fn zero_f() -> Self::F;
    /// `N` i32 lanes from `p`.
    unsafe fn load_i(p: *const i32) -> Self::I;
    /// `N` f32 lanes from `p`.
    unsafe fn load_f(p: *const f32) -> Self::F;
    /// `acc + Σ₄ w·x` per lane: `w` four unsigned bytes per lane, `x` four signed bytes.
    unsafe fn dot4(acc: Self::I, w: Self::I, x: i32) -> Self::I;
    /// A group's int8 sums before its scale: i32 lanes where `vpdpbusd` accumulates; with
    /// `maddubs` alone ([`Dot4::PAIRS`]) i16 pairs, added without a `madd` per chunk, which
    /// holds at most [`Lanes::pair_chunks`] chunks without overflow.
    unsafe fn dot_s(acc: Self::I, w: Self::I, x: i32) -> Self::I;
    /// `sumi + sc · Σ acc` per lane (`acc` from [`Lanes::dot_s`], `sc` one i32 per lane).
    unsafe fn scale_s(sumi: Self::I, acc: Self::I, sc: Self::I) -> Self::I;
    /// Chunks [`Lanes::dot_s`] may add up for quants of at most `umax` (activations in
    /// −127..=127): unbounded where its sums are i32.
    fn pair_chunks(umax: i32) -> usize;
    /// `acc + Σ₂ w·x` per lane over i16 pairs.
    unsafe fn dot2(acc: Self::I, w: Self::I, x: i32) -> Self::I;
    /// `acc + a·b` per lane (low 32 bits; exact here).
    unsafe fn mul_add(acc: Self::I, a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub_i(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn cvt(a: Self::I) -> Self::F;
    unsafe fn splat(x: f32) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn store_f(p: *mut f32, v: Self::F);
    unsafe fn and(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    /// Every 16-bit word shifted right by `S`.
    unsafe fn srl16<const S: i32>(a: Self::I) -> Self::I;
    /// Each i32 lane shifted left by `S`.
    unsafe fn sll32<const S: i32>(a: Self::I) -> Self::I;
    /// Each i32 lane shifted right by `S`, arithmetically.
    unsafe fn sra32<const S: i32>(a: Self::I) -> Self::I;
    unsafe fn splat_i8(v: i8) -> Self::I;
    unsafe fn splat_i(v: i32) -> Self::I;
    /// `N` bytes from `p` (a byte per row), zero- or sign-extended to the i32 lanes.
    unsafe fn load_u8(p: *const u8) -> Self::I;
    unsafe fn load_i8(p: *const i8) -> Self::I;
    /// `2N` bytes from `p` (two a row), zero-extended to the i16 halves of the i32 lanes:
    /// operands for [`Lanes::dot2`].
    unsafe fn load_u8_pairs(p: *const u8) -> Self::I;
    /// `N` f16 values from `p` as f32 lanes (exact).
    unsafe fn load_h(p: *const u16) -> Self::F;
}

/// AVX-512 (F, BW, VNNI): all sixteen rows in one vector.
pub(crate) struct Z512;

impl Lanes for Z512 {
    type I = __m512i;
    type F = __m512;
    const N: usize = 16;
    #[inline(always)]
    unsafe fn zero_i() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load_i(p: *const i32) -> __m512i {
        // SAFETY: the caller passes 64 readable bytes.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m512 {
        // SAFETY: the caller passes 64 readable bytes.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn dot4(acc: __m512i, w: __m512i, x: i32) -> __m512i {
        _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x))
    }
    #[inline(always)]
    unsafe fn dot_s(acc: __m512i, w: __m512i, x: i32) -> __m512i {
        _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x))
    }
    #[inline(always)]
    unsafe fn scale_s(sumi: __m512i, acc: __m512i, sc: __m512i) -> __m512i {
        _mm512_add_epi32(sumi, _mm512_mullo_epi32(acc, sc))
    }
    fn pair_chunks(_: i32) -> usize {
        usize::MAX
    }
    #[inline(always)]
    unsafe fn dot2(acc: __m512i, w: __m512i, x: i32) -> __m512i {
        // `vpdpwssd`: the same exact sums as `madd` + add (it does not saturate).
        _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(x))
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        _mm512_add_epi32(acc, _mm512_mullo_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn sub_i(a: __m512i, b: __m512i) -> __m512i {
        _mm512_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn cvt(a: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m512) {
        // SAFETY: the caller passes 64 writable bytes.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn and(a: __m512i, b: __m512i) -> __m512i {
        _mm512_and_si512(a, b)
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn srl16<const S: i32>(a: __m512i) -> __m512i {
        // Constant counts: LLVM emits the immediate form.
        _mm512_srl_epi16(a, _mm_cvtsi32_si128(S))
    }
    #[inline(always)]
    unsafe fn sll32<const S: i32>(a: __m512i) -> __m512i {
        _mm512_sll_epi32(a, _mm_cvtsi32_si128(S))
    }
    #[inline(always)]
    unsafe fn sra32<const S: i32>(a: __m512i) -> __m512i {
        _mm512_sra_epi32(a, _mm_cvtsi32_si128(S))
    }
    #[inline(always)]
    unsafe fn splat_i8(v: i8) -> __m512i {
        _mm512_set1_epi8(v)
    }
    #[inline(always)]
    unsafe fn splat_i(v: i32) -> __m512i {
        _mm512_set1_epi32(v)
    }
    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> __m512i {
        // SAFETY: the caller passes 16 readable bytes.
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_u8_pairs(p: *const u8) -> __m512i {
        // SAFETY: the caller passes 32 readable bytes.
        unsafe { _mm512_cvtepu8_epi16(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_i8(p: *const i8) -> __m512i {
        // SAFETY: the caller passes 16 readable bytes.
        unsafe { _mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> __m512 {
        // SAFETY: the caller passes 32 readable bytes.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

/// AVX2: eight rows per vector, the int8 step spelled by `D`.
pub(crate) struct Y256<D>(PhantomData<D>);

impl<D: Dot4> Lanes for Y256<D> {
    type I = __m256i;
    type F = __m256;
    const N: usize = 8;
    #[inline(always)]
    unsafe fn zero_i() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load_i(p: *const i32) -> __m256i {
        // SAFETY: the caller passes 32 readable bytes.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn load_f(p: *const f32) -> __m256 {
        // SAFETY: the caller passes 32 readable bytes.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn dot4(acc: __m256i, w: __m256i, x: i32) -> __m256i {
        // SAFETY: the features of `D`, as the caller promised.
        unsafe { D::dot4(acc, w, _mm256_set1_epi32(x)) }
    }
    #[inline(always)]
    unsafe fn dot_s(acc: __m256i, w: __m256i, x: i32) -> __m256i {
        // SAFETY: the features of `D`, as the caller promised.
        unsafe {
            if D::PAIRS {
                _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, _mm256_set1_epi32(x)))
            } else {
                D::dot4(acc, w, _mm256_set1_epi32(x))
            }
        }
    }
    #[inline(always)]
    unsafe fn scale_s(sumi: __m256i, acc: __m256i, sc: __m256i) -> __m256i {
        if D::PAIRS {
            // The scale in both i16 halves of its lane: one `madd` scales and adds the pairs.
            let sc16 = _mm256_blend_epi16::<0xAA>(sc, _mm256_slli_epi32::<16>(sc));
            _mm256_add_epi32(sumi, _mm256_madd_epi16(acc, sc16))
        } else {
            _mm256_add_epi32(sumi, _mm256_mullo_epi32(acc, sc))
        }
    }
    fn pair_chunks(umax: i32) -> usize {
        if D::PAIRS {
            // Each chunk adds two products per i16, each at most umax · 127.
            (i16::MAX as i32 / (2 * 127 * umax)) as usize
        } else {
            usize::MAX
        }
    }
    #[inline(always)]
    unsafe fn dot2(acc: __m256i, w: __m256i, x: i32) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(w, _mm256_set1_epi32(x)))
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_mullo_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn sub_i(a: __m256i, b: __m256i) -> __m256i {
        _mm256_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn cvt(a: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn store_f(p: *mut f32, v: __m256) {
        // SAFETY: the caller passes 32 writable bytes.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn and(a: __m256i, b: __m256i) -> __m256i {
        _mm256_and_si256(a, b)
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        _mm256_or_si256(a, b)
    }
    #[inline(always)]
    unsafe fn srl16<const S: i32>(a: __m256i) -> __m256i {
        _mm256_srli_epi16::<S>(a)
    }
    #[inline(always)]
    unsafe fn sll32<const S: i32>(a: __m256i) -> __m256i {
        _mm256_slli_epi32::<S>(a)
    }
    #[inline(always)]
    unsafe fn sra32<const S: i32>(a: __m256i) -> __m256i {
        _mm256_srai_epi32::<S>(a)
    }
    #[inline(always)]
    unsafe fn splat_i8(v: i8) -> __m256i {
        _mm256_set1_epi8(v)
    }
    #[inline(always)]
    unsafe fn splat_i(v: i32) -> __m256i {
        _mm256_set1_epi32(v)
    }
    #[inline(always)]
    unsafe fn load_u8(p: *const u8) -> __m256i {
        // SAFETY: the caller passes 8 readable bytes.
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_u8_pairs(p: *const u8) -> __m256i {
        // SAFETY: the caller passes 16 readable bytes.
        unsafe { _mm256_cvtepu8_epi16(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_i8(p: *const i8) -> __m256i {
        // SAFETY: the caller passes 8 readable bytes.
        unsafe { _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_h(p: *const u16) -> __m256 {
        // SAFETY: the caller passes 16 readable bytes.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// [`crate::kquants::k_accumulate`]'s float step of super-block `j` for every activation
/// row, lane by lane:
/// `acc + ((d·dx)·sumi − (dmin·dx)·summ)` (`k_accumulate` with mins), or
/// `acc + (d·dx)·sumi` without (`dmin` `None`).
#[inline(always)]
pub(crate) unsafe fn k_accumulate_lanes<L: Lanes, const R: usize>(
    d: L::F,
    dmin: Option<L::F>,
    xs: &[&[BlockQ8K]; R],
    j: usize,
    sumi: &[L::I; R],
    summ: &[L::I; R],
    acc: &mut [L::F; R],
) {
    // SAFETY: the features of `L`, as the caller promised.
    unsafe {
        for r in 0..R {
            let dx = L::splat(xs[r][j].d);
            let step = match dmin {
                Some(dmin) => L::sub(
                    L::mul(L::mul(d, dx), L::cvt(sumi[r])),
                    L::mul(L::mul(dmin, dx), L::cvt(summ[r])),
                ),
                None => L::mul(L::mul(d, dx), L::cvt(sumi[r])),
            };
            acc[r] = L::add(acc[r], step);
        }
    }
}
