//! `ferrox run`: one raw completion in the terminal.
//!
//! It goes through the scheduler like every server request — a single prompt is a batch of
//! one — so what the terminal shows is exactly what the server would produce.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::Model;
use ferrox_sched::{
    Event, FinishReason, GenerationRequest, Scheduler, SchedulerConfig, StopConfig,
};

#[derive(clap::Args)]
pub struct RunArgs {
    /// GGUF file (default: the cached default model).
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// The prompt (raw completion; BOS added per the model's metadata).
    #[arg(short = 'p', long)]
    prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    n_predict: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    temperature: f32,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads.
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// Print one JSON object (ids_prompt, ids_out, text_out[, top]) instead of streaming.
    #[arg(long)]
    json: bool,
    /// With --json: the K most likely tokens at the last prompt position.
    #[arg(long, default_value_t = 0)]
    top_logprobs: usize,
}

pub fn run(args: RunArgs) -> Result<(), String> {
    let path = crate::resolve_model(args.model)?;
    eprintln!("ferrox: loading {}...", path.display());
    let model = Arc::new(Model::load(&path, args.threads).map_err(|e| e.to_string())?);
    let tok = model.tokenizer();
    let prompt_ids = tok.encode(&args.prompt, tok.add_bos_default(), true);
    let config = SchedulerConfig {
        max_seqs: 1,
        kv_budget: ferrox_sched::KvBudget::Blocks(
            (prompt_ids.len() + args.n_predict).div_ceil(16) + 1,
        ),
        log_every_decode_steps: 0,
        ..SchedulerConfig::default()
    };
    let sched = Scheduler::start(Arc::clone(&model), config).map_err(|e| e.to_string())?;
    let request = GenerationRequest {
        prompt_ids: prompt_ids.clone(),
        max_tokens: args.n_predict,
        sampling: SamplingParams {
            temperature: args.temperature,
            seed: args.seed,
            ..Default::default()
        },
        stop: StopConfig::default(),
        logprobs: (args.top_logprobs > 0).then_some(args.top_logprobs),
        cache_salt: None,
        reuse_cached_prompt: true,
        constraint: None,
        embedding: None,
        group: None,
        speculation: Default::default(),
    };
    let mut stream = sched.submit(request).map_err(|e| e.to_string())?;
    let mut top = Vec::new();
    let mut out = std::io::stdout().lock();
    let done = loop {
        match stream.blocking_recv() {
            Some(Event::Token(t)) => {
                if top.is_empty() && args.top_logprobs > 0 {
                    top = t.top_logprobs.clone();
                }
                if !args.json {
                    out.write_all(t.text.as_bytes())
                        .and_then(|_| out.flush())
                        .map_err(|e| e.to_string())?;
                }
            }
            Some(Event::Done(c)) => break c,
            None => return Err("the scheduler ended the stream without a result".into()),
        }
    };
    if let FinishReason::Error(e) = &done.finish_reason {
        return Err(e.clone());
    }
    if args.json {
        let mut obj = serde_json::json!({
            "ids_prompt": prompt_ids,
            "ids_out": done.token_ids,
            "text_out": done.text,
        });
        if args.top_logprobs > 0 {
            obj["top"] = top
                .iter()
                .map(|&(id, lp)| serde_json::json!({"id": id, "logprob": lp}))
                .collect();
        }
        writeln!(out, "{obj}").map_err(|e| e.to_string())?;
    } else {
        writeln!(out, "{}", done.flushed_text).map_err(|e| e.to_string())?;
    }
    Ok(())
}
