//! [`Q8Rows8`]: a Q8_0 matrix repacked eight rows at a time, in the lane-major order of
//! `gemm8`, for the matrix a decode step streams the most (the default model's output head:
//! 178 MB of the 246 MB it reads per token).
//!
//! Why: at n = 1 a thread's time is its compute plus its memory stalls (measured: one thread
//! on the head reads 6.8 GB/s; a plain read reaches ~10 GB/s and the kernel from cache
//! ~22 GB/s, and 1/(1/10 + 1/22) ≈ 6.9). So instructions per block buy bandwidth. In the
//! file's layout each 34-byte block carries its own f16 scale, the kernel gathers scales with
//! scalar loads and inserts, and half the 32-byte quant loads straddle a cache line.
//! Repacked, a group of eight rows keeps, per block column, the eight f16 scales side by side
//! (one load and one conversion for eight blocks) and the quants as eight aligned 32-byte
//! [`Chunks`] (chunk `k`: values `4k..4k+4` of each row), which `gemm8::dot8` multiplies with
//! no per-row scale or horizontal work; several activation rows reuse the group from L1.
//! The copy has the original's size (34 bytes per block); it replaces the file's pages in RSS
//! (the caller releases them as it repacks); it is used only where it pays: Q8_0 matrices
//! with a multiple of eight rows.
//!
//! Numbers are unchanged: each (weight row, block) lane goes through exactly the operations of
//! `legacy::add_block_scalar` in the same order, so a row's result is bit-identical to
//! [`crate::matmul`] on the original matrix, on either instruction set. Pinned by
//! `tests/rows8.rs`.

use crate::block::Isa;
use crate::legacy::{add_block_scalar, finish, BlockQ8_0, BlockQ8x4, QK};
use crate::matmul::{run_kernel, with_quantized, Job, RowKernel};
use crate::pool::ThreadPool;
use crate::GgmlType;

/// Weight rows per group.
pub(crate) const GROUP: usize = 8;

/// One block column of a group in lane-major order: chunk `k` holds values `4k..4k+4` of
/// each row (bytes `4i..4i+4` for row `i`). Also `gemm8`'s decoded form.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub(crate) struct Chunks(pub [[u8; 32]; 8]);

impl Chunks {
    /// Value `e` of row `i`.
    fn get(&self, i: usize, e: usize) -> u8 {
        self.0[e / 4][4 * i + e % 4]
    }
}

/// A Q8_0 matrix of `rows` (a multiple of eight) by `cols`, eight rows interleaved.
/// Entry `g * bpr + j` of `scales` and `chunks` is block column `j` of rows `8g..8g+8`.
pub struct Q8Rows8 {
    rows: usize,
    cols: usize,
    bpr: usize,
    scales: Vec<[u16; GROUP]>,
    chunks: Vec<Chunks>,
}

impl std::fmt::Debug for Q8Rows8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Q8Rows8({}x{})", self.rows, self.cols)
    }
}

impl Q8Rows8 {
    /// Repacks `data` (`rows` Q8_0 rows of `cols` values, as in GGUF), or `None` when the
    /// shape does not fit (rows not a multiple of eight, or a byte count that does not match).
    /// `done(bytes)` is called after each chunk of `data` has been copied, with the byte range
    /// of `data` it covered, so that a caller holding `data` in a mapped file can release those
    /// pages at once and the repack never holds two copies of the matrix.
    pub fn repack(
        data: &[u8],
        rows: usize,
        cols: usize,
        mut done: impl FnMut(std::ops::Range<usize>),
    ) -> Option<Q8Rows8> {
        if rows == 0 || !rows.is_multiple_of(GROUP) || !cols.is_multiple_of(QK) {
            return None;
        }
        let bpr = cols / QK;
        let block = size_of::<BlockQ8_0>();
        let row_bytes = bpr * block;
        if data.len() != rows * row_bytes {
            return None;
        }
        let groups = rows / GROUP;
        let mut scales = Vec::with_capacity(groups * bpr);
        let mut chunks = Vec::with_capacity(groups * bpr);
        // About 4 MB of the source per chunk.
        let chunk_groups = ((4 << 20) / (GROUP * row_bytes)).max(1);
        let mut g = 0;
        while g < groups {
            let g_end = (g + chunk_groups).min(groups);
            for gi in g..g_end {
                for j in 0..bpr {
                    let mut s = [0u16; GROUP];
                    let mut c = Chunks([[0; 32]; 8]);
                    for (i, scale) in s.iter_mut().enumerate() {
                        let at = (gi * GROUP + i) * row_bytes + j * block;
                        let b = &data[at..at + block];
                        *scale = u16::from_le_bytes([b[0], b[1]]);
                        for (e, &q) in b[2..].iter().enumerate() {
                            c.0[e / 4][4 * i + e % 4] = q;
                        }
                    }
                    scales.push(s);
                    chunks.push(c);
                }
            }
            done(g * GROUP * row_bytes..g_end * GROUP * row_bytes);
            g = g_end;
        }
        Some(Q8Rows8 {
            rows,
            cols,
            bpr,
            scales,
            chunks,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Block `j` of row `o`, as it was in the file.
    fn block(&self, o: usize, j: usize) -> BlockQ8_0 {
        let e = (o / GROUP) * self.bpr + j;
        BlockQ8_0 {
            d: self.scales[e][o % GROUP].to_le_bytes(),
            qs: std::array::from_fn(|v| self.chunks[e].get(o % GROUP, v) as i8),
        }
    }

    /// Row `o` dequantized into `dst` (`cols` values).
    pub fn dequantize_row(&self, o: usize, dst: &mut [f32]) {
        assert_eq!(dst.len(), self.cols, "dst must hold one row");
        let blocks: Vec<BlockQ8_0> = (0..self.bpr).map(|j| self.block(o, j)).collect();
        // SAFETY: BlockQ8_0 is a plain byte struct (size 34, align 1).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                blocks.as_ptr().cast::<u8>(),
                std::mem::size_of_val(&*blocks),
            )
        };
        crate::dequantize_row(GgmlType::Q8_0, bytes, dst);
    }

    /// `out[r * rows + o] = dot(W[o], x[r])`, bit-identical to [`crate::matmul`] on the
    /// matrix this was repacked from.
    pub fn matmul(&self, pool: &ThreadPool, x: &[f32], n: usize, out: &mut [f32]) {
        self.matmul_isa(Isa::best(), pool, x, n, out)
    }

    /// [`Q8Rows8::matmul`] on a chosen instruction set.
    pub fn matmul_isa(&self, isa: Isa, pool: &ThreadPool, x: &[f32], n: usize, out: &mut [f32]) {
        assert_eq!(x.len(), n * self.cols, "x must hold n rows of cols values");
        assert_eq!(
            out.len(),
            n * self.rows,
            "out must hold n rows of rows values"
        );
        let kernel = Kernel { m: self, isa };
        with_quantized(pool, GgmlType::Q8_0, x, n, self.cols, |acts| {
            let (units, upr) = acts.view::<BlockQ8x4>();
            run_kernel(pool, &kernel, units, upr, n, out);
        });
    }

    /// The scalar reference: row `o` times `x`, block by block as `legacy` does it.
    fn dot_scalar(&self, o: usize, x: &[BlockQ8x4]) -> f32 {
        let (mut acc, mut accm) = ([0.0f32; 8], [0.0f32; 4]);
        for j in 0..self.bpr {
            add_block_scalar(&self.block(o, j), j, x, &mut acc, &mut accm);
        }
        finish::<BlockQ8_0>(acc, accm)
    }
}

struct Kernel<'a> {
    m: &'a Q8Rows8,
    isa: Isa,
}

impl RowKernel for Kernel<'_> {
    type Act = BlockQ8x4;

    fn rows(&self) -> usize {
        self.m.rows
    }

    fn row_bytes(&self) -> usize {
        self.m.bpr * size_of::<BlockQ8_0>()
    }

    fn row_align(&self) -> usize {
        GROUP
    }

    fn subtile(&self, job: &Job<BlockQ8x4>, o0: usize, o1: usize) {
        let m = self.m;
        for r in 0..job.n() {
            assert!(
                job.row(r).len() >= m.bpr.div_ceil(4),
                "activation row too short"
            );
        }
        for g in o0 / GROUP..o1.div_ceil(GROUP) {
            let cols = g * m.bpr..(g + 1) * m.bpr;
            for r in 0..job.n() {
                let x = job.row(r);
                let res: [f32; GROUP] = {
                    #[cfg(target_arch = "x86_64")]
                    if self.isa.is_avx2() {
                        // SAFETY: an Avx2 `Isa` exists only if the CPU has AVX2, FMA and F16C;
                        // `x` covers every block column (checked above).
                        unsafe {
                            crate::gemm8::dot8::<BlockQ8_0, _>(
                                &m.chunks[cols.clone()],
                                &m.scales[cols.clone()],
                                &[],
                                x,
                                r == 0,
                            )
                        }
                    } else {
                        std::array::from_fn(|i| m.dot_scalar(g * GROUP + i, x))
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    std::array::from_fn(|i| m.dot_scalar(g * GROUP + i, x))
                };
                for (i, &v) in res.iter().enumerate() {
                    // SAFETY: rows `8g..8g+8` lie in this task's sub-tile (sub-tiles start at
                    // multiples of eight rows and the matrix has a multiple of eight rows).
                    unsafe { job.put(r, g * GROUP + i, v) };
                }
            }
        }
    }
}
