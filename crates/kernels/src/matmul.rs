//! `matmul`: a quantized weight matrix times a batch of f32 activation rows.
//!
//! Shape of the work: each activation row is quantized once into the format the weight type
//! multiplies with ([`Activations`], `acts.rs`). The weight rows are split into one contiguous
//! range per thread (`tiling.rs`, the driver every layout runs on). A thread walks its range in
//! sub-tiles of about 32 KB (so they
//! stay in L1/L2) and, for each sub-tile, runs the multi-row kernel over all its weight rows
//! for four activation rows at a time. Each weight block is thus read from memory once per
//! call and decoded once per four activation rows, and the kernel loops over weight rows
//! inside one `target_feature` function (a call per row cost ~10% at n = 1).
//!
//! Invariant (batch invariance; the scheduler relies on it): `out[r][o]` is the same bits
//! whatever `n` is, whatever the other rows hold and whatever the thread count. It holds
//! because (1) a row's activation quantization depends only on that row, (2) the kernels'
//! per-row operation sequence does not depend on how many rows they process together, and
//! (3) tiling only decides which thread computes `(o, r)`, never how. Pinned by
//! `tests/matmul.rs::batch_and_thread_invariance`.

use crate::acts::{with_quantized, ActKind, ActStorage, Activations};
use crate::block::{as_blocks, dot_rows_multi, Isa, WeightBlock};
use crate::codebook::{BlockIq4Nl, BlockIq4Xs, BlockMxfp4};
use crate::float::{Bf16Le, F16Le, F32Le};
use crate::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use crate::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
use crate::pool::ThreadPool;
use crate::tiling::{run_kernel, Job, RowKernel, MAX_SUBTILE_ROWS};
use crate::GgmlType;

/// A row-major weight matrix as stored in GGUF: `rows` output features of `cols` values
/// each (`cols` = the tensor's `dims[0]`); `data` is `rows * row_bytes(ty, cols)` bytes.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl<'a> QMatrix<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` values of `ty`.
    pub fn new(ty: GgmlType, data: &'a [u8], rows: usize, cols: usize) -> QMatrix<'a> {
        let m = QMatrix {
            ty,
            data,
            rows,
            cols,
        };
        m.validate();
        m
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        crate::row_bytes(self.ty, self.cols)
    }

    /// The bytes of row `o`.
    pub fn row(&self, o: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[o * rb..(o + 1) * rb]
    }

    fn validate(&self) {
        assert!(
            self.cols.is_multiple_of(self.ty.block_elems()),
            "{} rows need a multiple of {} values, got {}",
            self.ty.name(),
            self.ty.block_elems(),
            self.cols
        );
        assert_eq!(
            self.data.len(),
            self.rows * self.row_bytes(),
            "{}x{} {} matrix needs {} bytes",
            self.rows,
            self.cols,
            self.ty.name(),
            self.rows * self.row_bytes()
        );
    }
}

/// `out[r * w.rows + o] = dot(W[o], x[r])` for the `n` rows of `x` (each `w.cols` values).
/// Quantizes each row of `x` once (format chosen by `w.ty`), then multiplies on the pool.
/// Batch invariant (see the module doc).
pub fn matmul(pool: &ThreadPool, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    matmul_isa(Isa::best(), pool, w, x, n, out)
}

/// [`matmul`] on a chosen instruction set (tests compare the scalar and AVX2 paths).
pub fn matmul_isa(isa: Isa, pool: &ThreadPool, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols, "x must hold n rows of w.cols values");
    if ActKind::for_weights(w.ty) == ActKind::F32 {
        return dispatch(isa, pool, w, Input::F32(x), n, out);
    }
    with_quantized(pool, w.ty, x, n, w.cols, |acts| {
        dispatch(isa, pool, w, Input::Acts(acts), n, out)
    })
}

/// [`matmul`] with activations already quantized (for `w.ty`'s [`ActKind`]).
pub fn matmul_acts(pool: &ThreadPool, w: &QMatrix, acts: &Activations, out: &mut [f32]) {
    matmul_acts_isa(Isa::best(), pool, w, acts, out)
}

/// [`matmul_acts`] on a chosen instruction set.
pub fn matmul_acts_isa(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &Activations,
    out: &mut [f32],
) {
    assert_eq!(
        acts.cols(),
        w.cols,
        "activations have {} values per row, W has {}",
        acts.cols(),
        w.cols
    );
    dispatch(isa, pool, w, Input::Acts(acts), acts.n_rows(), out)
}

enum Input<'a> {
    F32(&'a [f32]),
    Acts(&'a Activations),
}

fn dispatch(isa: Isa, pool: &ThreadPool, w: &QMatrix, x: Input, n: usize, out: &mut [f32]) {
    w.validate();
    assert_eq!(
        out.len(),
        n * w.rows,
        "out must hold n rows of w.rows values"
    );
    match w.ty {
        GgmlType::F32 => run::<F32Le>(isa, pool, w, x, n, out),
        GgmlType::F16 => run::<F16Le>(isa, pool, w, x, n, out),
        GgmlType::BF16 => run::<Bf16Le>(isa, pool, w, x, n, out),
        GgmlType::Q4_0 => run_legacy::<BlockQ4_0>(isa, pool, w, x, n, out),
        GgmlType::Q4_1 => run_legacy::<BlockQ4_1>(isa, pool, w, x, n, out),
        GgmlType::Q5_0 => run_legacy::<BlockQ5_0>(isa, pool, w, x, n, out),
        GgmlType::Q5_1 => run_legacy::<BlockQ5_1>(isa, pool, w, x, n, out),
        GgmlType::Q8_0 => run_legacy::<BlockQ8_0>(isa, pool, w, x, n, out),
        GgmlType::Q8_1 => run_legacy::<BlockQ8_1>(isa, pool, w, x, n, out),
        GgmlType::Q2_K => run_k::<BlockQ2K>(isa, pool, w, x, n, out),
        GgmlType::Q3_K => run_k::<BlockQ3K>(isa, pool, w, x, n, out),
        GgmlType::Q4_K => run_k::<BlockQ4K>(isa, pool, w, x, n, out),
        GgmlType::Q5_K => run_k::<BlockQ5K>(isa, pool, w, x, n, out),
        GgmlType::Q6_K => run_k::<BlockQ6K>(isa, pool, w, x, n, out),
        GgmlType::IQ4_NL => run_legacy::<BlockIq4Nl>(isa, pool, w, x, n, out),
        GgmlType::MXFP4 => run_legacy::<BlockMxfp4>(isa, pool, w, x, n, out),
        GgmlType::IQ4_XS => run::<BlockIq4Xs>(isa, pool, w, x, n, out),
        GgmlType::IQ2_XXS => run::<crate::iquants::BlockIq2Xxs>(isa, pool, w, x, n, out),
        GgmlType::IQ2_XS => run::<crate::iquants::BlockIq2Xs>(isa, pool, w, x, n, out),
        GgmlType::IQ2_S => run::<crate::iquants::BlockIq2S>(isa, pool, w, x, n, out),
        GgmlType::IQ3_XXS => run::<crate::iquants::BlockIq3Xxs>(isa, pool, w, x, n, out),
        GgmlType::IQ3_S => run::<crate::iquants::BlockIq3S>(isa, pool, w, x, n, out),
        GgmlType::IQ1_S => run::<crate::iquants::BlockIq1S>(isa, pool, w, x, n, out),
        GgmlType::IQ1_M => run::<crate::iquants::BlockIq1M>(isa, pool, w, x, n, out),
        GgmlType::TQ1_0 => run::<crate::iquants::BlockTq1_0>(isa, pool, w, x, n, out),
        GgmlType::TQ2_0 => run::<crate::iquants::BlockTq2_0>(isa, pool, w, x, n, out),
        GgmlType::Q8_K => panic!("q8_K is an activation format; no matmul with q8_K weights"),
    }
}

/// Activation rows processed together by one kernel call (eight for `WeightBlock::WIDE`).
const ROWS_PER_KERNEL: usize = 4;
/// A 32-value format: from [`crate::gemm8::MIN_ROWS`] activation rows on, through a
/// lane-major kernel (same bits): `gemm16` on AVX-512, else `gemm8` (about twice the
/// row-major throughput); below that, [`run`].
#[cfg(target_arch = "x86_64")]
fn run_legacy<B: crate::legacy_avx2::LegacyAvx2 + Sync>(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    x: Input,
    n: usize,
    out: &mut [f32],
) {
    let (blocks, bpr, rows, row_bytes) =
        (as_blocks(w.data), w.cols / B::ELEMS, w.rows, w.row_bytes());
    if isa.is_avx512() && n >= crate::gemm16::MIN_ROWS {
        let kernel = crate::gemm16::Gemm16::<B> {
            blocks,
            bpr,
            rows,
            row_bytes,
        };
        return run_lane_major(pool, &kernel, x, n, out);
    }
    if isa.is_avx2() && n >= crate::gemm8::MIN_ROWS {
        let kernel = crate::gemm8::Gemm8::<B> {
            isa,
            blocks,
            bpr,
            rows,
            row_bytes,
        };
        return run_lane_major(pool, &kernel, x, n, out);
    }
    run::<B>(isa, pool, w, x, n, out)
}

/// A K format: from [`crate::kgemm::min_rows`] activation rows on, through the lane-major
/// kernel (`kgemm`, same bits); else [`run`].
#[cfg(target_arch = "x86_64")]
fn run_k<B: crate::kgemm::KPack>(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    x: Input,
    n: usize,
    out: &mut [f32],
) {
    if isa.is_avx2() && n >= crate::kgemm::min_rows(isa) {
        let (blocks, bpr) = (as_blocks(w.data), w.cols / B::ELEMS);
        let (rows, row_bytes) = (w.rows, w.row_bytes());
        let kernel = crate::kgemm::KGemm::<B> {
            isa,
            blocks,
            bpr,
            rows,
            row_bytes,
        };
        return run_lane_major(pool, &kernel, x, n, out);
    }
    run::<B>(isa, pool, w, x, n, out)
}

/// A lane-major kernel over the call's quantized activations (the quantized formats always
/// get them quantized: `matmul_isa` and `matmul_acts_isa` pass `Input::Acts`).
#[cfg(target_arch = "x86_64")]
fn run_lane_major<K: RowKernel>(pool: &ThreadPool, kernel: &K, x: Input, n: usize, out: &mut [f32])
where
    K::Act: ActStorage,
{
    let Input::Acts(acts) = x else {
        unreachable!("a quantized format's activations are quantized")
    };
    let (units, upr) = acts.view::<K::Act>();
    run_kernel(pool, kernel, units, upr, n, out)
}

// Without x86-64 there are no lane-major kernels: every format runs row-major.
#[cfg(not(target_arch = "x86_64"))]
use self::{run as run_legacy, run as run_k};

fn run<W: WeightBlock>(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    x: Input,
    n: usize,
    out: &mut [f32],
) where
    W::Act: ActStorage,
{
    let (acts, upr): (&[W::Act], usize) = match x {
        Input::Acts(a) => a.view::<W::Act>(),
        Input::F32(x) => {
            let acts = W::Act::from_f32(x).expect("raw f32 rows only for f32-activation weights");
            (acts, w.cols)
        }
    };
    if w.cols == 0 {
        out.fill(0.0);
        return;
    }
    let kernel = BlockKernel::<W> {
        isa,
        blocks: as_blocks(w.data),
        bpr: w.cols / W::ELEMS,
        rows: w.rows,
        row_bytes: w.row_bytes(),
    };
    run_kernel(pool, &kernel, acts, upr, n, out);
}

/// A matrix in GGUF's row-major block layout.
struct BlockKernel<'a, W> {
    isa: Isa,
    blocks: &'a [W],
    bpr: usize,
    rows: usize,
    row_bytes: usize,
}

impl<W: WeightBlock> RowKernel for BlockKernel<'_, W> {
    type Act = W::Act;
    fn rows(&self) -> usize {
        self.rows
    }
    fn row_bytes(&self) -> usize {
        self.row_bytes
    }
    /// [`ROWS_PER_KERNEL`] activation rows at a time through the multi-row kernels.
    #[inline(always)]
    fn subtile(&self, job: &Job<W::Act>, o0: usize, o1: usize) {
        let mut r = 0;
        while r < job.n() {
            r += match job.n() - r {
                1 => self.tile::<1>(job, o0, o1, r),
                2 => self.tile::<2>(job, o0, o1, r),
                3 => self.tile::<3>(job, o0, o1, r),
                8.. if W::WIDE => self.tile::<8>(job, o0, o1, r),
                _ => self.tile::<ROWS_PER_KERNEL>(job, o0, o1, r),
            };
        }
    }
}

impl<W: WeightBlock> BlockKernel<'_, W> {
    /// Computes the dots of activation rows `r..r + R` with weight rows `o0..o1`; returns `R`.
    #[inline(always)]
    fn tile<const R: usize>(&self, job: &Job<W::Act>, o0: usize, o1: usize, r: usize) -> usize {
        let xs: [&[W::Act]; R] = std::array::from_fn(|i| job.row(r + i));
        let mut res = [[0.0f32; R]; MAX_SUBTILE_ROWS];
        let res = &mut res[..o1 - o0];
        let w = &self.blocks[o0 * self.bpr..o1 * self.bpr];
        dot_rows_multi(self.isa, w, self.bpr, xs, res);
        for (k, dots) in res.iter().enumerate() {
            for (i, &v) in dots.iter().enumerate() {
                // SAFETY: weight row `o0 + k` lies in the sub-tile this task claimed.
                unsafe { job.put(r + i, o0 + k, v) };
            }
        }
        R
    }
}
