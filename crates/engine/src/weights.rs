//! The model's tensors, bound by name and checked against the config at load.
//!
//! Weights stay in the memory-mapped file: a [`Matrix`] records where its bytes are, and the
//! forward pass borrows them per call. Only the small F32 norm vectors are copied out.

use ferrox_gguf::{GgmlType, GgufFile, TensorInfo};
use ferrox_kernels::QMatrix;

use crate::config::{Arch, ModelConfig};
use crate::error::EngineError;

/// A weight matrix living in the file: `rows` outputs of `cols` inputs each.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// The tensor's name in the file, for error messages and debugging.
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Index of the tensor in the file's tensor list (found by name once, at load).
    index: usize,
    n_bytes: usize,
}

impl Matrix {
    /// The kernel view of this matrix over `file`'s bytes.
    pub fn view<'a>(&self, file: &'a GgufFile) -> QMatrix<'a> {
        let data = file.tensor_data(&file.tensors()[self.index]);
        debug_assert_eq!(data.len(), self.n_bytes, "tensor {}", self.name);
        QMatrix {
            ty: self.ty,
            data,
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// Bytes of one row (a whole number of blocks by construction).
    pub fn row_bytes(&self) -> usize {
        self.n_bytes / self.rows
    }
}

/// One transformer block's tensors. Optional ones exist only in some families.
#[derive(Debug)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Per-head RMSNorm of Q and K (Gemma 3, Qwen 3).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Matrix,
    /// Norm of the attention output before the residual add (Gemma).
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Matrix,
    pub w_up: Matrix,
    pub w_down: Matrix,
    /// Norm of the FFN output before the residual add (Gemma).
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// Every tensor the forward pass reads.
#[derive(Debug)]
pub struct Weights {
    pub token_embd: Matrix,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    /// The output head: `output.weight`, or `token_embd` when the head is tied.
    pub output: Matrix,
}

impl Weights {
    pub fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Weights, EngineError> {
        let (d, q, kv, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let token_embd = matrix(f, "token_embd.weight", cfg.n_vocab, d)?;
        let output = if f.tensor("output.weight").is_some() {
            matrix(f, "output.weight", cfg.n_vocab, d)?
        } else {
            token_embd.clone()
        };
        let gemma = cfg.arch == Arch::Gemma3;
        let qk_norm = matches!(cfg.arch, Arch::Gemma3 | Arch::Qwen3);
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for il in 0..cfg.n_layer {
            let p = |s: &str| format!("blk.{il}.{s}");
            let opt_vec = |name: String, n: usize| -> Result<Option<Vec<f32>>, EngineError> {
                if f.tensor(&name).is_some() {
                    vector(f, &name, n).map(Some)
                } else {
                    Ok(None)
                }
            };
            let head_norm = |s: &str| -> Result<Option<Vec<f32>>, EngineError> {
                if qk_norm {
                    vector(f, &p(s), cfg.head_dim).map(Some)
                } else {
                    Ok(None)
                }
            };
            let post_norm = |s: &str| -> Result<Option<Vec<f32>>, EngineError> {
                if gemma {
                    vector(f, &p(s), d).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(LayerWeights {
                attn_norm: vector(f, &p("attn_norm.weight"), d)?,
                wq: matrix(f, &p("attn_q.weight"), q, d)?,
                wk: matrix(f, &p("attn_k.weight"), kv, d)?,
                wv: matrix(f, &p("attn_v.weight"), kv, d)?,
                bq: opt_vec(p("attn_q.bias"), q)?,
                bk: opt_vec(p("attn_k.bias"), kv)?,
                bv: opt_vec(p("attn_v.bias"), kv)?,
                q_norm: head_norm("attn_q_norm.weight")?,
                k_norm: head_norm("attn_k_norm.weight")?,
                wo: matrix(f, &p("attn_output.weight"), d, q)?,
                post_attn_norm: post_norm("post_attention_norm.weight")?,
                ffn_norm: vector(f, &p("ffn_norm.weight"), d)?,
                w_gate: matrix(f, &p("ffn_gate.weight"), ff, d)?,
                w_up: matrix(f, &p("ffn_up.weight"), ff, d)?,
                w_down: matrix(f, &p("ffn_down.weight"), d, ff)?,
                post_ffn_norm: post_norm("post_ffw_norm.weight")?,
            });
        }
        Ok(Weights {
            token_embd,
            layers,
            output_norm: vector(f, "output_norm.weight", d)?,
            output,
        })
    }
}

fn info<'a>(f: &'a GgufFile, name: &str) -> Result<&'a TensorInfo, EngineError> {
    f.tensor(name).ok_or_else(|| EngineError::MissingTensor {
        name: name.to_string(),
    })
}

/// Binds a 2-D weight of `rows` × `cols` (GGUF dims `[cols, rows]`).
pub(crate) fn matrix(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Matrix, EngineError> {
    let t = info(f, name)?;
    let expected = vec![cols as u64, rows as u64];
    if t.dims != expected {
        return Err(EngineError::BadTensorShape {
            name: name.into(),
            expected,
            found: t.dims.clone(),
        });
    }
    if t.ty == GgmlType::Q8_1 || t.ty == GgmlType::Q8_K {
        // Activation-only formats: ggml never stores weights in them.
        return Err(EngineError::UnsupportedTensorType {
            name: name.into(),
            ty: t.ty,
        });
    }
    let index = f
        .tensors()
        .iter()
        .position(|x| x.name == name)
        .expect("found by name above");
    let n_bytes = usize::try_from(t.n_bytes).expect("size checked against the file at open");
    Ok(Matrix {
        name: name.to_string(),
        ty: t.ty,
        rows,
        cols,
        index,
        n_bytes,
    })
}

/// Reads a 1-D tensor of `n` values (any float or quantized type) into f32.
pub(crate) fn vector(f: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>, EngineError> {
    let t = info(f, name)?;
    let expected = vec![n as u64];
    if t.dims != expected {
        return Err(EngineError::BadTensorShape {
            name: name.into(),
            expected,
            found: t.dims.clone(),
        });
    }
    let mut out = vec![0.0f32; n];
    ferrox_kernels::dequantize_row(t.ty, f.tensor_data(t), &mut out);
    Ok(out)
}
