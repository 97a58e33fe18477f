//! The 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and [`BlockQ8x4`], the
//! activation format they are multiplied with.
//!
//! Layouts are ggml's (`ggml-common.h`): an f16 scale `d`, for the `_1` types an f16 offset
//! `m` (value = d*q + m), for the 5-bit types 32 high bits in `qh` (bit j belongs to value j),
//! and the low bits in `qs`, where byte j holds value j in its low nibble and value j+16 in its
//! high nibble.
//!
//! Every format is written as value = `d*q + m` with `q` the stored quant as the kernels
//! multiply it (unsigned 0..16 / 0..32 for the 4/5-bit formats, signed for Q8) and `m` either
//! zero (Q8), `-8d` / `-16d` (Q4_0 / Q5_0), or stored (the `_1` formats). Then
//! `dot = Σ_b (d_b dx_b) Σ_i q_i x_i + Σ_b m_b sx_b` with `sx = dx Σx` kept in the activations.
//!
//! Summation order (shared by the scalar reference and every SIMD kernel — row-major AVX2,
//! lane-major `gemm8` / `gemm16` — which are therefore bit-identical): block `b` of a row
//! contributes its exact integer dot `P_b = Σ_i q_i x_i` (for the offset formats minus
//! `o · Σ_i x_i`, so `Σ (q_i − o) x_i` exactly; every such sum is far below 2^24, so its f32
//! conversion is exact) as ONE float step, `lane_{b%4} = fma(d_b dx_b, P_b, lane_{b%4})`;
//! the stored `m` terms of the `_1` formats go to four more lanes (`lane_{b%4} += m_b sx_b`);
//! [`finish`] folds each set as `(l0 + l1) + (l2 + l3)`.
//!
//! Why this order: a block costs one float step instead of eight, which is what the
//! lane-major kernels (one weight row per vector lane) spend their time on otherwise, and the
//! integers are exact, so it is also the more accurate order (ggml takes a float step per
//! four products). It replaced that ggml order when the engine's fidelity came to be judged
//! statistically (docs/PERFORMANCE.md has the gate's figures before and after).

use crate::block::{
    amax, f16_to_f32, f32_to_f16, fold4, inv_or_zero, round_clamp, signed_max, ActBlock, Isa,
    WeightBlock,
};

/// Values per block.
pub const QK: usize = 32;

/// Q4_0: value = d * (q - 8), q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Q4_1: value = d * q + m, q in 0..16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// Q5_0: value = d * (q - 16), q in 0..32 (high bit in `qh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// Q5_1: value = d * q + m, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// Q8_0: value = d * q, q an i8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// Q8_1: value = d * q; `s` = d * sum(q) (redundant for weights, kept for the layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// Activations for the 32-value formats: four consecutive 32-value blocks of one row, with
/// the scales side by side so the AVX2 kernel loads four at once.
///
/// Not a GGUF type: it is ggml's Q8_1 (scale, scaled sum, i8 values) regrouped, with f32
/// scales instead of f16 (one rounding fewer). Quantization is symmetric (q in -127..=127,
/// never -128: the AVX2 sign trick for Q8 weights needs that).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ8x4 {
    /// Scale of each block: x ≈ d * q.
    pub d: [f32; 4],
    /// `d * Σq` of each block (what the stored `m` terms multiply).
    pub s: [f32; 4],
    /// `Σq` of each block (what the offset formats' integers subtract `o` times).
    pub isum: [i32; 4],
    /// Quants, block k in `qs[k]`.
    pub qs: [[i8; 32]; 4],
}
const _: () = assert!(std::mem::size_of::<BlockQ8x4>() == 176);

impl ActBlock for BlockQ8x4 {
    const ELEMS: usize = 4 * QK;

    fn quantize_row_isa(isa: Isa, src: &[f32], out: &mut [BlockQ8x4]) {
        assert_eq!(out.len(), Self::units_for(src.len()));
        for (g, unit) in out.iter_mut().enumerate() {
            *unit = BlockQ8x4::default();
            for k in 0..4 {
                let start = (4 * g + k) * QK;
                if start >= src.len() {
                    break; // zero padding past the row end
                }
                let x = &src[start..(start + QK).min(src.len())];
                let (d, qs, isum) = match <&[f32; QK]>::try_from(x) {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: an AVX2 `Isa` proves the CPU features.
                    Ok(full) if isa.is_avx2() => unsafe { crate::quant_avx2::quantize32(full) },
                    _ => quantize32(x),
                };
                unit.d[k] = d;
                unit.qs[k] = qs;
                unit.s[k] = d * isum as f32;
                unit.isum[k] = isum;
            }
        }
    }
}

/// One activation block (up to 32 values, the rest zero): `(d, quants, Σ quants)` with
/// `d = amax/127` and quants rounded to nearest, ties to even. The reference the AVX2
/// quantizer matches bit for bit.
pub fn quantize32(x: &[f32]) -> (f32, [i8; 32], i32) {
    let d = amax(x) / 127.0;
    let id = inv_or_zero(d);
    let mut qs = [0i8; 32];
    let mut isum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = round_clamp(v * id, -127, 127) as i8;
        isum += *q as i32;
    }
    (d, qs, isum)
}

/// Where a format's additive term `m` comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MTerm {
    /// No offset (Q8): value = d*q with signed q.
    Zero,
    /// value = d*(q - o): m = -o*d (Q4_0: 8, Q5_0: 16).
    Offset(i32),
    /// value = d*q + m with m stored as f16 (the `_1` formats).
    Stored,
}

/// What the scalar and AVX2 kernels need from a 32-value weight block.
pub trait Legacy32: WeightBlock<Act = BlockQ8x4> {
    const M: MTerm;
    /// The quants as the kernels multiply them (unsigned unless `M == Zero`), element order.
    fn quants(&self) -> [i8; 32];
    fn d_bits(&self) -> [u8; 2];
    /// The block's scale (its f16 `d` unless a format stores it otherwise).
    #[inline(always)]
    fn d(&self) -> f32 {
        f16_to_f32(self.d_bits())
    }
    /// The stored `m` of the `_1` formats (f16 bits); zero for the others.
    fn m_bits(&self) -> [u8; 2] {
        [0, 0]
    }
}

/// The exact integer block `b` contributes to a row (`u` = the activation unit holding it,
/// `k` = its place there): `Σ q_i x_i`, minus `o · Σ x_i` for the offset formats.
#[inline]
pub fn block_int<B: Legacy32>(wb: &B, u: &BlockQ8x4, k: usize) -> i32 {
    let p: i32 = wb
        .quants()
        .iter()
        .zip(&u.qs[k])
        .map(|(&q, &x)| q as i32 * x as i32)
        .sum();
    match B::M {
        MTerm::Offset(o) => p - o * u.isum[k],
        _ => p,
    }
}

/// Adds block `b` of a row (weights `wb`, activations `x`) to the lanes; the scalar
/// definition of the order (see the module doc).
#[inline]
pub fn add_block_scalar<B: Legacy32>(
    wb: &B,
    b: usize,
    x: &[BlockQ8x4],
    acc: &mut [f32; 4],
    accm: &mut [f32; 4],
) {
    let (u, k) = (&x[b / 4], b % 4);
    acc[k] = (wb.d() * u.d[k]).mul_add(block_int(wb, u, k) as f32, acc[k]);
    if B::M == MTerm::Stored {
        accm[k] += f16_to_f32(wb.m_bits()) * u.s[k];
    }
}

/// Folds a row's lanes into its result: `(a0+a1)+(a2+a3)`, plus the stored `m` lanes folded
/// the same way.
#[inline]
pub fn finish<B: Legacy32>(acc: [f32; 4], accm: [f32; 4]) -> f32 {
    let r = fold4(acc);
    if B::M == MTerm::Stored {
        r + fold4(accm)
    } else {
        r
    }
}

/// Eight lanes folded as `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`: the order of the formats
/// that keep a float step per four products (IQ4_XS, the lattice formats).
#[inline]
pub fn fold_lanes(acc: [f32; 8]) -> f32 {
    let t = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (t[0] + t[2]) + (t[1] + t[3])
}

pub(crate) fn dot_legacy_scalar<B: Legacy32, const R: usize>(
    w: &[B],
    xs: [&[BlockQ8x4]; R],
) -> [f32; R] {
    xs.map(|x| {
        assert!(x.len() >= w.len().div_ceil(4), "activation row too short");
        let mut acc = [0.0f32; 4];
        let mut accm = [0.0f32; 4];
        for (b, wb) in w.iter().enumerate() {
            add_block_scalar(wb, b, x, &mut acc, &mut accm);
        }
        finish::<B>(acc, accm)
    })
}

/// Splits 16 packed bytes into 32 nibble values (low nibbles first).
#[inline(always)]
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for j in 0..16 {
        out[j] = qs[j] & 0x0F;
        out[j + 16] = qs[j] >> 4;
    }
    out
}

/// Packs 32 values (< 16 after masking) two per byte: j low, j+16 high.
#[inline(always)]
fn pack_nibbles(q: &[u8; 32]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for j in 0..16 {
        out[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
    out
}

/// 5-bit values from `qs` nibbles and `qh` high bits.
#[inline(always)]
fn five_bit(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let h = u32::from_le_bytes(qh);
    let mut out = nibbles(qs);
    for (j, v) in out.iter_mut().enumerate() {
        *v |= (((h >> j) & 1) as u8) << 4;
    }
    out
}

fn high_bits(q: &[u8; 32]) -> [u8; 4] {
    let mut h = 0u32;
    for (j, &v) in q.iter().enumerate() {
        h |= ((v as u32 >> 4) & 1) << j;
    }
    h.to_le_bytes()
}

/// Symmetric fit for an offset format: the largest-magnitude value maps to `-half`.
fn fit_offset(x: &[f32], half: i32) -> (f32, [u8; 32]) {
    let d = signed_max(x) / -(half as f32);
    let id = inv_or_zero(d);
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = round_clamp(v * id + half as f32, 0, 2 * half - 1) as u8;
    }
    (d, q)
}

/// Asymmetric fit for a `_1` format: min maps to 0, max to `qmax`.
fn fit_min(x: &[f32], qmax: i32) -> (f32, f32, [u8; 32]) {
    let lo = x.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let d = (hi - lo) / qmax as f32;
    let id = inv_or_zero(d);
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = round_clamp((v - lo) * id, 0, qmax) as u8;
    }
    (d, lo, q)
}

fn fit_q8(x: &[f32]) -> (f32, [i8; 32]) {
    let d = amax(x) / 127.0;
    let id = inv_or_zero(d);
    let mut q = [0i8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = round_clamp(v * id, -127, 127) as i8;
    }
    (d, q)
}

/// Shared dequantize loop (ggml's formulas: `d*(q-o)`, `d*q + m`, `d*q`).
pub(crate) fn dequant_blocks<B: Legacy32>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d();
        let m = f16_to_f32(b.m_bits());
        for (y, q) in y.iter_mut().zip(b.quants()) {
            *y = match B::M {
                MTerm::Zero => d * q as f32,
                MTerm::Offset(o) => d * (q as i32 - o) as f32,
                MTerm::Stored => d * q as f32 + m,
            };
        }
    }
}

impl BlockQ4_0 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, q) = fit_offset(x, 8);
        BlockQ4_0 {
            d: f32_to_f16(d),
            qs: pack_nibbles(&q),
        }
    }
}
impl Legacy32 for BlockQ4_0 {
    const M: MTerm = MTerm::Offset(8);
    #[inline]
    fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|v| v as i8)
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
}

impl BlockQ4_1 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, m, q) = fit_min(x, 15);
        BlockQ4_1 {
            d: f32_to_f16(d),
            m: f32_to_f16(m),
            qs: pack_nibbles(&q),
        }
    }
}
impl Legacy32 for BlockQ4_1 {
    const M: MTerm = MTerm::Stored;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        nibbles(&self.qs).map(|v| v as i8)
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
    #[inline]
    fn m_bits(&self) -> [u8; 2] {
        self.m
    }
}

impl BlockQ5_0 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, q) = fit_offset(x, 16);
        BlockQ5_0 {
            d: f32_to_f16(d),
            qh: high_bits(&q),
            qs: pack_nibbles(&q),
        }
    }
}
impl Legacy32 for BlockQ5_0 {
    const M: MTerm = MTerm::Offset(16);
    #[inline]
    fn quants(&self) -> [i8; 32] {
        five_bit(&self.qs, self.qh).map(|v| v as i8)
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
}

impl BlockQ5_1 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, m, q) = fit_min(x, 31);
        BlockQ5_1 {
            d: f32_to_f16(d),
            m: f32_to_f16(m),
            qh: high_bits(&q),
            qs: pack_nibbles(&q),
        }
    }
}
impl Legacy32 for BlockQ5_1 {
    const M: MTerm = MTerm::Stored;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        five_bit(&self.qs, self.qh).map(|v| v as i8)
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
    #[inline]
    fn m_bits(&self) -> [u8; 2] {
        self.m
    }
}

impl BlockQ8_0 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, qs) = fit_q8(x);
        BlockQ8_0 {
            d: f32_to_f16(d),
            qs,
        }
    }
}
impl Legacy32 for BlockQ8_0 {
    const M: MTerm = MTerm::Zero;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        self.qs
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
}

impl BlockQ8_1 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, qs) = fit_q8(x);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 {
            d: f32_to_f16(d),
            s: f32_to_f16(d * sum as f32),
            qs,
        }
    }
}
impl Legacy32 for BlockQ8_1 {
    const M: MTerm = MTerm::Zero;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        self.qs
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::vec_dot;
    use crate::block::Isa;
    use crate::GgmlType;

    fn h(v: f32) -> [u8; 2] {
        f32_to_f16(v)
    }

    #[test]
    fn sizes_match_ggml() {
        assert_eq!(
            std::mem::size_of::<BlockQ4_0>(),
            GgmlType::Q4_0.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ4_1>(),
            GgmlType::Q4_1.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ5_0>(),
            GgmlType::Q5_0.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ5_1>(),
            GgmlType::Q5_1.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ8_0>(),
            GgmlType::Q8_0.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ8_1>(),
            GgmlType::Q8_1.block_bytes()
        );
    }

    #[test]
    fn q4_0_known_block() {
        // byte j = (hi << 4) | lo with lo = j, hi = 15 - j; d = 0.5.
        let mut qs = [0u8; 16];
        for (j, b) in qs.iter_mut().enumerate() {
            *b = (j as u8) | ((15 - j as u8) << 4);
        }
        let b = BlockQ4_0 { d: h(0.5), qs };
        let mut y = [0.0f32; 32];
        BlockQ4_0::dequantize(&[b], &mut y);
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * (j as f32 - 8.0));
            assert_eq!(y[j + 16], 0.5 * (7.0 - j as f32));
        }
    }

    #[test]
    fn q4_1_known_block() {
        let b = BlockQ4_1 {
            d: h(0.25),
            m: h(-1.0),
            qs: [0x3A; 16],
        };
        let mut y = [0.0f32; 32];
        BlockQ4_1::dequantize(&[b], &mut y);
        assert!(y[..16].iter().all(|&v| v == 0.25 * 10.0 - 1.0));
        assert!(y[16..].iter().all(|&v| v == 0.25 * 3.0 - 1.0));
    }

    #[test]
    fn q5_0_known_block() {
        // All nibbles 0x1 low / 0x2 high; qh bit j set for even j only.
        let qh = 0x5555_5555u32.to_le_bytes();
        let b = BlockQ5_0 {
            d: h(2.0),
            qh,
            qs: [0x21; 16],
        };
        let mut y = [0.0f32; 32];
        BlockQ5_0::dequantize(&[b], &mut y);
        for (j, &v) in y.iter().enumerate() {
            let nib = if j < 16 { 1 } else { 2 };
            let hb = if j % 2 == 0 { 16 } else { 0 };
            assert_eq!(v, 2.0 * ((nib + hb) as f32 - 16.0), "value {j}");
        }
    }

    #[test]
    fn q5_1_known_block() {
        let qh = 0xFFFF_0000u32.to_le_bytes(); // high bit on values 16..32
        let b = BlockQ5_1 {
            d: h(1.0),
            m: h(0.5),
            qh,
            qs: [0xF0; 16],
        };
        let mut y = [0.0f32; 32];
        BlockQ5_1::dequantize(&[b], &mut y);
        assert!(y[..16].iter().all(|&v| v == 0.5));
        assert!(y[16..].iter().all(|&v| v == 31.5));
    }

    #[test]
    fn q8_known_blocks() {
        let mut qs = [0i8; 32];
        for (j, q) in qs.iter_mut().enumerate() {
            *q = j as i8 - 16;
        }
        let b0 = BlockQ8_0 { d: h(0.125), qs };
        let b1 = BlockQ8_1 {
            d: h(0.125),
            s: h(0.0),
            qs,
        };
        let mut y0 = [0.0f32; 32];
        let mut y1 = [0.0f32; 32];
        BlockQ8_0::dequantize(&[b0], &mut y0);
        BlockQ8_1::dequantize(&[b1], &mut y1);
        for j in 0..32 {
            assert_eq!(y0[j], 0.125 * (j as f32 - 16.0));
            assert_eq!(y1[j], y0[j]);
        }
    }

    #[test]
    fn activation_quantization_is_symmetric_and_padded() {
        let x: Vec<f32> = (0..160).map(|i| (i as f32 - 80.0) / 7.0).collect();
        let mut a = vec![BlockQ8x4::default(); BlockQ8x4::units_for(x.len())];
        BlockQ8x4::quantize_row(&x, &mut a);
        assert_eq!(a.len(), 2);
        // Padding blocks of the second unit are zero.
        assert_eq!(a[1].d[1..], [0.0; 3]);
        assert_eq!(a[1].qs[3], [0; 32]);
        for (b, x) in x.chunks(32).enumerate() {
            let u = &a[b / 4];
            let k = b % 4;
            let isum: i32 = u.qs[k].iter().map(|&q| q as i32).sum();
            assert_eq!(u.s[k], u.d[k] * isum as f32);
            for (j, &v) in x.iter().enumerate() {
                assert!((u.d[k] * u.qs[k][j] as f32 - v).abs() <= u.d[k] * 0.5 + 1e-6);
            }
        }
    }

    #[test]
    fn q4_0_dot_of_known_block() {
        // Weights all (9-8)*0.5 = 0.5; activations all 127 (scale exactly 1) → 32*0.5*127.
        let w = [BlockQ4_0 {
            d: h(0.5),
            qs: [0x99; 16],
        }];
        let x = vec![127.0f32; 32];
        let mut a = vec![BlockQ8x4::default(); 1];
        BlockQ8x4::quantize_row(&x, &mut a);
        assert_eq!(a[0].d[0], 1.0);
        assert_eq!(vec_dot(Isa::scalar(), &w, &a), 2032.0);
    }
}
