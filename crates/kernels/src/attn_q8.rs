//! Attention over a q8_0 KV cache: int8 scores and value sums straight from the blocks.
//!
//! A q8_0 cache (llama.cpp's `--cache-type-k/-v q8_0`) keeps each K and V row as blocks of
//! 32 int8 values with one f16 scale: 34 bytes per 32 values instead of 64, so a long
//! context costs about half the memory and half the reads. The keys meet the queries in
//! int8 — each query head quantized to q8_0 by the caller, once per call, as llama.cpp
//! quantizes Q to its K type — and the values are widened to f32 in registers, never copied.
//!
//! Bits: every spelling gives the same bits (AVX-512 hosts run the AVX2 code; the 256-bit
//! lane layout is the definition). A score is, per key: for each 32-value block, eight lane
//! sums of four int8 products (exact integers), lane `l` accumulating `fma(dq·dk, sum_l,
//! lane_l)` over the blocks in order; then the lanes are reduced as
//! `((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))`. A value sum updates each accumulator element by
//! `fma(p·dv, v, acc)` with the keys in order. Neither depends on how many rows or keys a
//! call carries, so attention over a q8_0 cache keeps batch and chunk invariance.

use crate::block::{f16_to_f32, Isa};
use crate::legacy::{BlockQ8_0, QK};

/// `x` (whole blocks of 32) as the q8_0 blocks `out`: llama.cpp's reference rounding.
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), out.len() * QK, "q8_0 takes whole blocks of {QK}");
    for (o, x) in out.iter_mut().zip(x.chunks_exact(QK)) {
        *o = BlockQ8_0::from_f32(x);
    }
}

/// [`attn_scores_q8_isa`] on the best ISA.
pub fn attn_scores_q8(q: &[BlockQ8_0], nb: usize, keys: &[&[BlockQ8_0]], out: &mut [f32]) {
    attn_scores_q8_isa(Isa::best(), q, nb, keys, out)
}

/// [`attn_accumulate_q8_isa`] on the best ISA.
pub fn attn_accumulate_q8(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[BlockQ8_0]]) {
    attn_accumulate_q8_isa(Isa::best(), acc, d, p, vs)
}

/// Scores of every row of `q` (rows of `nb` blocks: one query head each) against every key
/// (`nb` blocks each): `out[r * keys.len() + j]`, on `isa`.
pub fn attn_scores_q8_isa(
    isa: Isa,
    q: &[BlockQ8_0],
    nb: usize,
    keys: &[&[BlockQ8_0]],
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
        for (j, k) in keys.iter().enumerate() {
            let mut r0 = 0;
            while r0 < rows {
                let rr = (rows - r0).min(4);
                let qr = &q[r0 * nb..(r0 + rr) * nb];
                // SAFETY: an AVX2 `Isa` proves the CPU features.
                let s = unsafe {
                    match rr {
                        4 => avx2::scores::<4>(qr, nb, k),
                        3 => avx2::scores::<3>(qr, nb, k).map4(),
                        2 => avx2::scores::<2>(qr, nb, k).map4(),
                        _ => avx2::scores::<1>(qr, nb, k).map4(),
                    }
                };
                for (r, &s) in s.iter().take(rr).enumerate() {
                    out[(r0 + r) * n + j] = s;
                }
                r0 += rr;
            }
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
fn score_scalar(q: &[BlockQ8_0], k: &[BlockQ8_0]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (qb, kb) in q.iter().zip(k) {
        let scale = f16_to_f32(qb.d) * f16_to_f32(kb.d);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let sum: i32 = (4 * l..4 * l + 4)
                .map(|t| i32::from(qb.qs[t]) * i32::from(kb.qs[t]))
                .sum();
            *lane = (sum as f32).mul_add(scale, *lane);
        }
    }
    let l = lanes;
    ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

/// `acc[r] += Σ_j p[r * vs.len() + j] · vs[j]` for every row `r` of `acc` (rows of `d`
/// values, `d / 32` blocks per value row), keys in order, on `isa`.
pub fn attn_accumulate_q8_isa(isa: Isa, acc: &mut [f32], d: usize, p: &[f32], vs: &[&[BlockQ8_0]]) {
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
            // SAFETY: an AVX2 `Isa` proves the CPU features.
            unsafe {
                match rr {
                    4 => avx2::accumulate::<4>(a, d, pr, vs),
                    3 => avx2::accumulate::<3>(a, d, pr, vs),
                    2 => avx2::accumulate::<2>(a, d, pr, vs),
                    _ => avx2::accumulate::<1>(a, d, pr, vs),
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
                let wd = w * f16_to_f32(vb.d);
                for (a, &x) in a[b * QK..(b + 1) * QK].iter_mut().zip(&vb.qs) {
                    *a = wd.mul_add(f32::from(x), *a);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use crate::block::f16_to_f32;
    use crate::legacy::{BlockQ8_0, QK};

    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// One key against `R` query rows of `nb` blocks.
    #[target_feature(enable = "avx2,fma")]
    pub fn scores<const R: usize>(q: &[BlockQ8_0], nb: usize, k: &[BlockQ8_0]) -> [f32; R] {
        assert!(q.len() >= R * nb && k.len() >= nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let kb = &k[b];
            // SAFETY: a block holds 32 bytes of quants.
            let kv = unsafe { _mm256_loadu_si256(kb.qs.as_ptr().cast()) };
            let kabs = _mm256_sign_epi8(kv, kv);
            let dk = f16_to_f32(kb.d);
            for (r, acc) in acc.iter_mut().enumerate() {
                let qb = &q[r * nb + b];
                // SAFETY: as above.
                let qv = unsafe { _mm256_loadu_si256(qb.qs.as_ptr().cast()) };
                // |k| · (q · sign k) = q · k; both within ±127, so no i16 pair saturates.
                let p16 = _mm256_maddubs_epi16(kabs, _mm256_sign_epi8(qv, kv));
                let p32 = _mm256_madd_epi16(p16, ones);
                let scale = _mm256_set1_ps(f16_to_f32(qb.d) * dk);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, *acc);
            }
        }
        let mut out = [0.0f32; R];
        for (o, &a) in out.iter_mut().zip(&acc) {
            *o = hsum(a);
        }
        out
    }

    /// `R` accumulator rows of `d`, over every value row, 16 values at a time.
    #[target_feature(enable = "avx2,fma")]
    pub fn accumulate<const R: usize>(acc: &mut [f32], d: usize, p: &[f32], vs: &[&[BlockQ8_0]]) {
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
                    let src = vb.qs.as_ptr().add(half);
                    let v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(src.cast())));
                    let v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        src.add(8).cast(),
                    )));
                    let dv = f16_to_f32(vb.d);
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

    fn blocks(x: &[f32]) -> Vec<BlockQ8_0> {
        let mut out = vec![BlockQ8_0::default(); x.len() / QK];
        quantize_q8_0(x, &mut out);
        out
    }

    #[test]
    fn every_spelling_gives_the_scalar_bits_and_the_math_is_right() {
        let (d, rows, n) = (128, 7, 13);
        let nb = d / QK;
        let q = blocks(&values(rows * d, 1));
        let key_rows: Vec<Vec<BlockQ8_0>> =
            (0..n).map(|j| blocks(&values(d, 10 + j as u32))).collect();
        let keys: Vec<&[BlockQ8_0]> = key_rows.iter().map(|k| k.as_slice()).collect();
        let p = values(rows * n, 99);
        let acc0 = values(rows * d, 7);
        let run = |isa: Isa| {
            let mut s = vec![0.0; rows * n];
            attn_scores_q8_isa(isa, &q, nb, &keys, &mut s);
            let mut acc = acc0.clone();
            attn_accumulate_q8_isa(isa, &mut acc, d, &p, &keys);
            (s, acc)
        };
        let (s, acc) = run(Isa::scalar());
        // Against the dequantized values in f64.
        let deq = |b: &[BlockQ8_0]| -> Vec<f64> {
            b.iter()
                .flat_map(|b| {
                    b.qs.iter()
                        .map(move |&x| f64::from(f16_to_f32(b.d)) * f64::from(x))
                })
                .collect()
        };
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
                "{isa:?} differs from scalar"
            );
            // Fewer rows or keys per call: the same bits for those it has.
            let mut one = vec![0.0; n];
            attn_scores_q8_isa(isa, &q[2 * nb..3 * nb], nb, &keys, &mut one);
            assert!(
                one[..] == s[2 * n..3 * n],
                "{isa:?}: a row's scores depend on the call"
            );
        }
    }
}
