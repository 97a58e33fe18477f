//! [`Q8Rows8`]: a Q8_0 matrix repacked eight rows at a time, for the matrix a decode step
//! streams the most (the default model's output head: 178 MB of the 246 MB it reads per
//! token).
//!
//! Why: at n = 1 a thread's time is its compute plus its memory stalls (measured: one thread
//! on the head reads 6.8 GB/s; a plain read reaches ~10 GB/s and the kernel from cache
//! ~22 GB/s, and 1/(1/10 + 1/22) ≈ 6.9). So instructions per block buy bandwidth. In the
//! file's layout each 34-byte block carries its own f16 scale, and the kernel gathers four
//! scales with scalar loads and inserts, and half the 32-byte quant loads straddle a cache
//! line. Repacked, a group of eight rows keeps, per block column, the eight f16 scales side
//! by side (one 16-byte load and one conversion for eight blocks) and the eight quant vectors
//! 32-byte aligned. The copy has the original's size (34 bytes per block), it replaces the
//! file's pages in RSS (the caller releases them as it repacks), and it is used only where it
//! pays: Q8_0 matrices with a multiple of eight rows.
//!
//! Numbers are unchanged: each (weight row, block) pair goes through exactly the operations
//! of `legacy_avx2` (and of the scalar `legacy::add_block_scalar`) in the same order, so a
//! row's result is bit-identical to [`crate::matmul`] on the original matrix, on either
//! instruction set. Pinned by `tests/rows8.rs`.

use crate::block::{prefetch_ahead, Isa};
use crate::legacy::{add_block_scalar, finish, BlockQ8_0, BlockQ8x4, QK};
use crate::matmul::{run_kernel, Activations, RowKernel};
use crate::pool::ThreadPool;
use crate::GgmlType;

/// Weight rows per group.
pub const GROUP: usize = 8;

/// The quants of one block column of a group: row `i`'s 32 values in `q[i]`.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Quants8 {
    q: [[i8; QK]; GROUP],
}

/// A Q8_0 matrix of `rows` (a multiple of [`GROUP`]) by `cols`, eight rows interleaved.
/// Entry `g * bpr + j` of `scales` and `quants` is block column `j` of rows `8g..8g+8`.
pub struct Q8Rows8 {
    rows: usize,
    cols: usize,
    bpr: usize,
    scales: Vec<[u16; GROUP]>,
    quants: Vec<Quants8>,
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
        let row_bytes = bpr * size_of::<BlockQ8_0>();
        if data.len() != rows * row_bytes {
            return None;
        }
        let groups = rows / GROUP;
        let mut scales = Vec::with_capacity(groups * bpr);
        let mut quants = Vec::with_capacity(groups * bpr);
        // About 4 MB of the source per chunk.
        let chunk_groups = ((4 << 20) / (GROUP * row_bytes)).max(1);
        let mut g = 0;
        while g < groups {
            let g_end = (g + chunk_groups).min(groups);
            for gi in g..g_end {
                for j in 0..bpr {
                    let mut s = [0u16; GROUP];
                    let mut q = Quants8 {
                        q: [[0; QK]; GROUP],
                    };
                    for (i, (scale, quants)) in s.iter_mut().zip(&mut q.q).enumerate() {
                        let at = (gi * GROUP + i) * row_bytes + j * size_of::<BlockQ8_0>();
                        let b = &data[at..at + size_of::<BlockQ8_0>()];
                        *scale = u16::from_le_bytes([b[0], b[1]]);
                        for (dst, &src) in quants.iter_mut().zip(&b[2..]) {
                            *dst = src as i8;
                        }
                    }
                    scales.push(s);
                    quants.push(q);
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
            quants,
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
            qs: self.quants[e].q[o % GROUP],
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
                blocks.len() * size_of::<BlockQ8_0>(),
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
        let mut acts = Activations::new();
        acts.quantize(pool, GgmlType::Q8_0, x, n, self.cols);
        let kernel = Kernel { m: self, isa };
        let (units, upr) = acts.view::<BlockQ8x4>();
        run_kernel(pool, &kernel, units, upr, n, out);
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

    fn compute<const R: usize>(
        &self,
        o0: usize,
        o1: usize,
        xs: [&[BlockQ8x4]; R],
        out: &mut [[f32; R]],
    ) {
        let m = self.m;
        for x in &xs {
            assert!(x.len() >= m.bpr.div_ceil(4), "activation row too short");
        }
        debug_assert!(o0.is_multiple_of(GROUP) && (o1.is_multiple_of(GROUP) || o1 == m.rows));
        for g in o0 / GROUP..o1 / GROUP {
            let (s, q) = (
                &m.scales[g * m.bpr..(g + 1) * m.bpr],
                &m.quants[g * m.bpr..(g + 1) * m.bpr],
            );
            let res = &mut out[(g * GROUP - o0)..(g * GROUP - o0) + GROUP];
            #[cfg(target_arch = "x86_64")]
            if self.isa.is_avx2() {
                // SAFETY: an Avx2 `Isa` exists only if the CPU has AVX2, FMA and F16C.
                unsafe { avx2::group(s, q, xs, res) };
                continue;
            }
            for (i, row) in res.iter_mut().enumerate() {
                *row = xs.map(|x| {
                    let (mut acc, mut accm) = ([0.0f32; 8], [0.0f32; 4]);
                    for j in 0..m.bpr {
                        add_block_scalar(&m.block(g * GROUP + i, j), j, x, &mut acc, &mut accm);
                    }
                    finish::<BlockQ8_0>(acc, accm)
                });
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// The eight rows of one group times `R` activation rows: `out[i][r]`. Per (row, block):
    /// `fma(d_w * d_x, cvt(madd(maddubs(|w|, sign(x, w)), 1)), lanes)`, as `legacy_avx2`.
    /// One activation row takes all eight weight rows at once (eight accumulators); pairs of
    /// activation rows take four weight rows at a time, so each loaded weight vector serves
    /// two rows with the same eight accumulators.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available; every `xs[r]` covers `scales.len()` blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn group<const R: usize>(
        scales: &[[u16; GROUP]],
        quants: &[Quants8],
        xs: [&[BlockQ8x4]; R],
        out: &mut [[f32; R]],
    ) {
        let mut r = 0;
        while r + 2 <= R {
            for half in 0..2 {
                let res = part::<2, 4>(scales, quants, [xs[r], xs[r + 1]], 4 * half, r == 0);
                for (i, v) in res.iter().enumerate() {
                    out[4 * half + i][r] = v[0];
                    out[4 * half + i][r + 1] = v[1];
                }
            }
            r += 2;
        }
        if r < R {
            let res = part::<1, GROUP>(scales, quants, [xs[r]], 0, r == 0);
            for (i, v) in res.iter().enumerate() {
                out[i][r] = v[0];
            }
        }
    }

    /// Weight rows `first..first + H` of the group times `A` activation rows.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn part<const A: usize, const H: usize>(
        scales: &[[u16; GROUP]],
        quants: &[Quants8],
        xs: [&[BlockQ8x4]; A],
        first: usize,
        prefetch: bool,
    ) -> [[f32; A]; H] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); A]; H];
        for (j, (s, q)) in scales.iter().zip(quants).enumerate() {
            if prefetch && first == 0 {
                prefetch_ahead(q.q.as_ptr().cast(), size_of::<Quants8>());
                prefetch_ahead(s.as_ptr().cast(), size_of::<[u16; GROUP]>());
            }
            let k = j % 4;
            // SAFETY: 16 readable bytes of scales; 32 of quants (aligned); 32 of x.
            unsafe {
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast()));
                let mut sc = [[0.0f32; GROUP]; A];
                let mut xv = [_mm256_setzero_si256(); A];
                for a in 0..A {
                    let u = &xs[a][j / 4];
                    _mm256_storeu_ps(
                        sc[a].as_mut_ptr(),
                        _mm256_mul_ps(dw, _mm256_set1_ps(u.d[k])),
                    );
                    xv[a] = _mm256_loadu_si256(u.qs[k].as_ptr().cast());
                }
                for i in 0..H {
                    let w = _mm256_load_si256(q.q[first + i].as_ptr().cast());
                    let aw = _mm256_abs_epi8(w);
                    for a in 0..A {
                        let p = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[a], w)),
                            ones,
                        );
                        acc[i][a] = _mm256_fmadd_ps(
                            _mm256_broadcast_ss(&sc[a][first + i]),
                            _mm256_cvtepi32_ps(p),
                            acc[i][a],
                        );
                    }
                }
            }
        }
        let mut res = [[0.0f32; A]; H];
        for i in 0..H {
            for a in 0..A {
                let mut lane = [0.0f32; 8];
                // SAFETY: 8 writable floats.
                unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), acc[i][a]) };
                res[i][a] = finish::<BlockQ8_0>(lane, [0.0; 4]);
            }
        }
        res
    }
}
