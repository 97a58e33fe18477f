//! `Q8Rows8` (a Q8_0 matrix repacked eight rows at a time) gives the same bits on every
//! instruction set, batch size and thread count, and within float rounding of `matmul` on the
//! matrix it came from (its own summation order: one float step per block).

use ferrox_kernels::{
    dequantize_row, matmul_isa, quantize_row, row_bytes, GgmlType, Isa, Q8Rows8, ThreadPool,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn q8_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rows {
        let row: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
        quantize_row(GgmlType::Q8_0, &row, &mut bytes);
    }
    // Quants of -128 are legal in a file (llama.cpp never writes them); keep some.
    for b in bytes.chunks_exact_mut(34).step_by(7) {
        b[5] = 0x80;
    }
    bytes
}

#[test]
fn repacked_matmul_is_invariant_and_close_to_matmul() {
    let mut rng = StdRng::seed_from_u64(8);
    let isas: Vec<Isa> = [Isa::scalar(), Isa::best()].into_iter().collect();
    // 160 columns: five blocks, not a multiple of four.
    for (rows, cols) in [(8, 32), (72, 160), (520, 640)] {
        let bytes = q8_matrix(&mut rng, rows, cols);
        let mut released = Vec::new();
        let m = Q8Rows8::repack(&bytes, rows, cols, |r| released.push(r)).expect("repackable");
        // The release callback covers the source exactly once, in order.
        assert_eq!(released.first().map(|r| r.start), Some(0));
        assert!(released.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(released.last().map(|r| r.end), Some(bytes.len()));
        let w = ferrox_kernels::QMatrix::new(GgmlType::Q8_0, &bytes, rows, cols);
        for n in [1, 2, 3, 4, 5, 9] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect();
            // The scalar reference, one activation row at a time: what every batch size,
            // instruction set and thread count must reproduce bit for bit.
            let mut alone = vec![0.0; n * rows];
            for r in 0..n {
                let pool = ThreadPool::new(1);
                let xr = &x[r * cols..(r + 1) * cols];
                m.matmul_isa(
                    Isa::scalar(),
                    &pool,
                    xr,
                    1,
                    &mut alone[r * rows..(r + 1) * rows],
                );
            }
            let pool = ThreadPool::new(2);
            let mut legacy = vec![0.0; n * rows];
            matmul_isa(Isa::scalar(), &pool, &w, &x, n, &mut legacy);
            for (a, b) in alone.iter().zip(&legacy) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{rows}x{cols} n={n}: {a} vs matmul's {b}"
                );
            }
            for &isa in &isas {
                for threads in [1, 2, 3] {
                    let pool = ThreadPool::new(threads);
                    let mut got = vec![0.0; n * rows];
                    m.matmul_isa(isa, &pool, &x, n, &mut got);
                    let same = alone
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{rows}x{cols} n={n} {isa:?} threads={threads}");
                }
            }
        }
        for o in [0, rows / 2, rows - 1] {
            let mut want = vec![0.0; cols];
            dequantize_row(
                GgmlType::Q8_0,
                &bytes[o * row_bytes(GgmlType::Q8_0, cols)..],
                &mut want,
            );
            let mut got = vec![0.0; cols];
            m.dequantize_row(o, &mut got);
            assert_eq!(want, got, "row {o}");
        }
    }
}

#[test]
fn shapes_that_do_not_fit_are_refused() {
    let mut rng = StdRng::seed_from_u64(9);
    let bytes = q8_matrix(&mut rng, 12, 64);
    assert!(Q8Rows8::repack(&bytes, 12, 64, |_| {}).is_none(), "12 rows");
    assert!(
        Q8Rows8::repack(&bytes[..34 * 2 * 8], 12, 64, |_| {}).is_none(),
        "short data"
    );
    assert!(Q8Rows8::repack(&bytes[..34 * 2 * 8], 8, 64, |_| {}).is_some());
}
