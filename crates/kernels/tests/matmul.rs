//! `matmul` properties for every weight type: agreement with a naive f32 reference, batch
//! and thread-count invariance (bit-identical rows), scalar == every SIMD spelling for the
//! quantized types,
//! and reuse of pre-quantized activations.

use ferrox_kernels::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MATMUL_TYPES: [GgmlType; 26] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
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

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
}

fn random_matrix(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let wf = random(rng, rows * cols);
    let mut bytes = Vec::new();
    for r in wf.chunks(cols) {
        quantize_row(ty, r, &mut bytes);
    }
    let mut wd = vec![0.0; rows * cols];
    for (o, row) in wd.chunks_mut(cols).enumerate() {
        dequantize_row(ty, &bytes[o * row_bytes(ty, cols)..], row);
    }
    (bytes, wd)
}

fn cols_for(ty: GgmlType) -> usize {
    if ty.block_elems() == 256 {
        768
    } else {
        // 20 blocks: 5 full groups of four; plus the float types get an odd tail.
        if ty.block_elems() == 1 {
            647
        } else {
            640 + 96
        }
    }
}

#[test]
fn matches_naive_reference() {
    let mut rng = StdRng::seed_from_u64(10);
    let pool = ThreadPool::new(2);
    for ty in MATMUL_TYPES {
        let (rows, cols, n) = (37, cols_for(ty), 5);
        let (bytes, wd) = random_matrix(&mut rng, ty, rows, cols);
        let x = random(&mut rng, n * cols);
        let mut out = vec![f32::NAN; n * rows];
        matmul(
            &pool,
            &QMatrix::new(ty, &bytes, rows, cols),
            &x,
            n,
            &mut out,
        );
        let tol = if ActKind::for_weights(ty) == ActKind::F32 {
            1e-5
        } else {
            0.01
        };
        for r in 0..n {
            for o in 0..rows {
                let w = &wd[o * cols..(o + 1) * cols];
                let xr = &x[r * cols..(r + 1) * cols];
                let exact: f64 = w.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = w
                    .iter()
                    .zip(xr)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let got = out[r * rows + o] as f64;
                assert!(
                    (got - exact).abs() <= tol * mag + 1e-6,
                    "{} out[{r}][{o}] = {got}, reference {exact}",
                    ty.name()
                );
            }
        }
    }
}

#[test]
fn batch_and_thread_invariance() {
    let mut rng = StdRng::seed_from_u64(11);
    let pools = [ThreadPool::new(1), ThreadPool::new(2), ThreadPool::new(3)];
    for ty in MATMUL_TYPES {
        let (rows, cols) = (53, cols_for(ty));
        let (bytes, _) = random_matrix(&mut rng, ty, rows, cols);
        let w = QMatrix::new(ty, &bytes, rows, cols);
        let probe = random(&mut rng, cols);
        let mut single = vec![0.0; rows];
        matmul(&pools[0], &w, &probe, 1, &mut single);
        for n in [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 16] {
            for (pi, pool) in pools.iter().enumerate() {
                // The probe row sits at a different position among random neighbours.
                let at = (n * 5 + pi) % n;
                let mut x = random(&mut rng, n * cols);
                x[at * cols..(at + 1) * cols].copy_from_slice(&probe);
                let mut out = vec![0.0; n * rows];
                matmul(pool, &w, &x, n, &mut out);
                let got = &out[at * rows..(at + 1) * rows];
                for o in 0..rows {
                    assert_eq!(
                        got[o].to_bits(),
                        single[o].to_bits(),
                        "{} n={n} threads={} row at {at}, output {o}",
                        ty.name(),
                        pool.n_threads()
                    );
                }
            }
        }
    }
}

/// Every ISA spelling the machine has (`Isa::available`: AVX2, AVX-VNNI, AVX-512) gives the
/// scalar kernels' bits for the quantized types, below and above the batch sizes where the
/// lane-major kernels take over (8 rows; 16 on plain AVX2), with a row count that leaves a
/// partial group of rows.
#[test]
fn every_isa_spelling_matches_scalar() {
    let mut rng = StdRng::seed_from_u64(12);
    let pool = ThreadPool::new(2);
    for ty in MATMUL_TYPES {
        for n in [1, 2, 3, 6, 8, 13, 17] {
            let (rows, cols) = (19, cols_for(ty));
            let (bytes, _) = random_matrix(&mut rng, ty, rows, cols);
            let w = QMatrix::new(ty, &bytes, rows, cols);
            let x = random(&mut rng, n * cols);
            let mut a = vec![0.0; n * rows];
            matmul_isa(Isa::scalar(), &pool, &w, &x, n, &mut a);
            for isa in Isa::available().into_iter().skip(1) {
                let mut b = vec![0.0; n * rows];
                matmul_isa(isa, &pool, &w, &x, n, &mut b);
                for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                    let what = format!("{} {} n={n} [{i}] {p} vs {q}", ty.name(), isa.name());
                    if ActKind::for_weights(ty) == ActKind::F32 {
                        assert!((p - q).abs() <= 1e-4 * (1.0 + p.abs()), "{what}");
                    } else {
                        assert_eq!(p.to_bits(), q.to_bits(), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn prequantized_activations_give_the_same_result() {
    let mut rng = StdRng::seed_from_u64(13);
    let pool = ThreadPool::new(2);
    let mut acts = Activations::new();
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16] {
        let (rows, cols, n) = (24, cols_for(ty).min(768) / 256 * 256, 9);
        let (bytes, _) = random_matrix(&mut rng, ty, rows, cols);
        let w = QMatrix::new(ty, &bytes, rows, cols);
        let x = random(&mut rng, n * cols);
        let mut a = vec![0.0; n * rows];
        let mut b = vec![0.0; n * rows];
        matmul(&pool, &w, &x, n, &mut a);
        acts.quantize(&pool, ty, &x, n, cols);
        assert_eq!(acts.kind(), ActKind::for_weights(ty));
        matmul_acts(&pool, &w, &acts, &mut b);
        assert_eq!(a, b, "{}", ty.name());
    }
}

#[test]
fn empty_batch_is_a_no_op() {
    let pool = ThreadPool::new(2);
    let bytes = vec![0u8; 4 * row_bytes(GgmlType::Q8_0, 64)];
    let w = QMatrix::new(GgmlType::Q8_0, &bytes, 4, 64);
    let mut out: Vec<f32> = Vec::new();
    matmul(&pool, &w, &[], 0, &mut out);
}
