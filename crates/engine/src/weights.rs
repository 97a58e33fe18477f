//! The model's tensors, bound by name and checked against the config at load.
//!
//! A [`Matrix`] records where its bytes are in the memory-mapped file, and the forward pass
//! borrows them per call. Only the small F32 norm vectors are copied out at bind time. After
//! binding, on AVX-512 and plain AVX2 hosts, the Q4_K and Q6_K matrices of the decoder's
//! layers and head are repacked sixteen rows at a time, all into one buffer on huge pages
//! ([`Weights::repack`]; `ferrox_kernels::KRows16`): a layout the kernel multiplies ~3x
//! faster from cache at one activation row. What is left in the file's layout is copied
//! into one buffer on huge pages ([`Weights::copy_to_huge_pages`]), because a decode step
//! streams it from memory and a mapped file's pages are 4 KB. Either way the file's pages are
//! released as they are copied, so the model stays resident once.

use ferrox_gguf::{GgmlType, GgufFile, TensorInfo};
use std::sync::Arc;

use ferrox_kernels::{Activations, Isa, KRows16, QMatrix, RepackPart, ThreadPool};

use crate::config::{Arch, ModelConfig, QkNorm};
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
    row_bytes: usize,
    /// Where this matrix starts in its tensor: a part of a fused tensor (Phi-3's `attn_qkv`,
    /// its gate+up `ffn_up`) is a run of the tensor's rows.
    first_row: usize,
    /// The matrix repacked for the lane-major K kernels, once [`Matrix::repack`] made it;
    /// the file's bytes are then read only by code that wants single rows.
    packed: Option<Arc<KRows16>>,
    /// Where the matrix's bytes sit in the weights' copy on huge pages, once
    /// [`Weights::copy_to_huge_pages`] made it; read in place of the file's.
    copy: Option<(Arc<Vec<u8>>, std::ops::Range<usize>)>,
}

impl Matrix {
    /// The kernel view of this matrix over `file`'s bytes.
    pub fn view<'a>(&'a self, file: &'a GgufFile) -> QMatrix<'a> {
        QMatrix {
            ty: self.ty,
            data: match &self.copy {
                Some((buf, range)) => &buf[range.clone()],
                None => self.file_bytes(file),
            },
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// `out = W x` for `n` rows of `x` (the same bits whichever layout holds the matrix).
    pub fn matmul(&self, pool: &ThreadPool, file: &GgufFile, x: &[f32], n: usize, out: &mut [f32]) {
        match &self.packed {
            Some(k) => k.matmul(pool, x, n, out),
            None => ferrox_kernels::matmul(pool, &self.view(file), x, n, out),
        }
    }

    /// [`Matrix::matmul`] with activations already quantized for this matrix's type.
    pub fn matmul_acts(
        &self,
        pool: &ThreadPool,
        file: &GgufFile,
        acts: &Activations,
        out: &mut [f32],
    ) {
        match &self.packed {
            Some(k) => k.matmul_acts(pool, acts, out),
            None => ferrox_kernels::matmul_acts(pool, &self.view(file), acts, out),
        }
    }

    /// [`Matrix::matmul_acts`] for several matrices that read the same activations: in one
    /// parallel loop where all are repacked (`KRows16::matmul_acts_many`), else one call each.
    /// The same bits either way.
    pub fn matmul_acts_shared(
        pool: &ThreadPool,
        file: &GgufFile,
        acts: &Activations,
        jobs: &mut [(&Matrix, &mut [f32])],
    ) {
        if jobs.len() > 1 && jobs.iter().all(|(m, _)| m.packed.is_some()) {
            let mut parts: Vec<(&KRows16, &mut [f32])> = jobs
                .iter_mut()
                .filter_map(|(m, out)| Some((m.packed.as_deref()?, &mut **out)))
                .collect();
            KRows16::matmul_acts_many(pool, acts, &mut parts);
        } else {
            for (m, out) in jobs.iter_mut() {
                m.matmul_acts(pool, file, acts, out);
            }
        }
    }

    /// Whether this matrix is one `KRows16` should hold (Q4_K or Q6_K, not repacked yet) on
    /// this CPU: on the AVX-512 and plain AVX2 spellings, where it was measured to pay, and
    /// on AVX-VNNI too when `any_avx2`. On plain AVX2 (Zen 4's `avx2` spelling, 4B shape)
    /// it decodes level on slow memory and up to 1.4× faster on fast, and since its prefill
    /// runs `kgemm`'s body (`krows/gemm.rs`) it prefills level with the file's layout
    /// (docs/PERFORMANCE.md, thirteenth session). AVX-VNNI hosts (Intel) were not measured:
    /// there the file's layout stays unless asked.
    fn wants_repack(&self, any_avx2: bool) -> bool {
        let ty_ok = matches!(self.ty, GgmlType::Q4_K | GgmlType::Q6_K);
        let isa = Isa::best();
        let measured = isa.is_avx512() || isa.is_avx2() && !isa.vnni256();
        self.packed.is_none() && ty_ok && (measured || any_avx2 && isa.is_avx2())
    }

    /// The memory a multiply by this matrix streams: the buffer its packs share with the
    /// other repacked matrices, else the huge-page copy it sits in, else its file bytes.
    pub fn held_bytes<'a>(&'a self, file: &'a GgufFile) -> &'a [u8] {
        match (&self.packed, &self.copy) {
            (Some(k), _) => k.buffer(),
            (None, Some((buf, _))) => buf,
            (None, None) => self.file_bytes(file),
        }
    }

    /// This matrix's bytes in the file.
    fn file_bytes<'a>(&self, file: &'a GgufFile) -> &'a [u8] {
        let data = file.tensor_data(&file.tensors()[self.index]);
        let start = self.first_row * self.row_bytes;
        &data[start..start + self.rows * self.row_bytes]
    }

    /// Bytes of one row (a whole number of blocks by construction).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Rows `first..first + n` as a matrix of their own.
    fn slice_rows(&self, first: usize, n: usize) -> Matrix {
        assert!(first + n <= self.rows, "{}: rows out of range", self.name);
        Matrix {
            name: format!("{}[{first}..{}]", self.name, first + n),
            rows: n,
            first_row: self.first_row + first,
            // A part of the file's tensor, not of a repacked or huge-page copy.
            packed: None,
            copy: None,
            ..self.clone()
        }
    }
}

/// One transformer block's tensors. Optional ones exist only in some families.
#[derive(Debug)]
pub struct LayerWeights {
    /// Norm of the attention block's input (every decoder but OLMo 2).
    pub attn_norm: Option<Vec<f32>>,
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
    /// Output projection bias (gpt-oss).
    pub bo: Option<Vec<f32>>,
    /// A learned logit per query head that joins every softmax and takes no value (gpt-oss's
    /// attention sinks).
    pub sinks: Option<Vec<f32>>,
    /// Norm of the attention output before the residual add (Gemma, OLMo 2).
    pub post_attn_norm: Option<Vec<f32>>,
    /// Norm of the FFN block's input (every decoder but OLMo 2).
    pub ffn_norm: Option<Vec<f32>>,
    pub ffn: Ffn,
    /// Norm of the FFN output before the residual add (Gemma, OLMo 2).
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// A layer's feed-forward network.
// One per layer, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Ffn {
    /// One gated FFN for every token.
    Dense {
        gate: Matrix,
        up: Matrix,
        down: Matrix,
    },
    /// A router and stacked experts (`moe.rs` runs them).
    Moe(MoeWeights),
}

/// A mixture-of-experts layer's tensors.
#[derive(Debug)]
pub struct MoeWeights {
    /// Router: `n_expert` logits per token, plus a bias (gpt-oss).
    pub router: Matrix,
    pub router_bias: Option<Vec<f32>>,
    /// Per-expert biases after each matrix (gpt-oss): expert `e`'s are rows `e` of these.
    pub gate_bias: Option<Vec<f32>>,
    pub up_bias: Option<Vec<f32>>,
    pub down_bias: Option<Vec<f32>>,
    /// Expert `e`'s gate, up and down matrices are `.expert(e)` of these.
    pub gate: Experts,
    pub up: Experts,
    pub down: Experts,
    /// The shared expert every token runs (Qwen 2 MoE).
    pub shared: Option<Box<SharedExpert>>,
}

/// A shared expert: a dense SiLU-gated FFN and, for Qwen 2 MoE, the vector whose dot with
/// the input, through a sigmoid, scales its output.
#[derive(Debug)]
pub struct SharedExpert {
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
    pub gate_inp: Option<Vec<f32>>,
}

/// A 3-D tensor of `n` matrices of `rows` × `cols`, stored one after another (GGUF dims
/// `[cols, rows, n]`).
#[derive(Debug, Clone)]
pub struct Experts {
    /// The whole tensor as one matrix of `n * rows` rows.
    all: Matrix,
    /// Rows of one expert.
    pub rows: usize,
}

impl Experts {
    /// Expert `e`'s matrix over `file`'s bytes.
    pub fn view<'a>(&'a self, file: &'a GgufFile, e: usize) -> QMatrix<'a> {
        let all = self.all.view(file);
        let bytes = self.rows * self.all.row_bytes();
        QMatrix {
            ty: all.ty,
            data: &all.data[e * bytes..(e + 1) * bytes],
            rows: self.rows,
            cols: all.cols,
        }
    }
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
    /// The memory one decode token streams, buffer by buffer (a buffer shared by several
    /// matrices is listed for each): every dense layer matrix and, unless `head_elsewhere`,
    /// the head. A mixture of experts' expert tensors are left out (a token reads a few of
    /// them, in the mapped file).
    pub fn decode_memory<'a>(&'a self, file: &'a GgufFile, head_elsewhere: bool) -> Vec<&'a [u8]> {
        let mut ms: Vec<&Matrix> = Vec::new();
        for l in &self.layers {
            ms.extend([&l.wq, &l.wk, &l.wv, &l.wo]);
            if let Ffn::Dense { gate, up, down } = &l.ffn {
                ms.extend([gate, up, down]);
            }
        }
        if !head_elsewhere {
            ms.push(&self.output);
        }
        ms.iter().map(|m| m.held_bytes(file)).collect()
    }

    /// Repacks the layers' and the head's matrices for the lane-major K kernels where that
    /// applies (see the module doc). `FERROX_KROWS=0` keeps the file's layout, `=1` repacks
    /// on the AVX-VNNI spelling too (both for side-by-side timing; the bits are the same).
    pub fn repack(&mut self, file: &GgufFile) {
        let setting = std::env::var("FERROX_KROWS").unwrap_or_default();
        if setting == "0" {
            return;
        }
        let any_avx2 = setting == "1";
        let mut ms = layer_matrices(&mut self.layers);
        ms.push(&mut self.output);
        ms.retain(|m| m.wants_repack(any_avx2));
        // One buffer for all of them (`KRows16::repack_all`): on huge pages even where a
        // matrix is smaller than a few 2 MB pages.
        let parts: Vec<RepackPart> = ms
            .iter()
            .map(|m| RepackPart {
                ty: m.ty,
                data: m.file_bytes(file),
                rows: m.rows,
                cols: m.cols,
            })
            .collect();
        let packed = KRows16::repack_all(&parts, |i, done| file.release(&parts[i].data[done]));
        for (m, k) in ms.into_iter().zip(packed) {
            m.packed = k.map(Arc::new);
        }
    }

    /// Copies the dense layers' matrices that [`Weights::repack`] left in the file's layout
    /// (and the head too, unless `head_elsewhere`: the caller holds its own layout of it)
    /// onto huge pages, releasing their file pages as they go; returns the bytes copied.
    ///
    /// Why: a decode step streams every weight once, and a mapped file's pages are 4 KB
    /// page-cache pages that transparent huge pages do not reach, so every 4 KB of every
    /// stream is a TLB miss. On an AMD Zen 4 host, the AVX2 spelling's 4B-shape decode
    /// (file layout throughout) ran faster from the copy in each of 14 interleaved pairs, by
    /// 1.01–1.29x, median ~1.05 (docs/PERFORMANCE.md). Only on a mapped file (a file read into
    /// memory is anonymous already) and where the kernel offers huge pages; MoE experts
    /// stay mapped (tens of gigabytes, read sparsely). `FERROX_COPY_WEIGHTS=0` turns it off.
    pub fn copy_to_huge_pages(&mut self, file: &GgufFile, head_elsewhere: bool) -> usize {
        if !file.is_mapped()
            || !ferrox_kernels::huge_pages_available()
            || std::env::var("FERROX_COPY_WEIGHTS").is_ok_and(|v| v == "0")
        {
            return 0;
        }
        let mut ms = layer_matrices(&mut self.layers);
        if !head_elsewhere {
            ms.push(&mut self.output);
        }
        ms.retain(|m| m.packed.is_none());
        let parts: Vec<&[u8]> = ms.iter().map(|m| m.file_bytes(file)).collect();
        let (buf, ranges) =
            ferrox_kernels::copy_to_huge_pages(&parts, |i, done| file.release(&parts[i][done]));
        let (buf, bytes) = (Arc::new(buf), parts.iter().map(|p| p.len()).sum());
        for (m, range) in ms.into_iter().zip(ranges) {
            m.copy = Some((Arc::clone(&buf), range));
        }
        if !head_elsewhere && self.token_embd.name == self.output.name {
            // Tied: token rows are read from the same copy (the file's pages are gone).
            self.token_embd.copy = self.output.copy.clone();
        }
        bytes
    }

    pub fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<Weights, EngineError> {
        let (d, q, kv, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let token_embd = matrix(f, "token_embd.weight", cfg.n_vocab, d)?;
        let output = if f.tensor("output.weight").is_some() {
            matrix(f, "output.weight", cfg.n_vocab, d)?
        } else {
            token_embd.clone()
        };
        let qk_norm = cfg.arch.qk_norm();
        // Feed-forward biases exist in some Granite files; nothing here adds them, so refuse.
        if let Some(t) = f.tensors().iter().find(|t| {
            t.name.ends_with("ffn_up.bias")
                || t.name.ends_with("ffn_gate.bias")
                || t.name.ends_with("ffn_down.bias")
        }) {
            return Err(EngineError::UnsupportedTensor {
                name: t.name.clone(),
                reason: "feed-forward biases are unsupported",
            });
        }
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
            let qk_norm = |s: &str, whole: usize| -> Result<Option<Vec<f32>>, EngineError> {
                match qk_norm {
                    Some(QkNorm::PerHead) => vector(f, &p(s), cfg.head_dim).map(Some),
                    Some(QkNorm::Whole) => vector(f, &p(s), whole).map(Some),
                    None => Ok(None),
                }
            };
            // Gemma and GLM-4 norm both blocks' outputs, and OLMo 2 instead of their inputs.
            let post_norm = |s: &str| -> Result<Option<Vec<f32>>, EngineError> {
                if cfg.arch.has_post_norms() {
                    vector(f, &p(s), d).map(Some)
                } else {
                    Ok(None)
                }
            };
            // Q, K and V: three tensors, or one fused `attn_qkv` (Phi-3) in that row order.
            let (wq, wk, wv) = if f.tensor(&p("attn_qkv.weight")).is_some() {
                let qkv = matrix(f, &p("attn_qkv.weight"), q + 2 * kv, d)?;
                (
                    qkv.slice_rows(0, q),
                    qkv.slice_rows(q, kv),
                    qkv.slice_rows(q + kv, kv),
                )
            } else {
                (
                    matrix(f, &p("attn_q.weight"), q, d)?,
                    matrix(f, &p("attn_k.weight"), kv, d)?,
                    matrix(f, &p("attn_v.weight"), kv, d)?,
                )
            };
            layers.push(LayerWeights {
                attn_norm: match cfg.arch.has_pre_norms() {
                    true => Some(vector(f, &p("attn_norm.weight"), d)?),
                    false => None,
                },
                wq,
                wk,
                wv,
                bq: opt_vec(p("attn_q.bias"), q)?,
                bk: opt_vec(p("attn_k.bias"), kv)?,
                bv: opt_vec(p("attn_v.bias"), kv)?,
                q_norm: qk_norm("attn_q_norm.weight", q)?,
                k_norm: qk_norm("attn_k_norm.weight", kv)?,
                wo: matrix(f, &p("attn_output.weight"), d, q)?,
                bo: opt_vec(p("attn_output.bias"), d)?,
                sinks: match cfg.arch {
                    Arch::GptOss => Some(vector(f, &p("attn_sinks.weight"), cfg.n_head)?),
                    _ => None,
                },
                post_attn_norm: post_norm("post_attention_norm.weight")?,
                // gpt-oss names its pre-FFN norm `post_attention_norm`.
                ffn_norm: match cfg.arch {
                    Arch::GptOss => Some(vector(f, &p("post_attention_norm.weight"), d)?),
                    a if !a.has_pre_norms() => None,
                    _ => Some(vector(f, &p("ffn_norm.weight"), d)?),
                },
                ffn: match &cfg.moe {
                    // Gate and up: two tensors, or one `ffn_up` of both (Phi-3: gate rows first).
                    None if f.tensor(&p("ffn_gate.weight")).is_none() => {
                        let both = matrix(f, &p("ffn_up.weight"), 2 * ff, d)?;
                        Ffn::Dense {
                            gate: both.slice_rows(0, ff),
                            up: both.slice_rows(ff, ff),
                            down: matrix(f, &p("ffn_down.weight"), d, ff)?,
                        }
                    }
                    None => Ffn::Dense {
                        gate: matrix(f, &p("ffn_gate.weight"), ff, d)?,
                        up: matrix(f, &p("ffn_up.weight"), ff, d)?,
                        down: matrix(f, &p("ffn_down.weight"), d, ff)?,
                    },
                    Some(m) => Ffn::Moe(MoeWeights {
                        router: matrix(f, &p("ffn_gate_inp.weight"), m.n_expert, d)?,
                        router_bias: opt_vec(p("ffn_gate_inp.bias"), m.n_expert)?,
                        gate_bias: opt_table(f, &p("ffn_gate_exps.bias"), m.n_expert, m.n_ff_exp)?,
                        up_bias: opt_table(f, &p("ffn_up_exps.bias"), m.n_expert, m.n_ff_exp)?,
                        down_bias: opt_table(f, &p("ffn_down_exps.bias"), m.n_expert, d)?,
                        gate: experts(f, &p("ffn_gate_exps.weight"), m.n_expert, m.n_ff_exp, d)?,
                        up: experts(f, &p("ffn_up_exps.weight"), m.n_expert, m.n_ff_exp, d)?,
                        down: experts(f, &p("ffn_down_exps.weight"), m.n_expert, d, m.n_ff_exp)?,
                        shared: match m.n_ff_shared {
                            0 => None,
                            w => Some(Box::new(SharedExpert {
                                gate: matrix(f, &p("ffn_gate_shexp.weight"), w, d)?,
                                up: matrix(f, &p("ffn_up_shexp.weight"), w, d)?,
                                down: matrix(f, &p("ffn_down_shexp.weight"), d, w)?,
                                gate_inp: opt_vec(p("ffn_gate_inp_shexp.weight"), d)?,
                            })),
                        },
                    }),
                },
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

/// Binds a 3-D weight of `n` matrices of `rows` × `cols` (GGUF dims `[cols, rows, n]`).
fn experts(
    f: &GgufFile,
    name: &str,
    n: usize,
    rows: usize,
    cols: usize,
) -> Result<Experts, EngineError> {
    let expected = vec![cols as u64, rows as u64, n as u64];
    let all = tensor(f, name, expected, n * rows, cols)?;
    Ok(Experts { all, rows })
}

/// Binds a 2-D weight of `rows` × `cols` (GGUF dims `[cols, rows]`).
pub(crate) fn matrix(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Matrix, EngineError> {
    tensor(f, name, vec![cols as u64, rows as u64], rows, cols)
}

/// Binds a weight of GGUF dims `expected`, viewed as `rows` × `cols`.
fn tensor(
    f: &GgufFile,
    name: &str,
    expected: Vec<u64>,
    rows: usize,
    cols: usize,
) -> Result<Matrix, EngineError> {
    let t = info(f, name)?;
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
        row_bytes: n_bytes / rows,
        first_row: 0,
        packed: None,
        copy: None,
    })
}

/// Every dense layer's matrices: Q, K, V, O and the FFN's gate, up and down.
fn layer_matrices(layers: &mut [LayerWeights]) -> Vec<&mut Matrix> {
    let mut ms: Vec<&mut Matrix> = Vec::new();
    for l in layers {
        ms.extend([&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo]);
        if let Ffn::Dense { gate, up, down } = &mut l.ffn {
            ms.extend([gate, up, down]);
        }
    }
    ms
}

/// Reads an optional 2-D table of `rows` rows of `cols` values (GGUF dims `[cols, rows]`)
/// into f32, row after row.
fn opt_table(
    f: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Option<Vec<f32>>, EngineError> {
    let Some(t) = f.tensor(name) else {
        return Ok(None);
    };
    let expected = vec![cols as u64, rows as u64];
    if t.dims != expected {
        return Err(EngineError::BadTensorShape {
            name: name.into(),
            expected,
            found: t.dims.clone(),
        });
    }
    let mut out = vec![0.0f32; rows * cols];
    ferrox_kernels::dequantize_row(t.ty, f.tensor_data(t), &mut out);
    Ok(Some(out))
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
