//! The codebook formats: IQ4_NL, IQ4_XS and MXFP4.
//!
//! Each stores 4-bit indices into a fixed table of 16 signed integers instead of the integers
//! themselves, so a value is `scale * TABLE[q]`. Layouts are ggml's (`ggml-common.h`):
//! - IQ4_NL (32 values, 18 bytes): an f16 scale and 16 bytes of nibbles (byte j holds value j
//!   low, value j + 16 high), indexing the non-linear table [`IQ4_TABLE`].
//! - IQ4_XS (256 values, 136 bytes): an f16 super-scale `d`, then a signed 6-bit scale per 32
//!   values (low 4 bits in `scales_l`, high 2 bits in `scales_h`, stored + 32), then IQ4_NL's
//!   nibbles: value = `d * (ls - 32) * IQ4_TABLE[q]`.
//! - MXFP4 (32 values, 17 bytes): an E8M0 exponent `e` and the nibbles of FP4 (E2M1) values,
//!   written as twice their value in [`MXFP4_TABLE`] so that they are integers; the scale
//!   `2^(e - 128)` halves them back (ggml's `GGML_E8M0_TO_FP32_HALF`).
//!
//! Why they reuse the 32-value machinery: once the table lookup is done a block is 32 signed
//! integers and one scale, exactly a Q8_0 block. IQ4_NL and MXFP4 therefore implement
//! [`Legacy32`] (and on x86-64 `LegacyAvx2`, whose `load_q` does the lookup with one
//! `pshufb`): the same kernels, the same summation order, the same bit-identity between
//! scalar and SIMD. IQ4_NL's f16 scale also lets the lane-major `gemm8`/`gemm16` take it.
//! MXFP4's scale is not an f16, so it stays on the row-major kernels. IQ4_XS is eight such
//! sub-blocks with the sub-scale `d * (ls - 32)` (exact in f32), and its kernels here walk the
//! sub-blocks in the same lane order as [`crate::legacy`].
//!
//! The quantizers (used only to write random-weight test models) pick a scale from the
//! largest magnitude and round each value to the nearest table entry; ggml's search for the
//! best scale is not needed to make valid blocks.

use crate::block::{amax, f16_to_f32, f32_to_f16, inv_or_zero, signed_max, Block, WeightBlock};
use crate::legacy::{fold_lanes, BlockQ8x4, Legacy32, MTerm};
use crate::GgmlType;

/// IQ4_NL's and IQ4_XS's 16 values (ggml's `kvalues_iq4nl`).
pub const IQ4_TABLE: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// MXFP4's 16 values, doubled to integers (E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives).
pub const MXFP4_TABLE: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// IQ4_NL: value = `d * IQ4_TABLE[q]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);

/// MXFP4: value = `2^(e - 128) * MXFP4_TABLE[q]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockMxfp4 {
    pub e: u8,
    pub qs: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<BlockMxfp4>() == 17);

/// IQ4_XS: eight IQ4_NL sub-blocks sharing `d`, each with a 6-bit signed scale.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIq4Xs {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);

/// The 32 table indices of 16 packed bytes (low nibbles first), looked up in `table`.
#[inline(always)]
fn lookup(qs: &[u8; 16], table: &[i8; 16]) -> [i8; 32] {
    let mut out = [0i8; 32];
    for j in 0..16 {
        out[j] = table[(qs[j] & 0x0F) as usize];
        out[j + 16] = table[(qs[j] >> 4) as usize];
    }
    out
}

/// The index of the table entry nearest to `v` (the first on a tie).
fn nearest(table: &[i8; 16], v: f32) -> u8 {
    let mut best = 0;
    for (i, &t) in table.iter().enumerate() {
        if (v - t as f32).abs() < (v - table[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// Packs 32 table indices two per byte: j low, j + 16 high.
fn pack(idx: &[u8; 32]) -> [u8; 16] {
    std::array::from_fn(|j| idx[j] | (idx[j + 16] << 4))
}

/// Indices of `x` (32 values) divided by `d` in `table`.
fn indices(table: &[i8; 16], x: &[f32], d: f32) -> [u8; 32] {
    let id = inv_or_zero(d);
    let mut idx = [0u8; 32];
    for (q, &v) in idx.iter_mut().zip(x) {
        *q = nearest(table, v * id);
    }
    idx
}

/// ggml's `GGML_E8M0_TO_FP32_HALF`: 2^(e - 128), exact (subnormal for e < 2).
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

impl BlockIq4Nl {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        // The largest magnitude lands on the table's end -127 (with its sign folded into d).
        let d = signed_max(x) / -127.0;
        BlockIq4Nl {
            d: f32_to_f16(d),
            qs: pack(&indices(&IQ4_TABLE, x, d)),
        }
    }
}

impl BlockMxfp4 {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        // The smallest power of two d with amax / d <= 12 (the table's largest magnitude).
        let m = amax(x);
        let e = if m == 0.0 {
            0
        } else {
            (128.0 + (m / 12.0).log2().ceil()).clamp(0.0, 254.0) as u8
        };
        BlockMxfp4 {
            e,
            qs: pack(&indices(&MXFP4_TABLE, x, e8m0_half(e))),
        }
    }
}

impl Legacy32 for BlockIq4Nl {
    const M: MTerm = MTerm::Zero;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        lookup(&self.qs, &IQ4_TABLE)
    }
    #[inline]
    fn d_bits(&self) -> [u8; 2] {
        self.d
    }
}

impl Legacy32 for BlockMxfp4 {
    const M: MTerm = MTerm::Zero;
    #[inline]
    fn quants(&self) -> [i8; 32] {
        lookup(&self.qs, &MXFP4_TABLE)
    }
    /// Not an f16: [`Legacy32::d`] is overridden, and MXFP4 never reaches the kernels that
    /// read f16 bits (`gemm8`, `gemm16`).
    fn d_bits(&self) -> [u8; 2] {
        unreachable!("mxfp4 has no f16 scale")
    }
    #[inline]
    fn d(&self) -> f32 {
        e8m0_half(self.e)
    }
}

impl BlockIq4Xs {
    /// Sub-block `ib`'s scale as stored: 0..64, meaning `ls - 32`.
    #[inline(always)]
    fn ls(&self, ib: usize) -> i32 {
        let lo = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
        let hi = (u16::from_le_bytes(self.scales_h) >> (2 * ib)) & 3;
        (lo as i32) | ((hi as i32) << 4)
    }

    /// Sub-block `ib`'s scale in f32: `d * (ls - 32)`, exact (an f16 times a 6-bit integer).
    #[inline(always)]
    pub fn sub_scale(&self, ib: usize) -> f32 {
        f16_to_f32(self.d) * (self.ls(ib) - 32) as f32
    }

    /// Sub-block `ib`'s 32 table values.
    #[inline(always)]
    pub fn sub_quants(&self, ib: usize) -> [i8; 32] {
        let qs: &[u8; 16] = self.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
        lookup(qs, &IQ4_TABLE)
    }

    fn from_f32(x: &[f32]) -> Self {
        // Each sub-block's own best scale (as IQ4_NL picks it), then one super-scale so that
        // the largest of them is 31 steps (the 6-bit signed range is -32..=31).
        let subs: [f32; 8] =
            std::array::from_fn(|ib| signed_max(&x[32 * ib..32 * ib + 32]) / -127.0);
        let d = amax(&subs) / 31.0;
        let dh = f16_to_f32(f32_to_f16(d));
        let id = inv_or_zero(dh);
        let mut b = BlockIq4Xs {
            d: f32_to_f16(d),
            scales_h: [0; 2],
            scales_l: [0; 4],
            qs: [0; 128],
        };
        let mut sh = 0u16;
        for (ib, &s) in subs.iter().enumerate() {
            let ls = ((s * id).round() as i32).clamp(-32, 31) + 32;
            b.scales_l[ib / 2] |= ((ls & 0x0F) as u8) << (4 * (ib % 2));
            sh |= ((ls >> 4) as u16 & 3) << (2 * ib);
            let dl = dh * (ls - 32) as f32;
            let idx = indices(&IQ4_TABLE, &x[32 * ib..32 * ib + 32], dl);
            b.qs[16 * ib..16 * ib + 16].copy_from_slice(&pack(&idx));
        }
        b.scales_h = sh.to_le_bytes();
        b
    }
}

// SAFETY: repr(C), only byte arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl Block for BlockIq4Xs {
    const TYPE: GgmlType = GgmlType::IQ4_XS;
    const ELEMS: usize = 256;
}

/// Adds sub-block `ib` of super-block `b` to the lanes, as `legacy::add_block_scalar` adds a
/// 32-value block: lane j += (dl * dx) * Σ_{i=4j}^{4j+3} q_i x_i.
#[inline(always)]
fn add_sub_scalar(wb: &BlockIq4Xs, b: usize, ib: usize, x: &[BlockQ8x4], acc: &mut [f32; 8]) {
    let k32 = 8 * b + ib; // the 32-value block's index in the row
    let (u, k) = (&x[k32 / 4], k32 % 4);
    let s = wb.sub_scale(ib) * u.d[k];
    let q = wb.sub_quants(ib);
    for (j, lane) in acc.iter_mut().enumerate() {
        let p: i32 = (4 * j..4 * j + 4)
            .map(|i| q[i] as i32 * u.qs[k][i] as i32)
            .sum();
        *lane = s.mul_add(p as f32, *lane);
    }
}

impl WeightBlock for BlockIq4Xs {
    type Act = BlockQ8x4;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * 256);
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(256)) {
            for (ib, y) in y.chunks_exact_mut(32).enumerate() {
                let dl = b.sub_scale(ib);
                for (y, q) in y.iter_mut().zip(b.sub_quants(ib)) {
                    *y = dl * q as f32;
                }
            }
        }
    }

    fn quantize(src: &[f32], out: &mut [Self]) {
        assert_eq!(src.len(), out.len() * 256);
        for (x, b) in src.chunks_exact(256).zip(out.iter_mut()) {
            *b = BlockIq4Xs::from_f32(x);
        }
    }

    fn dot_scalar<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
        xs.map(|x| {
            assert!(x.len() >= 2 * w.len(), "activation row too short");
            let mut acc = [0.0f32; 8];
            for (b, wb) in w.iter().enumerate() {
                for ib in 0..8 {
                    add_sub_scalar(wb, b, ib, x, &mut acc);
                }
            }
            fold_lanes(acc)
        })
    }

    unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the caller guarantees AVX2, FMA and F16C.
            unsafe { avx2::dot_iq4_xs(w, xs) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Self::dot_scalar(w, xs)
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! The x86-64 spellings: `pshufb` table lookups for the 32-value formats' `load_q`, and
    //! IQ4_XS's kernel (bit-identical to `add_sub_scalar`'s order).

    use super::*;
    use crate::legacy_avx2::{lanes_signed, unpack_nibbles, LegacyAvx2};
    use std::arch::x86_64::*;

    /// The 16-entry table in both 128-bit halves, for `pshufb`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn table(t: &[i8; 16]) -> __m256i {
        // SAFETY: 16 readable bytes.
        unsafe { _mm256_broadcastsi128_si256(_mm_loadu_si128(t.as_ptr().cast())) }
    }

    /// 32 table values of 16 packed bytes (low nibbles first).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn lookup32(qs: &[u8; 16], t: &[i8; 16]) -> __m256i {
        _mm256_shuffle_epi8(table(t), unpack_nibbles(qs))
    }

    impl LegacyAvx2 for BlockIq4Nl {
        const SIGNED: bool = true;
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn load_q(&self) -> __m256i {
            lookup32(&self.qs, &IQ4_TABLE)
        }
    }

    impl LegacyAvx2 for BlockMxfp4 {
        const SIGNED: bool = true;
        const F16_SCALE: bool = false;
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn load_q(&self) -> __m256i {
            lookup32(&self.qs, &MXFP4_TABLE)
        }
        #[inline]
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn scales4(g: &[Self]) -> __m128 {
            _mm_setr_ps(
                e8m0_half(g[0].e),
                e8m0_half(g[1].e),
                e8m0_half(g[2].e),
                e8m0_half(g[3].e),
            )
        }
    }

    /// `R` rows of `dot(w, xs[r])` for IQ4_XS: per sub-block one lookup, then per row the
    /// signed int8 step and one FMA into eight lanes, as `add_sub_scalar` orders it.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_iq4_xs<const R: usize>(w: &[BlockIq4Xs], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
        for x in &xs {
            assert!(x.len() >= 2 * w.len(), "activation row too short");
        }
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, wb) in w.iter().enumerate() {
            crate::block::prefetch_ahead((wb as *const BlockIq4Xs).cast(), 136);
            for ib in 0..8 {
                let qs: &[u8; 16] = wb.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
                let q = lookup32(qs, &IQ4_TABLE);
                let a = _mm256_abs_epi8(q);
                let dl = wb.sub_scale(ib);
                let k32 = 8 * b + ib;
                for r in 0..R {
                    let u = &xs[r][k32 / 4];
                    let s = dl * u.d[k32 % 4];
                    let p = lanes_signed(q, a, &u.qs[k32 % 4]);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(s), p, acc[r]);
                }
            }
        }
        acc.map(|v| {
            let mut lane = [0.0f32; 8];
            // SAFETY: 8 floats.
            unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), v) };
            fold_lanes(lane)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{vec_dot, ActBlock, Isa};

    #[test]
    fn sizes_match_ggml() {
        for (size, ty) in [
            (std::mem::size_of::<BlockIq4Nl>(), GgmlType::IQ4_NL),
            (std::mem::size_of::<BlockIq4Xs>(), GgmlType::IQ4_XS),
            (std::mem::size_of::<BlockMxfp4>(), GgmlType::MXFP4),
        ] {
            assert_eq!(size, ty.block_bytes(), "{}", ty.name());
        }
    }

    #[test]
    fn e8m0_half_is_two_to_the_e_minus_128() {
        for e in 0..=254u8 {
            assert_eq!(e8m0_half(e), 2f64.powi(e as i32 - 128) as f32, "e = {e}");
        }
    }

    #[test]
    fn known_blocks_decode_to_the_tables() {
        let qs: [u8; 16] = std::array::from_fn(|j| (j as u8) | ((15 - j as u8) << 4));
        let mut y = [0.0f32; 32];
        BlockIq4Nl::dequantize(
            &[BlockIq4Nl {
                d: f32_to_f16(0.5),
                qs,
            }],
            &mut y,
        );
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * IQ4_TABLE[j] as f32);
            assert_eq!(y[j + 16], 0.5 * IQ4_TABLE[15 - j] as f32);
        }
        BlockMxfp4::dequantize(&[BlockMxfp4 { e: 127, qs }], &mut y);
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * MXFP4_TABLE[j] as f32);
        }
    }

    #[test]
    fn quantizers_round_trip_closely() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let check = |name: &str, y: &[f32], tol: f32| {
            let err = x
                .iter()
                .zip(y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < tol, "{name}: max error {err}");
        };
        let mut y = vec![0.0; 512];
        let mut nl = vec![BlockIq4Nl::default(); 16];
        BlockIq4Nl::quantize(&x, &mut nl);
        BlockIq4Nl::dequantize(&nl, &mut y);
        check("iq4_nl", &y, 0.15);
        let mut mx = vec![BlockMxfp4::default(); 16];
        BlockMxfp4::quantize(&x, &mut mx);
        BlockMxfp4::dequantize(&mx, &mut y);
        check("mxfp4", &y, 0.3);
        let mut xs = vec![
            BlockIq4Xs {
                d: [0; 2],
                scales_h: [0; 2],
                scales_l: [0; 4],
                qs: [0; 128]
            };
            2
        ];
        BlockIq4Xs::quantize(&x, &mut xs);
        BlockIq4Xs::dequantize(&xs, &mut y);
        check("iq4_xs", &y, 0.15);
    }

    #[test]
    fn dots_equal_the_dequantized_sums_on_every_isa() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 30.0)
            .collect();
        let w: Vec<f32> = (0..512)
            .map(|i| ((i * 29 % 89) as f32 - 44.0) / 50.0)
            .collect();
        let mut a = vec![BlockQ8x4::default(); BlockQ8x4::units_for(512)];
        BlockQ8x4::quantize_row(&x, &mut a);
        fn each<W: WeightBlock<Act = BlockQ8x4>>(
            w: &[f32],
            x: &[f32],
            a: &[BlockQ8x4],
            mut b: Vec<W>,
        ) {
            W::quantize(w, &mut b);
            let mut y = vec![0.0; w.len()];
            W::dequantize(&b, &mut y);
            let exact: f32 = y.iter().zip(x).map(|(p, q)| p * q).sum();
            let scalar = vec_dot(Isa::scalar(), &b, a);
            assert!(
                (scalar - exact).abs() < 0.05 * exact.abs().max(1.0),
                "{scalar} vs {exact}"
            );
            for isa in Isa::available() {
                assert_eq!(
                    vec_dot(isa, &b, a).to_bits(),
                    scalar.to_bits(),
                    "{}",
                    isa.name()
                );
            }
        }
        each(&w, &x, &a, vec![BlockIq4Nl::default(); 16]);
        each(&w, &x, &a, vec![BlockMxfp4::default(); 16]);
        let xs = BlockIq4Xs {
            d: [0; 2],
            scales_h: [0; 2],
            scales_l: [0; 4],
            qs: [0; 128],
        };
        each(&w, &x, &a, vec![xs; 2]);
    }
}
