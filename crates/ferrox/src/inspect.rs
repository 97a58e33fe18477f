//! `ferrox inspect` and `ferrox tokenize`: look at a model without running it.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use ferrox_engine::tokenizer::Tokenizer;
use ferrox_engine::ModelConfig;
use ferrox_gguf::GgufFile;

pub fn inspect(path: &Path) -> Result<(), String> {
    let f = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg = ModelConfig::from_gguf(&f).map_err(|e| e.to_string())?;
    let mut hist: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    let mut total_bytes = 0u64;
    let mut n_params = 0u64;
    for t in f.tensors() {
        let e = hist.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
        total_bytes += t.n_bytes;
        n_params += t.n_elems();
    }
    let kv = cfg.kv_shape();
    let name = f
        .get("general.name")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    println!("file:            {}", path.display());
    println!("name:            {name}");
    println!("gguf version:    {}", f.version());
    println!("architecture:    {}", cfg.arch.name());
    println!(
        "parameters:      {n_params} ({:.1} MB of tensors)",
        total_bytes as f64 / 1e6
    );
    println!(
        "layers {} | embd {} | heads {} (kv {}) x {} | ffn {} | vocab {}",
        cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff, cfg.n_vocab
    );
    println!("context length:  {}", cfg.context_length);
    if cfg.sliding_window > 0 {
        println!(
            "sliding window:  {} (every {}th layer global)",
            cfg.sliding_window, cfg.swa_period
        );
    }
    println!(
        "rope:            {:?}, base {} (swa {})",
        cfg.rope_style, cfg.rope_base, cfg.rope_base_swa
    );
    println!("KV per token:    {} bytes (f16)", kv.bytes_per_token());
    let has_template = f.get("tokenizer.chat_template").is_some();
    println!(
        "chat template:   {}",
        if has_template {
            "present"
        } else {
            "absent (built-in format)"
        }
    );
    println!("tensor types:");
    for (ty, (n, bytes)) in hist {
        println!("  {ty:>6}: {n:4} tensors, {:9.1} MB", bytes as f64 / 1e6);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// GGUF file (default: the cached default model).
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Do not prepend BOS.
    #[arg(long)]
    no_bos: bool,
    /// Treat control-token text like `<bos>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// The text to tokenize.
    #[arg(long, conflicts_with_all = ["file", "jsonl"])]
    text: Option<String>,
    /// A file whose exact bytes are the text.
    #[arg(long, conflicts_with = "jsonl")]
    file: Option<PathBuf>,
    /// JSON lines of {"text", "add_bos", "parse_special"}: one array printed per line.
    #[arg(long)]
    jsonl: Option<PathBuf>,
}

#[derive(serde::Deserialize)]
struct TokenizeLine {
    text: String,
    #[serde(default = "yes")]
    add_bos: bool,
    #[serde(default = "yes")]
    parse_special: bool,
}

fn yes() -> bool {
    true
}

pub fn tokenize(args: TokenizeArgs) -> Result<(), String> {
    let path = crate::resolve_model(args.model)?;
    let f = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tok = Tokenizer::from_gguf(&f).map_err(|e| e.to_string())?;
    let print = |ids: Vec<u32>| println!("{}", serde_json::to_string(&ids).expect("ids serialize"));
    if let Some(j) = args.jsonl {
        let file = std::fs::File::open(&j).map_err(|e| format!("{}: {e}", j.display()))?;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("{}: {e}", j.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            let l: TokenizeLine = serde_json::from_str(&line)
                .map_err(|e| format!("{}:{}: {e}", j.display(), i + 1))?;
            print(tok.encode(&l.text, l.add_bos, l.parse_special));
        }
        return Ok(());
    }
    let text = match (args.text, args.file) {
        (Some(t), _) => t,
        (None, Some(p)) => {
            let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", p.display()))?
        }
        (None, None) => return Err("give --text, --file or --jsonl".into()),
    };
    let add_bos = !args.no_bos && tok.add_bos_default();
    print(tok.encode(&text, add_bos, !args.no_parse_special));
    Ok(())
}
