//! The K formats (Q2_K … Q6_K) times many activation rows at once (prefill, batched decode):
//! sixteen weight rows at a time are decoded ONCE into unsigned bytes, lane-major, and every
//! activation row of the call runs over them.
//!
//! Why: the row-major kernels (`kquants_avx2`) spend two int8 operations (`maddubs`, then
//! `madd` with the group scales) per 32 values of one weight row and activation row, and
//! decode each weight block again for every four activation rows. Here a decoded "chunk"
//! holds four consecutive quants of each of sixteen weight rows (bytes `4i..4i+4` = row
//! `i`), so one `vpdpbusd` against the matching four activation bytes, broadcast, adds four
//! products to each row's lane: 64 values × 16 rows per 512-bit operation. The group scale
//! is applied once per group by an integer multiply, and the super-block's float step runs
//! sixteen rows wide. The AVX2 spellings take the same chunks as two halves of eight rows
//! (`vpdpbusd` on 256 bits with AVX-VNNI, `maddubs` + `madd` without; plain AVX2 takes
//! both halves in one pass, see [`body_pairs`]).
//!
//! Numbers are unchanged: per (weight row, activation row, super-block) the integers
//! `sumi = Σ_g sc_g Σ q x` and `summ = Σ_g mn_g bsum_g` are exact whatever order they are
//! summed in (the largest, Q6_K's, stays below 2^28), and each lane then takes exactly
//! [`crate::kquants::k_accumulate`]'s float operations, in super-block order. So every row's
//! result is bit-identical to the scalar kernel's whatever the batch, the ISA spelling or the
//! thread count (pinned by `tests/matmul.rs`, which compares every spelling the machine has).
//! The signed formats are stored here as `u = q + offset`, which `vpdpbusd` needs unsigned;
//! the offset comes back out through the activation block sums:
//! `Σ_g sc_g Σ q x = Σ_g sc_g Σ u x − Σ_g (offset·sc_g) bsum_g`.

use std::arch::x86_64::*;
use std::cell::RefCell;

use crate::block::Isa;
use crate::dot4::{transpose8, Pairs, Vnni};
use crate::kquants::{
    unpack_scale_min_k4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, KQuant, QK_K,
};
use crate::kquants_avx2::q6k_values;
use crate::lanes::{dot_pairs, k_accumulate_lanes, word, Lanes, Y256, Z512};
use crate::tiling::{Job, RowKernel};

/// Weight rows decoded together: one 32-bit lane per row of a 512-bit vector.
pub(crate) const ROWS: usize = 16;

/// Activation rows from which this path beats the row-major kernels on `isa`: the decode
/// must be shared by enough rows to pay for itself, and without `vpdpbusd` the int8 step
/// costs what the row-major kernels pay. One thread, 64 x 2048 from cache, ns per 32
/// values and activation row (AMD EPYC with AVX-512, 2026-12-02; row-major ~0.44 at every
/// n): `avx512` n=8 0.29, n=16 0.20, n=64 0.12; `avxvnni` 0.39, 0.30, 0.23; `avx2` 0.47,
/// 0.32, 0.24 (q4_K; q5_K/q6_K 0.48, 0.38, 0.31).
pub(crate) fn min_rows(isa: Isa) -> usize {
    if isa.is_avx512() || isa.vnni256() {
        8
    } else {
        16
    }
}

/// One super-block of a group of [`ROWS`] weight rows, lane-major.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Packed {
    /// Chunk `c`: values `4c..4c+4` of row `i` at bytes `4i..4i+4` (unsigned quants).
    pub(crate) q: [[u8; 4 * ROWS]; QK_K / 4],
    /// Scale group `g` of each row (groups of [`KPack::GROUP_VALUES`] values): the i32
    /// scale, or for [`body_pairs`] the scale in both i16 halves of the lane (`madd`'s form).
    pub(crate) sc: [[i32; ROWS]; 16],
    /// i16 pairs `(b_2k, b_2k+1)` per row: the 16-value groups' mins (formats with mins) or
    /// `offset · scale` (signed formats), to multiply with the activations' block sums. For
    /// [`body_pairs`] the formats with one min per 32 values take four pairs of consecutive
    /// mins instead, against sums of 32 activations ([`BlockQ8K::sums32`]).
    pub(crate) bias: [[i32; ROWS]; 8],
    pub(crate) d: [f32; ROWS],
    pub(crate) dmin: [f32; ROWS],
}

const PACKED_ZERO: Packed = Packed {
    q: [[0; 4 * ROWS]; QK_K / 4],
    sc: [[0; ROWS]; 16],
    bias: [[0; ROWS]; 8],
    d: [0.0; ROWS],
    dmin: [0.0; ROWS],
};

/// One weight row's super-block decoded to unsigned quants (see the module doc).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Unpacked {
    u: [u8; QK_K],
    sc: [i32; 16],
    bias: [i16; 16],
    d: f32,
    dmin: f32,
}

const UNPACKED_ZERO: Unpacked = Unpacked {
    u: [0; QK_K],
    sc: [0; 16],
    bias: [0; 16],
    d: 0.0,
    dmin: 0.0,
};

/// A K format that can be decoded to [`Unpacked`].
pub(crate) trait KPack: KQuant + Sync {
    /// Values per scale group: 32 where the format's scales cover 32 values (Q4_K, Q5_K),
    /// which halves the integer multiplies; else 16.
    const GROUP_VALUES: usize = 16;

    /// The largest unsigned quant (`2^bits - 1`): bounds the i16 sums of the AVX2 spelling.
    const UMAX: i32;

    /// Decodes the super-block. The default goes through the scalar [`KQuant::decode`];
    /// the common formats override it with SIMD.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[inline(always)]
    unsafe fn unpack(&self, out: &mut Unpacked) {
        let dec = self.decode();
        for (u, &q) in out.u.iter_mut().zip(&dec.q) {
            *u = (q as i32 + Self::Q_OFFSET) as u8;
        }
        let per = Self::GROUP_VALUES / 16;
        for g in 0..16 / per {
            out.sc[g] = dec.sc[per * g];
        }
        for g in 0..16 {
            out.bias[g] = if Self::HAS_MIN {
                dec.mn[g]
            } else {
                Self::Q_OFFSET * dec.sc[g]
            } as i16;
        }
        out.d = dec.d;
        out.dmin = dec.dmin;
    }
}

impl KPack for BlockQ2K {
    const UMAX: i32 = 3;
}
impl KPack for BlockQ3K {
    const UMAX: i32 = 7;
}

/// Q4_K and Q5_K scales and mins (32-value groups; each min covers two 16-value bsums).
#[inline(always)]
fn unpack_k4_meta(scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2], out: &mut Unpacked) {
    let (sc, mn) = unpack_scale_min_k4(scales);
    for k in 0..8 {
        out.sc[k] = sc[k] as i32;
        out.bias[2 * k] = mn[k] as i16;
        out.bias[2 * k + 1] = mn[k] as i16;
    }
    out.d = crate::block::f16_to_f32(d);
    out.dmin = crate::block::f16_to_f32(dmin);
}

#[inline(always)]
unsafe fn store32(dst: &mut [u8], v: __m256i) {
    assert!(dst.len() >= 32);
    // SAFETY: 32 writable bytes; AVX2 as the caller promised.
    unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), v) }
}

#[inline(always)]
unsafe fn load32(src: &[u8]) -> __m256i {
    assert!(src.len() >= 32);
    // SAFETY: 32 readable bytes; AVX2 as the caller promised.
    unsafe { _mm256_loadu_si256(src.as_ptr().cast()) }
}

impl KPack for BlockQ4K {
    const GROUP_VALUES: usize = 32;
    const UMAX: i32 = 15;
    #[inline(always)]
    unsafe fn unpack(&self, out: &mut Unpacked) {
        // SAFETY: AVX2, as the caller promised.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            for j in 0..4 {
                let q = load32(&self.qs[32 * j..]);
                store32(&mut out.u[64 * j..], _mm256_and_si256(q, m4));
                store32(
                    &mut out.u[64 * j + 32..],
                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                );
            }
        }
        unpack_k4_meta(&self.scales, self.d, self.dmin, out);
    }
}

impl KPack for BlockQ5K {
    const GROUP_VALUES: usize = 32;
    const UMAX: i32 = 31;
    #[inline(always)]
    unsafe fn unpack(&self, out: &mut Unpacked) {
        // SAFETY: AVX2, as the caller promised.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let qh = load32(&self.qh);
            for j in 0..4 {
                let q = load32(&self.qs[32 * j..]);
                // Bit 2j of qh[l] is the fifth bit of value 64j + l, bit 2j + 1 that of
                // 64j + 32 + l.
                let h_lo = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32)),
                    _mm256_set1_epi8(1),
                );
                let h_hi = _mm256_and_si256(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                    _mm256_set1_epi8(1),
                );
                let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h_lo, 4));
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                    _mm256_slli_epi16(h_hi, 4),
                );
                store32(&mut out.u[64 * j..], lo);
                store32(&mut out.u[64 * j + 32..], hi);
            }
        }
        unpack_k4_meta(&self.scales, self.d, self.dmin, out);
    }
}

impl KPack for BlockQ6K {
    const UMAX: i32 = 63;
    #[inline(always)]
    unsafe fn unpack(&self, out: &mut Unpacked) {
        for n in 0..2 {
            // SAFETY: AVX2, as the caller promised.
            let q = unsafe { q6k_values(self, n) };
            for (k, &qk) in q.iter().enumerate() {
                // SAFETY: as above.
                unsafe { store32(&mut out.u[128 * n + 32 * k..], qk) };
            }
        }
        for g in 0..16 {
            out.sc[g] = self.scales[g] as i32;
            out.bias[g] = (Self::Q_OFFSET * self.scales[g] as i32) as i16;
        }
        out.d = crate::block::f16_to_f32(self.d);
        out.dmin = 0.0;
    }
}

/// Hints the cache lines of the `span` bytes from `p` into L2. Never faults.
#[inline(always)]
pub(crate) fn prefetch_l2(p: *const u8, span: usize) {
    let mut off = 0;
    while off <= span {
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// Decodes up to [`ROWS`] rows (`rows.len() / bpr`; missing rows read as zero) into `out`,
/// hinting the rows `ahead` rows on into L2. `paired` stores the scales and mins in the
/// forms [`body_pairs`] multiplies by (see [`Packed`]).
#[target_feature(enable = "avx2,fma,f16c")]
fn pack<B: KPack>(rows: &[B], bpr: usize, ahead: usize, paired: bool, out: &mut [Packed]) {
    let h = rows.len() / bpr;
    assert_eq!(out.len(), bpr, "one packed super-block per block of a row");
    let mut tmp = [UNPACKED_ZERO; ROWS];
    for (j, p) in out.iter_mut().enumerate() {
        for (i, t) in tmp.iter_mut().enumerate().take(h) {
            let b = &rows[i * bpr + j];
            // The same block `ahead` rows on (the next sub-tile's), into L2: it arrives
            // while this sub-tile is multiplied with every activation row (rows are
            // contiguous; past the matrix the hint is dropped, a prefetch never faults).
            prefetch_l2(
                (b as *const B)
                    .cast::<u8>()
                    .wrapping_add(ahead * bpr * size_of::<B>()),
                size_of::<B>(),
            );
            // SAFETY: AVX2, FMA and F16C are enabled in this function.
            unsafe { b.unpack(t) };
        }
        for half in 0..2 {
            for v in 0..8 {
                let mut w = [_mm256_setzero_si256(); 8];
                for (i, wi) in w.iter_mut().enumerate() {
                    // SAFETY: AVX2 is enabled in this function.
                    *wi = unsafe { load32(&tmp[8 * half + i].u[32 * v..]) };
                }
                for (m, c) in transpose8(w).into_iter().enumerate() {
                    // SAFETY: as above.
                    unsafe { store32(&mut p.q[8 * v + m][32 * half..], c) };
                }
            }
        }
        for (i, t) in tmp.iter().enumerate() {
            for g in 0..16 {
                // A scale fits in i16 (Q6_K's are i8); its high half is a sign extension.
                let sc = t.sc[g];
                p.sc[g][i] = if paired {
                    ((sc as u16 as u32) | ((sc as u16 as u32) << 16)) as i32
                } else {
                    sc
                };
            }
            let pair = |a: i16, b: i16| ((a as u16 as u32) | ((b as u16 as u32) << 16)) as i32;
            if paired && mins32::<B>() {
                for k in 0..4 {
                    p.bias[k][i] = pair(t.bias[4 * k], t.bias[4 * k + 2]);
                }
            } else {
                for k in 0..8 {
                    p.bias[k][i] = pair(t.bias[2 * k], t.bias[2 * k + 1]);
                }
            }
            p.d[i] = t.d;
            p.dmin[i] = t.dmin;
        }
    }
}

/// The dots of lanes `lane0..lane0 + L::N` of a packed group with `R` activation rows, into
/// `out[r][lane0..]`. Each lane takes `k_accumulate`'s float steps, super-block by
/// super-block (see the module doc).
#[inline(always)]
unsafe fn body<L: Lanes, B: KPack, const R: usize>(
    pk: &[Packed],
    lane0: usize,
    xs: &[&[BlockQ8K]; R],
    out: &mut [[f32; ROWS]; R],
) {
    assert!(lane0 + L::N <= ROWS, "lanes {lane0}.. outside the group");
    let chunks_per_group = B::GROUP_VALUES / 4;
    let groups = QK_K / B::GROUP_VALUES;
    // SAFETY (every intrinsic below): the features of `L`, as the caller promised; every
    // pointer is into `Packed` arrays of ROWS lanes at `lane0 + L::N <= ROWS`.
    unsafe {
        let mut acc = [L::zero_f(); R];
        for (j, p) in pk.iter().enumerate() {
            let mut raw = [L::zero_i(); R];
            for g in 0..groups {
                let mut s = [L::zero_i(); R];
                for c in g * chunks_per_group..(g + 1) * chunks_per_group {
                    let w = L::load_i(p.q[c].as_ptr().add(4 * lane0).cast());
                    for r in 0..R {
                        s[r] = L::dot4(s[r], w, word(&xs[r][j].qs, c));
                    }
                }
                let sc = L::load_i(p.sc[g].as_ptr().add(lane0));
                for r in 0..R {
                    raw[r] = L::mul_add(raw[r], s[r], sc);
                }
            }
            finish_superblock::<L, B, R>(p, lane0, xs, j, &raw, &mut acc);
        }
        for r in 0..R {
            L::store_f(out[r].as_mut_ptr().add(lane0), acc[r]);
        }
    }
}

/// The rest of super-block `j` for every activation row: the mins' (or offsets') dot with the
/// activation block sums, then `k_accumulate`'s float step, lane by lane: `acc + ((d·dx)·sumi
/// − (dmin·dx)·summ)`, or `acc + (d·dx)·sumi` with `sumi = raw − offset terms`.
#[inline(always)]
unsafe fn finish_superblock<L: Lanes, B: KPack, const R: usize>(
    p: &Packed,
    lane0: usize,
    xs: &[&[BlockQ8K]; R],
    j: usize,
    raw: &[L::I; R],
    acc: &mut [L::F; R],
) {
    // SAFETY: the features of `L`, as the caller promised; the pointers are into `Packed`
    // arrays of ROWS lanes at `lane0 + L::N <= ROWS`.
    unsafe {
        let mut bs = [L::zero_i(); R];
        for k in 0..8 {
            let b = L::load_i(p.bias[k].as_ptr().add(lane0));
            dot_pairs::<L, R>(&mut bs, b, xs, j, |x| x.bsums_pair(k));
        }
        let d = L::load_f(p.d.as_ptr().add(lane0));
        if B::HAS_MIN {
            let dmin = L::load_f(p.dmin.as_ptr().add(lane0));
            k_accumulate_lanes::<L, R>(d, Some(dmin), xs, j, raw, &bs, acc);
        } else {
            let sumi = std::array::from_fn(|r| L::sub_i(raw[r], bs[r]));
            k_accumulate_lanes::<L, R>(d, None, xs, j, &sumi, &bs, acc);
        }
    }
}

/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn group_avx512<B: KPack, const R: usize>(
    pk: &[Packed],
    xs: &[&[BlockQ8K]; R],
    out: &mut [[f32; ROWS]; R],
) {
    // SAFETY: as the caller promised.
    unsafe { body::<Z512, B, R>(pk, 0, xs, out) }
}

/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<B: KPack, const R: usize>(
    pk: &[Packed],
    xs: &[&[BlockQ8K]; R],
    out: &mut [[f32; ROWS]; R],
) {
    // SAFETY: as the caller promised.
    unsafe {
        assert!(R <= PAIRS_ROWS, "{R} rows spill body_pairs' accumulators");
        body_pairs::<B, R>(pk, xs, out);
    }
}

/// Chunks whose i16 pair sums add without overflow (each pair is at most
/// `2 · UMAX · 127`), at most a group's: Q4_K eight (its group), Q5_K four, Q6_K two.
const fn pairs_run<B: KPack>() -> usize {
    let fit = (i16::MAX as i32 / (2 * B::UMAX * 127)) as usize;
    let group = B::GROUP_VALUES / 4;
    if fit < group {
        fit
    } else {
        group
    }
}

/// Whether `B` has one min per 32 values (Q4_K, Q5_K): [`body_pairs`] then dots its mins
/// with sums of 32 activations, half the `madd`s of the 16-value block sums.
const fn mins32<B: KPack>() -> bool {
    B::HAS_MIN && B::GROUP_VALUES == 32
}

/// [`finish_superblock`] for the [`mins32`] formats in [`body_pairs`]: the mins' dot is four
/// i16 pairs of consecutive mins per lane against the matching pairs of 32-value activation
/// sums ([`BlockQ8K::sums32`]); then `k_accumulate`'s float step.
#[inline(always)]
unsafe fn finish_mins32<const R: usize>(
    p: &Packed,
    lane0: usize,
    xs: &[&[BlockQ8K]; R],
    j: usize,
    raw: &[__m256i; R],
    acc: &mut [__m256; R],
) {
    type L = Y256<Pairs>;
    // SAFETY: AVX2, as the caller promised; the pointers are into `Packed` arrays of ROWS
    // lanes at `lane0 + 8 <= ROWS`.
    unsafe {
        let mut bs = [_mm256_setzero_si256(); R];
        for k in 0..4 {
            let b = L::load_i(p.bias[k].as_ptr().add(lane0));
            dot_pairs::<L, R>(&mut bs, b, xs, j, |x| x.sums32_pair(k));
        }
        let d = L::load_f(p.d.as_ptr().add(lane0));
        let dmin = L::load_f(p.dmin.as_ptr().add(lane0));
        k_accumulate_lanes::<L, R>(d, Some(dmin), xs, j, raw, &bs, acc);
    }
}

/// Activation rows per pass of [`body_pairs`]: its `4 R` integer accumulators and three
/// operands fill the sixteen registers.
const PAIRS_ROWS: usize = 3;

/// [`body`] for plain AVX2, all sixteen lanes in one pass. Without `vpdpbusd` the int8 step
/// is `maddubs` (pairs of products into i16) and `madd` (into i32); here the i16 pairs of as
/// many chunks as cannot overflow ([`pairs_run`]) are added first, and one `madd` with the
/// group scale in both halves of each lane (packed in that form) turns them into `sc · Σ` in
/// i32, where [`body`] pays a `madd` by ones per chunk and a multiply per group. The
/// integers are the same (exact), so the bits are. Every format takes it: even Q6_K's runs
/// of two chunks save a sixth of its integer operations.
///
/// Why sixteen lanes: each activation broadcast then serves both halves' chunks, two weight
/// loads and `R` broadcasts for `2 R` `maddubs`, where two passes of eight lanes paid one
/// load per `maddubs`; the loads, not the multiplies, bounded the loop. The float
/// accumulators live in `out` between super-blocks, which keeps the integer ones in
/// registers. Each run's chunk count is a constant that divides the group, so the chunk
/// loop unrolls whole: with a run loop of variable length Q6_K's pairs measured level with
/// [`body`], unrolled they are a quarter faster.
///
/// One thread, `avx2`, ns per 32 values x row (AMD EPYC Zen 4, best of 5): q4_K 1024 x
/// 2560, n = 128: two passes of eight lanes 0.31-0.33, one pass 0.27-0.28, unrolled with
/// packed scales and the 32-value mins 0.253; q6_K 256 x 10240: two passes 0.376, this 0.288.
/// 64 x 2048, n = 64: q5_K 0.39 → 0.29, q3_K 1.15 → 1.07, q2_K 0.71 → 0.62.
#[inline(always)]
unsafe fn body_pairs<B: KPack, const R: usize>(
    pk: &[Packed],
    xs: &[&[BlockQ8K]; R],
    out: &mut [[f32; ROWS]; R],
) {
    type L = Y256<Pairs>;
    let chunks_per_group = B::GROUP_VALUES / 4;
    let groups = QK_K / B::GROUP_VALUES;
    // A compile-time run that divides the group: its chunk loop unrolls whole.
    let run = const { pairs_run::<B>() };
    const { assert!(pairs_run::<B>() >= 1 && (B::GROUP_VALUES / 4) % pairs_run::<B>() == 0) };
    // SAFETY (every intrinsic below): AVX2, as the caller promised; every pointer is into
    // `Packed` arrays of ROWS lanes, at lanes 0 and 8.
    unsafe {
        *out = [[0.0; ROWS]; R];
        for (j, p) in pk.iter().enumerate() {
            // Half-major: `raw[h][r]` holds lanes `8h..8h + 8` of activation row `r`.
            let mut raw = [[_mm256_setzero_si256(); R]; 2];
            for g in 0..groups {
                for c in (g * chunks_per_group..(g + 1) * chunks_per_group).step_by(run) {
                    let mut s16 = [[_mm256_setzero_si256(); R]; 2];
                    for cc in c..c + run {
                        let w0 = L::load_i(p.q[cc].as_ptr().cast());
                        let w1 = L::load_i(p.q[cc].as_ptr().add(32).cast());
                        for r in 0..R {
                            let x = _mm256_set1_epi32(word(&xs[r][j].qs, cc));
                            s16[0][r] = _mm256_add_epi16(s16[0][r], _mm256_maddubs_epi16(w0, x));
                            s16[1][r] = _mm256_add_epi16(s16[1][r], _mm256_maddubs_epi16(w1, x));
                        }
                    }
                    for (h, (raw_h, s16_h)) in raw.iter_mut().zip(&s16).enumerate() {
                        // The group scale in both i16 halves of each lane (packed so).
                        let sc16 = L::load_i(p.sc[g].as_ptr().add(8 * h));
                        for (acc, &s) in raw_h.iter_mut().zip(s16_h) {
                            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(s, sc16));
                        }
                    }
                }
            }
            for (h, raw_h) in raw.iter().enumerate() {
                let mut acc: [__m256; R] =
                    std::array::from_fn(|r| L::load_f(out[r].as_ptr().add(8 * h)));
                if mins32::<B>() {
                    finish_mins32::<R>(p, 8 * h, xs, j, raw_h, &mut acc);
                } else {
                    finish_superblock::<L, B, R>(p, 8 * h, xs, j, raw_h, &mut acc);
                }
                for (o, a) in out.iter_mut().zip(acc) {
                    L::store_f(o.as_mut_ptr().add(8 * h), a);
                }
            }
        }
    }
}

/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn group_vnni<B: KPack, const R: usize>(
    pk: &[Packed],
    xs: &[&[BlockQ8K]; R],
    out: &mut [[f32; ROWS]; R],
) {
    // SAFETY: as the caller promised.
    unsafe {
        body::<Y256<Vnni>, B, R>(pk, 0, xs, out);
        body::<Y256<Vnni>, B, R>(pk, 8, xs, out);
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<Packed>> = const { RefCell::new(Vec::new()) };
}

/// `f` on this thread's scratch of `len` packed super-blocks (reused call to call; its
/// contents are whatever the last call left, so `f` fills every one it reads).
pub(crate) fn with_scratch(len: usize, f: impl FnOnce(&mut [Packed])) {
    SCRATCH.with(|cell| {
        let mut pk = cell.borrow_mut();
        pk.resize(len, PACKED_ZERO);
        f(&mut pk[..len])
    })
}

/// A row-major matrix of a K format, multiplied through the lane-major path.
pub(crate) struct KGemm<'a, B> {
    /// An AVX2 spelling or better (checked by `matmul::run`).
    pub isa: Isa,
    pub blocks: &'a [B],
    pub bpr: usize,
    pub rows: usize,
    pub row_bytes: usize,
}

impl<B: KPack> RowKernel for KGemm<'_, B> {
    type Act = BlockQ8K;

    fn rows(&self) -> usize {
        self.rows
    }

    fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    fn row_align(&self) -> usize {
        ROWS
    }

    fn subtile(&self, job: &Job<BlockQ8K>, o0: usize, o1: usize) {
        assert!(self.isa.is_avx2(), "the lane-major K kernels need AVX2");
        let bpr = self.bpr;
        // Every group of the sub-tile packed first (its weights in L2 for the whole call).
        with_scratch((o1 - o0).div_ceil(ROWS) * bpr, |pk| {
            for (gi, p) in pk.chunks_exact_mut(bpr).enumerate() {
                let g0 = o0 + gi * ROWS;
                let h = ROWS.min(o1 - g0);
                // SAFETY: an AVX2 `Isa` proves AVX2, FMA and F16C.
                unsafe {
                    let rows = &self.blocks[g0 * bpr..(g0 + h) * bpr];
                    pack(rows, bpr, o1 - o0, plain_avx2(self.isa), p)
                };
            }
            multiply::<B>(self.isa, pk, bpr, job, o0, o1);
        });
    }
}

/// Whether [`body_pairs`] runs, and so the forms [`Packed`] must hold: AVX2 without
/// `vpdpbusd`.
pub(crate) fn plain_avx2(isa: Isa) -> bool {
    !isa.is_avx512() && !isa.vnni256()
}

/// Every activation row of `job` times the packed groups `pk` (`bpr` super-blocks each) of
/// weight rows `o0..o1`, into `job`'s outputs.
pub(crate) fn multiply<B: KPack>(
    isa: Isa,
    pk: &[Packed],
    bpr: usize,
    job: &Job<BlockQ8K>,
    o0: usize,
    o1: usize,
) {
    assert!(isa.is_avx2(), "the lane-major K kernels need AVX2");
    assert_eq!(
        pk.len(),
        (o1 - o0).div_ceil(ROWS) * bpr,
        "one group per sixteen rows"
    );
    for r in 0..job.n() {
        assert!(job.row(r).len() >= bpr, "activation row too short");
    }
    // Activation rows outer, groups inner: the rows' blocks are read from memory (or L3) once
    // per sub-tile rather than once per group, and stay in L1 across its groups (a 512-row
    // step's activations outgrow L2). Rows per pass: four, or [`PAIRS_ROWS`] where
    // [`body_pairs`] runs.
    let most = if plain_avx2(isa) { PAIRS_ROWS } else { 4 };
    let mut r = 0;
    while r < job.n() {
        let take = (job.n() - r).min(most);
        for (gi, p) in pk.chunks_exact(bpr).enumerate() {
            let g0 = o0 + gi * ROWS;
            let h = ROWS.min(o1 - g0);
            match take {
                1 => rows_of::<B, 1>(isa, p, job, r, g0, h),
                2 => rows_of::<B, 2>(isa, p, job, r, g0, h),
                3 => rows_of::<B, 3>(isa, p, job, r, g0, h),
                _ => rows_of::<B, 4>(isa, p, job, r, g0, h),
            }
        }
        r += take;
    }
}

/// Activation rows `r..r + R` times the packed group of weight rows `g0..g0 + h`.
#[inline(always)]
fn rows_of<B: KPack, const R: usize>(
    isa: Isa,
    pk: &[Packed],
    job: &Job<BlockQ8K>,
    r: usize,
    g0: usize,
    h: usize,
) {
    let xs: [&[BlockQ8K]; R] = std::array::from_fn(|i| job.row(r + i));
    let mut out = [[0.0f32; ROWS]; R];
    // SAFETY: the `Isa` proves the features of the entry chosen; every row covers the `bpr`
    // packed super-blocks (checked in `multiply`).
    unsafe {
        if isa.is_avx512() {
            group_avx512::<B, R>(pk, &xs, &mut out);
        } else if isa.vnni256() {
            group_vnni::<B, R>(pk, &xs, &mut out);
        } else {
            group_avx2::<B, R>(pk, &xs, &mut out);
        }
    }
    for (i, o) in out.iter().enumerate() {
        // SAFETY: rows `g0..g0 + h` lie in this task's sub-tile.
        unsafe { job.put_run(r + i, g0, &o[..h]) };
    }
}
