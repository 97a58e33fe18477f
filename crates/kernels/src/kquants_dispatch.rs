//! How each K format plugs into the kernels' traits: its [`Block`] / [`WeightBlock`] impls,
//! which pick the scalar kernel (`kquants`), the AVX2 one (`kquants_avx2`) or the AVX-512
//! one (`kquants_avx512`), and [`BlockQ8K`]'s quantizer, which picks `quant_avx2`'s where
//! the CPU has AVX2.
//!
//! Why a module of its own: the SIMD spellings import the formats' types from `kquants`;
//! were the choice made there too, `kquants` and its spellings would import each other.
//! Here, above them all, each is imported one way.

use crate::block::{ActBlock, Block, Isa, WeightBlock};
use crate::kquants::{
    dequant_k, dot_k_scalar, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K,
};
use crate::GgmlType;

impl ActBlock for BlockQ8K {
    const ELEMS: usize = QK_K;
    fn quantize_row_isa(isa: Isa, src: &[f32], out: &mut [BlockQ8K]) {
        assert_eq!(out.len(), Self::units_for(src.len()));
        for (b, x) in out.iter_mut().zip(src.chunks(QK_K)) {
            match <&[f32; QK_K]>::try_from(x) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: an AVX2 `Isa` proves the CPU features.
                Ok(full) if isa.is_avx2() => unsafe { crate::quant_avx2::quantize_q8k(full, b) },
                _ => *b = BlockQ8K::from_f32(x),
            }
        }
    }
}

macro_rules! k_weight_block {
    ($B:ty, $ty:expr, wide: $wide:expr, rows512: $rows512:path) => {
        // SAFETY: repr(C), only byte arrays: alignment 1, no padding, every bit pattern valid.
        unsafe impl Block for $B {
            const TYPE: GgmlType = $ty;
            const ELEMS: usize = QK_K;
        }
        impl WeightBlock for $B {
            type Act = BlockQ8K;
            const WIDE: bool = $wide;
            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                dequant_k(blocks, out)
            }
            fn quantize(src: &[f32], out: &mut [Self]) {
                assert_eq!(src.len(), out.len() * QK_K);
                for (x, b) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
                    *b = <$B>::from_f32(x);
                }
            }
            fn dot_scalar<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
                dot_k_scalar(w, xs)
            }
            unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[BlockQ8K]; R]) -> [f32; R] {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: the caller guarantees AVX2, FMA and F16C.
                    unsafe { crate::kquants_avx2::dot(w, xs) }
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    Self::dot_scalar(w, xs)
                }
            }
            #[cfg(target_arch = "x86_64")]
            unsafe fn dot_avx2_rows<const R: usize>(
                w: &[Self],
                bpr: usize,
                xs: [&[BlockQ8K]; R],
                out: &mut [[f32; R]],
            ) {
                // SAFETY: the caller guarantees AVX2, FMA and F16C.
                unsafe { crate::kquants_avx2::dot_rows(w, bpr, xs, out) }
            }
            #[cfg(target_arch = "x86_64")]
            unsafe fn dot_avx512_rows<const R: usize>(
                w: &[Self],
                bpr: usize,
                xs: [&[BlockQ8K]; R],
                out: &mut [[f32; R]],
            ) {
                // SAFETY: the caller guarantees AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
                unsafe { $rows512(w, bpr, xs, out) }
            }
        }
    };
}

// Eight activation rows per kernel call only where measured faster (see `WeightBlock::WIDE`).
// `rows512`: the 512-bit kernel of the formats that have one (the Q4_K_M / Q5_K_M mixes'),
// else the AVX2 kernel.
k_weight_block!(BlockQ2K, GgmlType::Q2_K, wide: false, rows512: crate::kquants_avx2::dot_rows);
k_weight_block!(BlockQ3K, GgmlType::Q3_K, wide: false, rows512: crate::kquants_avx2::dot_rows);
k_weight_block!(BlockQ4K, GgmlType::Q4_K, wide: false, rows512: crate::kquants_avx512::dot_rows);
k_weight_block!(BlockQ5K, GgmlType::Q5_K, wide: false, rows512: crate::kquants_avx512::dot_rows);
k_weight_block!(BlockQ6K, GgmlType::Q6_K, wide: true, rows512: crate::kquants_avx512::dot_rows);
