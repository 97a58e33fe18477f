//! Attention over a quantized KV cache: int8 scores and value sums straight from the blocks.
//!
//! A q8_0 cache (llama.cpp's `--cache-type-k/-v q8_0`) keeps each K and V row as blocks of
//! 32 int8 values with one f16 scale: 34 bytes per 32 values instead of 64, so a long
//! context costs about half the memory and half the reads; q4_0 keeps 32 nibbles (value
//! `q − 8`) and a scale, 18 bytes. The keys meet the queries in int8 — each query head
//! quantized to q8_0 by the caller, once per call, as llama.cpp quantizes Q to its K type; a
//! q4_0 block is widened to 32 signed bytes in registers first — and the values are widened
//! to f32 in registers, never copied. [`KvBlock`] is what a block type supplies.
//!
//! Bits: every spelling gives the same bits (AVX-512 hosts run the AVX2 code; the 256-bit
//! lane layout is the definition). A score is, per key: for each 32-value block, eight lane
//! sums of four int8 products (exact integers), lane `l` accumulating `fma(dq·dk, sum_l,
//! lane_l)` over the blocks in order; then the lanes are reduced as
//! `((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))`. A value sum updates each accumulator element by
//! `fma(p·dv, v, acc)` with the keys in order. Neither depends on how many rows or keys a
//! call carries, so attention over a q8_0 cache keeps batch and chunk invariance.

use crate::block::{f16_to_f32, Isa};
use crate::legacy::{BlockQ4_0, BlockQ8_0, QK};

/// A 32-value block of a quantized KV row: its scale, its values as signed bytes, and how to
/// write one.
pub trait KvBlock: Copy + Default + Sync + 'static {
    /// The f16 scale, little-endian.
    fn d(&self) -> [u8; 2];
    /// The 32 values' integers (the value is `d ×` each), in order.
    fn signed(&self) -> [i8; 32];
    /// The block that stores `x` (32 values).
    fn quantize_block(x: &[f32]) -> Self;
    /// [`KvBlock::signed`] in a register.
    ///
    /// # Safety
    /// AVX2 must be available.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i;
}

impl KvBlock for BlockQ8_0 {
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn signed(&self) -> [i8; 32] {
        self.qs
    }
    /// `d = amax / 127`, quants rounded to nearest, ties to even: the activation quantizer's
    /// rule, the same bits on every ISA.
    fn quantize_block(x: &[f32]) -> Self {
        let (d, qs, _) = match <&[f32; QK]>::try_from(x) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: an AVX2 `Isa` proves the CPU features.
            Ok(full) if Isa::best().is_avx2() => unsafe { crate::quant_avx2::quantize32(full) },
            _ => crate::legacy::quantize32(x),
        };
        BlockQ8_0 {
            d: crate::block::f32_to_f16(d),
            qs,
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        // SAFETY: 32 readable bytes; AVX2 per the caller.
        unsafe { std::arch::x86_64::_mm256_loadu_si256(self.qs.as_ptr().cast()) }
    }
}

impl KvBlock for BlockQ4_0 {
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn signed(&self) -> [i8; 32] {
        let mut out = [0i8; 32];
        for (j, &b) in self.qs.iter().enumerate() {
            out[j] = (b & 0x0F) as i8 - 8;
            out[j + 16] = (b >> 4) as i8 - 8;
        }
        out
    }
    /// ggml's q4_0 rule (`d = max / −8` of the value largest in magnitude).
    fn quantize_block(x: &[f32]) -> Self {
        BlockQ4_0::from_f32(x)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: 16 readable bytes; AVX2 per the caller.
        unsafe {
            let b = _mm_loadu_si128(self.qs.as_ptr().cast());
            let low = _mm_set1_epi8(0x0F);
            let lo = _mm_and_si128(b, low);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(b), low);
            _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8))
        }
    }
}

/// `x` (whole blocks of 32) as the blocks `out` ([`KvBlock::quantize_block`]).
pub fn quantize_kv<B: KvBlock>(x: &[f32], out: &mut [B]) {
    assert_eq!(
        x.len(),
        out.len() * QK,
        "KV blocks take whole blocks of {QK}"
    );
    for (o, x) in out.iter_mut().zip(x.chunks_exact(QK)) {
        *o = B::quantize_block(x);
    }
}

/// [`attn_scores_int8_isa`] on the best ISA.
pub fn attn_scores_int8<B: KvBlock>(q: &[BlockQ8_0], nb: usize, keys: &[&[B]], out: &mut [f32]) {
    attn_scores_int8_isa(Isa::best(), q, nb, keys, out)
}

/// [`attn_accumulate_int8_isa`] on the best ISA.
pub fn attn_accumulate_int8<B: KvBlock>(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[B]]) {
    attn_accumulate_int8_isa(Isa::best(), acc, d, p, vs)
}

/// Scores of every row of `q` (rows of `nb` blocks: one query head each) against every key
/// (`nb` blocks each): `out[r * keys.len() + j]`, on `isa`.
pub fn attn_scores_int8_isa<B: KvBlock>(
    isa: Isa,
    q: &[BlockQ8_0],
    nb: usize,
    keys: &[&[B]],
    out: &mut [f32],
) {
    assert!(nb > 0 && q.len().is_multiple_of(nb), "q is not whole rows");
    let (rows, n) = (q.len() / nb, keys.len());
    assert_eq!(out.len(), rows * n, "score buffer size");
    for k in keys {
        assert!(k.len() >= nb, "key shorter than a row");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        let vnni = isa.is_avx512();
        let mut r0 = 0;
        while r0 < rows {
            let rr = (rows - r0).min(4);
            let qr = &q[r0 * nb..(r0 + rr) * nb];
            // The query blocks' scales, widened once for every key (on the stack: this runs
            // for every key block of every query tile).
            let mut stack = [0.0f32; 64];
            let mut heap = Vec::new();
            let qd: &mut [f32] = if qr.len() <= stack.len() {
                &mut stack[..qr.len()]
            } else {
                heap.resize(qr.len(), 0.0);
                &mut heap
            };
            for (d, b) in qd.iter_mut().zip(qr) {
                *d = f16_to_f32(b.d);
            }
            let qd = &*qd;
            for (j, k) in keys.iter().enumerate() {
                // SAFETY: an AVX2 `Isa` proves the CPU features, an AVX-512 one VNNI too.
                let s = unsafe {
                    match (rr, vnni) {
                        (4, false) => avx2::scores::<4, _>(qr, qd, nb, k),
                        (3, false) => avx2::scores::<3, _>(qr, qd, nb, k).map4(),
                        (2, false) => avx2::scores::<2, _>(qr, qd, nb, k).map4(),
                        (_, false) => avx2::scores::<1, _>(qr, qd, nb, k).map4(),
                        (4, true) => avx2::scores_vnni::<4, _>(qr, qd, nb, k),
                        (3, true) => avx2::scores_vnni::<3, _>(qr, qd, nb, k).map4(),
                        (2, true) => avx2::scores_vnni::<2, _>(qr, qd, nb, k).map4(),
                        (_, true) => avx2::scores_vnni::<1, _>(qr, qd, nb, k).map4(),
                    }
                };
                for (r, &s) in s.iter().take(rr).enumerate() {
                    out[(r0 + r) * n + j] = s;
                }
            }
            r0 += rr;
        }
        return;
    }
    let _ = isa;
    for r in 0..rows {
        for (j, k) in keys.iter().enumerate() {
            out[r * n + j] = score_scalar(&q[r * nb..(r + 1) * nb], k);
        }
    }
}

/// Pads a shorter score array to four (the callers read only the rows they asked for).
trait Map4 {
    fn map4(self) -> [f32; 4];
}

impl<const R: usize> Map4 for [f32; R] {
    fn map4(self) -> [f32; 4] {
        let mut out = [0.0; 4];
        out[..R].copy_from_slice(&self);
        out
    }
}

/// The module doc's score, one lane at a time.
fn score_scalar<B: KvBlock>(q: &[BlockQ8_0], k: &[B]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (qb, kb) in q.iter().zip(k) {
        let scale = f16_to_f32(qb.d) * f16_to_f32(kb.d());
        let kq = kb.signed();
        for (l, lane) in lanes.iter_mut().enumerate() {
            let sum: i32 = (4 * l..4 * l + 4)
                .map(|t| i32::from(qb.qs[t]) * i32::from(kq[t]))
                .sum();
            *lane = (sum as f32).mul_add(scale, *lane);
        }
    }
    let l = lanes;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// `acc[r] += Σ_j p[r * vs.len() + j] · vs[j]` for every row `r` of `acc` (rows of `d`
/// values, `d / 32` blocks per value row), keys in order, on `isa`.
pub fn attn_accumulate_int8_isa<B: KvBlock>(
    isa: Isa,
    acc: &mut [f32],
    d: usize,
    p: &[f32],
    vs: &[&[B]],
) {
    assert!(
        d > 0 && d.is_multiple_of(QK) && acc.len().is_multiple_of(d),
        "acc is not whole rows of {d}"
    );
    let (rows, n, nb) = (acc.len() / d, vs.len(), d / QK);
    assert_eq!(p.len(), rows * n, "weight buffer size");
    for v in vs {
        assert!(v.len() >= nb, "value shorter than a row");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        let mut r0 = 0;
        while r0 < rows {
            let rr = (rows - r0).min(4);
            let a = &mut acc[r0 * d..(r0 + rr) * d];
            let pr = &p[r0 * n..(r0 + rr) * n];
            // SAFETY: an AVX2 `Isa` proves the CPU features (an AVX-512 one those too).
            unsafe {
                match rr {
                    4 if isa.is_avx512() => avx512::accumulate::<4, _>(a, d, pr, vs),
                    3 if isa.is_avx512() => avx512::accumulate::<3, _>(a, d, pr, vs),
                    2 if isa.is_avx512() => avx512::accumulate::<2, _>(a, d, pr, vs),
                    1 if isa.is_avx512() => avx512::accumulate::<1, _>(a, d, pr, vs),
                    4 => avx2::accumulate::<4, _>(a, d, pr, vs),
                    3 => avx2::accumulate::<3, _>(a, d, pr, vs),
                    2 => avx2::accumulate::<2, _>(a, d, pr, vs),
                    _ => avx2::accumulate::<1, _>(a, d, pr, vs),
                }
            }
            r0 += rr;
        }
        return;
    }
    let _ = isa;
    for r in 0..rows {
        let a = &mut acc[r * d..(r + 1) * d];
        for (j, v) in vs.iter().enumerate() {
            let w = p[r * n + j];
            for (b, vb) in v[..nb].iter().enumerate() {
                let wd = w * f16_to_f32(vb.d());
                for (a, &x) in a[b * QK..(b + 1) * QK].iter_mut().zip(&vb.signed()) {
                    *a = wd.mul_add(f32::from(x), *a);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::KvBlock;
    use crate::legacy::{BlockQ8_0, QK};

    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// An f16 scale, widened by F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub fn widen(d: [u8; 2]) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
            u16::from_le_bytes(d),
        ))))
    }

    /// One key against `R` query rows of `nb` blocks (their scales `qd`), the int8 step as
    /// `maddubs` + `madd`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scores<const R: usize, B: KvBlock>(
        q: &[BlockQ8_0],
        qd: &[f32],
        nb: usize,
        k: &[B],
    ) -> [f32; R] {
        let ones = _mm256_set1_epi16(1);
        // SAFETY: this function's target features are the caller's.
        unsafe {
            scores_with::<R, B>(q, qd, nb, k, |kabs, qsign| {
                _mm256_madd_epi16(_mm256_maddubs_epi16(kabs, qsign), ones)
            })
        }
    }

    /// [`scores`] with AVX-512 VNNI's 256-bit `vpdpbusd` (the same integers: no pair
    /// saturates in `maddubs`, both are exact).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub fn scores_vnni<const R: usize, B: KvBlock>(
        q: &[BlockQ8_0],
        qd: &[f32],
        nb: usize,
        k: &[B],
    ) -> [f32; R] {
        // SAFETY: this function's target features are the caller's.
        unsafe {
            scores_with::<R, B>(q, qd, nb, k, |kabs, qsign| {
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), kabs, qsign)
            })
        }
    }

    /// # Safety
    /// AVX2, FMA and F16C must be available (inlined into functions that enable them).
    #[inline(always)]
    unsafe fn scores_with<const R: usize, B: KvBlock>(
        q: &[BlockQ8_0],
        qd: &[f32],
        nb: usize,
        k: &[B],
        dot: impl Fn(__m256i, __m256i) -> __m256i,
    ) -> [f32; R] {
        assert!(q.len() >= R * nb && qd.len() >= R * nb && k.len() >= nb);
        // SAFETY: the caller's target features.
        let mut acc = [unsafe { _mm256_setzero_ps() }; R];
        for b in 0..nb {
            let kb = &k[b];
            // SAFETY: a block holds 32 bytes of quants; the caller's target features hold.
            unsafe {
                let kv = kb.load();
                let kabs = _mm256_sign_epi8(kv, kv);
                let dk = widen(kb.d());
                for (r, acc) in acc.iter_mut().enumerate() {
                    let qv = _mm256_loadu_si256(q[r * nb + b].qs.as_ptr().cast());
                    // |k| · (q · sign k) = q · k; both within ±127 (q4_0: −8..7).
                    let p32 = dot(kabs, _mm256_sign_epi8(qv, kv));
                    let scale = _mm256_set1_ps(qd[r * nb + b] * dk);
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, *acc);
                }
            }
        }
        let mut out = [0.0f32; R];
        for (o, &a) in out.iter_mut().zip(&acc) {
            // SAFETY: AVX2 is a caller's target feature.
            *o = unsafe { hsum(a) };
        }
        out
    }

    /// `R` accumulator rows of `d`, over every value row, 16 values at a time.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn accumulate<const R: usize, B: KvBlock>(
        acc: &mut [f32],
        d: usize,
        p: &[f32],
        vs: &[&[B]],
    ) {
        let n = vs.len();
        assert!(acc.len() >= R * d && p.len() >= R * n);
        for v in vs {
            assert!(v.len() * QK >= d);
        }
        let mut i = 0;
        while i < d {
            let (b, half) = (i / QK, i % QK);
            // SAFETY: i + 16 <= d (d is a multiple of 32), each accumulator row holds d.
            unsafe {
                let mut a = [[_mm256_setzero_ps(); 2]; R];
                for (r, a) in a.iter_mut().enumerate() {
                    let row = acc.as_ptr().add(r * d + i);
                    *a = [_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8))];
                }
                for (j, v) in vs.iter().enumerate() {
                    let vb = &v[b];
                    let all = vb.load();
                    let part = if half == 0 {
                        _mm256_castsi256_si128(all)
                    } else {
                        _mm256_extracti128_si256::<1>(all)
                    };
                    let v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                    let v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(part)));
                    let dv = widen(vb.d());
                    for (r, a) in a.iter_mut().enumerate() {
                        let w = _mm256_set1_ps(p[r * n + j] * dv);
                        a[0] = _mm256_fmadd_ps(w, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(w, v1, a[1]);
                    }
                }
                for (r, a) in a.iter().enumerate() {
                    let row = acc.as_mut_ptr().add(r * d + i);
                    _mm256_storeu_ps(row, a[0]);
                    _mm256_storeu_ps(row.add(8), a[1]);
                }
            }
            i += 16;
        }
    }
}

/// The value sums 512 bits wide: a whole block (32 values) of every accumulator row per
/// key, the same element-wise FMAs in the same key order as the other spellings.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::widen;
    use super::KvBlock;
    use crate::legacy::QK;

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub fn accumulate<const R: usize, B: KvBlock>(
        acc: &mut [f32],
        d: usize,
        p: &[f32],
        vs: &[&[B]],
    ) {
        let n = vs.len();
        assert!(acc.len() >= R * d && p.len() >= R * n && d.is_multiple_of(QK));
        for v in vs {
            assert!(v.len() * QK >= d);
        }
        for b in 0..d / QK {
            let i = b * QK;
            // SAFETY: i + 32 <= d; each accumulator row holds d values.
            unsafe {
                let mut a = [[_mm512_setzero_ps(); 2]; R];
                for (r, a) in a.iter_mut().enumerate() {
                    let row = acc.as_ptr().add(r * d + i);
                    *a = [_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16))];
                }
                for (j, v) in vs.iter().enumerate() {
                    let vb = &v[b];
                    let all = vb.load();
                    let v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(all)));
                    let v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm256_extracti128_si256::<1>(all),
                    ));
                    let dv = widen(vb.d());
                    for (r, a) in a.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(p[r * n + j] * dv);
                        a[0] = _mm512_fmadd_ps(w, v0, a[0]);
                        a[1] = _mm512_fmadd_ps(w, v1, a[1]);
                    }
                }
                for (r, a) in a.iter().enumerate() {
                    let row = acc.as_mut_ptr().add(r * d + i);
                    _mm512_storeu_ps(row, a[0]);
                    _mm512_storeu_ps(row.add(16), a[1]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random values with a few extremes.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let x = (s % 20_001) as f32 / 10_000.0 - 1.0;
                if i % 29 == 0 {
                    x * 40.0
                } else {
                    x
                }
            })
            .collect()
    }

    fn blocks<B: KvBlock>(x: &[f32]) -> Vec<B> {
        let mut out = vec![B::default(); x.len() / QK];
        quantize_kv(x, &mut out);
        out
    }

    /// Dequantized, in f64.
    fn deq<B: KvBlock>(b: &[B]) -> Vec<f64> {
        b.iter()
            .flat_map(|b| {
                let d = f64::from(f16_to_f32(b.d()));
                b.signed().map(move |x| d * f64::from(x))
            })
            .collect()
    }

    #[test]
    fn every_spelling_gives_the_scalar_bits_and_the_math_is_right() {
        check::<BlockQ8_0>();
        check::<BlockQ4_0>();
    }

    fn check<B: KvBlock>() {
        let (d, rows, n) = (128, 7, 13);
        let nb = d / QK;
        let q = blocks::<BlockQ8_0>(&values(rows * d, 1));
        let key_rows: Vec<Vec<B>> = (0..n).map(|j| blocks(&values(d, 10 + j as u32))).collect();
        let keys: Vec<&[B]> = key_rows.iter().map(|k| k.as_slice()).collect();
        let p = values(rows * n, 99);
        let acc0 = values(rows * d, 7);
        let run = |isa: Isa| {
            let mut s = vec![0.0; rows * n];
            attn_scores_int8_isa(isa, &q, nb, &keys, &mut s);
            let mut acc = acc0.clone();
            attn_accumulate_int8_isa(isa, &mut acc, d, &p, &keys);
            (s, acc)
        };
        let (s, acc) = run(Isa::scalar());
        // Against the dequantized values in f64.
        for r in 0..rows {
            let qr = deq(&q[r * nb..(r + 1) * nb]);
            for j in 0..n {
                let want: f64 = qr.iter().zip(deq(keys[j])).map(|(a, b)| a * b).sum();
                assert!((f64::from(s[r * n + j]) - want).abs() < 1e-3 * (1.0 + want.abs()));
            }
            for i in 0..d {
                let want = f64::from(acc0[r * d + i])
                    + (0..n)
                        .map(|j| f64::from(p[r * n + j]) * deq(keys[j])[i])
                        .sum::<f64>();
                assert!((f64::from(acc[r * d + i]) - want).abs() < 1e-3 * (1.0 + want.abs()));
            }
        }
        for isa in Isa::available() {
            let got = run(isa);
            assert!(
                got == (s.clone(), acc.clone()),
                "{isa:?} differs from scalar ({})",
                std::any::type_name::<B>()
            );
            // Fewer rows or keys per call: the same bits for those it has.
            let mut one = vec![0.0; n];
            attn_scores_int8_isa(isa, &q[2 * nb..3 * nb], nb, &keys, &mut one);
            assert!(
                one[..] == s[2 * n..3 * n],
                "{isa:?}: a row's scores depend on the call"
            );
        }
    }
}
