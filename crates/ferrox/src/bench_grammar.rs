//! `ferrox bench grammar`: what constrained decoding costs per token, without a server.
//!
//! Loads the model's tokenizer, compiles a JSON schema (default:
//! `scripts/bench-schema.json`'s shape, a record with a 64-item list, so it never ends
//! early) the way `ferrox serve` does — the first compile also builds the token trie, reported
//! apart — then walks `--tokens` steps of one constrained row: compute the mask, draw a
//! seeded random token it allows, advance. Reports the compile time and the per-token mask
//! time p50 / p99 (the advance is included: it is the rest of a step's constraint work).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_engine::Model;
use ferrox_server::core::grammar::{GrammarRequest, GrammarSpec, Grammars};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::bench_client::percentile_ms;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchGrammarArgs {
    /// GGUF file (default: the cached default model).
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// A JSON schema file (default: the built-in benchmark schema).
    #[arg(long)]
    schema: Option<PathBuf>,
    /// Constrained steps to time.
    #[arg(long, default_value_t = 512)]
    tokens: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The default schema: the same shape as `scripts/bench-schema.json`.
pub fn default_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 64},
            "done": {"type": "boolean"},
        },
        "required": ["title", "year", "tags", "done"],
        "additionalProperties": false,
    })
}

pub fn bench_grammar(args: BenchGrammarArgs) -> Result<(), String> {
    let schema = match &args.schema {
        Some(p) => serde_json::from_str(&std::fs::read_to_string(p).map_err(|e| e.to_string())?)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => default_schema(),
    };
    let path = crate::resolve_model(args.model)?;
    let model = Arc::new(Model::load(&path, 1).map_err(|e| e.to_string())?);
    let vocab = model.tokenizer().vocab_size();
    let grammars = Grammars::new(Arc::clone(&model));
    let request = GrammarRequest {
        spec: GrammarSpec::JsonSchema(schema),
        param: "schema".into(),
    };
    let t = Instant::now();
    grammars.compile(&request).map_err(|e| e.to_string())?;
    let first = t.elapsed();
    let t = Instant::now();
    let constraint = grammars.compile(&request).map_err(|e| e.to_string())?;
    let compile = t.elapsed();
    let mut state = constraint.0.start();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut mask = vec![0u32; vocab.div_ceil(32)];
    let mut times: Vec<Duration> = Vec::with_capacity(args.tokens);
    let mut allowed_counts = Vec::with_capacity(args.tokens);
    for _ in 0..args.tokens {
        let t = Instant::now();
        mask.fill(0);
        state.allowed(&mut mask)?;
        let allowed: Vec<u32> = (0..vocab as u32)
            .filter(|&i| mask[i as usize / 32] & (1 << (i % 32)) != 0)
            .collect();
        let pick = allowed[rng.gen_range(0..allowed.len())];
        let done = state.advance(pick)?;
        times.push(t.elapsed());
        allowed_counts.push(allowed.len());
        if done {
            break;
        }
    }
    let (p50, p99) = (percentile_ms(&times, 50.0), percentile_ms(&times, 99.0));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if args.json {
        println!(
            "{}",
            json!({"trie_and_first_compile_ms": ms(first), "compile_ms": ms(compile),
                   "steps": times.len(), "mask_p50_ms": p50, "mask_p99_ms": p99})
        );
    } else {
        println!(
            "vocabulary {vocab}: trie + first compile {:.1} ms, compile {:.2} ms; \
             {} constrained steps: mask + advance p50 {:.3} ms, p99 {:.3} ms",
            ms(first),
            ms(compile),
            times.len(),
            p50.unwrap_or(0.0),
            p99.unwrap_or(0.0)
        );
    }
    Ok(())
}
