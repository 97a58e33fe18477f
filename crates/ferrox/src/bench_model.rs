//! `ferrox bench model`: random-weight GGUFs at the shapes people serve, for speed work.
//!
//! The models users run cannot be downloaded here, but what a forward pass costs does not
//! depend on the weights' values: only on the shapes and the tensor types. So this writes a
//! model of a real shape (a Gemma-3-4B or a Llama-3-8B), weights drawn from N(0, 0.02), norm
//! weights one, quantized with the project's own `quantize_row` into the tensor-type mix
//! llama.cpp's presets produce, with the default model's tokenizer and metadata, through the
//! project's own GGUF writer. llama.cpp loads the same file, so the two are compared on the
//! very same bytes. Files are cached (`~/.cache/ferrox/bench-models/`), never committed.
//!
//! The Q4_K_M mix, as llama.cpp's `llama_tensor_get_type` makes it: Q4_K everywhere but the
//! output head (the tied embedding of a model without `output.weight`) in Q6_K, and
//! `attn_v` / `ffn_down` in Q6_K on the layers `use_more_bits` picks (the first and last
//! eighth, and every third in between). Q8_0: every matrix Q8_0.

use std::path::{Path, PathBuf};

use ferrox_gguf::{GgmlType, GgufFile, GgufWriter, Value};

/// A model shape to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Gemma 3 4B: d 2560, 34 layers, 8/4 heads x 256, FFN 10240, vocab 262144, tied head.
    #[value(name = "gemma3-4b")]
    Gemma3_4b,
    /// Gemma 3 270M: d 640, 18 layers, 4/1 heads x 256, FFN 2048, vocab 262144, tied head: a
    /// draft model for the Gemma 3 shapes (`--model-draft`). Its 640-value rows hold no
    /// K-quant block, so `--quant q8_0` only.
    #[value(name = "gemma3-270m")]
    Gemma3_270m,
    /// Llama 3 8B: d 4096, 32 layers, 32/8 heads x 128, FFN 14336, its own output head (the
    /// default model's 262144-token SentencePiece vocabulary instead of Llama's 128256).
    #[value(name = "llama3-8b")]
    Llama3_8b,
    /// Qwen3-30B-A3B, a mixture of experts: d 2048, 48 layers, 32/4 heads x 128, 128 experts
    /// of width 768 with 8 used per token, vocab 262144 (Qwen's is 151936); 3.3B parameters
    /// read per token. `--layers 12` writes a quarter of it (~4.6 GB at Q4_K_M).
    #[value(name = "qwen3moe-30b-a3b")]
    Qwen3Moe30bA3b,
    /// gpt-oss-20b: d 2880, 24 layers, 64/8 heads x 64, 32 experts of width 2880 with 4 used
    /// per token, biases, attention sinks, windows of 128 on every other layer, YaRN; use
    /// `--quant mxfp4` (experts MXFP4, the rest Q8_0, as the published GGUF mixes them).
    #[value(name = "gpt-oss-20b")]
    GptOss20b,
}

/// llama.cpp's quantization presets this writer reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
    /// Experts in MXFP4, everything else Q8_0 (gpt-oss).
    #[value(name = "mxfp4")]
    Mxfp4,
}

#[derive(clap::Args, Debug, Clone)]
pub struct BenchModelArgs {
    /// The shape to write.
    #[arg(long, value_enum, default_value = "gemma3-4b")]
    pub shape: Shape,
    /// The tensor-type mix, as llama.cpp's preset of that name.
    #[arg(long = "quant", value_enum, default_value = "q4_k_m")]
    pub preset: Preset,
    /// Fewer layers than the shape has (a quick check of the writer; the file name says so).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Where to write it [default: the cache, `bench-models/<shape>-<quant>.gguf`].
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Write it again even if the file is there.
    #[arg(long)]
    pub force: bool,
}

/// The numbers of a shape.
struct Dims {
    arch: &'static str,
    name: &'static str,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
    n_ff: usize,
    context: usize,
    /// Experts per layer, used per token, width of one (a mixture of experts).
    experts: Option<(usize, usize, usize)>,
}

impl Shape {
    fn dims(self) -> Dims {
        match self {
            Shape::Gemma3_4b => Dims {
                arch: "gemma3",
                name: "gemma3-4b",
                n_embd: 2560,
                n_layer: 34,
                n_head: 8,
                n_head_kv: 4,
                head_dim: 256,
                n_ff: 10240,
                context: 131072,
                experts: None,
            },
            Shape::Gemma3_270m => Dims {
                arch: "gemma3",
                name: "gemma3-270m",
                n_embd: 640,
                n_layer: 18,
                n_head: 4,
                n_head_kv: 1,
                head_dim: 256,
                n_ff: 2048,
                context: 32768,
                experts: None,
            },
            Shape::Llama3_8b => Dims {
                arch: "llama",
                name: "llama3-8b",
                n_embd: 4096,
                n_layer: 32,
                n_head: 32,
                n_head_kv: 8,
                head_dim: 128,
                n_ff: 14336,
                context: 8192,
                experts: None,
            },
            Shape::Qwen3Moe30bA3b => Dims {
                arch: "qwen3moe",
                name: "qwen3moe-30b-a3b",
                n_embd: 2048,
                n_layer: 48,
                n_head: 32,
                n_head_kv: 4,
                head_dim: 128,
                n_ff: 6144,
                context: 40960,
                experts: Some((128, 8, 768)),
            },
            Shape::GptOss20b => Dims {
                arch: "gpt-oss",
                name: "gpt-oss-20b",
                n_embd: 2880,
                n_layer: 24,
                n_head: 64,
                n_head_kv: 8,
                head_dim: 64,
                n_ff: 2880,
                context: 131072,
                experts: Some((32, 4, 2880)),
            },
        }
    }
}

impl Preset {
    fn name(self) -> &'static str {
        match self {
            Preset::Q4KM => "q4_k_m",
            Preset::Q8_0 => "q8_0",
            Preset::Mxfp4 => "mxfp4",
        }
    }

    /// llama.cpp's `general.file_type` of the preset.
    fn file_type(self) -> u32 {
        match self {
            Preset::Q4KM => 15,
            Preset::Q8_0 => 7,
            // llama.cpp's MOSTLY_MXFP4_MOE.
            Preset::Mxfp4 => 38,
        }
    }

    /// The type of matrix `name` of layer `layer` of `n_layer`, or of a model-level matrix
    /// (`layer: None`).
    fn type_of(self, name: &str, layer: Option<usize>, n_layer: usize) -> GgmlType {
        match self {
            Preset::Q8_0 => GgmlType::Q8_0,
            Preset::Mxfp4 => match name {
                "ffn_gate_exps" | "ffn_up_exps" | "ffn_down_exps" => GgmlType::MXFP4,
                _ => GgmlType::Q8_0,
            },
            Preset::Q4KM => match (name, layer) {
                ("output", None) => GgmlType::Q6_K,
                ("attn_v" | "ffn_down" | "ffn_down_exps", Some(i)) if use_more_bits(i, n_layer) => {
                    GgmlType::Q6_K
                }
                _ => GgmlType::Q4_K,
            },
        }
    }
}

/// llama.cpp's choice of the layers that get more bits: the first and last eighth (integer
/// division, as there), and every third layer in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    let eighth = n / 8;
    i < eighth || i >= 7 * n / 8 || (i - eighth) % 3 == 2
}

/// Writes the model (unless it is cached) and prints its path.
pub fn bench_model(args: BenchModelArgs) -> Result<(), String> {
    let dims = args.shape.dims();
    if !dims.n_embd.is_multiple_of(256) && args.preset == Preset::Q4KM {
        return Err(format!(
            "the {} shape's rows of {} values hold no K-quant block: use --quant q8_0",
            dims.name, dims.n_embd
        ));
    }
    let layers = args.layers.unwrap_or(dims.n_layer);
    let path = args.out.clone().unwrap_or_else(|| {
        let suffix = match args.layers {
            Some(n) => format!("-{n}layers"),
            None => String::new(),
        };
        ferrox_engine::cache::cache_dir()
            .join("bench-models")
            .join(format!("{}{suffix}-{}.gguf", dims.name, args.preset.name()))
    });
    if path.exists() && !args.force {
        println!("{}", path.display());
        return Ok(());
    }
    let tokenizer = crate::pull::ensure_default_model()?;
    let started = std::time::Instant::now();
    write(&path, args.shape, args.preset, layers, &tokenizer)?;
    eprintln!(
        "ferrox: wrote {} ({:.2} GB) in {:.0} s",
        path.display(),
        std::fs::metadata(&path).map_or(0, |m| m.len()) as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );
    println!("{}", path.display());
    Ok(())
}

/// Writes `shape` with `layers` layers in `preset`'s mix to `path`, with the tokenizer (and,
/// for a Gemma shape, the architecture's other metadata) of the GGUF at `tokenizer_from`.
pub fn write(
    path: &Path,
    shape: Shape,
    preset: Preset,
    layers: usize,
    tokenizer_from: &Path,
) -> Result<(), String> {
    let d = shape.dims();
    let source =
        GgufFile::open(tokenizer_from).map_err(|e| format!("{}: {e}", tokenizer_from.display()))?;
    let mut w = GgufWriter::new();
    let a = d.arch;
    // The source's tokenizer, and for the same architecture its other keys (rope, sliding
    // window, epsilon); the shape's numbers override what they must.
    for (key, value) in source.metadata() {
        let keep = key.starts_with("tokenizer.") || key.starts_with(&format!("{a}."));
        if keep {
            w.add_metadata(key, value.clone());
        }
    }
    let u32v = |n: usize| Value::U32(n as u32);
    w.add_metadata("general.architecture", Value::String(a.into()));
    w.add_metadata(
        "general.name",
        Value::String(format!(
            "ferrox bench {} {} (random weights)",
            d.name,
            preset.name()
        )),
    );
    w.add_metadata("general.file_type", Value::U32(preset.file_type()));
    w.add_metadata("general.quantization_version", Value::U32(2));
    w.add_metadata(&format!("{a}.context_length"), u32v(d.context));
    w.add_metadata(&format!("{a}.embedding_length"), u32v(d.n_embd));
    w.add_metadata(&format!("{a}.block_count"), u32v(layers));
    w.add_metadata(&format!("{a}.feed_forward_length"), u32v(d.n_ff));
    w.add_metadata(&format!("{a}.attention.head_count"), u32v(d.n_head));
    w.add_metadata(&format!("{a}.attention.head_count_kv"), u32v(d.n_head_kv));
    w.add_metadata(&format!("{a}.attention.key_length"), u32v(d.head_dim));
    w.add_metadata(&format!("{a}.attention.value_length"), u32v(d.head_dim));
    match shape {
        Shape::Gemma3_4b => {
            w.add_metadata(&format!("{a}.attention.sliding_window"), u32v(1024));
        }
        // The default model is this shape: its own window and rope keys, copied above.
        Shape::Gemma3_270m => {}
        Shape::GptOss20b => {
            let (n, used, width) = d.experts.expect("an MoE shape");
            w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(150_000.0));
            w.add_metadata(
                &format!("{a}.rope.scaling.type"),
                Value::String("yarn".into()),
            );
            w.add_metadata(&format!("{a}.rope.scaling.factor"), Value::F32(32.0));
            w.add_metadata(
                &format!("{a}.rope.scaling.original_context_length"),
                u32v(4096),
            );
            w.add_metadata(&format!("{a}.attention.sliding_window"), u32v(128));
            w.add_metadata(
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-5),
            );
            w.add_metadata(&format!("{a}.expert_count"), u32v(n));
            w.add_metadata(&format!("{a}.expert_used_count"), u32v(used));
            w.add_metadata(&format!("{a}.expert_feed_forward_length"), u32v(width));
        }
        Shape::Qwen3Moe30bA3b => {
            let (n, used, width) = d.experts.expect("an MoE shape");
            w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(1_000_000.0));
            w.add_metadata(
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-6),
            );
            w.add_metadata(&format!("{a}.expert_count"), u32v(n));
            w.add_metadata(&format!("{a}.expert_used_count"), u32v(used));
            w.add_metadata(&format!("{a}.expert_feed_forward_length"), u32v(width));
        }
        Shape::Llama3_8b => {
            w.add_metadata(&format!("{a}.rope.freq_base"), Value::F32(500_000.0));
            w.add_metadata(&format!("{a}.rope.dimension_count"), u32v(d.head_dim));
            w.add_metadata(
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-5),
            );
        }
    }
    let n_vocab = source
        .get_array("tokenizer.ggml.tokens")
        .map_err(|e| format!("{}: {e}", tokenizer_from.display()))?
        .len();
    let (q, kv) = (d.n_head * d.head_dim, d.n_head_kv * d.head_dim);
    let seed = std::cell::Cell::new(0x5eed_u64);
    // `n` matrices of `rows` x `cols` (n > 1: a 3-D tensor of stacked experts).
    let tensor = |w: &mut GgufWriter,
                  name: &str,
                  kind: &str,
                  layer: Option<usize>,
                  (n, rows, cols): (usize, usize, usize)| {
        seed.set(seed.get().wrapping_add(0x9e37_79b9_7f4a_7c15));
        let ty = preset.type_of(kind, layer, layers);
        let mut dims = vec![cols as u64, rows as u64];
        if n > 1 {
            dims.push(n as u64);
        }
        w.add_tensor(name, &dims, ty, random_rows(ty, n * rows, cols, seed.get()));
    };
    let matrix = |w: &mut GgufWriter,
                  name: &str,
                  kind: &str,
                  layer: Option<usize>,
                  rows: usize,
                  cols: usize| tensor(w, name, kind, layer, (1, rows, cols));
    let zeros = |w: &mut GgufWriter, name: &str, dims: &[usize]| {
        let n: usize = dims.iter().product();
        let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w.add_tensor(name, &dims, GgmlType::F32, vec![0u8; 4 * n]);
    };
    let ones = |w: &mut GgufWriter, name: &str, n: usize| {
        let bytes = std::iter::repeat_n(1.0f32.to_le_bytes(), n)
            .flatten()
            .collect();
        w.add_tensor(name, &[n as u64], GgmlType::F32, bytes);
    };
    match shape {
        // Gemma ties its head to the embedding: the embedding is the head's type.
        Shape::Gemma3_4b | Shape::Gemma3_270m => matrix(
            &mut w,
            "token_embd.weight",
            "output",
            None,
            n_vocab,
            d.n_embd,
        ),
        Shape::Llama3_8b | Shape::Qwen3Moe30bA3b | Shape::GptOss20b => {
            matrix(
                &mut w,
                "token_embd.weight",
                "token_embd",
                None,
                n_vocab,
                d.n_embd,
            );
            matrix(&mut w, "output.weight", "output", None, n_vocab, d.n_embd);
        }
    }
    ones(&mut w, "output_norm.weight", d.n_embd);
    for il in 0..layers {
        let p = |x: &str| format!("blk.{il}.{x}.weight");
        let l = Some(il);
        ones(&mut w, &p("attn_norm"), d.n_embd);
        matrix(&mut w, &p("attn_q"), "attn_q", l, q, d.n_embd);
        matrix(&mut w, &p("attn_k"), "attn_k", l, kv, d.n_embd);
        matrix(&mut w, &p("attn_v"), "attn_v", l, kv, d.n_embd);
        matrix(&mut w, &p("attn_output"), "attn_output", l, d.n_embd, q);
        let oss = shape == Shape::GptOss20b;
        if oss {
            // Biases, sinks and the pre-FFN norm under gpt-oss's name.
            let b = |x: &str| format!("blk.{il}.{x}.bias");
            for (name, n) in [
                ("attn_q", q),
                ("attn_k", kv),
                ("attn_v", kv),
                ("attn_output", d.n_embd),
            ] {
                zeros(&mut w, &b(name), &[n]);
            }
            zeros(&mut w, &p("attn_sinks"), &[d.n_head]);
            ones(&mut w, &p("post_attention_norm"), d.n_embd);
        } else {
            ones(&mut w, &p("ffn_norm"), d.n_embd);
        }
        match d.experts {
            None => {
                matrix(&mut w, &p("ffn_gate"), "ffn_gate", l, d.n_ff, d.n_embd);
                matrix(&mut w, &p("ffn_up"), "ffn_up", l, d.n_ff, d.n_embd);
                matrix(&mut w, &p("ffn_down"), "ffn_down", l, d.n_embd, d.n_ff);
            }
            Some((n, _, width)) => {
                // The router stays f32, as llama.cpp's quantizer leaves it.
                let router = random_rows(GgmlType::F32, n, d.n_embd, il as u64);
                let dims = [d.n_embd as u64, n as u64];
                w.add_tensor(&p("ffn_gate_inp"), &dims, GgmlType::F32, router);
                let e = d.n_embd;
                tensor(
                    &mut w,
                    &p("ffn_gate_exps"),
                    "ffn_gate_exps",
                    l,
                    (n, width, e),
                );
                tensor(&mut w, &p("ffn_up_exps"), "ffn_up_exps", l, (n, width, e));
                tensor(
                    &mut w,
                    &p("ffn_down_exps"),
                    "ffn_down_exps",
                    l,
                    (n, e, width),
                );
                if oss {
                    let b = |x: &str| format!("blk.{il}.{x}.bias");
                    zeros(&mut w, &b("ffn_gate_inp"), &[n]);
                    zeros(&mut w, &b("ffn_gate_exps"), &[width, n]);
                    zeros(&mut w, &b("ffn_up_exps"), &[width, n]);
                    zeros(&mut w, &b("ffn_down_exps"), &[e, n]);
                }
            }
        }
        if shape == Shape::Qwen3Moe30bA3b {
            ones(&mut w, &p("attn_q_norm"), d.head_dim);
            ones(&mut w, &p("attn_k_norm"), d.head_dim);
        }
        if matches!(shape, Shape::Gemma3_4b | Shape::Gemma3_270m) {
            ones(&mut w, &p("attn_q_norm"), d.head_dim);
            ones(&mut w, &p("attn_k_norm"), d.head_dim);
            ones(&mut w, &p("post_attention_norm"), d.n_embd);
            ones(&mut w, &p("post_ffw_norm"), d.n_embd);
        }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Written beside, then renamed: a cut-off write never passes for a cached model.
    let partial = path.with_extension("gguf.partial");
    w.write_to(&partial)
        .map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `rows` rows of `cols` values from N(0, 0.02), quantized to `ty`, on every core.
fn random_rows(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let row_bytes = ferrox_kernels::row_bytes(ty, cols);
    let mut out = vec![0u8; rows * row_bytes];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = rows.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per * row_bytes).enumerate() {
            s.spawn(move || {
                let mut rng = Normal::new(seed ^ (t as u64).wrapping_mul(0xa076_1d64_78bd_642f));
                let mut row = vec![0f32; cols];
                for dst in chunk.chunks_mut(row_bytes) {
                    row.iter_mut().for_each(|v| *v = 0.02 * rng.next());
                    ferrox_kernels::quantize_row_into(ty, &row, dst);
                }
            });
        }
    });
    out
}

/// Standard normal samples: xorshift64* and Box-Muller (fast; the values only need to look
/// like trained weights, not to be a good generator).
struct Normal {
    state: u64,
    spare: Option<f32>,
}

impl Normal {
    fn new(seed: u64) -> Normal {
        Normal {
            state: seed | 1,
            spare: None,
        }
    }

    fn uniform(&mut self) -> f32 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        (bits as f32 + 0.5) / (1u64 << 24) as f32
    }

    fn next(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let (u, v) = (self.uniform(), self.uniform());
        let r = (-2.0 * u.ln()).sqrt();
        let (s, c) = (std::f32::consts::TAU * v).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_go_where_llama_cpp_puts_them() {
        // Gemma 3 4B: 17 of 34 layers, so 35 Q6_K tensors with the head (the anchors' count).
        let picked: Vec<usize> = (0..34).filter(|&i| use_more_bits(i, 34)).collect();
        assert_eq!(
            picked,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 29, 30, 31, 32, 33]
        );
        assert_eq!((0..32).filter(|&i| use_more_bits(i, 32)).count(), 16);
    }

    #[test]
    fn samples_look_normal() {
        let mut n = Normal::new(7);
        let xs: Vec<f32> = (0..100_000).map(|_| n.next()).collect();
        let mean = xs.iter().sum::<f32>() / xs.len() as f32;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / xs.len() as f32;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
    }
}
