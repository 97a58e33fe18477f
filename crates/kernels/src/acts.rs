//! Activations quantized once: each row of a call's input in the format its weight type
//! multiplies with ([`ActKind`]), in a reusable buffer ([`Activations`]) that several
//! matrices of one input share (Q, K and V; gate and up). A row's quantization depends on
//! that row alone, which is the first leg of batch invariance (`matmul.rs`).

use std::cell::RefCell;

use crate::block::ActBlock;
use crate::kquants::BlockQ8K;
use crate::legacy::BlockQ8x4;
use crate::pool::ThreadPool;
use crate::GgmlType;

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
            | GgmlType::Q8_1
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::MXFP4
            | GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ2_S
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => ActKind::Q8x4,
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
