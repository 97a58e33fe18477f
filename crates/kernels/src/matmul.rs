//! `matmul`: a quantized weight matrix times a batch of f32 activation rows.
//!
//! Shape of the work: each activation row is quantized once into the format the weight type
//! multiplies with ([`Activations`]). The weight rows are split into one contiguous range per
//! thread ([`Ranges`]). A thread walks its range in sub-tiles of about 32 KB (so they
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

use crate::block::{as_blocks, dot_rows_multi, ActBlock, Isa, WeightBlock};
use crate::float::{Bf16Le, F16Le, F32Le};
use crate::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
use crate::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, BlockQ8x4};
use crate::pool::ThreadPool;
use crate::GgmlType;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The activation format a weight type multiplies with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ActKind {
    /// f32 as is (F32, F16, BF16 weights).
    #[default]
    F32,
    /// [`BlockQ8x4`]: 32-value blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 weights).
    Q8x4,
    /// [`BlockQ8K`]: 256-value blocks (K-quant weights).
    Q8K,
}

impl ActKind {
    /// The activation format for weights of type `ty`.
    pub fn for_weights(ty: GgmlType) -> ActKind {
        match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => ActKind::F32,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1 => ActKind::Q8x4,
            _ => ActKind::Q8K,
        }
    }
}

/// A reusable buffer of quantized activation rows. Quantize once, multiply with several
/// matrices of the same [`ActKind`] (e.g. Q, K and V projections of one input).
#[derive(Debug, Default)]
pub struct Activations {
    kind: ActKind,
    n: usize,
    cols: usize,
    f32s: Vec<f32>,
    q8: Vec<BlockQ8x4>,
    q8k: Vec<BlockQ8K>,
}

/// Where an activation unit type lives inside [`Activations`].
pub trait ActStorage: ActBlock {
    const KIND: ActKind;
    fn storage(a: &Activations) -> &[Self];
    fn storage_mut(a: &mut Activations) -> &mut Vec<Self>;
    /// Raw f32 rows used as they are (only for `ActKind::F32`).
    fn from_f32(_x: &[f32]) -> Option<&[Self]> {
        None
    }
}

impl ActStorage for f32 {
    const KIND: ActKind = ActKind::F32;
    fn storage(a: &Activations) -> &[f32] {
        &a.f32s
    }
    fn storage_mut(a: &mut Activations) -> &mut Vec<f32> {
        &mut a.f32s
    }
    fn from_f32(x: &[f32]) -> Option<&[f32]> {
        Some(x)
    }
}
impl ActStorage for BlockQ8x4 {
    const KIND: ActKind = ActKind::Q8x4;
    fn storage(a: &Activations) -> &[BlockQ8x4] {
        &a.q8
    }
    fn storage_mut(a: &mut Activations) -> &mut Vec<BlockQ8x4> {
        &mut a.q8
    }
}
impl ActStorage for BlockQ8K {
    const KIND: ActKind = ActKind::Q8K;
    fn storage(a: &Activations) -> &[BlockQ8K] {
        &a.q8k
    }
    fn storage_mut(a: &mut Activations) -> &mut Vec<BlockQ8K> {
        &mut a.q8k
    }
}

impl Activations {
    pub fn new() -> Activations {
        Activations::default()
    }

    pub fn kind(&self) -> ActKind {
        self.kind
    }

    /// Activation rows held.
    pub fn n_rows(&self) -> usize {
        self.n
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Quantizes `n` rows of `cols` values (`x.len() == n * cols`) for weights of type `ty`,
    /// reusing the buffer's memory. Rows are spread over `pool` when there are several.
    pub fn quantize(&mut self, pool: &ThreadPool, ty: GgmlType, x: &[f32], n: usize, cols: usize) {
        assert_eq!(x.len(), n * cols, "x must hold n rows of cols values");
        self.kind = ActKind::for_weights(ty);
        self.n = n;
        self.cols = cols;
        match self.kind {
            ActKind::F32 => self.fill::<f32>(pool, x),
            ActKind::Q8x4 => self.fill::<BlockQ8x4>(pool, x),
            ActKind::Q8K => self.fill::<BlockQ8K>(pool, x),
        }
    }

    fn fill<A: ActStorage>(&mut self, pool: &ThreadPool, x: &[f32]) {
        let (n, cols) = (self.n, self.cols);
        let upr = A::units_for(cols);
        let buf = A::storage_mut(self);
        buf.clear();
        buf.resize(n * upr, A::default());
        if n < 4 || pool.n_threads() == 1 {
            for (xr, ar) in x
                .chunks_exact(cols.max(1))
                .zip(buf.chunks_exact_mut(upr.max(1)))
            {
                A::quantize_row(xr, ar);
            }
            return;
        }
        struct BufPtr<A>(*mut A);
        // SAFETY: each task writes only its own row's units.
        unsafe impl<A> Sync for BufPtr<A> {}
        let ptr = BufPtr(buf.as_mut_ptr());
        let ptr = &ptr;
        pool.for_each(n, &|r| {
            // SAFETY: rows `r` are disjoint ranges of the buffer, alive for the whole call.
            let row = unsafe { std::slice::from_raw_parts_mut(ptr.0.add(r * upr), upr) };
            A::quantize_row(&x[r * cols..(r + 1) * cols], row);
        });
    }

    /// Row units of type `A` and units per row; panics if the buffer holds another kind.
    pub(crate) fn view<A: ActStorage>(&self) -> (&[A], usize) {
        assert_eq!(
            self.kind,
            A::KIND,
            "activations were quantized for another weight type"
        );
        (A::storage(self), A::units_for(self.cols))
    }
}

thread_local! {
    /// `matmul`'s activation scratch, reused across calls on this thread.
    static SCRATCH: RefCell<Activations> = RefCell::new(Activations::new());
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

/// Runs `f` on `x` (`n` rows of `cols` values) quantized for weights of type `ty`, in this
/// thread's reusable buffer (a fresh one if the buffer is already in use on this thread, e.g.
/// a matmul inside a pool task).
pub(crate) fn with_quantized<R>(
    pool: &ThreadPool,
    ty: GgmlType,
    x: &[f32],
    n: usize,
    cols: usize,
    f: impl FnOnce(&Activations) -> R,
) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut acts) => {
            acts.quantize(pool, ty, x, n, cols);
            f(&acts)
        }
        Err(_) => {
            let mut acts = Activations::new();
            acts.quantize(pool, ty, x, n, cols);
            f(&acts)
        }
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
        GgmlType::Q2_K => run::<BlockQ2K>(isa, pool, w, x, n, out),
        GgmlType::Q3_K => run::<BlockQ3K>(isa, pool, w, x, n, out),
        GgmlType::Q4_K => run::<BlockQ4K>(isa, pool, w, x, n, out),
        GgmlType::Q5_K => run::<BlockQ5K>(isa, pool, w, x, n, out),
        GgmlType::Q6_K => run::<BlockQ6K>(isa, pool, w, x, n, out),
        GgmlType::Q8_K => panic!("q8_K is an activation format; no matmul with q8_K weights"),
    }
}

/// Activation rows processed together by one kernel call (eight for `WeightBlock::WIDE`).
const ROWS_PER_KERNEL: usize = 4;
/// Target bytes of a weight sub-tile (kept in L1/L2 while the activation groups pass over it).
const SUBTILE_BYTES: usize = 32 * 1024;
/// Weight rows of a sub-tile, at most (the size of the kernel's output buffer on the stack).
const MAX_SUBTILE_ROWS: usize = 64;
/// A 32-value format: from [`crate::gemm8::MIN_ROWS`] activation rows on, through the
/// lane-major kernel (`gemm8`, same bits, about twice the throughput); else [`run`].
#[cfg(target_arch = "x86_64")]
fn run_legacy<B: crate::legacy_avx2::LegacyAvx2 + Sync>(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    x: Input,
    n: usize,
    out: &mut [f32],
) {
    if let (true, Input::Acts(acts)) = (isa.is_avx2() && n >= crate::gemm8::MIN_ROWS, &x) {
        let (units, upr) = acts.view::<BlockQ8x4>();
        let kernel = crate::gemm8::Gemm8::<B> {
            blocks: as_blocks(w.data),
            bpr: w.cols / B::ELEMS,
            rows: w.rows,
            row_bytes: w.row_bytes(),
        };
        return run_kernel(pool, &kernel, units, upr, n, out);
    }
    run::<B>(isa, pool, w, x, n, out)
}

#[cfg(not(target_arch = "x86_64"))]
fn run_legacy<B: WeightBlock>(
    isa: Isa,
    pool: &ThreadPool,
    w: &QMatrix,
    x: Input,
    n: usize,
    out: &mut [f32],
) where
    B::Act: ActStorage,
{
    run::<B>(isa, pool, w, x, n, out)
}

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

/// A weight matrix in some layout that computes the dot products of a run of its rows with
/// every activation row of a call. [`run_kernel`] spreads the runs over the pool.
pub(crate) trait RowKernel: Sync {
    type Act: ActBlock + Sync;
    /// Output features.
    fn rows(&self) -> usize;
    /// Weight bytes per row (sizes the sub-tiles).
    fn row_bytes(&self) -> usize;
    /// Sub-tiles start at multiples of this many rows.
    fn row_align(&self) -> usize {
        1
    }
    /// Every activation row of `job` times weight rows `o0..o1` (a sub-tile this task owns),
    /// written with [`Job::put`].
    fn subtile(&self, job: &Job<Self::Act>, o0: usize, o1: usize);
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
        while r < job.n {
            r += match job.n - r {
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

/// `out[r * rows + o] = dot(W[o], x[r])` for the `n` activation rows of `acts` (`upr` units
/// each), on the pool: rows split into [`Ranges`] of sub-tiles of about [`SUBTILE_BYTES`], each
/// sub-tile computed for [`ROWS_PER_KERNEL`] activation rows at a time.
pub(crate) fn run_kernel<K: RowKernel>(
    pool: &ThreadPool,
    kernel: &K,
    acts: &[K::Act],
    upr: usize,
    n: usize,
    out: &mut [f32],
) {
    let rows = kernel.rows();
    assert_eq!(out.len(), n * rows, "out must hold n rows of w.rows values");
    if n == 0 || rows == 0 {
        out.fill(0.0);
        return;
    }
    assert!(acts.len() >= n * upr, "activation buffer too short");
    let align = kernel.row_align();
    let sub_rows = (SUBTILE_BYTES / kernel.row_bytes().max(1)).clamp(1, MAX_SUBTILE_ROWS);
    let sub_rows = sub_rows.div_ceil(align) * align;
    assert!(
        sub_rows <= MAX_SUBTILE_ROWS,
        "row alignment above the sub-tile size"
    );
    let n_sub = rows.div_ceil(sub_rows);
    let ranges = Ranges::new(n_sub, pool.n_threads());
    let job = Job {
        acts,
        upr,
        n,
        rows,
        out: out.as_mut_ptr(),
    };
    let job = &job;
    let ranges = &ranges;

    pool.for_each(ranges.len(), &|home| {
        while let Some(sub) = ranges.claim(home) {
            let s0 = sub * sub_rows;
            kernel.subtile(job, s0, (s0 + sub_rows).min(rows));
        }
    });
}

/// The sub-tiles of one call split into one contiguous range per thread.
///
/// Why contiguous: at n = 1 a matmul streams its weights from memory, and each thread's
/// software prefetch runs [`crate::block::PREFETCH_DISTANCE`] bytes ahead of where it reads.
/// Handing out small tiles in global order made every thread jump to a fresh tile every few
/// KB, each start a cold miss; one range per thread keeps each stream going (the layers of
/// the default model: 8.3 -> 6.2 ms per decode step, median of interleaved runs). A thread that
/// finishes its own range takes sub-tiles from the END of the others (the machine is shared;
/// a preempted thread must not hold up the call), so owner and thief meet in the middle.
struct Ranges {
    /// Per range, `front << 32 | back`: the sub-tiles `front..back` are still unclaimed.
    /// Padded to a cache line so that owners never contend.
    ranges: Vec<PaddedRange>,
}

#[repr(align(64))]
struct PaddedRange(AtomicU64);

impl Ranges {
    fn new(n_sub: usize, threads: usize) -> Ranges {
        let k = threads.clamp(1, n_sub.max(1));
        let ranges = (0..k)
            .map(|i| {
                let (front, back) = (n_sub * i / k, n_sub * (i + 1) / k);
                PaddedRange(AtomicU64::new(((front as u64) << 32) | back as u64))
            })
            .collect();
        Ranges { ranges }
    }

    fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The next sub-tile for the thread working on range `home`: the front of its own range,
    /// else the back of another's; `None` once every range is empty.
    fn claim(&self, home: usize) -> Option<usize> {
        let k = self.ranges.len();
        (0..k).find_map(|j| {
            let i = (home + j) % k;
            self.take(i, j == 0)
        })
    }

    fn take(&self, i: usize, front: bool) -> Option<usize> {
        let cell = &self.ranges[i].0;
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let (f, b) = (cur >> 32, cur & 0xFFFF_FFFF);
            if f >= b {
                return None;
            }
            let (next, got) = if front {
                (((f + 1) << 32) | b, f)
            } else {
                ((f << 32) | (b - 1), b - 1)
            };
            match cell.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(got as usize),
                Err(now) => cur = now,
            }
        }
    }
}

/// What every task of one `run_kernel` shares.
pub(crate) struct Job<'a, A> {
    acts: &'a [A],
    /// Activation units per row.
    upr: usize,
    /// Activation rows.
    n: usize,
    /// Output features (the stride of `out`).
    rows: usize,
    out: *mut f32,
}

// SAFETY: `out` is written at disjoint elements by the tasks (each weight row `o` belongs to
// one task), and `for_each` returns only after all tasks finished.
unsafe impl<A: Sync> Sync for Job<'_, A> {}

impl<A> Job<'_, A> {
    /// Activation rows.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Activation row `r`.
    pub(crate) fn row(&self, r: usize) -> &[A] {
        &self.acts[r * self.upr..(r + 1) * self.upr]
    }

    /// Stores the dot of weight row `o` with activation row `r`.
    ///
    /// # Safety
    /// Only the task that claimed the sub-tile holding weight row `o` may call this.
    #[inline(always)]
    pub(crate) unsafe fn put(&self, r: usize, o: usize, v: f32) {
        assert!(r < self.n && o < self.rows, "({r}, {o}) outside out");
        // SAFETY: inside `out` (n * rows, checked in `run_kernel`); the caller owns row `o`.
        unsafe { *self.out.add(r * self.rows + o) = v };
    }

    /// Stores the dots of weight rows `o..o + vs.len()` with activation row `r` (one bounds
    /// check and one copy for a group's results).
    ///
    /// # Safety
    /// Only the task that claimed the sub-tile holding those weight rows may call this.
    #[inline(always)]
    pub(crate) unsafe fn put_run(&self, r: usize, o: usize, vs: &[f32]) {
        assert!(
            r < self.n && o + vs.len() <= self.rows,
            "({r}, {o}..{}) outside out",
            o + vs.len()
        );
        // SAFETY: inside `out` (n * rows, checked in `run_kernel`); the caller owns the rows.
        unsafe {
            std::ptr::copy_nonoverlapping(vs.as_ptr(), self.out.add(r * self.rows + o), vs.len())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    /// Owners and thieves racing over the ranges claim every sub-tile exactly once, and an
    /// owner alone walks its range front to back.
    #[test]
    fn ranges_hand_out_each_subtile_once() {
        for (n_sub, threads) in [(1000, 4), (7, 3), (3, 8), (1, 2), (0, 2)] {
            let ranges = Ranges::new(n_sub, threads);
            let mut got: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..ranges.len())
                    .map(|home| {
                        let ranges = &ranges;
                        s.spawn(move || {
                            std::iter::from_fn(|| ranges.claim(home)).collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            });
            got.sort_unstable();
            assert_eq!(
                got,
                (0..n_sub).collect::<Vec<_>>(),
                "{n_sub} over {threads}"
            );
        }
        let ranges = Ranges::new(10, 2);
        let own: Vec<usize> = (0..5).map(|_| ranges.claim(0).unwrap()).collect();
        assert_eq!(own, [0, 1, 2, 3, 4]);
        assert_eq!(
            ranges.claim(0),
            Some(9),
            "then steals from the back of range 1"
        );
    }
}
