//! Cross-type properties of the block formats, one golden procedure run against every type:
//! quantize → dequantize stays close to the input; the AVX2 dot equals the scalar dot
//! (bit-identical for quantized weights, within reassociation for float weights); the
//! multi-row kernels give each row exactly the single-row result; and the quantized dot
//! stays within the activation-rounding bound of an f32 dot of the dequantized weights.

// Rows are compared across several parallel arrays (scalar, AVX2, reference) by index.
#![allow(clippy::needless_range_loop)]

use ferrox_kernels::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    // Mixed magnitudes so per-block scales differ, plus an occasional outlier.
    (0..n)
        .map(|i| {
            let scale = if (i / 32) % 3 == 0 { 0.1 } else { 1.0 };
            let v: f32 = rng.gen_range(-1.0..1.0) * scale;
            if rng.gen_ratio(1, 97) {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

/// Worst quantize→dequantize error allowed, relative to the largest |x| of its 256 values.
fn roundtrip_tolerance(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 | GgmlType::BF16 => 0.01,
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => 0.005,
        GgmlType::Q6_K => 0.04,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 0.07,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 0.14,
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => 0.14,
        // A power-of-two scale and E2M1's gaps: up to two of 12 steps, the scale up to 2x.
        GgmlType::MXFP4 => 0.34,
        // Lattices of 1-3 bits a value and ternary values: coarse by design. The IQ2/IQ3
        // lattices have no zero (a small value lands on the smallest point) and their 7-bit
        // sign indices flip one sign in a group with an odd count of negatives, so one value
        // may come back with the wrong sign; our quantizer makes valid blocks, not ggml's
        // best ones. Layouts are checked exactly against gguf-py (`layouts.rs`).
        GgmlType::IQ3_XXS | GgmlType::IQ3_S => 0.8,
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S => 0.8,
        GgmlType::IQ1_S | GgmlType::IQ1_M | GgmlType::TQ1_0 | GgmlType::TQ2_0 => 0.8,
        GgmlType::Q3_K => 0.3,
        GgmlType::Q2_K => 0.5,
    }
}

#[test]
fn quantize_dequantize_round_trip() {
    let mut rng = StdRng::seed_from_u64(1);
    for ty in GgmlType::ALL {
        for _ in 0..20 {
            let x = random(&mut rng, 1024);
            let mut bytes = Vec::new();
            quantize_row(ty, &x, &mut bytes);
            let mut y = vec![0.0; x.len()];
            dequantize_row(ty, &bytes, &mut y);
            for (xs, ys) in x.chunks(256).zip(y.chunks(256)) {
                let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (a, b) in xs.iter().zip(ys) {
                    let err = (a - b).abs();
                    assert!(
                        err <= roundtrip_tolerance(ty) * amax,
                        "{}: {a} came back as {b} (amax {amax})",
                        ty.name()
                    );
                }
            }
        }
    }
}

/// Largest error the activation quantization can cause: each value moves by at most half its
/// block's step `amax/127`, times |w| (the weights are exact after dequantization), plus a
/// little float rounding.
fn act_error_bound(ty: GgmlType, w: &[f32], x: &[f32]) -> f64 {
    let mag: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let block = match ActKind::for_weights(ty) {
        ActKind::F32 => return 1e-5 * mag + 1e-6,
        ActKind::Q8x4 => 32,
        ActKind::Q8K => 256,
    };
    let mut bound = 0.0f64;
    for (wb, xb) in w.chunks(block).zip(x.chunks(block)) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
        let wsum: f64 = wb.iter().map(|v| v.abs() as f64).sum();
        bound += wsum * amax / 127.0 * 0.5;
    }
    bound * 1.001 + 1e-5 * mag + 1e-6
}

struct Case<W: WeightBlock> {
    w: Vec<W>,
    /// Activation rows already quantized.
    acts: Vec<Vec<W::Act>>,
    x: Vec<Vec<f32>>,
}

fn make_case<W: WeightBlock>(rng: &mut StdRng, cols: usize, rows: usize) -> Case<W>
where
    W::Act: ActBlock,
{
    let wf = random(rng, cols);
    let mut bytes = Vec::new();
    quantize_row(W::TYPE, &wf, &mut bytes);
    let w = as_blocks::<W>(&bytes).to_vec();
    let x: Vec<Vec<f32>> = (0..rows).map(|_| random(rng, cols)).collect();
    let acts = x
        .iter()
        .map(|xr| {
            let mut a = vec![W::Act::default(); W::Act::units_for(cols)];
            W::Act::quantize_row(xr, &mut a);
            a
        })
        .collect();
    Case { w, acts, x }
}

fn check_type<W: WeightBlock>(rng: &mut StdRng) {
    let ty = W::TYPE;
    let bitwise = !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    // Lengths: one block, odd block counts (tails of the 4-block groups), a typical width.
    let lens: Vec<usize> = [1usize, 3, 5, 7, 8, 20]
        .iter()
        .map(|b| b * W::ELEMS.max(32))
        .chain([W::ELEMS.max(32) * 2 + if W::ELEMS == 1 { 7 } else { 0 }])
        .collect();
    for &cols in &lens {
        for _ in 0..5 {
            let c = make_case::<W>(rng, cols, 4);
            let xs: [&[W::Act]; 4] = std::array::from_fn(|i| c.acts[i].as_slice());
            let scalar4 = dot_rows::<W, 4>(Isa::scalar(), &c.w, xs);
            // Multi-row kernels give each row exactly its single-row result.
            for r in 0..4 {
                let one = vec_dot(Isa::scalar(), &c.w, &c.acts[r]);
                assert_eq!(
                    one.to_bits(),
                    scalar4[r].to_bits(),
                    "{} scalar R=4 row {r}",
                    ty.name()
                );
            }
            let three = dot_rows::<W, 3>(Isa::scalar(), &c.w, [xs[1], xs[2], xs[3]]);
            assert_eq!(
                three.map(f32::to_bits),
                [1, 2, 3].map(|r| scalar4[r].to_bits())
            );

            // Reference: f32 dot of the dequantized weights with the unquantized activations.
            let mut wd = vec![0.0; cols];
            W::dequantize(&c.w, &mut wd);
            for r in 0..4 {
                let exact: f64 = wd
                    .iter()
                    .zip(&c.x[r])
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                let bound = act_error_bound(ty, &wd, &c.x[r]);
                let err = (scalar4[r] as f64 - exact).abs();
                assert!(
                    err <= bound,
                    "{} cols={cols}: dot {} vs f32 {exact} (bound {bound})",
                    ty.name(),
                    scalar4[r]
                );
            }

            let Some(avx2) = Isa::avx2() else { continue };
            let simd4 = dot_rows::<W, 4>(avx2, &c.w, xs);
            for r in 0..4 {
                let one = vec_dot(avx2, &c.w, &c.acts[r]);
                assert_eq!(
                    one.to_bits(),
                    simd4[r].to_bits(),
                    "{} avx2 R=4 row {r}",
                    ty.name()
                );
                if bitwise {
                    assert_eq!(
                        simd4[r].to_bits(),
                        scalar4[r].to_bits(),
                        "{} cols={cols}: avx2 {} != scalar {}",
                        ty.name(),
                        simd4[r],
                        scalar4[r]
                    );
                } else {
                    let mag: f32 = c.x[r].iter().zip(&wd).map(|(a, b)| (a * b).abs()).sum();
                    assert!(
                        (simd4[r] - scalar4[r]).abs() <= 1e-5 * mag + 1e-6,
                        "{} cols={cols}",
                        ty.name()
                    );
                }
            }
        }
    }
}

#[test]
fn every_weight_type_dot_products() {
    let mut rng = StdRng::seed_from_u64(2);
    check_type::<F32Le>(&mut rng);
    check_type::<F16Le>(&mut rng);
    check_type::<Bf16Le>(&mut rng);
    check_type::<BlockQ4_0>(&mut rng);
    check_type::<BlockQ4_1>(&mut rng);
    check_type::<BlockQ5_0>(&mut rng);
    check_type::<BlockQ5_1>(&mut rng);
    check_type::<BlockQ8_0>(&mut rng);
    check_type::<BlockQ8_1>(&mut rng);
    check_type::<BlockQ2K>(&mut rng);
    check_type::<BlockQ3K>(&mut rng);
    check_type::<BlockQ4K>(&mut rng);
    check_type::<BlockQ5K>(&mut rng);
    check_type::<BlockQ6K>(&mut rng);
}

/// Extreme quants: every weight byte and activation at the edge of its range, where the
/// AVX2 paths' i16 `maddubs` could saturate if the bounds in their docs were wrong.
#[test]
fn extreme_blocks_match_scalar() {
    let mut rng = StdRng::seed_from_u64(3);
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::MXFP4,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ];
    for ty in types {
        for _ in 0..50 {
            let cols = 512;
            // Random bytes are valid blocks of every type; pin the f16 scales to sane values.
            let mut bytes: Vec<u8> = (0..row_bytes(ty, cols)).map(|_| rng.gen()).collect();
            if rng.gen_bool(0.5) {
                bytes.iter_mut().for_each(|b| *b = 0xFF);
            }
            fix_scales(ty, &mut bytes);
            // Seventeen activation rows: the lane-major kernels (from eight rows, sixteen on
            // plain AVX2) and the row-major ones all meet the extremes.
            let n = 17;
            let x: Vec<f32> = (0..n * cols)
                .map(|i| {
                    if (i + rng.gen_range(0..2)) % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    }
                })
                .collect();
            let w = QMatrix::new(ty, &bytes, 1, cols);
            let pool = ThreadPool::new(1);
            let mut a = vec![0.0f32; n];
            matmul_isa(Isa::scalar(), &pool, &w, &x, n, &mut a);
            for isa in Isa::available().into_iter().skip(1) {
                for rows in [1, n] {
                    let mut b = vec![0.0f32; rows];
                    matmul_isa(isa, &pool, &w, &x[..rows * cols], rows, &mut b);
                    for (p, q) in a.iter().zip(&b) {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{} {} n={rows}: scalar {p} vs {q}",
                            ty.name(),
                            isa.name()
                        );
                    }
                }
            }
            assert!(a.iter().all(|v| v.is_finite()));
        }
    }
}

/// Overwrites every f16 scale field of a row with 0.5 (random bits may be inf/NaN).
fn fix_scales(ty: GgmlType, bytes: &mut [u8]) {
    let half = half::f16::from_f32(0.5).to_bits().to_le_bytes();
    let bb = ty.block_bytes();
    let offsets: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S => &[0],
        GgmlType::IQ3_XXS | GgmlType::IQ3_S | GgmlType::IQ1_S => &[0],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    };
    for block in bytes.chunks_exact_mut(bb) {
        if ty == GgmlType::MXFP4 {
            block[0] = 126; // the E8M0 exponent: a scale of 0.25 (255 would be NaN)
        }
        if ty == GgmlType::IQ1_M {
            // The f16 scale is the top nibbles of the four scale words (bytes 48..56).
            let bits = u16::from_le_bytes(half);
            for i in 0..4 {
                let hi = 48 + 2 * i + 1;
                block[hi] = (block[hi] & 0x0F) | ((((bits >> (4 * i)) & 0xF) as u8) << 4);
            }
        }
        for &o in offsets {
            block[o..o + 2].copy_from_slice(&half);
        }
    }
}

/// The activation quantizers give the same bits on every ISA (the AVX2 build is the same
/// code compiled with AVX2; this pins that no vector rounding mode slipped in).
#[test]
fn activation_quantizers_match_across_isas() {
    let Some(avx2) = Isa::avx2() else { return };
    let mut rng = StdRng::seed_from_u64(4);
    for cols in [32, 96, 256, 640, 2048, 2080] {
        for _ in 0..20 {
            let mut x = random(&mut rng, cols);
            if rng.gen_bool(0.3) {
                // Exact ties: amax 127 makes d = 1, and half-integers round to even.
                for (i, v) in x.iter_mut().enumerate() {
                    *v = if i % 32 == 0 {
                        127.0
                    } else {
                        rng.gen_range(-120i32..120) as f32 + 0.5
                    };
                }
            }
            if rng.gen_bool(0.2) {
                x[cols / 2] = f32::NAN; // quantizes to 0 on both paths
            }
            let mut a = vec![BlockQ8x4::default(); BlockQ8x4::units_for(cols)];
            let mut b = a.clone();
            BlockQ8x4::quantize_row_isa(Isa::scalar(), &x, &mut a);
            BlockQ8x4::quantize_row_isa(avx2, &x, &mut b);
            assert_eq!(a, b, "q8x4 cols={cols}");
            let mut a = vec![BlockQ8K::default(); BlockQ8K::units_for(cols)];
            let mut b = a.clone();
            BlockQ8K::quantize_row_isa(Isa::scalar(), &x, &mut a);
            BlockQ8K::quantize_row_isa(avx2, &x, &mut b);
            assert_eq!(a, b, "q8k cols={cols}");
        }
    }
}
