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

use crate::config::Arch;
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
    /// Type of the 2-D weights (norms are always F32).
    pub weight_type: GgmlType,
    /// The last four vocabulary entries become fill-in-the-middle control tokens
    /// (`<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`, `<|file_sep|>`), for `/infill`.
    pub fim_tokens: bool,
    /// Written as `{arch}.pooling_type` (llama.cpp's numbering) when set; an encoder writes
    /// 2 (CLS) unless this says otherwise.
    pub pooling_type: Option<usize>,
    /// Written as `tokenizer.chat_template` when set (else the architecture's builtin
    /// format applies).
    pub chat_template: Option<String>,
    pub seed: u64,
}

impl SyntheticSpec {
    /// A tiny model of `arch` with f32 weights and the family's usual options (GQA, Gemma's
    /// sliding window on 5 of 6 layers, Qwen 2 biases, an untied head for Llama).
    pub fn tiny(arch: Arch, seed: u64) -> SyntheticSpec {
        SyntheticSpec {
            arch,
            n_vocab: 320,
            n_embd: 64,
            n_layer: if arch == Arch::Gemma3 { 6 } else { 2 },
            n_head: 4,
            // An encoder has as many K/V heads as queries.
            n_head_kv: if arch == Arch::Bert { 4 } else { 2 },
            head_dim: 16,
            n_ff: 96,
            context_length: 256,
            sliding_window: if arch == Arch::Gemma3 { 8 } else { 0 },
            untied_output: arch == Arch::Llama,
            qkv_bias: arch == Arch::Qwen2,
            weight_type: GgmlType::F32,
            fim_tokens: false,
            pooling_type: None,
            chat_template: None,
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
        }
        self
    }
}

/// The vocabulary every synthetic model shares: 4 specials, 256 byte tokens, then pieces
/// (the last four FIM control tokens, with `fim`).
fn vocab(n_vocab: usize, fim: bool) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let mut tokens = vec![
        "<pad>".to_string(),
        "<eos>".into(),
        "<bos>".into(),
        "<unk>".into(),
    ];
    let mut types = vec![3i32, 3, 3, 2];
    for b in 0..=255u8 {
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
    if fim {
        let names = [
            "<|fim_prefix|>",
            "<|fim_suffix|>",
            "<|fim_middle|>",
            "<|file_sep|>",
        ];
        for (k, name) in names.iter().enumerate() {
            let at = tokens.len() - names.len() + k;
            tokens[at] = name.to_string();
            types[at] = 3;
        }
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
    w.add_metadata("general.name", Value::String(format!("synthetic-{a}")));
    w.add_metadata(&format!("{a}.context_length"), u32v(s.context_length));
    w.add_metadata(&format!("{a}.embedding_length"), u32v(s.n_embd));
    w.add_metadata(&format!("{a}.block_count"), u32v(s.n_layer));
    w.add_metadata(&format!("{a}.feed_forward_length"), u32v(s.n_ff));
    w.add_metadata(&format!("{a}.attention.head_count"), u32v(s.n_head));
    w.add_metadata(&format!("{a}.attention.head_count_kv"), u32v(s.n_head_kv));
    w.add_metadata(&format!("{a}.attention.key_length"), u32v(s.head_dim));
    w.add_metadata(&format!("{a}.attention.value_length"), u32v(s.head_dim));
    w.add_metadata(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(10000.0));
    if let Some(p) = s.pooling_type {
        w.add_metadata(&format!("{a}.pooling_type"), u32v(p));
    }
    if s.sliding_window > 0 {
        w.add_metadata(
            &format!("{a}.attention.sliding_window"),
            u32v(s.sliding_window),
        );
    }
    let (tokens, scores, types) = vocab(s.n_vocab, s.fim_tokens);
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
        Value::Bool(s.arch != Arch::Gemma3),
    );

    let (d, q, kv, ff) = (
        s.n_embd,
        s.n_head * s.head_dim,
        s.n_head_kv * s.head_dim,
        s.n_ff,
    );
    let mut matrix = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize| {
        let scale = 1.0 / (cols as f32).sqrt();
        let vals: Vec<f32> = (0..rows * cols)
            .map(|_| rng.gen_range(-1.7..1.7) * scale)
            .collect();
        let mut bytes = Vec::new();
        for row in vals.chunks_exact(cols) {
            ferrox_kernels::quantize_row(s.weight_type, row, &mut bytes);
        }
        w.add_tensor(name, &[cols as u64, rows as u64], s.weight_type, bytes);
    };
    let mut rng2 = StdRng::seed_from_u64(s.seed ^ 0x5eed);
    let mut vector = |w: &mut GgufWriter, name: &str, n: usize| {
        let vals: Vec<f32> = (0..n).map(|_| 1.0 + rng2.gen_range(-0.2..0.2)).collect();
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(name, &[n as u64], GgmlType::F32, bytes);
    };
    // The embedding is scaled up so residual-stream magnitudes look like a real model's.
    matrix(&mut w, "token_embd.weight", s.n_vocab, d);
    if s.untied_output {
        matrix(&mut w, "output.weight", s.n_vocab, d);
    }
    vector(&mut w, "output_norm.weight", d);
    let qk_norm = matches!(s.arch, Arch::Gemma3 | Arch::Qwen3);
    for il in 0..s.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}");
        vector(&mut w, &p("attn_norm.weight"), d);
        matrix(&mut w, &p("attn_q.weight"), q, d);
        matrix(&mut w, &p("attn_k.weight"), kv, d);
        matrix(&mut w, &p("attn_v.weight"), kv, d);
        if s.qkv_bias {
            vector(&mut w, &p("attn_q.bias"), q);
            vector(&mut w, &p("attn_k.bias"), kv);
            vector(&mut w, &p("attn_v.bias"), kv);
        }
        if qk_norm {
            vector(&mut w, &p("attn_q_norm.weight"), s.head_dim);
            vector(&mut w, &p("attn_k_norm.weight"), s.head_dim);
        }
        matrix(&mut w, &p("attn_output.weight"), d, q);
        vector(&mut w, &p("ffn_norm.weight"), d);
        matrix(&mut w, &p("ffn_gate.weight"), ff, d);
        matrix(&mut w, &p("ffn_up.weight"), ff, d);
        matrix(&mut w, &p("ffn_down.weight"), d, ff);
        if s.arch == Arch::Gemma3 {
            vector(&mut w, &p("post_attention_norm.weight"), d);
            vector(&mut w, &p("post_ffw_norm.weight"), d);
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

/// Builds and loads the model of `spec`.
pub fn load(spec: &SyntheticSpec, n_threads: usize) -> Result<Model, EngineError> {
    Model::from_gguf(GgufFile::from_bytes(build_gguf(spec))?, n_threads)
}
