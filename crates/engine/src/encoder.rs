//! The BERT-family encoder (GGUF `bert`): what an embedding model computes, laid out as
//! llama.cpp lays it out, so that its GGUF files mean here what they mean there.
//!
//! Input row = token embedding + token-type embedding 0 + learned position embedding, then a
//! LayerNorm. Each layer is post-norm: `h = LN(x + Wo·attn(x) + bo)`, then
//! `x = LN(h + W_down·GELU(W_up·h + b_up) + b_down)`, every projection with its bias,
//! attention bidirectional over the token's own sequence (scale 1/√head_dim, no rotary
//! embedding). GELU is the tanh approximation, llama.cpp's; the output is the last layer's
//! rows, with no final norm (pooling happens in the scheduler).
//!
//! An encoder keeps no state between steps: the KV cache the scheduler leases is not
//! touched, and every chunk must be a whole sequence from position 0 (the scheduler gives
//! an encoder's rows their whole prompt in one step). A sequence's rows never depend on
//! another's in the batch: the matmuls are batch-invariant and attention stays within a
//! sequence, so a batched input is bit-identical to itself alone.

use std::sync::Mutex;

use ferrox_gguf::GgufFile;
use ferrox_kernels::{matmul, ThreadPool};

use crate::config::ModelConfig;
use crate::error::EngineError;
use crate::kv::SeqChunk;
use crate::weights::{matrix, vector, Matrix};

/// A LayerNorm's weight and bias.
struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

/// A projection with its bias.
struct Linear {
    w: Matrix,
    b: Vec<f32>,
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// Every tensor of an encoder.
pub struct EncoderWeights {
    token_embd: Matrix,
    /// Row 0 (the first segment's): the only one llama.cpp ever adds.
    token_type0: Vec<f32>,
    position_embd: Matrix,
    embd_norm: Norm,
    layers: Vec<Layer>,
    /// A cross-encoder's classification head (a reranker): `cls` (d → d, then tanh) and
    /// `cls.output` (d → labels), either or both, as llama.cpp's rank pooling applies them.
    head: Option<Box<(Option<Linear>, Option<Linear>)>>,
}

impl EncoderWeights {
    /// Whether the file has a classification head (a reranker).
    pub fn has_head(&self) -> bool {
        self.head.is_some()
    }

    pub fn bind(f: &GgufFile, cfg: &ModelConfig) -> Result<EncoderWeights, EngineError> {
        let (d, ff) = (cfg.n_embd, cfg.n_ff);
        let norm = |name: &str| -> Result<Norm, EngineError> {
            Ok(Norm {
                w: vector(f, &format!("{name}.weight"), d)?,
                b: vector(f, &format!("{name}.bias"), d)?,
            })
        };
        let linear = |name: &str, rows: usize, cols: usize| -> Result<Linear, EngineError> {
            Ok(Linear {
                w: matrix(f, &format!("{name}.weight"), rows, cols)?,
                b: vector(f, &format!("{name}.bias"), rows)?,
            })
        };
        let token_type0 = match f.tensor("token_types.weight") {
            Some(t) => {
                let types = usize::try_from(t.rows()).unwrap_or(0).max(1);
                let m = matrix(f, "token_types.weight", types, d)?;
                let mut row = vec![0.0; d];
                let data = m.view(f).data;
                ferrox_kernels::dequantize_row(m.ty, &data[..m.row_bytes()], &mut row);
                row
            }
            None => vec![0.0; d],
        };
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for il in 0..cfg.n_layer {
            let p = |s: &str| format!("blk.{il}.{s}");
            layers.push(Layer {
                q: linear(&p("attn_q"), d, d)?,
                k: linear(&p("attn_k"), d, d)?,
                v: linear(&p("attn_v"), d, d)?,
                o: linear(&p("attn_output"), d, d)?,
                attn_norm: norm(&p("attn_output_norm"))?,
                up: linear(&p("ffn_up"), ff, d)?,
                down: linear(&p("ffn_down"), d, ff)?,
                out_norm: norm(&p("layer_output_norm"))?,
            });
        }
        if f.tensor("cls.norm.weight").is_some() {
            return Err(EngineError::UnsupportedTensor {
                name: "cls.norm.weight".into(),
                reason: "a normed classification head (ModernBERT's) is unsupported",
            });
        }
        let dense = match f.tensor("cls.weight") {
            Some(_) => Some(linear("cls", d, d)?),
            None => None,
        };
        let out = match f.tensor("cls.output.weight") {
            Some(t) => {
                let labels = usize::try_from(t.rows()).unwrap_or(0);
                Some(linear("cls.output", labels, d)?)
            }
            None => None,
        };
        let head = (dense.is_some() || out.is_some()).then(|| Box::new((dense, out)));
        Ok(EncoderWeights {
            head,
            token_embd: matrix(f, "token_embd.weight", cfg.n_vocab, d)?,
            token_type0,
            position_embd: matrix(f, "position_embd.weight", cfg.context_length, d)?,
            embd_norm: norm("token_embd_norm")?,
            layers,
        })
    }
}

/// What an encoder's forward reads besides its weights.
pub struct Encoder<'a> {
    pub file: &'a GgufFile,
    pub pool: &'a ThreadPool,
    pub config: &'a ModelConfig,
    pub weights: &'a EncoderWeights,
}

impl Encoder<'_> {
    /// Checks that every chunk is a whole sequence from position 0 that asks for no logits.
    pub fn validate(&self, chunks: &[SeqChunk]) -> Result<(), EngineError> {
        for c in chunks {
            if c.logit_rows > 0 {
                return Err(EngineError::EncoderStep("has no logits"));
            }
            if c.start_pos != 0 {
                return Err(EngineError::EncoderStep(
                    "takes each sequence whole, from position 0",
                ));
            }
            if c.tokens.len() > self.config.context_length {
                return Err(EngineError::EncoderStep(
                    "sequence is longer than its position table",
                ));
            }
        }
        Ok(())
    }

    /// Appends the last layer's rows of every chunk that wants them to `hidden`.
    pub fn forward(&self, chunks: &[SeqChunk], hidden: &mut Vec<f32>) {
        let cfg = self.config;
        let w = self.weights;
        let d = cfg.n_embd;
        let n: usize = chunks.iter().map(|c| c.tokens.len()).sum();
        if n == 0 {
            return;
        }
        let mut x = vec![0.0f32; n * d];
        let mut tmp = vec![0.0f32; d];
        let mut row = 0;
        for c in chunks {
            for (pos, &t) in c.tokens.iter().enumerate() {
                let out = &mut x[row * d..(row + 1) * d];
                self.row_of(&w.token_embd, t as usize, out);
                self.row_of(&w.position_embd, pos, &mut tmp);
                for ((o, p), t0) in out.iter_mut().zip(&tmp).zip(&w.token_type0) {
                    *o += p + t0;
                }
                row += 1;
            }
        }
        layer_norm_rows(&mut x, &w.embd_norm, cfg.rms_eps);
        let spans: Vec<(usize, usize)> = chunks
            .iter()
            .scan(0, |at, c| {
                let span = (*at, c.tokens.len());
                *at += c.tokens.len();
                Some(span)
            })
            .collect();
        let (mut q, mut k, mut v) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n * d]);
        let mut att = vec![0.0; n * d];
        let mut o = vec![0.0; n * d];
        let mut up = vec![0.0; n * cfg.n_ff];
        for l in &w.layers {
            self.linear(&l.q, &x, n, &mut q);
            self.linear(&l.k, &x, n, &mut k);
            self.linear(&l.v, &x, n, &mut v);
            self.attend(&spans, &q, &k, &v, &mut att);
            self.linear(&l.o, &att, n, &mut o);
            add_into(&mut o, &x);
            layer_norm_rows(&mut o, &l.attn_norm, cfg.rms_eps);
            // `o` is h now; the FFN reads it and adds it back.
            self.linear(&l.up, &o, n, &mut up);
            up.iter_mut().for_each(|u| *u = gelu(*u));
            self.linear(&l.down, &up, n, &mut x);
            add_into(&mut x, &o);
            layer_norm_rows(&mut x, &l.out_norm, cfg.rms_eps);
        }
        for (c, &(at, len)) in chunks.iter().zip(&spans) {
            if c.want_hidden {
                hidden.extend_from_slice(&x[at * d..(at + len) * d]);
            }
        }
    }

    /// A reranker's scores for one pooled (CLS) row: `cls.output · tanh(cls · x + b) + b'`
    /// (either layer absent: skipped), one per label; `None` without a head.
    pub fn classify(&self, pooled: &[f32]) -> Option<Vec<f32>> {
        let (dense, out) = self.weights.head.as_deref()?;
        let mut x = pooled.to_vec();
        if let Some(l) = dense {
            let mut y = vec![0.0; l.w.rows];
            self.linear(l, &x, 1, &mut y);
            x = y.into_iter().map(f32::tanh).collect();
        }
        if let Some(l) = out {
            let mut y = vec![0.0; l.w.rows];
            self.linear(l, &x, 1, &mut y);
            x = y;
        }
        Some(x)
    }

    fn row_of(&self, m: &Matrix, i: usize, out: &mut [f32]) {
        let rb = m.row_bytes();
        let data = m.view(self.file).data;
        ferrox_kernels::dequantize_row(m.ty, &data[i * rb..(i + 1) * rb], out);
    }

    fn linear(&self, l: &Linear, x: &[f32], n: usize, out: &mut [f32]) {
        matmul(self.pool, &l.w.view(self.file), x, n, out);
        for row in out.chunks_exact_mut(l.b.len()) {
            row.iter_mut().zip(&l.b).for_each(|(v, &b)| *v += b);
        }
    }

    /// Bidirectional attention of every row over its own sequence, one task per (sequence,
    /// head) on the pool.
    fn attend(&self, spans: &[(usize, usize)], q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
        let cfg = self.config;
        let (d, hd, heads) = (cfg.n_embd, cfg.head_dim, cfg.n_head);
        let scale = 1.0 / (hd as f32).sqrt();
        let results: Vec<Mutex<Vec<f32>>> = (0..spans.len() * heads)
            .map(|_| Mutex::new(Vec::new()))
            .collect();
        self.pool.for_each(results.len(), &|task| {
            let (at, len) = spans[task / heads];
            let h = task % heads;
            let col = |r: usize| (at + r) * d + h * hd;
            let mut res = vec![0.0f32; len * hd];
            let mut scores = vec![0.0f32; len];
            for i in 0..len {
                let qi = &q[col(i)..col(i) + hd];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    let kj = &k[col(j)..col(j) + hd];
                    *s = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                    max = max.max(*s);
                }
                let mut sum = 0.0;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let r = &mut res[i * hd..(i + 1) * hd];
                for (j, s) in scores.iter().enumerate() {
                    let p = s / sum;
                    let vj = &v[col(j)..col(j) + hd];
                    r.iter_mut().zip(vj).for_each(|(o, &x)| *o += p * x);
                }
            }
            *results[task].lock().unwrap_or_else(|e| e.into_inner()) = res;
        });
        for (task, res) in results.into_iter().enumerate() {
            let (at, len) = spans[task / heads];
            let h = task % heads;
            let res = res.into_inner().unwrap_or_else(|e| e.into_inner());
            for i in 0..len {
                let dst = (at + i) * d + h * hd;
                out[dst..dst + hd].copy_from_slice(&res[i * hd..(i + 1) * hd]);
            }
        }
    }
}

/// LayerNorm of every row: mean and biased variance, then weight and bias.
fn layer_norm_rows(x: &mut [f32], norm: &Norm, eps: f32) {
    let d = norm.w.len();
    for row in x.chunks_exact_mut(d) {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(&norm.w).zip(&norm.b) {
            *v = (*v - mean) * inv * w + b;
        }
    }
}

/// GELU, tanh approximation.
fn gelu(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}
