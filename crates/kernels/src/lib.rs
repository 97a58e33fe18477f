//! CPU kernels for GGML block formats.
//!
//! API CONTRACT (the engine codes against this; keep names and signatures):
//! - `dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32])`: dst.len() values from the
//!   bytes of whole blocks of `ty`.
//! - `QMatrix<'a> { ty, data: &'a [u8], rows, cols }`: a row-major weight matrix as stored in
//!   GGUF (`rows` output features, each of `cols` values = `dims[0]`).
//! - `matmul(pool: &ThreadPool, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32])`: for each
//!   of the `n` activation rows `x[r*cols..]`, `out[r*w.rows + o] = dot(W[o], x[r])`.
//!   A row's result is bit-identical whatever `n` is and whatever the thread count (batch
//!   invariance is a property the scheduler relies on).
//! - `ThreadPool::new(n_threads)`, `pool.n_threads()`, `pool.for_each(n_tasks, &|task| ..)`.
//! - small f32 helpers used by attention: `dot_f32`, `dot_f16_f32`, `axpy_f16_f32`, ...
//!
//! Also public, for code that wants the pieces: `quantize_row` (f32 → any block type, for
//! tests and random-weight GGUF writers), `row_bytes`, the block structs, the activation
//! formats ([`BlockQ8x4`], [`BlockQ8K`]) and the reusable [`Activations`] buffer with
//! [`matmul_acts`], and per-type dot products through [`WeightBlock`] / [`vec_dot`].
//!
//! # Modules
//! - `block`: the traits every format implements, [`Isa`] (scalar, AVX2, AVX-VNNI, AVX-512
//!   or AMX, detected once; `FERROX_ISA` forces one).
//! - `float`: F32/F16/BF16 weights and the attention helpers.
//! - `attn`: multi-row attention scores and value sums over f16 K/V, `exp`, GELU/SiLU gates
//!   (spelled in `attn_avx2` and `attn_avx512`; `vmath`: the constants and scalar twins).
//! - `legacy` (+ `legacy_avx2`; `legacy_dispatch` picks between them, for `codebook`'s
//!   formats too): the 32-value formats Q4_0 … Q8_1 and [`BlockQ8x4`];
//!   `codebook`: IQ4_NL, IQ4_XS and MXFP4 (table lookups feeding the same kernels);
//!   `iquants` (+ `iq_grids`): the lattice and ternary types IQ1_S … IQ3_S, TQ1_0, TQ2_0;
//!   `gemm8`: the same formats for many activation rows (eight weight rows decoded once);
//!   `gemm16`: the same on AVX-512 (sixteen rows, 512-bit `vpdpbusd`).
//! - `kquants` (+ `kquants_avx2`, and `kquants_avx512` for Q4_K/Q5_K/Q6_K; `kquants_dispatch`
//!   picks among them): Q2_K … Q6_K and [`BlockQ8K`] at a few activation rows (decode); `kgemm`: the same formats for many
//!   activation rows (sixteen weight rows decoded once, `vpdpbusd` 512 or 256 bits wide).
//! - `krows`: [`KRows16`], a Q4_K or Q6_K matrix repacked sixteen rows at a time, still
//!   packed, lane-major (a loaded model's Q4_K and Q6_K matrices on AVX-512 hosts; on `amx`
//!   a prefill multiplies its Q4_K ones with AMX-INT8 tiles, `krows::amx`); `lanes`: the
//!   per-row-lane vector operations `kgemm` and `krows` are written over; `hugepages`: asks
//!   for transparent huge pages under the repacked copies, which decode streams; `membw`:
//!   [`read_bandwidth`], the plain read a one-sequence decode is judged against.
//! - `matmul`: [`QMatrix`], [`Activations`], [`matmul`].
//! - `pool`: [`ThreadPool`].
//! - `rows8`: [`Q8Rows8`], a Q8_0 matrix repacked eight rows at a time (the output head).
//! - `dot4`: the int8 step (four u8 × i8 products per i32 lane) as AVX2 spells it or as one
//!   AVX-VNNI `vpdpbusd`, the same integers either way; `gemm8` and the head use VNNI where
//!   the [`Isa`] has it (`FERROX_ISA=avx2` forces the AVX2 spelling).
//!
//! # Scalar vs SIMD
//! Every weight type has a portable `dot_scalar` and an AVX2 `dot_avx2` (the K-quants of the
//! Q4_K_M / Q5_K_M mixes also an AVX-512 row kernel, `dot_avx512_rows`); the lane-major paths
//! (`gemm8` + `gemm16`, `kgemm`) have AVX2, AVX-VNNI and AVX-512 entries. For the
//! quantized types they are all bit-identical (integer dot products are exact and both paths apply the
//! same float operations in the same order; see `legacy` and `kquants`). For F32/F16/BF16
//! weights and the f32 helpers they agree within float reassociation. Either way, one ISA is
//! used for a whole process ([`Isa::best`]), so results never depend on the batch.
//!
//! # Performance notes (AMD EPYC Zen 3, 2 vCPUs, AVX2; 2026-11-30; re-measure with
//! `cargo run -p ferrox-kernels --release --example bench_matmul [threads]
//! [compute|one T N|head|head8 [ROWS]|layers|read|quant|pool]`)
//!
//! Decode (n = 1) streams every weight from memory, and a thread's time is its compute PLUS
//! its memory stalls (one thread on the Q8_0 head: 6.8 GB/s, where a plain read gives ~10
//! and the kernel from cache ~22; 1/(1/10 + 1/22) ≈ 6.9). Hence, in order of effect:
//! software prefetch 4 KB ahead of the weight stream (head 26.5 → 15 ms); one contiguous row
//! range per thread instead of small tiles (each tile start was a cold stream; the default
//! model's 18 layers 8.3 → 6.2 ms); and for the head, `Q8Rows8` (scales side by side, aligned
//! lane-major quants: 17 → 10-11 ms for 178 MB, ~17 GB/s on two threads, about the
//! machine's plain-read bandwidth).
//!
//! Prefill and batched decode are int8-compute-bound. One thread, weights in cache, ns per
//! (32-value block, activation row) (n = 16 `gemm8` q5_0 and q6_K re-measured in session 4):
//!
//! | type | n=1 | n=4 | n=16 | n=64 |
//! |------|-----|-----|------|------|
//! | q8_0 (row-major / `gemm8`) | 1.55 | 1.24 | 1.23 / 0.95 | — / 0.91 |
//! | q5_0 (row-major / `gemm8`) | 2.55 | 1.42 | 1.44 / 0.79 | 1.14 / 0.84 |
//! | q4_0 (row-major / `gemm8`) | 1.82 | 1.27 | 1.30 / 1.13 | |
//! | q4_K | 1.55 | 0.80 | 0.80 | |
//! | q6_K | 1.63 | 0.90 | 0.64 | |
//!
//! The K-quants at n = 1 on that AVX-512 host (512 × 2048 from cache, 2026-12-03): `avx2`
//! q4_K 0.78, q6_K 0.80–0.86; `kquants_avx512` 0.50–0.55 and 0.49–0.56, which from memory
//! reads at the machine's plain-read bandwidth (two threads, ~42 GB/s).
//!
//! The K-quants from eight rows on (`kgemm`), re-measured on an AMD EPYC with AVX-512 VNNI
//! (2026-12-02), q4_K 64 × 2048, row-major 0.44 at every n: n = 16 / 64 — `avx512` 0.20 /
//! 0.12, `avxvnni` 0.30 / 0.23, `avx2` 0.32 / 0.24 (q4_K's i16 sums; q5_K and q6_K 0.38 /
//! 0.31 there, within 0.01 of each other elsewhere).
//!
//! `gemm8` (from 8 activation rows) decodes eight weight rows once into chunks whose lane `i`
//! is row `i`, so four values of a (block, row) cost a broadcast + maddubs + madd (one
//! `vpdpbusd` with VNNI) and no per-row scale work, plus one cvt + fma per block (`gemm16`
//! on AVX-512: three activation rows per pass share each chunk load); the remaining limit is
//! the int8 multiply throughput. On Zen 3,
//! `maddubs`/`madd` share two pipes, `sign`/`abs`/`fma` two others that overlap them, and
//! `cvt` a third pair, so fewer float steps pay: the repacked head (`Q8Rows8`) sums a
//! block's eight chunks in i32 and takes one float step per block into one accumulator per
//! row, four activation rows per pass (262144 x 640 at n = 16: ~0.51 of the file-layout
//! kernel's time; ~0.70 with a float step per chunk). A bare micro-benchmark retires about
//! two vector operations per cycle here, so operation counts are what to cut. The layers'
//! 32-value formats take one float step per block too (exact block integers, lanes `b % 4`;
//! see `legacy`), since fidelity is judged by the statistical gate rather than one golden
//! continuation (docs/PERFORMANCE.md, 2026-12-03). Q6_K runs eight
//! activation rows per call (`WeightBlock::WIDE`). Earlier wins: several weight rows per call at
//! n = 1, the row loop inside the `target_feature` function, table-driven K-quant scales, and
//! AVX2 activation quantization. `ThreadPool::for_each` of tiny tasks: ~0.05 µs per call.

mod acts;
mod attn;
#[cfg(target_arch = "x86_64")]
mod attn_avx2;
#[cfg(target_arch = "x86_64")]
mod attn_avx512;
mod attn_int8;
mod block;
mod codebook;
#[cfg(target_arch = "x86_64")]
mod dot4;
mod float;
#[cfg(target_arch = "x86_64")]
mod gemm16;
#[cfg(target_arch = "x86_64")]
mod gemm8;
mod hugepages;
mod iq_grids;
mod iquants;
#[cfg(target_arch = "x86_64")]
mod kgemm;
mod kquants;
#[cfg(target_arch = "x86_64")]
mod kquants_avx2;
#[cfg(target_arch = "x86_64")]
mod kquants_avx512;
mod kquants_dispatch;
mod krows;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod legacy;
#[cfg(target_arch = "x86_64")]
mod legacy_avx2;
mod legacy_dispatch;
mod matmul;
mod membw;
mod pool;
#[cfg(target_arch = "x86_64")]
mod quant_avx2;
mod rows8;
mod tiling;
mod vmath;

pub use acts::{ActKind, ActStorage, Activations};
pub use attn::{
    attn_accumulate_f16, attn_accumulate_f16_isa, attn_scores_f16, attn_scores_f16_isa, exp_f32,
    exp_shift_sum, exp_shift_sum_isa, gelu_tanh_mul, gelu_tanh_mul_isa, silu_mul, silu_mul_isa,
};
pub use attn_int8::{
    attn_accumulate_int8, attn_accumulate_int8_isa, attn_scores_int8, attn_scores_int8_isa,
    quantize_kv, KvBlock,
};
pub use block::{
    as_blocks, as_blocks_mut, dot_rows, dot_rows_multi, prefetch_span, vec_dot, ActBlock, Block,
    Isa, WeightBlock,
};
pub use codebook::{BlockIq4Nl, BlockIq4Xs, BlockMxfp4, IQ4_TABLE, MXFP4_TABLE};
pub use ferrox_gguf::GgmlType;
pub use float::{
    axpy_f16_f32, axpy_f16_f32_isa, dot_f16_f32, dot_f16_f32_isa, dot_f32, dot_f32_isa,
    f32_to_f16_slice, f32_to_f16_slice_isa, Bf16Le, F16Le, F32Le,
};
pub use hugepages::{copy_to_huge_pages, huge_pages_available};
pub use iquants::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockTq1_0,
    BlockTq2_0,
};
pub use kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
pub use krows::{KRows16, RepackPart};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, BlockQ8x4, QK};
pub use matmul::{matmul, matmul_acts, matmul_acts_isa, matmul_isa, QMatrix};
pub use membw::{read_bandwidth, read_bandwidth_of};
pub use pool::ThreadPool;
pub use rows8::Q8Rows8;

/// Bytes of a row of `cols` values of `ty`. Panics if `cols` is not a whole number of blocks.
pub fn row_bytes(ty: GgmlType, cols: usize) -> usize {
    let be = ty.block_elems();
    assert!(
        cols.is_multiple_of(be),
        "{cols} values is not a whole number of {} blocks ({be})",
        ty.name()
    );
    cols / be * ty.block_bytes()
}

/// Runs `$body` with `$B` bound to the block struct of `$ty` (Q8_K excluded: it is not a
/// `Block`, its f32 scale is not byte-aligned).
macro_rules! with_block {
    ($ty:expr, $B:ident => $body:expr, q8k => $q8k:expr) => {
        match $ty {
            GgmlType::F32 => {
                type $B = F32Le;
                $body
            }
            GgmlType::F16 => {
                type $B = F16Le;
                $body
            }
            GgmlType::BF16 => {
                type $B = Bf16Le;
                $body
            }
            GgmlType::Q4_0 => {
                type $B = BlockQ4_0;
                $body
            }
            GgmlType::Q4_1 => {
                type $B = BlockQ4_1;
                $body
            }
            GgmlType::Q5_0 => {
                type $B = BlockQ5_0;
                $body
            }
            GgmlType::Q5_1 => {
                type $B = BlockQ5_1;
                $body
            }
            GgmlType::Q8_0 => {
                type $B = BlockQ8_0;
                $body
            }
            GgmlType::Q8_1 => {
                type $B = BlockQ8_1;
                $body
            }
            GgmlType::Q2_K => {
                type $B = BlockQ2K;
                $body
            }
            GgmlType::Q3_K => {
                type $B = BlockQ3K;
                $body
            }
            GgmlType::Q4_K => {
                type $B = BlockQ4K;
                $body
            }
            GgmlType::Q5_K => {
                type $B = BlockQ5K;
                $body
            }
            GgmlType::Q6_K => {
                type $B = BlockQ6K;
                $body
            }
            GgmlType::IQ4_NL => {
                type $B = BlockIq4Nl;
                $body
            }
            GgmlType::IQ4_XS => {
                type $B = BlockIq4Xs;
                $body
            }
            GgmlType::MXFP4 => {
                type $B = BlockMxfp4;
                $body
            }
            GgmlType::IQ2_XXS => {
                type $B = BlockIq2Xxs;
                $body
            }
            GgmlType::IQ2_XS => {
                type $B = BlockIq2Xs;
                $body
            }
            GgmlType::IQ2_S => {
                type $B = BlockIq2S;
                $body
            }
            GgmlType::IQ3_XXS => {
                type $B = BlockIq3Xxs;
                $body
            }
            GgmlType::IQ3_S => {
                type $B = BlockIq3S;
                $body
            }
            GgmlType::IQ1_S => {
                type $B = BlockIq1S;
                $body
            }
            GgmlType::IQ1_M => {
                type $B = BlockIq1M;
                $body
            }
            GgmlType::TQ1_0 => {
                type $B = BlockTq1_0;
                $body
            }
            GgmlType::TQ2_0 => {
                type $B = BlockTq2_0;
                $body
            }
            GgmlType::Q8_K => $q8k,
        }
    };
}

/// Decodes `dst.len()` values (a whole number of blocks) from the leading bytes of `src`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let nbytes = row_bytes(ty, dst.len());
    assert!(
        src.len() >= nbytes,
        "{} {} values need {nbytes} bytes, got {}",
        dst.len(),
        ty.name(),
        src.len()
    );
    let src = &src[..nbytes];
    with_block!(ty, B => B::dequantize(as_blocks::<B>(src), dst), q8k => {
        for (b, y) in src.chunks_exact(ty.block_bytes()).zip(dst.chunks_exact_mut(QK_K)) {
            BlockQ8K::dequantize_bytes(b, y);
        }
    })
}

/// Encodes `src` (a whole number of blocks of `ty`) and appends the bytes to `dst`.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut Vec<u8>) {
    let start = dst.len();
    dst.resize(start + row_bytes(ty, src.len()), 0);
    quantize_row_into(ty, src, &mut dst[start..]);
}

/// Encodes `src` into `dst`, which must be exactly `row_bytes(ty, src.len())` bytes.
pub fn quantize_row_into(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        dst.len(),
        row_bytes(ty, src.len()),
        "dst size for {} {} values",
        src.len(),
        ty.name()
    );
    with_block!(ty, B => B::quantize(src, as_blocks_mut::<B>(dst)), q8k => {
        let mut bytes = Vec::with_capacity(dst.len());
        for x in src.chunks_exact(QK_K) {
            BlockQ8K::from_f32(x).to_bytes(&mut bytes);
        }
        dst.copy_from_slice(&bytes);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_bytes() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for ty in GgmlType::ALL {
            let mut bytes = Vec::new();
            quantize_row(ty, &x, &mut bytes);
            assert_eq!(bytes.len(), row_bytes(ty, x.len()), "{}", ty.name());
            let mut y = vec![0.0; x.len()];
            dequantize_row(ty, &bytes, &mut y);
            let err = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            // At most one quantization step of the type over the values' range [-1, 1):
            // 2 / 2^bits (a type whose scales are themselves quantized loses a little more,
            // which the whole step covers; a wrong scale or nibble order is far beyond it).
            let bits = match ty {
                GgmlType::F32 => 24,
                GgmlType::F16 => 11,
                GgmlType::BF16 => 8,
                GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => 8,
                GgmlType::Q6_K => 6,
                GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 5,
                GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 4,
                GgmlType::IQ4_NL | GgmlType::IQ4_XS => 4,
                // E2M1's top gap is a third of its range's top: 8 → 12 (doubled).
                GgmlType::Q3_K | GgmlType::MXFP4 => 3,
                // A lattice's nearest point is farther than a uniform grid's step, and the
                // 7-bit sign indices flip one sign in odd groups.
                GgmlType::IQ3_XXS | GgmlType::IQ3_S => 1,
                GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S => 1,
                GgmlType::IQ1_S | GgmlType::IQ1_M | GgmlType::TQ1_0 | GgmlType::TQ2_0 => 1,
                GgmlType::Q2_K => 2,
            };
            let step = 2.0 / (1u32 << bits) as f32;
            assert!(
                err <= step,
                "{} max error {err} > one step {step}",
                ty.name()
            );
        }
    }

    #[test]
    #[should_panic(expected = "whole number")]
    fn partial_block_is_refused() {
        let mut y = vec![0.0; 31];
        dequantize_row(GgmlType::Q4_0, &[0; 18], &mut y);
    }
}
