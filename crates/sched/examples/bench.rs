//! Scheduler benchmark (a command, not a test), on the default model through the scheduler
//! API (no HTTP):
//!
//! - `concurrency`: for N = 1, 2, 4, 8, 16, N requests arrive at once, each with its own
//!   128-token prompt, greedy, `ignore_eos`, 128 tokens. Reports aggregate decode tok/s over
//!   the steady window (every request has its first token, none has finished) — the number
//!   llama-batched-bench calls S_TG at `-npl N` — plus output tok/s over the whole wave and
//!   time-to-first-token p50 / max.
//! - `chunk`: for each prefill chunk size, 4 requests are decoding when a 512-token prompt
//!   arrives. Reports the decoders' inter-token latency while that prompt prefills (median and
//!   worst: the stall the chunk size costs them) and the prompt's time to first token (what a
//!   small chunk costs it). This is how the default `FERROX_CB_PREFILL_CHUNK` was chosen.
//! - `order`: 16 requests with their own 2,000-token prompts (`--prompt`) arrive at once;
//!   for each prefill order (oldest first, round-robin), time-to-first-token p50 / p90 / max
//!   and the wall time of the wave. This is how the default `FERROX_CB_PREFILL_ORDER` was
//!   chosen.
//!
//! ```text
//! cargo run -p ferrox-sched --example bench -- [concurrency|chunk|order|all] [--threads N]
//!     [--reps R] [--npl 1,2,4,8,16] [--prompt 128] [--gen 128]
//! ```
//! The model is `FERROX_MODEL` or the cached default (`ferrox pull`). The workspace's dev
//! profile is optimized, so no `--release` is needed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_engine::Model;
use ferrox_sched::{
    Event, GenerationRequest, KvBudget, PrefillOrder, Scheduler, SchedulerConfig, SchedulerHandle,
    StopConfig,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let mode = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .map_or("all", String::as_str);
    let threads = flag("--threads", 2);
    let prompt_tokens = flag("--prompt", 128);
    let gen_tokens = flag("--gen", 128);
    let reps = flag("--reps", 3);
    let npl: Vec<usize> = args
        .iter()
        .position(|a| a == "--npl")
        .and_then(|i| args.get(i + 1))
        .map_or(vec![1, 2, 4, 8, 16], |v| {
            v.split(',').map(|n| n.parse().expect("a number")).collect()
        });
    let path = ferrox_engine::cache::default_model_path();
    let model = Arc::new(Model::load(&path, threads).expect("the model loads (ferrox pull)"));
    println!("model {} threads {threads} reps {reps}", path.display());
    if mode == "concurrency" || mode == "all" {
        concurrency(&model, reps, &npl, prompt_tokens, gen_tokens);
    }
    if mode == "chunk" || mode == "all" {
        chunk_sweep(&model, reps);
    }
    if mode == "order" || mode == "all" {
        let len = if args.iter().any(|a| a == "--prompt") {
            prompt_tokens
        } else {
            2000
        };
        order_sweep(&model, reps, len);
    }
}

fn config(prefill_chunk_tokens: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_seqs: 16,
        prefill_chunk_tokens,
        kv_budget: KvBudget::Blocks(16 * 48),
        log_every_decode_steps: 0,
        ..SchedulerConfig::default()
    }
}

/// A prompt nobody else has: ordinary-text token ids, varied by `seed`.
fn prompt(len: usize, seed: usize, vocab: usize) -> Vec<u32> {
    let mut p = vec![2]; // BOS
    p.extend((1..len).map(|i| (1000 + (i * 7919 + seed * 104_729) % (vocab - 2000)) as u32));
    p
}

fn request(prompt_ids: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        stop: StopConfig {
            ignore_eos: true,
            ..StopConfig::default()
        },
        ..GenerationRequest::greedy(prompt_ids, max_tokens)
    }
}

/// When each token of one request arrived, from `t0`.
struct Timeline {
    submitted: Instant,
    tokens: Vec<Instant>,
}

/// Submits `req` and records its token times on a thread of its own.
fn spawn(handle: &SchedulerHandle, req: GenerationRequest) -> std::thread::JoinHandle<Timeline> {
    let submitted = Instant::now();
    let mut stream = handle.submit(req).expect("accepted");
    std::thread::spawn(move || {
        let mut tokens = Vec::new();
        while let Some(event) = stream.blocking_recv() {
            match event {
                Event::Token(_) => tokens.push(Instant::now()),
                Event::Done(_) => break,
            }
        }
        Timeline { submitted, tokens }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn concurrency(model: &Arc<Model>, reps: usize, npl: &[usize], prompt_len: usize, gen: usize) {
    println!("\n# concurrency: {prompt_len}-token prompts, {gen} tokens each, prefill chunk 64");
    println!("| N | decode tok/s (steady) | output tok/s (wave) | TTFT p50 s | TTFT max s |");
    println!("|---|---|---|---|---|");
    let vocab = model.vocab_size();
    for &n in npl {
        let (mut steady, mut wave, mut ttft_p50, mut ttft_max) = (vec![], vec![], vec![], vec![]);
        for rep in 0..reps {
            let handle = Scheduler::start(Arc::clone(model), config(64)).unwrap();
            let t0 = Instant::now();
            let runs: Vec<Timeline> = (0..n)
                .map(|i| {
                    spawn(
                        &handle,
                        request(prompt(prompt_len, rep * 100 + i, vocab), gen),
                    )
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            let wall = secs(t0.elapsed());
            let firsts: Vec<Instant> = runs.iter().map(|r| r.tokens[0]).collect();
            let lasts: Vec<Instant> = runs.iter().map(|r| *r.tokens.last().unwrap()).collect();
            let from = *firsts.iter().max().unwrap();
            let to = *lasts.iter().min().unwrap();
            let in_window = runs
                .iter()
                .flat_map(|r| &r.tokens)
                .filter(|&&t| t > from && t <= to)
                .count();
            steady.push(in_window as f64 / secs(to - from));
            wave.push((n * gen) as f64 / wall);
            let ttft: Vec<f64> = runs
                .iter()
                .map(|r| secs(r.tokens[0] - r.submitted))
                .collect();
            ttft_max.push(max(&ttft));
            ttft_p50.push(median(ttft));
        }
        println!(
            "| {n} | {:.1} | {:.1} | {:.2} | {:.2} |",
            median(steady),
            median(wave),
            median(ttft_p50),
            median(ttft_max)
        );
    }
}

/// The `p`-quantile of `v` (nearest rank).
fn quantile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied().unwrap_or(f64::NAN)
}

fn order_sweep(model: &Arc<Model>, reps: usize, prompt_len: usize) {
    let n = 16;
    println!(
        "\n# prefill order: {n} requests of {prompt_len} prompt tokens at once, 4 tokens each"
    );
    println!("| order | TTFT p50 s | TTFT p90 s | TTFT max s | wave s |");
    println!("|---|---|---|---|---|");
    let vocab = model.vocab_size();
    for order in [PrefillOrder::Oldest, PrefillOrder::RoundRobin] {
        let (mut p50, mut p90, mut worst, mut walls) = (vec![], vec![], vec![], vec![]);
        for rep in 0..reps {
            let cfg = SchedulerConfig {
                prefill_order: order,
                kv_budget: KvBudget::Blocks(n * (prompt_len + 4).div_ceil(16)),
                ..config(128)
            };
            let handle = Scheduler::start(Arc::clone(model), cfg).unwrap();
            let t0 = Instant::now();
            let runs: Vec<Timeline> = (0..n)
                .map(|i| {
                    spawn(
                        &handle,
                        request(prompt(prompt_len, rep * 100 + i, vocab), 4),
                    )
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect();
            walls.push(secs(t0.elapsed()));
            let ttft: Vec<f64> = runs
                .iter()
                .map(|r| secs(r.tokens[0] - r.submitted))
                .collect();
            worst.push(max(&ttft));
            p90.push(quantile(ttft.clone(), 0.9));
            p50.push(quantile(ttft, 0.5));
        }
        println!(
            "| {order:?} | {:.1} | {:.1} | {:.1} | {:.1} |",
            median(p50),
            median(p90),
            median(worst),
            median(walls)
        );
    }
}

fn chunk_sweep(model: &Arc<Model>, reps: usize) {
    const LONG: usize = 512;
    println!("\n# prefill chunk: 4 decoding requests, then a {LONG}-token prompt arrives");
    println!("| chunk | decode ITL before ms | ITL during prefill p50 ms | worst ms | long prompt TTFT s |");
    println!("|---|---|---|---|---|");
    let vocab = model.vocab_size();
    let chunks = [16usize, 32, 64, 128, 256, 512];
    let mut rows = vec![(vec![], vec![], vec![], vec![]); chunks.len()];
    // Interleaved: rep by rep over every chunk size, so drift on a shared machine spreads
    // over all of them.
    for rep in 0..reps {
        for (ci, &chunk) in chunks.iter().enumerate() {
            let handle = Scheduler::start(Arc::clone(model), config(chunk)).unwrap();
            let decoders: Vec<_> = (0..4)
                .map(|i| spawn(&handle, request(prompt(32, rep * 10 + i, vocab), 300)))
                .collect();
            // Let them settle into decoding.
            while handle.status().running < 4 || handle.status().tokens_decoded < 40 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let long = spawn(&handle, request(prompt(LONG, 999 + rep, vocab), 4))
                .join()
                .unwrap();
            let prefill_from = long.submitted;
            let prefill_to = long.tokens[0];
            // Stop the decoders (ids 0-3 on this fresh scheduler); their timelines so far are
            // what is measured.
            for id in 0..4 {
                handle.cancel(id);
            }
            let runs: Vec<Timeline> = decoders.into_iter().map(|h| h.join().unwrap()).collect();
            let (mut before, mut during) = (vec![], vec![]);
            for r in &runs {
                for w in r.tokens.windows(2) {
                    let gap = secs(w[1] - w[0]) * 1e3;
                    if w[1] <= prefill_from {
                        before.push(gap);
                    } else if w[0] >= prefill_from && w[1] <= prefill_to {
                        during.push(gap);
                    }
                }
            }
            let row = &mut rows[ci];
            row.0.push(median(before));
            row.1.push(median(during.clone()));
            row.2.push(max(&during));
            row.3.push(secs(long.tokens[0] - long.submitted));
        }
    }
    for (ci, chunk) in chunks.iter().enumerate() {
        let (b, d, w, t) = rows[ci].clone();
        println!(
            "| {chunk} | {:.0} | {:.0} | {:.0} | {:.2} |",
            median(b),
            median(d),
            median(w),
            median(t)
        );
    }
}
