//! `KRows16` (a Q4_K or Q6_K matrix repacked sixteen rows at a time) gives exactly the bits
//! `matmul` gives on the matrix it came from, on every instruction set the CPU has, at every
//! batch size and thread count.

use ferrox_kernels::{
    matmul_isa, quantize_row, Activations, GgmlType, Isa, KRows16, QMatrix, RepackPart, ThreadPool,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn matrix(rng: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rows {
        // Rows of different scales and signs, so that mins, scales and offsets all vary.
        let scale = rng.gen_range(0.1..3.0);
        let shift = rng.gen_range(-0.5..0.5);
        let row: Vec<f32> = (0..cols)
            .map(|_| scale * (rng.gen_range(-1.0f32..1.0) + shift))
            .collect();
        quantize_row(ty, &row, &mut bytes);
    }
    bytes
}

/// The spellings `KRows16` runs on that this CPU has (AVX2 and better).
fn avx2_isas() -> Vec<Isa> {
    Isa::available()
        .into_iter()
        .filter(|i| i.is_avx2())
        .collect()
}

#[test]
fn repacked_k_matmul_has_the_bits_of_matmul() {
    let isas = avx2_isas();
    if isas.is_empty() {
        eprintln!("no AVX2: KRows16 is not used on this CPU");
        return;
    }
    let mut rng = StdRng::seed_from_u64(16);
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        for (rows, cols) in [(16, 256), (48, 768), (64, 2048)] {
            let bytes = matrix(&mut rng, ty, rows, cols);
            let mut released = Vec::new();
            let Some(m) = KRows16::repack(ty, &bytes, rows, cols, |r| released.push(r)) else {
                // Only where the process's own ISA has no AVX2 (FERROX_ISA=scalar).
                assert!(!Isa::best().is_avx2(), "{ty:?} {rows}x{cols} not repacked");
                return;
            };
            assert_eq!(m.ty(), ty);
            // The release callback covers the source exactly once, in order.
            assert_eq!(released.first().map(|r| r.start), Some(0));
            assert!(released.windows(2).all(|w| w[0].end == w[1].start));
            assert_eq!(released.last().map(|r| r.end), Some(bytes.len()));
            let w = QMatrix::new(ty, &bytes, rows, cols);
            // 33: past 32 rows, plain AVX2 runs `kgemm`'s body on decoded packs; `amx` runs
            // pairs of 16-row tiles from 32 rows on, then one tile if one is left (50: a
            // pair and one; 81: two pairs and one), the AVX-512 body for the rows past them.
            for n in [1, 2, 3, 4, 5, 7, 9, 17, 33, 50, 81] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
                let mut want = vec![0.0; n * rows];
                matmul_isa(Isa::scalar(), &ThreadPool::new(1), &w, &x, n, &mut want);
                for &isa in &isas {
                    for threads in [1, 2] {
                        let mut got = vec![0.0; n * rows];
                        m.matmul_isa(isa, &ThreadPool::new(threads), &x, n, &mut got);
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{ty:?} {rows}x{cols} n={n} {isa:?} t={threads} at {i}: \
                                 {a} vs matmul's {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn only_fitting_matrices_are_repacked() {
    if !Isa::best().is_avx2() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(17);
    let bytes = matrix(&mut rng, GgmlType::Q4_K, 24, 256);
    assert!(
        KRows16::repack(GgmlType::Q4_K, &bytes, 24, 256, |_| {}).is_none(),
        "24 rows"
    );
    assert!(KRows16::repack(GgmlType::Q4_K, &bytes[..16 * 144], 16, 256, |_| {}).is_some());
    assert!(
        KRows16::repack(GgmlType::Q4_K, &bytes[..16 * 144 - 1], 16, 256, |_| {}).is_none(),
        "short data"
    );
    assert!(
        KRows16::repack(GgmlType::Q5_K, &bytes[..16 * 176], 16, 256, |_| {}).is_none(),
        "Q5_K has no repacked layout"
    );
}

#[test]
fn matrices_repacked_together_each_keep_their_bits() {
    if !Isa::best().is_avx2() {
        return;
    }
    // Both types, a part the layout refuses (Q5_K) between them, and a short one after:
    // each repacked part must read its own packs out of the shared buffer.
    let mut rng = StdRng::seed_from_u64(18);
    let shapes = [
        (GgmlType::Q6_K, 32, 512),
        (GgmlType::Q5_K, 16, 256),
        (GgmlType::Q4_K, 48, 768),
        (GgmlType::Q6_K, 16, 256),
    ];
    let datas: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, rows, cols)| matrix(&mut rng, ty, rows, cols))
        .collect();
    let parts: Vec<RepackPart> = shapes
        .iter()
        .zip(&datas)
        .map(|(&(ty, rows, cols), data)| RepackPart {
            ty,
            data,
            rows,
            cols,
        })
        .collect();
    let mut released = vec![0; parts.len()];
    let got = KRows16::repack_all(&parts, |i, r| released[i] += r.len());
    assert_eq!(got.len(), parts.len());
    for (i, (&(ty, rows, cols), m)) in shapes.iter().zip(&got).enumerate() {
        let Some(m) = m else {
            assert_eq!(ty, GgmlType::Q5_K, "part {i} not repacked");
            assert_eq!(released[i], 0, "a part left as it was is not released");
            continue;
        };
        assert_eq!(released[i], datas[i].len(), "part {i} released once, whole");
        assert_eq!((m.ty(), m.rows(), m.cols()), (ty, rows, cols));
        let w = QMatrix::new(ty, &datas[i], rows, cols);
        for n in [1, 20, 40] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
            let mut want = vec![0.0; n * rows];
            matmul_isa(Isa::scalar(), &ThreadPool::new(1), &w, &x, n, &mut want);
            let mut out = vec![0.0; n * rows];
            m.matmul(&ThreadPool::new(2), &x, n, &mut out);
            let same = out
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "part {i} ({ty:?} {rows}x{cols}) n={n}: not matmul's bits"
            );
        }
    }
}

#[test]
fn matrices_multiplied_in_one_loop_keep_their_bits() {
    let isas = avx2_isas();
    if !Isa::best().is_avx2() {
        return;
    }
    // Q/K/V-like: both types, rows not a multiple of one another, one width. Each matrix's
    // outputs from the shared loop must be the bits of its own call, whichever thread took
    // which of the sub-tiles, where one matrix's last sub-tile and the next one's first meet.
    let mut rng = StdRng::seed_from_u64(19);
    let cols = 512;
    let shapes = [
        (GgmlType::Q4_K, 80),
        (GgmlType::Q6_K, 16),
        (GgmlType::Q4_K, 48),
    ];
    let datas: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, rows)| matrix(&mut rng, ty, rows, cols))
        .collect();
    let parts: Vec<RepackPart> = shapes
        .iter()
        .zip(&datas)
        .map(|(&(ty, rows), data)| RepackPart {
            ty,
            data,
            rows,
            cols,
        })
        .collect();
    let ms: Vec<KRows16> = KRows16::repack_all(&parts, |_, _| {})
        .into_iter()
        .map(|m| m.expect("Q4_K and Q6_K repack"))
        .collect();
    for n in [1, 3, 17, 40] {
        let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
        let pool1 = ThreadPool::new(1);
        let mut acts = Activations::new();
        acts.quantize(&pool1, GgmlType::Q4_K, &x, n, cols);
        for &isa in &isas {
            let want: Vec<Vec<f32>> = ms
                .iter()
                .map(|m| {
                    let mut out = vec![0.0; n * m.rows()];
                    m.matmul_acts_isa(isa, &pool1, &acts, &mut out);
                    out
                })
                .collect();
            for threads in [1, 2, 3] {
                let mut outs: Vec<Vec<f32>> = ms.iter().map(|m| vec![0.0; n * m.rows()]).collect();
                let mut jobs: Vec<(&KRows16, &mut [f32])> = ms
                    .iter()
                    .zip(outs.iter_mut())
                    .map(|(m, o)| (m, &mut o[..]))
                    .collect();
                KRows16::matmul_acts_many_isa(isa, &ThreadPool::new(threads), &acts, &mut jobs);
                for (i, (got, want)) in outs.iter().zip(&want).enumerate() {
                    let same = got
                        .iter()
                        .zip(want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "matrix {i} n={n} {isa:?} t={threads}: not its own call's bits"
                    );
                }
            }
        }
    }
}
