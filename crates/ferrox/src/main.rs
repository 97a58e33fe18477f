//! The `ferrox` command: inspect a GGUF, tokenize, run a prompt, benchmark, serve.

mod bench;
mod bench_client;
mod bench_grammar;
mod bench_model;
mod bench_reuse;
mod bench_route;
mod bench_serve;
mod bench_spec;
mod chat;
mod inspect;
mod ps;
mod pull;
mod run;
mod serve;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ferrox", version, about = "Fast GGUF inference on the CPU")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Fetch a model into the cache and print its path: the default model (Gemma 3 270M
    /// Q4_K_M) without a name, else OWNER/REPO[:QUANT] from the Hugging Face hub
    /// (HF_ENDPOINT, HF_TOKEN), resumable and checked against the hub's SHA-256.
    Pull {
        /// OWNER/REPO or OWNER/REPO:QUANT (e.g. bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M).
        name: Option<String>,
    },
    /// Print a model's architecture, sizes, tensor types and KV cost.
    Inspect {
        /// GGUF file (default: the cached default model).
        model: Option<PathBuf>,
    },
    /// Print token ids as a JSON array.
    Tokenize(inspect::TokenizeArgs),
    /// Generate a raw completion for a prompt.
    Run(run::RunArgs),
    /// Chat in the terminal, as `ollama run` does: in this process, or with a running server
    /// (--url).
    Chat(chat::ChatArgs),
    /// Serve the model over HTTP: OpenAI (chat, completions, responses), Anthropic messages,
    /// llama.cpp native routes.
    Serve(Box<serve::ServeArgs>),
    /// What a running server has loaded: each model's status, memory and when it unloads.
    Ps(ps::PsArgs),
    /// Measure prefill, decode and batched decode throughput; `bench serve` load-tests a server.
    Bench(BenchCmd),
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCmd {
    #[command(subcommand)]
    sub: Option<BenchSub>,
    #[command(flatten)]
    args: bench::BenchArgs,
}

#[derive(Subcommand)]
enum BenchSub {
    /// Fire concurrent streaming requests at a server and report tok/s, TTFT and ITL
    /// (`--scenario conversation` / `shared-prefix`: chat load that reuses prompts).
    Serve(Box<bench_client::BenchServeArgs>),
    /// Time constrained decoding alone: a schema's compile time and the per-token mask time.
    Grammar(bench_grammar::BenchGrammarArgs),
    /// Write a random-weight model of a real shape (Gemma 3 4B, Llama 3 8B) in llama.cpp's
    /// Q4_K_M or Q8_0 mix, cached; prints its path.
    Model(bench_model::BenchModelArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse_from(serve::llama_style_args(std::env::args_os()));
    // A `FERROX_ISA` this CPU or build cannot honour stops every command, never ignored.
    if let Err(e) = ferrox_kernels::Isa::configured() {
        eprintln!("ferrox: error: {e}");
        std::process::exit(1);
    }
    let result = match cli.cmd {
        Cmd::Pull { name: None } => {
            pull::ensure_default_model().map(|path| println!("{}", path.display()))
        }
        Cmd::Pull { name: Some(name) } => {
            pull::from_hub(&name).map(|path| println!("{}", path.display()))
        }
        Cmd::Inspect { model } => resolve_model(model).and_then(|m| inspect::inspect(&m)),
        Cmd::Tokenize(args) => inspect::tokenize(args),
        Cmd::Bench(BenchCmd {
            sub: Some(BenchSub::Serve(args)),
            ..
        }) => bench_serve::bench_serve(*args),
        Cmd::Bench(BenchCmd {
            sub: Some(BenchSub::Grammar(args)),
            ..
        }) => bench_grammar::bench_grammar(args),
        Cmd::Bench(BenchCmd {
            sub: Some(BenchSub::Model(args)),
            ..
        }) => bench_model::bench_model(args),
        Cmd::Bench(BenchCmd { sub: None, args }) => bench::bench(args),
        Cmd::Serve(args) => serve::serve(*args),
        Cmd::Chat(args) => chat::chat(args),
        Cmd::Run(args) => run::run(args),
        Cmd::Ps(args) => ps::ps(args),
    };
    if let Err(e) = result {
        eprintln!("ferrox: error: {e}");
        std::process::exit(1);
    }
}

/// The model to use: the one given, else the default (fetched on first use).
pub fn resolve_model(model: Option<PathBuf>) -> Result<PathBuf, String> {
    match model {
        Some(p) => Ok(p),
        None => pull::ensure_default_model(),
    }
}
