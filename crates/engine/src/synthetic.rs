//! Small random-weight GGUF models of every supported architecture.
//!
//! No Llama or Qwen checkpoint can be fetched on our machines, so tests build their own: a
//! [`SyntheticSpec`] describes the geometry, [`build_gguf`] writes a complete GGUF in memory
//! (metadata the loader reads, a small SentencePiece vocabulary with byte fallback, weights
//! quantized to the chosen type) and [`load`] turns it into a [`Model`]. The same file goes
//! through the same reader and loader as a real model, so these tests cover the real path.

use ferrox_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::{Arch, QkNorm};
use crate::error::EngineError;
use crate::model::Model;

/// Geometry and options of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub context_length: usize,
    /// Gemma 3 only: sliding window (0 = none).
    pub sliding_window: usize,
    /// Write a separate `output.weight` instead of tying the head to the embedding.
    pub untied_output: bool,
    /// Qwen 2 style Q/K/V biases.
    pub qkv_bias: bool,
    /// Type of the 2-D weights (norms and an MoE router are always F32, as llama.cpp's
    /// quantizer leaves them).
    pub weight_type: GgmlType,
    /// Experts per layer (0: a dense FFN); each token uses `n_expert_used` of them, each of
    /// hidden width `n_ff_exp`.
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    /// The last vocabulary entries become these control tokens: [`FIM_TOKENS`] for
    /// `/infill`, [`HARMONY_TOKENS`] for gpt-oss's chat format.
    pub control_tokens: &'static [&'static str],
    /// Written as `{arch}.pooling_type` (llama.cpp's numbering) when set; an encoder writes
    /// 2 (CLS) unless this says otherwise.
    pub pooling_type: Option<usize>,
    /// Written as `tokenizer.chat_template` when set (else the architecture's builtin
    /// format applies).
    pub chat_template: Option<String>,
    /// Give the vocabulary SentencePiece's 256 byte-fallback tokens (ids 4..260). The parity
    /// models have none: llama-server withholds the log-probabilities of a token that ends
    /// in an incomplete UTF-8 sequence, which a random model emits all the time.
    pub byte_tokens: bool,
    /// Write Llama 3.1's `rope_freqs.weight`: a factor per rotated pair dividing its
    /// frequency (1 for the fastest pair up to 8 for the slowest, as Llama 3.1's are).
    pub rope_freq_factors: bool,
    /// Phi-4-mini's rotary setup: RoPE on three quarters of each head, and LongRoPE (long
    /// and short factors, an original context an eighth of the context, so the long ones
    /// apply, and their magnitude `rope.scaling.attn_factor`).
    pub long_rope: bool,
    /// Give an MoE a shared expert (Granite MoE's, ungated; Qwen 2 MoE always has its own).
    pub shared_expert: bool,
    /// Multiplies the final norm's weights: sharper logits (a random model's top two are
    /// otherwise often near-tied, and a near-tie proves nothing in a parity check).
    pub logit_scale: f32,
    pub seed: u64,
}

impl SyntheticSpec {
    /// A tiny model of `arch` with f32 weights and the family's usual options (GQA, Gemma's
    /// sliding window on 5 of 6 layers, Qwen 2 biases, an untied head for Llama and OLMoE,
    /// eight experts of which two run for the MoE families).
    pub fn tiny(arch: Arch, seed: u64) -> SyntheticSpec {
        let moe = matches!(
            arch,
            Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::Olmoe | Arch::GptOss | Arch::GraniteMoe
        );
        // Gemma 3's window pattern needs six layers to show, gpt-oss's alternation and
        // SmolLM 3's layer without RoPE four.
        let layers = match arch {
            a if a.is_gemma() => 6,
            Arch::GptOss | Arch::SmolLm3 => 4,
            _ => 2,
        };
        SyntheticSpec {
            arch,
            n_vocab: 320,
            n_embd: 64,
            n_layer: layers,
            n_head: 4,
            // An encoder and OLMoE have as many K/V heads as queries.
            n_head_kv: if matches!(arch, Arch::Bert | Arch::Olmoe) {
                4
            } else {
                2
            },
            head_dim: 16,
            n_ff: 96,
            context_length: 256,
            sliding_window: if arch.is_gemma() || arch == Arch::GptOss {
                8
            } else {
                0
            },
            untied_output: matches!(
                arch,
                Arch::Llama
                    | Arch::Olmoe
                    | Arch::Olmo2
                    | Arch::Phi3
                    | Arch::GptOss
                    | Arch::Qwen2Moe
            ),
            qkv_bias: matches!(
                arch,
                Arch::Qwen2 | Arch::Qwen2Moe | Arch::GptOss | Arch::Glm4
            ),
            weight_type: GgmlType::F32,
            n_expert: if moe { 8 } else { 0 },
            n_expert_used: if moe { 2 } else { 0 },
            n_ff_exp: if moe { 32 } else { 0 },
            control_tokens: &[],
            pooling_type: None,
            chat_template: None,
            byte_tokens: true,
            rope_freq_factors: false,
            long_rope: false,
            shared_expert: false,
            logit_scale: 1.0,
            seed,
        }
    }

    /// The same model with every 2-D weight quantized to `ty` (dims widened to 256 so the
    /// K-quants' 256-value blocks fit).
    pub fn quantized(mut self, ty: GgmlType) -> SyntheticSpec {
        self.weight_type = ty;
        if ty.block_elems() > 32 {
            self.n_embd = 256;
            self.n_head = 8;
            self.head_dim = 32;
            self.n_ff = 256;
            if self.n_expert > 0 {
                self.n_ff_exp = 256;
            }
        }
        self
    }

    /// The model each architecture's llama.cpp parity goldens are made with
    /// (`tests/parity.rs`, `scripts/gen-parity-goldens.sh`): larger than [`Self::tiny`] so
    /// that the layers do real work, sharp logits, and f32 weights: both engines then
    /// multiply in f32 without quantizing activations, so their hidden states differ by
    /// rounding only. (With Q8_0 weights the two engines' 8-bit activations differ enough to
    /// flip an MoE router's near-tied choices at ~6 % of positions, each a large but
    /// legitimate divergence; the formats are checked on their own elsewhere.) `moe` gives a `llama` experts (Mixtral's layout).
    pub fn parity(arch: Arch, moe: bool) -> SyntheticSpec {
        let mut s = SyntheticSpec::tiny(arch, 20261202);
        s.n_vocab = 512;
        s.n_embd = 128;
        s.n_layer = match arch {
            a if a.is_gemma() => 6,
            Arch::GptOss | Arch::SmolLm3 => 4,
            _ => 3,
        };
        s.n_head = 4;
        s.n_head_kv = if arch == Arch::Olmoe { 4 } else { 2 };
        s.head_dim = 32;
        s.n_ff = 256;
        s.context_length = 2048;
        s.logit_scale = 5.0;
        s.byte_tokens = false;
        if s.n_expert > 0 {
            s.n_ff_exp = 64;
        }
        if moe {
            s = s.with_experts(8, 2, 64);
        }
        s
    }

    /// A BERT cross-encoder with a classification head (rank pooling): the reranker the
    /// server's `/rerank` tests and its llama.cpp goldens use.
    pub fn reranker() -> SyntheticSpec {
        SyntheticSpec {
            n_vocab: 512,
            n_embd: 64,
            n_ff: 128,
            context_length: 128,
            pooling_type: Some(4),
            ..SyntheticSpec::tiny(Arch::Bert, 20261203)
        }
    }

    /// Every model the parity goldens cover, by the name their golden file carries.
    pub fn parity_models() -> Vec<(&'static str, SyntheticSpec)> {
        vec![
            ("gemma3", SyntheticSpec::parity(Arch::Gemma3, false)),
            ("gemma2", SyntheticSpec::parity(Arch::Gemma2, false)),
            ("phi3", SyntheticSpec::parity(Arch::Phi3, false)),
            (
                "phi4-mini",
                SyntheticSpec {
                    long_rope: true,
                    ..SyntheticSpec::parity(Arch::Phi3, false)
                },
            ),
            ("llama", SyntheticSpec::parity(Arch::Llama, false)),
            (
                "llama3.1",
                SyntheticSpec {
                    rope_freq_factors: true,
                    ..SyntheticSpec::parity(Arch::Llama, false)
                },
            ),
            ("qwen2", SyntheticSpec::parity(Arch::Qwen2, false)),
            ("qwen3", SyntheticSpec::parity(Arch::Qwen3, false)),
            ("qwen3moe", SyntheticSpec::parity(Arch::Qwen3Moe, false)),
            ("qwen2moe", SyntheticSpec::parity(Arch::Qwen2Moe, false)),
            ("olmoe", SyntheticSpec::parity(Arch::Olmoe, false)),
            ("mixtral", SyntheticSpec::parity(Arch::Llama, true)),
            ("gpt-oss", SyntheticSpec::parity(Arch::GptOss, false)),
            ("granite", SyntheticSpec::parity(Arch::Granite, false)),
            ("granitemoe", SyntheticSpec::parity(Arch::GraniteMoe, false)),
            (
                "granitemoe-shared",
                SyntheticSpec {
                    shared_expert: true,
                    ..SyntheticSpec::parity(Arch::GraniteMoe, false)
                },
            ),
            ("olmo2", SyntheticSpec::parity(Arch::Olmo2, false)),
            ("smollm3", SyntheticSpec::parity(Arch::SmolLm3, false)),
            ("glm4", SyntheticSpec::parity(Arch::Glm4, false)),
            ("mistral3", SyntheticSpec::parity(Arch::Mistral3, false)),
        ]
    }

    /// The same model with a routed FFN of `n_expert` experts, `n_used` per token (a Llama
    /// with experts is Mixtral's layout).
    pub fn with_experts(
        mut self,
        n_expert: usize,
        n_used: usize,
        n_ff_exp: usize,
    ) -> SyntheticSpec {
        self.n_expert = n_expert;
        self.n_expert_used = n_used;
        self.n_ff_exp = n_ff_exp;
        self
    }
}

/// Fill-in-the-middle markers (`/infill`).
pub const FIM_TOKENS: &[&str] = &[
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|file_sep|>",
];

/// gpt-oss's harmony markers, control tokens as its GGUF has them (the loader makes
/// `<|end|>` and the header markers text, as llama.cpp does).
pub const HARMONY_TOKENS: &[&str] = &[
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
];

/// The vocabulary every synthetic model shares: 4 specials, 256 byte tokens (unless
/// `bytes` is false), then pieces, the last of them replaced by `control` tokens.
fn vocab(n_vocab: usize, control: &[&str], bytes: bool) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let mut tokens = vec![
        "<pad>".to_string(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
    ];
    let mut types = vec![3i32, 3, 3, 2];
    for b in (0..=255u8).filter(|_| bytes) {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let letters = "abcdefghijklmnopqrstuvwxyz";
    'outer: for a in letters.chars() {
        for piece in [format!("\u{2581}{a}"), a.to_string()] {
            if tokens.len() >= n_vocab {
                break 'outer;
            }
            tokens.push(piece);
            types.push(1);
        }
    }
    let mut i = 0;
    while tokens.len() < n_vocab {
        tokens.push(format!("\u{2581}w{i}"));
        types.push(1);
        i += 1;
    }
    for (k, name) in control.iter().enumerate() {
        let at = tokens.len() - control.len() + k;
        tokens[at] = name.to_string();
        types[at] = 3;
    }
    let scores = (0..tokens.len()).map(|i| Value::F32(-(i as f32))).collect();
    (
        tokens.into_iter().map(Value::String).collect(),
        scores,
        types.into_iter().map(Value::I32).collect(),
    )
}

/// The WordPiece vocabulary of a synthetic encoder: BERT's five specials, word-start pieces
/// (`▁` + text), continuation pieces (bare text), filler words.
pub const BERT_PIECES: &[&str] = &[
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "\u{2581}hello",
    "\u{2581}world",
    "\u{2581}play",
    "ing",
    "\u{2581}un",
    "aff",
    "able",
    "\u{2581},",
    "\u{2581}!",
    "\u{2581}.",
    "\u{2581}the",
    "\u{2581}cat",
    "\u{2581}sat",
    "\u{2581}中",
    "\u{2581}文",
    "s",
    "ed",
];

/// Writes the GGUF bytes of `spec`.
pub fn build_gguf(spec: &SyntheticSpec) -> Vec<u8> {
    if spec.arch == Arch::Bert {
        return build_encoder(spec);
    }
    let s = spec;
    let a = s.arch.name();
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut w = GgufWriter::new();
    let u32v = |n: usize| Value::U32(n as u32);
    w.add_metadata("general.architecture", Value::String(a.into()));
    // Not "synthetic-phi3": llama.cpp applies Phi-3's vocabulary fix-ups to any model whose
    // name contains "phi3", and they need Phi-3's real special tokens.
    let name = match s.arch {
        Arch::Phi3 => "synthetic-phi".to_string(),
        _ => format!("synthetic-{a}"),
    };
    w.add_metadata("general.name", Value::String(name));
    w.add_metadata(&format!("{a}.context_length"), u32v(s.context_length));
    w.add_metadata(&format!("{a}.embedding_length"), u32v(s.n_embd));
    w.add_metadata(&format!("{a}.block_count"), u32v(s.n_layer));
    // The Qwen MoEs give their experts their own width (Qwen 2's `feed_forward_length` is
    // its shared expert's); Llama's (Mixtral's) and OLMoE's are `feed_forward_length` wide.
    let qwen_moe = matches!(s.arch, Arch::Qwen3Moe | Arch::Qwen2Moe);
    let own_width = s.n_expert > 0 && !qwen_moe;
    let ffn_width = if own_width { s.n_ff_exp } else { s.n_ff };
    w.add_metadata(&format!("{a}.feed_forward_length"), u32v(ffn_width));
    w.add_metadata(&format!("{a}.attention.head_count"), u32v(s.n_head));
    w.add_metadata(&format!("{a}.attention.head_count_kv"), u32v(s.n_head_kv));
    w.add_metadata(&format!("{a}.attention.key_length"), u32v(s.head_dim));
    w.add_metadata(&format!("{a}.attention.value_length"), u32v(s.head_dim));
    w.add_metadata(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    if s.arch == Arch::GptOss {
        // gpt-oss's own: base 150000 and YaRN ×32 over a 4096-token original context.
        w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(150000.0));
        w.add_metadata(
            &format!("{a}.rope.scaling.type"),
            Value::String("yarn".into()),
        );
        w.add_metadata(&format!("{a}.rope.scaling.factor"), Value::F32(32.0));
        w.add_metadata(
            &format!("{a}.rope.scaling.original_context_length"),
            u32v(4096),
        );
    } else {
        w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(10000.0));
    }
    if s.arch == Arch::Mistral3 {
        // Ministral 3's kind of YaRN, with a short original context so that a test's positions
        // cross it and the attention temperature takes effect (1 within it).
        w.add_metadata(
            &format!("{a}.rope.scaling.type"),
            Value::String("yarn".into()),
        );
        w.add_metadata(&format!("{a}.rope.scaling.factor"), Value::F32(4.0));
        let orig = (s.context_length / 64).max(8);
        w.add_metadata(
            &format!("{a}.rope.scaling.original_context_length"),
            u32v(orig),
        );
        w.add_metadata(
            &format!("{a}.rope.scaling.yarn_log_multiplier"),
            Value::F32(0.5),
        );
        w.add_metadata(&format!("{a}.attention.temperature_scale"), Value::F32(0.3));
    }
    if s.long_rope {
        w.add_metadata(
            &format!("{a}.rope.dimension_count"),
            u32v(s.head_dim * 3 / 4),
        );
        w.add_metadata(
            &format!("{a}.rope.scaling.original_context_length"),
            u32v((s.context_length / 8).max(8)),
        );
        w.add_metadata(&format!("{a}.rope.scaling.attn_factor"), Value::F32(1.19));
    }
    if s.arch == Arch::Glm4 {
        // GLM-4 rotates half of each head.
        w.add_metadata(&format!("{a}.rope.dimension_count"), u32v(s.head_dim / 2));
    }
    if matches!(s.arch, Arch::Granite | Arch::GraniteMoe) {
        // Granite's multipliers, away from 1 so that each one shows.
        w.add_metadata(&format!("{a}.embedding_scale"), Value::F32(4.0));
        w.add_metadata(&format!("{a}.residual_scale"), Value::F32(0.5));
        w.add_metadata(&format!("{a}.logit_scale"), Value::F32(2.0));
        w.add_metadata(&format!("{a}.attention.scale"), Value::F32(0.25));
    }
    if s.arch == Arch::Gemma2 {
        // Caps low enough to bite on a random model's scores and logits (the defaults, 50
        // and 30, would leave them almost untouched and untested).
        w.add_metadata(&format!("{a}.attn_logit_softcapping"), Value::F32(3.0));
        w.add_metadata(&format!("{a}.final_logit_softcapping"), Value::F32(12.0));
    }
    if s.n_expert > 0 {
        w.add_metadata(&format!("{a}.expert_count"), u32v(s.n_expert));
        w.add_metadata(&format!("{a}.expert_used_count"), u32v(s.n_expert_used));
        if qwen_moe || s.arch == Arch::GptOss {
            w.add_metadata(&format!("{a}.expert_feed_forward_length"), u32v(s.n_ff_exp));
        }
        if s.arch == Arch::Qwen2Moe || s.shared_expert {
            w.add_metadata(
                &format!("{a}.expert_shared_feed_forward_length"),
                u32v(s.n_ff),
            );
        }
    }
    if let Some(p) = s.pooling_type {
        w.add_metadata(&format!("{a}.pooling_type"), u32v(p));
    }
    if s.sliding_window > 0 {
        w.add_metadata(
            &format!("{a}.attention.sliding_window"),
            u32v(s.sliding_window),
        );
    }
    let (tokens, scores, types) = vocab(s.n_vocab, s.control_tokens, s.byte_tokens);
    w.add_metadata("tokenizer.ggml.model", Value::String("llama".into()));
    w.add_metadata("tokenizer.ggml.pre", Value::String("default".into()));
    w.add_metadata("tokenizer.ggml.tokens", Value::Array(tokens));
    w.add_metadata("tokenizer.ggml.scores", Value::Array(scores));
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(types));
    w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(2));
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(1));
    w.add_metadata("tokenizer.ggml.unknown_token_id", Value::U32(3));
    w.add_metadata("tokenizer.ggml.padding_token_id", Value::U32(0));
    if let Some(t) = &s.chat_template {
        w.add_metadata("tokenizer.chat_template", Value::String(t.clone()));
    }
    w.add_metadata("tokenizer.ggml.add_bos_token", Value::Bool(true));
    w.add_metadata("tokenizer.ggml.add_eos_token", Value::Bool(false));
    w.add_metadata(
        "tokenizer.ggml.add_space_prefix",
        Value::Bool(!s.arch.is_gemma()),
    );

    let (d, q, kv, ff) = (
        s.n_embd,
        s.n_head * s.head_dim,
        s.n_head_kv * s.head_dim,
        s.n_ff,
    );
    // `n` matrices of `rows` x `cols` in type `ty` (experts: a 3-D tensor).
    let mut tensor = |w: &mut GgufWriter, name: &str, n: usize, rows: usize, cols: usize, ty| {
        let scale = 1.0 / (cols as f32).sqrt();
        let vals: Vec<f32> = (0..n * rows * cols)
            .map(|_| rng.gen_range(-1.7..1.7) * scale)
            .collect();
        let mut bytes = Vec::new();
        for row in vals.chunks_exact(cols) {
            ferrox_kernels::quantize_row(ty, row, &mut bytes);
        }
        let mut dims = vec![cols as u64, rows as u64];
        if name.ends_with("_exps.weight") {
            dims.push(n as u64);
        }
        w.add_tensor(name, &dims, ty, bytes);
    };
    let wt = s.weight_type;
    let mut rng2 = StdRng::seed_from_u64(s.seed ^ 0x5eed);
    let mut vector = |w: &mut GgufWriter, name: &str, n: usize, scale: f32| {
        let vals: Vec<f32> = (0..n)
            .map(|_| (1.0 + rng2.gen_range(-0.2..0.2)) * scale)
            .collect();
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, &[n as u64], GgmlType::F32, bytes);
    };
    // Biases and gpt-oss's sinks: small values of either sign, from their own stream (the
    // other tensors of the older families keep their values).
    let mut rng3 = StdRng::seed_from_u64(s.seed ^ 0xb1a5);
    let mut bias = |w: &mut GgufWriter, name: &str, dims: &[u64]| {
        let n = dims.iter().product::<u64>() as usize;
        let vals: Vec<f32> = (0..n).map(|_| rng3.gen_range(-0.5..0.5)).collect();
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, dims, GgmlType::F32, bytes);
    };
    let oss = s.arch == Arch::GptOss;
    // The embedding is scaled up so residual-stream magnitudes look like a real model's.
    tensor(&mut w, "token_embd.weight", 1, s.n_vocab, d, wt);
    if s.untied_output {
        tensor(&mut w, "output.weight", 1, s.n_vocab, d, wt);
    }
    vector(&mut w, "output_norm.weight", d, s.logit_scale);
    // Per-pair frequency factors: 1 for the fastest pair up to `top` for the slowest.
    let factors = |w: &mut GgufWriter, name: &str, n: usize, top: f32| {
        let f: Vec<f32> = (0..n)
            .map(|i| top.powf(i as f32 / (n - 1).max(1) as f32))
            .collect();
        let bytes = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, &[n as u64], GgmlType::F32, bytes);
    };
    if s.rope_freq_factors {
        factors(&mut w, "rope_freqs.weight", s.head_dim / 2, 8.0);
    }
    if s.long_rope {
        let n = s.head_dim * 3 / 8;
        factors(&mut w, "rope_factors_long.weight", n, 16.0);
        factors(&mut w, "rope_factors_short.weight", n, 1.5);
    }
    let qk_norm = s.arch.qk_norm();
    // Phi-3 stores Q/K/V as one `attn_qkv` and gate/up as one `ffn_up`; GLM-4 only the
    // latter.
    let fused = s.arch == Arch::Phi3;
    let fused_ffn = fused || s.arch == Arch::Glm4;
    for il in 0..s.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}");
        if s.arch.has_pre_norms() {
            vector(&mut w, &p("attn_norm.weight"), d, 1.0);
        }
        if fused {
            tensor(&mut w, &p("attn_qkv.weight"), 1, q + 2 * kv, d, wt);
        } else {
            tensor(&mut w, &p("attn_q.weight"), 1, q, d, wt);
            tensor(&mut w, &p("attn_k.weight"), 1, kv, d, wt);
            tensor(&mut w, &p("attn_v.weight"), 1, kv, d, wt);
        }
        if s.qkv_bias {
            vector(&mut w, &p("attn_q.bias"), q, 1.0);
            vector(&mut w, &p("attn_k.bias"), kv, 1.0);
            vector(&mut w, &p("attn_v.bias"), kv, 1.0);
        }
        match qk_norm {
            Some(QkNorm::PerHead) => {
                vector(&mut w, &p("attn_q_norm.weight"), s.head_dim, 1.0);
                vector(&mut w, &p("attn_k_norm.weight"), s.head_dim, 1.0);
            }
            Some(QkNorm::Whole) => {
                vector(&mut w, &p("attn_q_norm.weight"), q, 1.0);
                vector(&mut w, &p("attn_k_norm.weight"), kv, 1.0);
            }
            None => {}
        }
        tensor(&mut w, &p("attn_output.weight"), 1, d, q, wt);
        if oss {
            bias(&mut w, &p("attn_output.bias"), &[d as u64]);
            // Sinks near 6: above most scores, so they take a real share.
            vector(&mut w, &p("attn_sinks.weight"), s.n_head, 6.0);
            // gpt-oss's pre-FFN norm goes by this name.
            vector(&mut w, &p("post_attention_norm.weight"), d, 1.0);
        } else if s.arch.has_pre_norms() {
            vector(&mut w, &p("ffn_norm.weight"), d, 1.0);
        }
        if s.n_expert > 0 {
            let (ne, fe) = (s.n_expert, s.n_ff_exp);
            tensor(&mut w, &p("ffn_gate_inp.weight"), 1, ne, d, GgmlType::F32);
            tensor(&mut w, &p("ffn_gate_exps.weight"), ne, fe, d, wt);
            tensor(&mut w, &p("ffn_up_exps.weight"), ne, fe, d, wt);
            tensor(&mut w, &p("ffn_down_exps.weight"), ne, d, fe, wt);
            if s.arch == Arch::Qwen2Moe || s.shared_expert {
                tensor(&mut w, &p("ffn_gate_shexp.weight"), 1, ff, d, wt);
                tensor(&mut w, &p("ffn_up_shexp.weight"), 1, ff, d, wt);
                tensor(&mut w, &p("ffn_down_shexp.weight"), 1, d, ff, wt);
            }
            if s.arch == Arch::Qwen2Moe {
                // Its gate: small values of either sign, so the sigmoid is not saturated.
                bias(&mut w, &p("ffn_gate_inp_shexp.weight"), &[d as u64]);
            }
            if oss {
                bias(&mut w, &p("ffn_gate_inp.bias"), &[ne as u64]);
                bias(&mut w, &p("ffn_gate_exps.bias"), &[fe as u64, ne as u64]);
                bias(&mut w, &p("ffn_up_exps.bias"), &[fe as u64, ne as u64]);
                bias(&mut w, &p("ffn_down_exps.bias"), &[d as u64, ne as u64]);
            }
        } else if fused_ffn {
            tensor(&mut w, &p("ffn_up.weight"), 1, 2 * ff, d, wt);
            tensor(&mut w, &p("ffn_down.weight"), 1, d, ff, wt);
        } else {
            tensor(&mut w, &p("ffn_gate.weight"), 1, ff, d, wt);
            tensor(&mut w, &p("ffn_up.weight"), 1, ff, d, wt);
            tensor(&mut w, &p("ffn_down.weight"), 1, d, ff, wt);
        }
        if s.arch.has_post_norms() {
            vector(&mut w, &p("post_attention_norm.weight"), d, 1.0);
            vector(&mut w, &p("post_ffw_norm.weight"), d, 1.0);
        }
    }
    w.to_bytes()
}

/// An encoder's GGUF: llama.cpp's `bert` keys and tensor names, a WordPiece vocabulary of
/// [`BERT_PIECES`] and filler up to `n_vocab`, random LayerNorm weights and biases.
fn build_encoder(s: &SyntheticSpec) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut w = GgufWriter::new();
    let u32v = |n: usize| Value::U32(n as u32);
    w.add_metadata("general.architecture", Value::String("bert".into()));
    w.add_metadata("general.name", Value::String("synthetic-bert".into()));
    w.add_metadata("bert.context_length", u32v(s.context_length));
    w.add_metadata("bert.embedding_length", u32v(s.n_embd));
    w.add_metadata("bert.block_count", u32v(s.n_layer));
    w.add_metadata("bert.feed_forward_length", u32v(s.n_ff));
    w.add_metadata("bert.attention.head_count", u32v(s.n_head));
    w.add_metadata("bert.attention.layer_norm_epsilon", Value::F32(1e-12));
    w.add_metadata("bert.attention.causal", Value::Bool(false));
    w.add_metadata("bert.pooling_type", u32v(s.pooling_type.unwrap_or(2)));
    let mut tokens: Vec<String> = BERT_PIECES.iter().map(|t| t.to_string()).collect();
    let mut i = 0;
    while tokens.len() < s.n_vocab {
        tokens.push(format!("\u{2581}w{i}"));
        i += 1;
    }
    let types = (0..tokens.len()).map(|i| Value::I32(if i < 5 { 3 } else { 1 }));
    w.add_metadata("tokenizer.ggml.model", Value::String("bert".into()));
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(tokens.into_iter().map(Value::String).collect()),
    );
    w.add_metadata("tokenizer.ggml.token_type", Value::Array(types.collect()));
    w.add_metadata("tokenizer.ggml.token_type_count", u32v(2));
    w.add_metadata("tokenizer.ggml.padding_token_id", u32v(0));
    w.add_metadata("tokenizer.ggml.unknown_token_id", u32v(1));
    w.add_metadata("tokenizer.ggml.bos_token_id", u32v(2));
    w.add_metadata("tokenizer.ggml.seperator_token_id", u32v(3));
    w.add_metadata("tokenizer.ggml.mask_token_id", u32v(4));

    let (d, ff) = (s.n_embd, s.n_ff);
    let mut random = |n: usize, scale: f32| -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(-1.7..1.7) * scale).collect()
    };
    let mut tensors: Vec<(String, Vec<u64>, Vec<f32>)> = Vec::new();
    let mut matrix = |name: String, rows: usize, cols: usize, tensors: &mut Vec<_>| {
        let vals = random(rows * cols, 1.0 / (cols as f32).sqrt());
        tensors.push((name, vec![cols as u64, rows as u64], vals));
    };
    matrix("token_embd.weight".into(), s.n_vocab, d, &mut tensors);
    matrix("token_types.weight".into(), 2, d, &mut tensors);
    matrix(
        "position_embd.weight".into(),
        s.context_length,
        d,
        &mut tensors,
    );
    let mut norms = vec!["token_embd_norm".to_string()];
    let mut biases: Vec<(String, usize)> = Vec::new();
    for il in 0..s.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}");
        for (name, rows, cols) in [
            ("attn_q", d, d),
            ("attn_k", d, d),
            ("attn_v", d, d),
            ("attn_output", d, d),
            ("ffn_up", ff, d),
            ("ffn_down", d, ff),
        ] {
            matrix(p(&format!("{name}.weight")), rows, cols, &mut tensors);
            biases.push((p(&format!("{name}.bias")), rows));
        }
        norms.push(p("attn_output_norm"));
        norms.push(p("layer_output_norm"));
    }
    // A reranker (rank pooling) gets a classification head: `cls` (d -> d) and one label.
    if s.pooling_type == Some(4) {
        matrix("cls.weight".into(), d, d, &mut tensors);
        biases.push(("cls.bias".into(), d));
        matrix("cls.output.weight".into(), 1, d, &mut tensors);
        biases.push(("cls.output.bias".into(), 1));
    }
    for (name, dims, vals) in tensors {
        let mut bytes = Vec::new();
        for row in vals.chunks_exact(dims[0] as usize) {
            ferrox_kernels::quantize_row(s.weight_type, row, &mut bytes);
        }
        w.add_tensor(&name, &dims, s.weight_type, bytes);
    }
    let mut rng2 = StdRng::seed_from_u64(s.seed ^ 0x5eed);
    let f32s = |w: &mut GgufWriter, name: &str, vals: Vec<f32>| {
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, &[vals.len() as u64], GgmlType::F32, bytes);
    };
    for norm in norms {
        let weight = (0..d).map(|_| 1.0 + rng2.gen_range(-0.2..0.2)).collect();
        f32s(&mut w, &format!("{norm}.weight"), weight);
        let bias = (0..d).map(|_| rng2.gen_range(-0.1..0.1)).collect();
        f32s(&mut w, &format!("{norm}.bias"), bias);
    }
    for (name, n) in biases {
        let bias = (0..n).map(|_| rng2.gen_range(-0.1..0.1)).collect();
        f32s(&mut w, &name, bias);
    }
    w.to_bytes()
}

/// FNV-1a (64 bits) of a file's bytes: how a golden file names the exact model it was made
/// from, so that a changed writer fails loudly instead of comparing different weights.
pub fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Builds and loads the model of `spec`.
pub fn load(spec: &SyntheticSpec, n_threads: usize) -> Result<Model, EngineError> {
    Model::from_gguf(GgufFile::from_bytes(build_gguf(spec))?, n_threads)
}
