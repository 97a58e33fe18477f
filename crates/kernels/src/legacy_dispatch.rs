//! How each 32-value format plugs into the kernels' traits: the [`Block`] / [`WeightBlock`]
//! impls of `legacy`'s Q4_0 … Q8_1 and `codebook`'s IQ4_NL and MXFP4, which pick the scalar
//! kernel (`legacy`) or the AVX2 one (`legacy_avx2`).
//!
//! Why a module of its own: `legacy_avx2` and `codebook` import the formats' types from
//! `legacy`; were the choice made there, `legacy` would import its SIMD spelling back (it did,
//! through a `$crate::` path in a macro). Here, above them all, each is imported one way, as
//! `kquants_dispatch` does for the K formats.

use crate::block::{Block, WeightBlock};
use crate::codebook::{BlockIq4Nl, BlockMxfp4};
use crate::legacy::{
    dequant_blocks, dot_legacy_scalar, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0,
    BlockQ8_1, BlockQ8x4, QK,
};
#[cfg(target_arch = "x86_64")]
use crate::legacy_avx2::{dot_legacy, dot_legacy_rows};
use crate::GgmlType;

/// `Block` and `WeightBlock` for a [`crate::legacy::Legacy32`] format whose type has a
/// `from_f32(&[f32])` constructor: the 32-value kernels, row-major and (on x86-64) AVX2.
macro_rules! weight_block {
    ($B:ty, $ty:expr) => {
        // SAFETY: repr(C), only byte arrays: alignment 1, no padding, every bit pattern valid.
        unsafe impl Block for $B {
            const TYPE: GgmlType = $ty;
            const ELEMS: usize = QK;
        }
        impl WeightBlock for $B {
            type Act = BlockQ8x4;
            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                dequant_blocks(blocks, out)
            }
            fn quantize(src: &[f32], out: &mut [Self]) {
                assert_eq!(src.len(), out.len() * QK);
                for (x, b) in src.chunks_exact(QK).zip(out.iter_mut()) {
                    *b = <$B>::from_f32(x);
                }
            }
            fn dot_scalar<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
                dot_legacy_scalar(w, xs)
            }
            unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: the caller guarantees AVX2, FMA and F16C.
                    unsafe { dot_legacy(w, xs) }
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
                xs: [&[BlockQ8x4]; R],
                out: &mut [[f32; R]],
            ) {
                // SAFETY: the caller guarantees AVX2, FMA and F16C.
                unsafe { dot_legacy_rows(w, bpr, xs, out) }
            }
        }
    };
}

weight_block!(BlockQ4_0, GgmlType::Q4_0);
weight_block!(BlockQ4_1, GgmlType::Q4_1);
weight_block!(BlockQ5_0, GgmlType::Q5_0);
weight_block!(BlockQ5_1, GgmlType::Q5_1);
weight_block!(BlockQ8_0, GgmlType::Q8_0);
weight_block!(BlockQ8_1, GgmlType::Q8_1);
weight_block!(BlockIq4Nl, GgmlType::IQ4_NL);
weight_block!(BlockMxfp4, GgmlType::MXFP4);
