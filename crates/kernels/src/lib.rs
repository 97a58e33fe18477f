//! CPU kernels for GGML block formats.
//!
//! API CONTRACT (the engine codes against this; keep names and signatures):
//! - `dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32])`: dst.len() values from the
//!   bytes of whole blocks of `ty`.
//! - `QMatrix<'a> { ty, data: &'a [u8], rows, cols }`: a row-major weight matrix as stored in
//!   GGUF (`rows` output features, each of `cols` values = dims[0]).
//! - `matmul(pool: &ThreadPool, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32])`: for each
//!   of the `n` activation rows `x[r*cols..]`, `out[r*w.rows + o] = dot(W[o], x[r])`.
//!   A row's result is bit-identical whatever `n` is and whatever the thread count (batch
//!   invariance is a property the scheduler relies on).
//! - `ThreadPool::new(n_threads)`, `pool.n_threads()`, `pool.for_each(n_tasks, &|task| ..)`.
//! - small f32 helpers used by attention: `dot_f32`, `dot_f16_f32`, `axpy_f16_f32`, ...

pub use ferrox_gguf::GgmlType;
