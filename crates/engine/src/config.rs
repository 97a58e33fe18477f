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
    /// Gemma 2: Gemma's layout without Q/K norms, every other layer sliding, and tanh
    /// soft-capping of attention scores and of the final logits.
    Gemma2,
    Llama,
    Qwen2,
    Qwen3,
    /// Qwen 3's mixture of experts (Qwen3-30B-A3B): Qwen 3 attention, every FFN routed.
    Qwen3Moe,
    /// Qwen 2's mixture of experts (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen 2 attention, every
    /// FFN routed (weights not renormalised) plus a shared expert behind a sigmoid gate.
    Qwen2Moe,
    /// OLMoE: RMSNorm over the whole Q and K projections (not per head), every FFN routed.
    Olmoe,
    /// OLMo 2: no norm before either block, an RMSNorm after each (before the residual add),
    /// and OLMoE's whole-projection Q/K norm. (OLMo 3's sliding window is refused.)
    Olmo2,
    /// SmolLM 3: Llama's layout, with every fourth layer attending without RoPE.
    SmolLm3,
    /// Phi-3 / Phi-4: Q/K/V fused in `attn_qkv`, gate and up fused in `ffn_up`.
    Phi3,
    /// GLM-4 (0414, GLM-Z1): Llama's layout with Q/K/V biases, gate and up fused in
    /// `ffn_up`, an RMSNorm after each block as well as before (Gemma's sandwich), and RoPE
    /// on the first half of each head only.
    Glm4,
    /// Mistral 3 (Ministral 3, Devstral Small 2): Llama's layout with YaRN and, past the
    /// original context, queries scaled up with the position (Llama 4's attention
    /// temperature).
    Mistral3,
    /// IBM Granite 3: Llama's layout with multipliers on the embeddings, each block's output,
    /// the attention scores and the logits.
    Granite,
    /// Granite's mixture of experts (softmax router, weights renormalised).
    GraniteMoe,
    /// gpt-oss: attention sinks, biases everywhere, every other layer sliding, YaRN, and
    /// every FFN routed (router bias, softmax over the chosen experts' logits, biased
    /// experts with a clamped SwiGLU).
    GptOss,
    /// An encoder (BERT family): bidirectional attention, learned positions, post-norm
    /// layers; it embeds and cannot generate (`encoder.rs`).
    Bert,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, EngineError> {
        match name {
            "gemma3" => Ok(Arch::Gemma3),
            "gemma2" => Ok(Arch::Gemma2),
            "phi3" => Ok(Arch::Phi3),
            "gpt-oss" => Ok(Arch::GptOss),
            "granite" => Ok(Arch::Granite),
            "glm4" => Ok(Arch::Glm4),
            "mistral3" => Ok(Arch::Mistral3),
            "granitemoe" => Ok(Arch::GraniteMoe),
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            "qwen3moe" => Ok(Arch::Qwen3Moe),
            "qwen2moe" => Ok(Arch::Qwen2Moe),
            "olmoe" => Ok(Arch::Olmoe),
            "olmo2" => Ok(Arch::Olmo2),
            "smollm3" => Ok(Arch::SmolLm3),
            "bert" => Ok(Arch::Bert),
            other => Err(EngineError::UnsupportedArchitecture(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma3 => "gemma3",
            Arch::Gemma2 => "gemma2",
            Arch::Phi3 => "phi3",
            Arch::GptOss => "gpt-oss",
            Arch::Granite => "granite",
            Arch::Glm4 => "glm4",
            Arch::Mistral3 => "mistral3",
            Arch::GraniteMoe => "granitemoe",
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Olmoe => "olmoe",
            Arch::Olmo2 => "olmo2",
            Arch::SmolLm3 => "smollm3",
            Arch::Bert => "bert",
        }
    }

    /// Whether the architecture only encodes (embeds): no causal mask, no generation.
    pub fn is_encoder(self) -> bool {
        self == Arch::Bert
    }

    /// Gemma 2 and 3: embeddings × √d, GELU, post-norms on both blocks.
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }

    /// Whether each block's input is normed (every decoder but OLMo 2, which norms the
    /// blocks' outputs instead).
    pub fn has_pre_norms(self) -> bool {
        self != Arch::Olmo2
    }

    /// Whether each block's output is normed before the residual add (Gemma and GLM-4,
    /// after a pre-norm too; OLMo 2, instead of one).
    pub fn has_post_norms(self) -> bool {
        self.is_gemma() || matches!(self, Arch::Glm4 | Arch::Olmo2)
    }

    /// How the family normalises Q and K before RoPE, if it does.
    pub fn qk_norm(self) -> Option<QkNorm> {
        match self {
            Arch::Gemma3 | Arch::Qwen3 | Arch::Qwen3Moe => Some(QkNorm::PerHead),
            Arch::Olmoe | Arch::Olmo2 => Some(QkNorm::Whole),
            Arch::Gemma2
            | Arch::SmolLm3
            | Arch::Llama
            | Arch::Qwen2
            | Arch::Qwen2Moe
            | Arch::Phi3
            | Arch::Glm4
            | Arch::Mistral3
            | Arch::GptOss
            | Arch::Granite
            | Arch::GraniteMoe
            | Arch::Bert => None,
        }
    }
}

/// Where a family's Q/K RMSNorm applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    /// Each head's `head_dim` values, one weight vector shared by the heads (Gemma 3, Qwen 3).
    PerHead,
    /// The whole projection of a token, one weight per value (OLMoE, OLMo 2).
    Whole,
}

/// A mixture-of-experts FFN's routing: which experts a token uses and with what weights.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer (`{arch}.expert_count`).
    pub n_expert: usize,
    /// Experts each token runs (`{arch}.expert_used_count`).
    pub n_used: usize,
    /// Hidden width of one expert.
    pub n_ff_exp: usize,
    /// Renormalise the chosen experts' probabilities to sum to one (llama.cpp's `norm_w`:
    /// Mixtral and Qwen3-MoE yes, OLMoE no).
    pub norm_weights: bool,
    /// Multiplier on the weights (`{arch}.expert_weights_scale`; 1 when absent).
    pub weights_scale: f32,
    /// How router logits become weights.
    pub gating: Gating,
    /// The experts' activation.
    pub act: ExpertAct,
    /// Width of the shared expert every token also runs (Qwen 2 MoE's, its output scaled by
    /// `sigmoid(ffn_gate_inp_shexp · x)`; Granite MoE's, added as it is); 0: none.
    pub n_ff_shared: usize,
}

/// How an MoE router's logits become the chosen experts' weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gating {
    /// Softmax over every expert, then the largest `n_used` (renormalised if asked).
    Softmax,
    /// The largest `n_used` logits, then a softmax over those alone (gpt-oss).
    SoftmaxOfChosen,
}

/// An expert's gated activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertAct {
    /// `silu(gate) * up`.
    Silu,
    /// gpt-oss's: `g * sigmoid(alpha * g) * (u + 1)` with `g = min(gate, limit)` and
    /// `u = clamp(up, -limit, limit)`.
    SwigluClamped { alpha: f32, limit: f32 },
}

/// YaRN's rotary scaling (llama.cpp's defaults: extrapolation mix 1, betas 32 and 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// The context the model was trained at before scaling (`rope.scaling.original_context_length`).
    pub orig_ctx: usize,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// What the rotations' cos and sin are multiplied by: `rope.scaling.attn_factor` (1) ×
    /// (1 + 0.1 ln factor).
    pub mscale: f32,
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
    /// How many of a head's leading values RoPE rotates (`rope.dimension_count`; GLM-4:
    /// half the head); the rest pass unrotated. The frequencies are spread over these.
    pub rope_dim: usize,
    /// RoPE base for global-attention layers.
    pub rope_base: f32,
    /// RoPE base for sliding-window layers (Gemma 3: 10000 unless the file says otherwise).
    pub rope_base_swa: f32,
    /// Position multiplier for global layers (1 / rope scaling factor, linear or YaRN).
    pub rope_freq_scale: f32,
    /// The same for sliding-window layers (Gemma 3's are unscaled; Gemma 2's and gpt-oss's
    /// share the global scale).
    pub rope_freq_scale_swa: f32,
    /// Every `no_rope_period`-th layer (il % period == period - 1) has no RoPE (SmolLM 3:
    /// 4, as llama.cpp fixes it); 0: every layer ropes.
    pub no_rope_period: usize,
    /// YaRN, when the file asks for it (`rope.scaling.type = yarn`).
    pub yarn: Option<Yarn>,
    /// What the rotations' cos and sin are multiplied by without YaRN
    /// (`rope.scaling.attn_factor`: LongRoPE's √(1 + ln s / ln n), else 1).
    pub rope_attn_factor: f32,
    /// The context the model was trained at before scaling
    /// (`rope.scaling.original_context_length`), if the file says.
    pub rope_orig_ctx: Option<usize>,
    /// Mistral 3's attention temperature (`attention.temperature_scale`): a query at
    /// position `p` is multiplied by `1 + scale · ln(⌊p / period⌋ + 1)`, `period` the
    /// original context (`rope.scaling.original_context_length`), so 1 within it.
    pub attn_temperature: Option<(f32, usize)>,
    /// Sliding-window size in tokens; 0 = every layer is global.
    pub sliding_window: usize,
    /// With a window: every `swa_period`-th layer (il % period == period - 1) is global
    /// (Gemma 3: 6, Gemma 2: 2).
    pub swa_period: usize,
    pub activation: Activation,
    /// Multiply token embeddings by sqrt(n_embd) (Gemma).
    pub scale_embeddings: bool,
    /// Granite's multipliers: on the token embeddings (`embedding_scale`), on each block's
    /// output before the residual add (`residual_scale`), and the logits divided by
    /// `logit_scale`. `None` where the file sets none.
    pub embedding_scale: Option<f32>,
    pub residual_scale: Option<f32>,
    pub logit_scale: Option<f32>,
    /// Scale applied to queries before Q·K (1/sqrt(head_dim) for every supported model but
    /// Gemma 3 27B, which uses 1/sqrt(n_embd / n_head)).
    pub attn_scale: f32,
    /// Gemma 2 style tanh soft-capping of the final logits, if the file sets it.
    pub final_logit_softcap: Option<f32>,
    /// Gemma 2's tanh soft-capping of attention scores (`cap · tanh(s / cap)`, after the
    /// query's scale, before the softmax).
    pub attn_softcap: Option<f32>,
    /// How the file says its embeddings pool (`{arch}.pooling_type`, llama.cpp's numbering:
    /// 0 none, 1 mean, 2 cls, 3 last, 4 rank), if it says.
    pub pooling_type: Option<usize>,
    /// Whether a token attends only to earlier ones (every decoder); an encoder attends to
    /// its whole sequence.
    pub causal: bool,
    /// The routed FFN of a mixture-of-experts model (every layer); `None` for a dense one.
    pub moe: Option<MoeConfig>,
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
        // gpt-oss has only its experts' width.
        let n_ff = match arch {
            Arch::GptOss => opt_usize(f, &key("feed_forward_length"))?.unwrap_or(0),
            _ => get_usize(f, &key("feed_forward_length"))?,
        };
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
        // Gemma 3's local layers default to base 10000; Gemma 2's and gpt-oss's share the
        // global base.
        let rope_base_swa = opt_f32(f, &key("rope.freq_base_swa"))?.unwrap_or(match arch {
            Arch::Gemma2 | Arch::GptOss => rope_base,
            _ => 10000.0,
        });
        let rope_freq_scale = match f.get(&key("rope.scaling.type")).and_then(Value::as_str) {
            None | Some("none") => 1.0,
            Some("linear") => {
                let factor = opt_f32(f, &key("rope.scaling.factor"))?.unwrap_or(1.0);
                if factor <= 0.0 {
                    return Err(bad(&key("rope.scaling.factor"), "must be positive"));
                }
                1.0 / factor
            }
            Some("yarn") => {
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
        let rope_orig_ctx = opt_usize(f, &key("rope.scaling.original_context_length"))?;
        let yarn = match f.get(&key("rope.scaling.type")).and_then(Value::as_str) {
            Some("yarn") if rope_freq_scale != 1.0 => {
                // llama.cpp's magnitude: `attn_factor` × m(1) / m(log_mul), where
                // m(k) = 1 + 0.1 k ln(factor) and m(0) counts as 1 (no multiplier).
                let factor = 1.0 / rope_freq_scale;
                let m = |k: f32| {
                    if factor <= 1.0 {
                        1.0
                    } else {
                        0.1 * k * factor.ln() + 1.0
                    }
                };
                let log_mul = opt_f32(f, &key("rope.scaling.yarn_log_multiplier"))?.unwrap_or(0.0);
                let attn = opt_f32(f, &key("rope.scaling.attn_factor"))?.unwrap_or(1.0);
                Some(Yarn {
                    orig_ctx: rope_orig_ctx.unwrap_or(context_length),
                    beta_fast: opt_f32(f, &key("rope.scaling.yarn_beta_fast"))?.unwrap_or(32.0),
                    beta_slow: opt_f32(f, &key("rope.scaling.yarn_beta_slow"))?.unwrap_or(1.0),
                    mscale: match log_mul {
                        0.0 => attn * m(1.0),
                        k => attn * m(1.0) / m(k),
                    },
                })
            }
            _ => None,
        };
        let attn_temperature = match opt_f32(f, &key("attention.temperature_scale"))? {
            None | Some(0.0) => None,
            Some(scale) => {
                let period = yarn.map_or(0, |y| y.orig_ctx);
                if period == 0 {
                    return Err(bad(
                        &key("attention.temperature_scale"),
                        "needs YaRN's original context length",
                    ));
                }
                Some((scale, period))
            }
        };
        // Phi-3 files may name a window too; llama.cpp ignores it (every layer global), and so
        // do we, to compute what it computes.
        let sliding_window = match arch {
            Arch::Gemma3 => opt_usize(f, &key("attention.sliding_window"))?.unwrap_or(0),
            Arch::Gemma2 => opt_usize(f, &key("attention.sliding_window"))?.unwrap_or(4096),
            Arch::GptOss => get_usize(f, &key("attention.sliding_window"))?,
            Arch::Olmo2 => match opt_usize(f, &key("attention.sliding_window"))? {
                Some(w) if w > 0 => {
                    return Err(bad(
                        &key("attention.sliding_window"),
                        "OLMo 3's sliding-window layers are unsupported",
                    ))
                }
                _ => 0,
            },
            _ => 0,
        };
        let big_gemma =
            (arch == Arch::Gemma3 && n_layer == 62) || (arch == Arch::Gemma2 && n_layer == 46);
        // A file may set the score scale itself (Granite's `attention.scale`).
        let attn_scale = if let Some(s) = opt_f32(f, &key("attention.scale"))?.filter(|&s| s != 0.0)
        {
            s
        } else if big_gemma {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        let (rope_style, activation) = match arch {
            Arch::Gemma3 | Arch::Gemma2 => (RopeStyle::Neox, Activation::GeluTanh),
            Arch::Phi3 | Arch::GptOss => (RopeStyle::Neox, Activation::Silu),
            Arch::Llama
            | Arch::Granite
            | Arch::GraniteMoe
            | Arch::SmolLm3
            | Arch::Glm4
            | Arch::Mistral3 => (RopeStyle::Interleaved, Activation::Silu),
            Arch::Qwen2
            | Arch::Qwen2Moe
            | Arch::Qwen3
            | Arch::Qwen3Moe
            | Arch::Olmoe
            | Arch::Olmo2 => (RopeStyle::Neox, Activation::Silu),
            // No rotary embedding (learned positions); GELU as llama.cpp computes it.
            Arch::Bert => (RopeStyle::Neox, Activation::GeluTanh),
        };
        let rope_dim = opt_usize(f, &key("rope.dimension_count"))?.unwrap_or(head_dim);
        // Multimodal GLM-4 (GLM-4.1V) files rotate by sections (M-RoPE), another pairing.
        if f.get(&key("rope.dimension_sections")).is_some() {
            return Err(bad(
                &key("rope.dimension_sections"),
                "multi-section RoPE (M-RoPE, vision models) is unsupported",
            ));
        }
        if rope_dim == 0 || rope_dim % 2 != 0 || rope_dim > head_dim {
            return Err(bad(
                &key("rope.dimension_count"),
                "must be even, non-zero and at most the head's size",
            ));
        }
        let moe = moe_config(f, arch, n_ff)?;
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
            rope_dim,
            rope_base,
            rope_base_swa,
            rope_freq_scale,
            sliding_window,
            swa_period: if matches!(arch, Arch::Gemma2 | Arch::GptOss) {
                2
            } else {
                6
            },
            rope_freq_scale_swa: match arch {
                Arch::Gemma2 | Arch::GptOss => rope_freq_scale,
                _ => 1.0,
            },
            no_rope_period: if arch == Arch::SmolLm3 { 4 } else { 0 },
            yarn,
            rope_attn_factor: opt_f32(f, &key("rope.scaling.attn_factor"))?.unwrap_or(1.0),
            rope_orig_ctx,
            attn_temperature,
            activation,
            scale_embeddings: arch.is_gemma(),
            embedding_scale: opt_f32(f, &key("embedding_scale"))?.filter(|&s| s != 0.0),
            residual_scale: opt_f32(f, &key("residual_scale"))?.filter(|&s| s != 0.0),
            logit_scale: opt_f32(f, &key("logit_scale"))?.filter(|&s| s != 0.0),
            attn_scale,
            final_logit_softcap: match opt_f32(f, &key("final_logit_softcapping"))? {
                None if arch == Arch::Gemma2 => Some(30.0),
                cap => cap,
            },
            attn_softcap: match arch {
                Arch::Gemma2 => Some(opt_f32(f, &key("attn_logit_softcapping"))?.unwrap_or(50.0)),
                _ => None,
            },
            pooling_type: opt_usize(f, &key("pooling_type"))?,
            causal,
            moe,
        })
    }

    /// Whether layer `il` attends only to the last `sliding_window` positions.
    pub fn is_sliding(&self, il: usize) -> bool {
        self.sliding_window > 0 && il % self.swa_period != self.swa_period - 1
    }

    /// The attention temperature's factor on a query at `pos` (1 without one), as llama.cpp
    /// computes it.
    pub fn query_temperature(&self, pos: usize) -> f32 {
        match self.attn_temperature {
            None => 1.0,
            Some((scale, period)) => {
                let steps = (pos as f32 / period as f32).floor() as f64;
                ((steps + 1.0).ln() * scale as f64 + 1.0) as f32
            }
        }
    }

    /// Whether layer `il` rotates its queries and keys.
    pub fn ropes(&self, il: usize) -> bool {
        self.no_rope_period == 0 || il % self.no_rope_period != self.no_rope_period - 1
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

/// The routing of `arch`'s experts, or `None` for a dense model. The MoE families must have
/// experts; Llama has them when the file says so (Mixtral). Gating other than softmax
/// (`{arch}.expert_gating_func` 2 = sigmoid, DeepSeek's) and shared experts are refused by
/// name: no supported family uses them and nothing here checks them against llama.cpp.
fn moe_config(f: &GgufFile, arch: Arch, n_ff: usize) -> Result<Option<MoeConfig>, EngineError> {
    let a = arch.name();
    let key = |k: &str| format!("{a}.{k}");
    let n_expert = opt_usize(f, &key("expert_count"))?.unwrap_or(0);
    let routed = matches!(
        arch,
        Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Olmoe | Arch::GptOss | Arch::GraniteMoe
    );
    if n_expert == 0 {
        return if routed {
            Err(EngineError::MissingKey {
                key: key("expert_count"),
            })
        } else {
            Ok(None)
        };
    }
    if !routed && arch != Arch::Llama {
        return Err(bad(
            &key("expert_count"),
            "experts are supported for llama only",
        ));
    }
    let n_used = get_usize(f, &key("expert_used_count"))?;
    if n_used > n_expert {
        return Err(bad(&key("expert_used_count"), "exceeds expert_count"));
    }
    if let Some(g) = opt_usize(f, &key("expert_gating_func"))?.filter(|_| arch != Arch::GptOss) {
        if g != 1 {
            return Err(bad(
                &key("expert_gating_func"),
                &format!("gating function {g} unsupported (only 1, softmax)"),
            ));
        }
    }
    // Qwen 2 MoE always has its shared expert, `feed_forward_length` wide unless the file
    // says; Granite MoE has one (ungated) where the file gives its width; the other
    // families' shared experts are not computed here.
    let n_ff_shared = match arch {
        Arch::Qwen2Moe => opt_usize(f, &key("expert_shared_feed_forward_length"))?
            .filter(|&w| w > 0)
            .unwrap_or(n_ff),
        Arch::GraniteMoe => opt_usize(f, &key("expert_shared_feed_forward_length"))?.unwrap_or(0),
        _ => {
            for shared in ["expert_shared_count", "expert_shared_feed_forward_length"] {
                if opt_usize(f, &key(shared))?.unwrap_or(0) > 0 {
                    return Err(bad(&key(shared), "shared experts unsupported"));
                }
            }
            0
        }
    };
    Ok(Some(MoeConfig {
        n_expert,
        n_used,
        // As llama.cpp reads it: Qwen3-MoE has its own key (else n_ff / n_used); Mixtral-style
        // Llama and OLMoE experts are `feed_forward_length` wide.
        n_ff_exp: match arch {
            Arch::Qwen3Moe | Arch::Qwen2Moe => {
                opt_usize(f, &key("expert_feed_forward_length"))?.unwrap_or(n_ff / n_used)
            }
            Arch::GptOss => get_usize(f, &key("expert_feed_forward_length"))?,
            _ => n_ff,
        },
        norm_weights: !matches!(arch, Arch::Olmoe | Arch::GptOss | Arch::Qwen2Moe),
        weights_scale: opt_f32(f, &key("expert_weights_scale"))?.unwrap_or(1.0),
        gating: match arch {
            Arch::GptOss => Gating::SoftmaxOfChosen,
            _ => Gating::Softmax,
        },
        act: match arch {
            Arch::GptOss => ExpertAct::SwigluClamped {
                alpha: 1.702,
                limit: 7.0,
            },
            _ => ExpertAct::Silu,
        },
        n_ff_shared,
    }))
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
