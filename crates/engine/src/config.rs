//! A model's hyper-parameters, read once from GGUF metadata.
//!
//! Architecture differences are data here (`RopeStyle`, `Activation`, which norms exist, which
//! layers slide), so the forward pass in `model.rs` is one function for every family.

use ferrox_gguf::{GgufFile, Value};

use crate::error::EngineError;
use crate::kv::KvShape;

/// The model families this engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Gemma3,
    Llama,
    Qwen2,
    Qwen3,
    /// An encoder (BERT family): bidirectional attention, learned positions, post-norm
    /// layers; it embeds and cannot generate (`encoder.rs`).
    Bert,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, EngineError> {
        match name {
            "gemma3" => Ok(Arch::Gemma3),
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "bert" => Ok(Arch::Bert),
            other => Err(EngineError::UnsupportedArchitecture(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma3 => "gemma3",
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Bert => "bert",
        }
    }

    /// Whether the architecture only encodes (embeds): no causal mask, no generation.
    pub fn is_encoder(self) -> bool {
        self == Arch::Bert
    }
}

/// How rotary embeddings pair up dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1): llama.cpp's "norm" rope, used for `llama` GGUFs (whose Q/K
    /// weights the converter permuted to match).
    Interleaved,
    /// Halves (i, i + d/2): GPT-NeoX style, used by Gemma and Qwen.
    Neox,
}

/// The gated FFN's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SiLU(gate) * up (Llama, Qwen).
    Silu,
    /// GELU with the tanh approximation (Gemma).
    GeluTanh,
}

/// Everything the forward pass needs to know about a model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// The norms' epsilon: RMSNorm's for decoders, LayerNorm's for an encoder.
    pub rms_eps: f32,
    pub context_length: usize,
    pub rope_style: RopeStyle,
    /// RoPE base for global-attention layers.
    pub rope_base: f32,
    /// RoPE base for sliding-window layers (Gemma 3: 10000 unless the file says otherwise).
    pub rope_base_swa: f32,
    /// Position multiplier for global layers (1 / linear rope scaling factor).
    pub rope_freq_scale: f32,
    /// Sliding-window size in tokens; 0 = every layer is global.
    pub sliding_window: usize,
    /// With a window: every `swa_period`-th layer (il % period == period - 1) is global.
    pub swa_period: usize,
    pub activation: Activation,
    /// Multiply token embeddings by sqrt(n_embd) (Gemma).
    pub scale_embeddings: bool,
    /// Scale applied to queries before Q·K (1/sqrt(head_dim) for every supported model but
    /// Gemma 3 27B, which uses 1/sqrt(n_embd / n_head)).
    pub attn_scale: f32,
    /// Gemma 2 style tanh soft-capping of the final logits, if the file sets it.
    pub final_logit_softcap: Option<f32>,
    /// How the file says its embeddings pool (`{arch}.pooling_type`, llama.cpp's numbering:
    /// 0 none, 1 mean, 2 cls, 3 last, 4 rank), if it says.
    pub pooling_type: Option<usize>,
    /// Whether a token attends only to earlier ones (every decoder); an encoder attends to
    /// its whole sequence.
    pub causal: bool,
}

impl ModelConfig {
    /// The config of the GGUF at `path`, from its header alone (the weights are mapped, not
    /// read): what a server needs to price a model before loading it.
    pub fn read(path: impl AsRef<std::path::Path>) -> Result<ModelConfig, EngineError> {
        ModelConfig::from_gguf(&GgufFile::open(path)?)
    }

    /// Reads the hyper-parameters of `f`'s architecture. `n_vocab` comes from the embedding
    /// tensor, the one number the forward pass really depends on.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, EngineError> {
        let arch_name = get_str(f, "general.architecture")?;
        let arch = Arch::from_name(arch_name)?;
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");

        let n_embd = get_usize(f, &key("embedding_length"))?;
        let n_layer = get_usize(f, &key("block_count"))?;
        let n_head = get_usize(f, &key("attention.head_count"))?;
        let n_head_kv = opt_usize(f, &key("attention.head_count_kv"))?.unwrap_or(n_head);
        let n_ff = get_usize(f, &key("feed_forward_length"))?;
        let context_length = get_usize(f, &key("context_length"))?;
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(bad(
                &key("attention.head_count_kv"),
                "must divide head_count",
            ));
        }
        let head_dim = match opt_usize(f, &key("attention.key_length"))? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => return Err(bad(&key("attention.head_count"), "does not divide n_embd")),
        };
        if let Some(v) = opt_usize(f, &key("attention.value_length"))? {
            if v != head_dim {
                return Err(bad(&key("attention.value_length"), "must equal key_length"));
            }
        }
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(bad(
                &key("attention.key_length"),
                "must be even and non-zero",
            ));
        }
        let rms_eps = if arch.is_encoder() {
            opt_f32(f, &key("attention.layer_norm_epsilon"))?.unwrap_or(1e-12)
        } else {
            opt_f32(f, &key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6)
        };
        let causal = match f.get(&key("attention.causal")) {
            None => !arch.is_encoder(),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| bad(&key("attention.causal"), "expected a bool"))?,
        };
        if causal == arch.is_encoder() {
            return Err(bad(
                &key("attention.causal"),
                if causal {
                    "an encoder is not causal"
                } else {
                    "a decoder must be causal"
                },
            ));
        }
        let rope_base = opt_f32(f, &key("rope.freq_base"))?.unwrap_or(10000.0);
        let rope_base_swa = opt_f32(f, &key("rope.freq_base_swa"))?.unwrap_or(10000.0);
        let rope_freq_scale = match f.get(&key("rope.scaling.type")).and_then(Value::as_str) {
            None | Some("none") => 1.0,
            Some("linear") => {
                let factor = opt_f32(f, &key("rope.scaling.factor"))?.unwrap_or(1.0);
                if factor <= 0.0 {
                    return Err(bad(&key("rope.scaling.factor"), "must be positive"));
                }
                1.0 / factor
            }
            Some(other) => {
                return Err(bad(
                    &key("rope.scaling.type"),
                    &format!("`{other}` unsupported"),
                ))
            }
        };
        let sliding_window = match arch {
            Arch::Gemma3 => opt_usize(f, &key("attention.sliding_window"))?.unwrap_or(0),
            _ => 0,
        };
        let attn_scale = if arch == Arch::Gemma3 && n_layer == 62 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        let (rope_style, activation) = match arch {
            Arch::Gemma3 => (RopeStyle::Neox, Activation::GeluTanh),
            Arch::Llama => (RopeStyle::Interleaved, Activation::Silu),
            Arch::Qwen2 | Arch::Qwen3 => (RopeStyle::Neox, Activation::Silu),
            // No rotary embedding (learned positions); GELU as llama.cpp computes it.
            Arch::Bert => (RopeStyle::Neox, Activation::GeluTanh),
        };
        let embd = f
            .tensor("token_embd.weight")
            .ok_or_else(|| EngineError::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        let n_vocab = usize::try_from(embd.rows()).map_err(|_| bad("token_embd", "too large"))?;
        Ok(ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            rms_eps,
            context_length,
            rope_style,
            rope_base,
            rope_base_swa,
            rope_freq_scale,
            sliding_window,
            swa_period: 6,
            activation,
            scale_embeddings: arch == Arch::Gemma3,
            attn_scale,
            final_logit_softcap: opt_f32(f, &key("final_logit_softcapping"))?,
            pooling_type: opt_usize(f, &key("pooling_type"))?,
            causal,
        })
    }

    /// Whether layer `il` attends only to the last `sliding_window` positions.
    pub fn is_sliding(&self, il: usize) -> bool {
        self.sliding_window > 0 && il % self.swa_period != self.swa_period - 1
    }

    /// K/V width of one token in one layer.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Q width (and attention output width) of one token.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// The KV geometry with an f16 cache.
    pub fn kv_shape(&self) -> KvShape {
        KvShape::f16(self.n_layer, self.n_head_kv, self.head_dim)
    }
}

fn bad(key: &str, reason: &str) -> EngineError {
    EngineError::BadMetadata {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

fn get_str<'a>(f: &'a GgufFile, key: &str) -> Result<&'a str, EngineError> {
    match f.get(key) {
        None => Err(EngineError::MissingKey {
            key: key.to_string(),
        }),
        Some(v) => v.as_str().ok_or_else(|| bad(key, "expected a string")),
    }
}

fn opt_usize(f: &GgufFile, key: &str) -> Result<Option<usize>, EngineError> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => {
            let n = v
                .as_u64()
                .ok_or_else(|| bad(key, "expected a non-negative integer"))?;
            // Shapes beyond 2^24 are not models, they are attacks on our allocations.
            if n > (1 << 24) {
                return Err(bad(key, &format!("{n} is implausibly large")));
            }
            Ok(Some(n as usize))
        }
    }
}

fn get_usize(f: &GgufFile, key: &str) -> Result<usize, EngineError> {
    match opt_usize(f, key)? {
        Some(0) => Err(bad(key, "must be non-zero")),
        Some(n) => Ok(n),
        None => Err(EngineError::MissingKey {
            key: key.to_string(),
        }),
    }
}

fn opt_f32(f: &GgufFile, key: &str) -> Result<Option<f32>, EngineError> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => {
            let x = v.as_f32().ok_or_else(|| bad(key, "expected a number"))?;
            if !x.is_finite() {
                return Err(bad(key, "must be finite"));
            }
            Ok(Some(x))
        }
    }
}
