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
//! [`Chunks`] (chunk `k`: values `4k..4k+4` of each row, `gemm8`'s decoded layout), which
//! the kernel multiplies with no per-row scale or horizontal work; several activation rows
//! reuse the group from L1.
//! The copy has the original's size (34 bytes per block); it replaces the file's pages in RSS
//! (the caller releases them as it repacks); it is used only where it pays: Q8_0 matrices
//! with a multiple of eight rows. Its quants ask for transparent huge pages (`hugepages`):
//! the default model's tg128 on Zen 4 went from 98.8, 87.6, 87.0, 100.5 to 105.6, 98.3,
//! 97.5, 92.5 (interleaved, 2026-12-03).
//!
//! Numbers: the head has its own summation order, one float step per block: each
//! (weight row, block) contributes its exact integer dot `p` as `acc = fma(d dx, p, acc)`,
//! blocks in order, one accumulator per (weight row, activation row)
//! ([`Q8Rows8::dot_scalar`]). The file's kernels (`legacy`) take one float step per four
//! products, as ggml does; here the eight chunks of a block column add up in integers
//! (exact, any order), so a block costs one `cvt` + `fmadd` per activation row instead of
//! eight, and four activation rows per pass share each chunk load and its `abs`. One
//! accumulator per row rather than four lanes (`j % 4`, then a fold) keeps all of a pass's
//! sums in registers: 262144 x 640 at n = 16, ratio to the file-layout kernel in one run
//! ~0.60 -> ~0.51. Measured per (block, weight row, activation row) from L1, Zen 3: ~1.05 ns
//! the legacy way, ~0.75 ns this way (before the single accumulator). The result differs from
//! [`crate::matmul`] on the original matrix by float rounding only (the same integers,
//! grouped differently; pinned by `tests/rows8.rs`), which moves logits, not layers'
//! activations, so the model's fidelity is unchanged (golden tests). Every batch size and
//! instruction set runs this same order, so batch invariance holds; the AVX2 kernel is
//! bit-identical to the scalar reference.

use crate::acts::with_quantized;
use crate::block::f16_to_f32;
use crate::block::Isa;
use crate::legacy::{BlockQ8_0, BlockQ8x4, QK};
use crate::pool::ThreadPool;
use crate::tiling::{run_kernel, Job, RowKernel};
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
    /// The memory a multiply streams: the scales and the chunks.
    pub fn buffers(&self) -> [&[u8]; 2] {
        // SAFETY: both are arrays of plain integers, read as bytes.
        unsafe {
            [
                std::slice::from_raw_parts(
                    self.scales.as_ptr().cast(),
                    std::mem::size_of_val(&self.scales[..]),
                ),
                std::slice::from_raw_parts(
                    self.chunks.as_ptr().cast(),
                    std::mem::size_of_val(&self.chunks[..]),
                ),
            ]
        }
    }

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
        crate::hugepages::advise(&chunks);
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

    /// `out[r * rows + o] = dot(W[o], x[r])`, in this type's summation order (see the module
    /// doc): within float rounding of [`crate::matmul`] on the matrix this was repacked from.
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

    /// The scalar reference: row `o` times `x` (which covers every block column), one float
    /// step per block (see the module doc).
    fn dot_scalar(&self, o: usize, x: &[BlockQ8x4]) -> f32 {
        let mut acc = 0.0f32;
        for j in 0..self.bpr {
            let b = self.block(o, j);
            let (u, k) = (&x[j / 4], j % 4);
            let s = f16_to_f32(b.d) * u.d[k];
            let p: i32 =
                b.qs.iter()
                    .zip(&u.qs[k])
                    .map(|(&w, &x)| w as i32 * x as i32)
                    .sum();
            // |p| <= 32 * 128 * 127 < 2^24: exact in f32.
            acc = s.mul_add(p as f32, acc);
        }
        acc
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
        #[cfg(target_arch = "x86_64")]
        let vnni = self.isa.vnni256();
        for g in o0 / GROUP..o1.div_ceil(GROUP) {
            let cols = g * m.bpr..(g + 1) * m.bpr;
            let (chunks, scales) = (&m.chunks[cols.clone()], &m.scales[cols]);
            let put = |r: usize, res: [f32; GROUP]| {
                for (i, &v) in res.iter().enumerate() {
                    // SAFETY: rows `8g..8g+8` lie in this task's sub-tile (sub-tiles start at
                    // multiples of eight rows and the matrix has a multiple of eight rows).
                    unsafe { job.put(r, g * GROUP + i, v) };
                }
            };
            #[cfg(target_arch = "x86_64")]
            if self.isa.is_avx2() {
                // SAFETY: an Avx2 `Isa` exists only if the CPU has AVX2, FMA and F16C (and
                // the VNNI entry runs only where the `Isa` says the CPU has AVX-VNNI); every row covers
                // every block column (checked above).
                unsafe {
                    if vnni {
                        avx2::dot_rows_vnni(chunks, scales, job, put)
                    } else {
                        avx2::dot_rows(chunks, scales, job, put)
                    }
                };
                continue;
            }
            for r in 0..job.n() {
                put(
                    r,
                    std::array::from_fn(|i| m.dot_scalar(g * GROUP + i, job.row(r))),
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Chunks, GROUP};
    use crate::block::prefetch_ahead;
    use crate::dot4::{broadcast4, Dot4, Pairs, Vnni};
    use crate::legacy::BlockQ8x4;
    use crate::tiling::Job;
    use std::arch::x86_64::*;

    /// [`dot_group`] over every activation row of `job`: four rows per pass, then two, then
    /// one; `put(r, dots)` receives row `r`'s eight dots. The first pass streams the group
    /// from memory (prefetch), the later ones find it in L1.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available; every row of `job` covers every block column.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows(
        chunks: &[Chunks],
        scales: &[[u16; GROUP]],
        job: &Job<BlockQ8x4>,
        put: impl Fn(usize, [f32; GROUP]),
    ) {
        // SAFETY: as the caller promised.
        unsafe { dot_rows_with::<Pairs>(chunks, scales, job, &put) }
    }

    /// [`dot_rows`] with `vpdpbusd` for the integer step (the same bits).
    ///
    /// # Safety
    /// As [`dot_rows`], and AVX-VNNI must be available.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(super) unsafe fn dot_rows_vnni(
        chunks: &[Chunks],
        scales: &[[u16; GROUP]],
        job: &Job<BlockQ8x4>,
        put: impl Fn(usize, [f32; GROUP]),
    ) {
        // SAFETY: as the caller promised.
        unsafe { dot_rows_with::<Vnni>(chunks, scales, job, &put) }
    }

    /// The body of both entries, inlined into each.
    #[inline(always)]
    unsafe fn dot_rows_with<D: Dot4>(
        chunks: &[Chunks],
        scales: &[[u16; GROUP]],
        job: &Job<BlockQ8x4>,
        put: &impl Fn(usize, [f32; GROUP]),
    ) {
        let mut r = 0;
        while r < job.n() {
            r += match job.n() - r {
                // SAFETY (all three): as the caller promised.
                4.. => unsafe { pass::<4, D>(chunks, scales, job, r, put) },
                2..4 => unsafe { pass::<2, D>(chunks, scales, job, r, put) },
                _ => unsafe { pass::<1, D>(chunks, scales, job, r, put) },
            };
        }
    }

    /// Activation rows `r..r + R` through [`dot_group`]; returns `R`.
    #[inline(always)]
    unsafe fn pass<const R: usize, D: Dot4>(
        chunks: &[Chunks],
        scales: &[[u16; GROUP]],
        job: &Job<BlockQ8x4>,
        r: usize,
        put: &impl Fn(usize, [f32; GROUP]),
    ) -> usize {
        // (A loop, not `array::from_fn`: its closure would not be inlined here.)
        let mut xs = [job.row(r); R];
        for (i, x) in xs.iter_mut().enumerate().skip(1) {
            *x = job.row(r + i);
        }
        // SAFETY: as the caller promised.
        let res = unsafe { dot_group::<R, D>(chunks, scales, xs, r == 0) };
        for (i, v) in res.into_iter().enumerate() {
            put(r + i, v);
        }
        R
    }

    /// The eight dots of a group (`chunks` and f16 `scales` per block column) with each of
    /// the `R` activation rows `xs`, in [`super::Q8Rows8::dot_scalar`]'s order: per block
    /// column, eight `maddubs` + `madd` (|w| times x with w's sign) summed in i32 give each
    /// row's exact block dot; one `cvt` + `fmadd` per block and activation row into that
    /// row's single accumulator.
    /// `prefetch`: hint the memory ahead of `chunks` (the group streams from memory).
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[inline(always)]
    pub(super) unsafe fn dot_group<const R: usize, D: Dot4>(
        chunks: &[Chunks],
        scales: &[[u16; GROUP]],
        xs: [&[BlockQ8x4]; R],
        prefetch: bool,
    ) -> [[f32; GROUP]; R] {
        let bpr = chunks.len();
        assert_eq!(scales.len(), bpr, "one scale row per block column");
        for x in &xs {
            assert!(x.len() >= bpr.div_ceil(4), "activation row too short");
        }
        // One accumulator per (weight row, activation row), eight weight rows wide.
        let mut acc = [_mm256_setzero_ps(); R];
        for j in 0..bpr {
            let c = &chunks[j];
            if prefetch {
                prefetch_ahead(c.0.as_ptr().cast(), size_of::<Chunks>());
            }
            let (g, kk) = (j / 4, j % 4);
            let mut isum = [_mm256_setzero_si256(); R];
            for k in 0..8 {
                // SAFETY: 32 readable, 32-byte aligned bytes.
                let w = unsafe { _mm256_load_si256(c.0[k].as_ptr().cast()) };
                let aw = _mm256_abs_epi8(w);
                for r in 0..R {
                    let xb = broadcast4(&xs[r][g].qs[kk], k);
                    // SAFETY: the features of `D`, as the caller promised.
                    isum[r] = unsafe { D::dot4(isum[r], aw, _mm256_sign_epi8(xb, w)) };
                }
            }
            // SAFETY: 16 readable bytes of f16 bits.
            let dw = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(scales[j].as_ptr().cast())) };
            for r in 0..R {
                let s = _mm256_mul_ps(dw, _mm256_set1_ps(xs[r][g].d[kk]));
                acc[r] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum[r]), acc[r]);
            }
        }
        let mut out = [[0.0f32; GROUP]; R];
        for r in 0..R {
            // SAFETY: 8 writable floats.
            unsafe { _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]) };
        }
        out
    }
}
