//! `ferrox bench`: engine throughput, the numbers llama-bench and llama-batched-bench report.
//!
//! - `pp{P}`: prefill of a P-token prompt in one step, tokens per second;
//! - `tg{N}`: N decode steps of one sequence, tokens per second;
//! - `batch{B}`: B sequences (each with a P-token... a short 128-token prompt) decoding
//!   together, N steps, aggregate generated tokens per second.
//!
//! Each is repeated `-r` times and reported as min/median/max. The steps go through
//! `forward_multi_seq`, the same call the scheduler makes, on a KV cache sized for the run
//! and stored as `--ctk` / `--ctv` say (llama-bench's `-ctk` / `-ctv`). With `-d N` (llama-bench's depth) every test runs after
//! N tokens already in each sequence's KV (computed first, untimed), and is named `pp512 @
//! d4000` and so on.
//!
//! With `--bandwidth` it also measures the machine's plain read bandwidth on the model's
//! threads (`ferrox_kernels::read_bandwidth`) and reports what share of it one sequence's
//! decode reads: the weights a token reads ([`decode_bytes`]) times `tg` tokens per second.
//! On a real-size model that share, not the tokens per second alone, says how much faster a
//! decode kernel could still get on this machine. It also reads the weights' own memory the
//! same way (`ferrox_kernels::read_bandwidth_of`) right before and after each decode run and
//! reports the run's share of those reads (`tg_weights_read_pct`): a fresh probe buffer can
//! land on other memory than the weights did, and this host's memory changes speed over
//! seconds, so only reads of the same memory at the same time compare like with like.

use std::path::PathBuf;
use std::time::Instant;

use ferrox_engine::{KvShape, KvType, Model, SeqChunk};
use ferrox_gguf::GgufFile;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// GGUF file (default: the cached default model).
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Threads.
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// Prompt length for the prefill test (0 skips it).
    #[arg(short = 'p', long, default_value_t = 512)]
    prompt: usize,
    /// Decode steps for the generation tests (0 skips them).
    #[arg(short = 'n', long, default_value_t = 128)]
    n_gen: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Batch sizes for aggregate decode, comma-separated (e.g. 1,2,4,8,16).
    #[arg(long, value_delimiter = ',')]
    batch: Vec<usize>,
    /// Prompt length of each sequence in the batch tests (as llama-batched-bench's -npp).
    #[arg(long, default_value_t = 128)]
    batch_prompt: usize,
    /// Tokens already in the KV before each test (llama-bench's -d).
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// How the KV cache stores keys: f16, q8_0 or q4_0 (llama-bench's -ctk).
    #[arg(long = "cache-type-k", visible_alias = "ctk", default_value = "f16")]
    cache_type_k: String,
    /// How the KV cache stores values: f16, q8_0 or q4_0 (llama-bench's -ctv).
    #[arg(long = "cache-type-v", visible_alias = "ctv", default_value = "f16")]
    cache_type_v: String,
    /// Also measure the plain read bandwidth and the share of it one sequence's decode reads.
    #[arg(long)]
    bandwidth: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Bytes of weights one decode token reads from `file`: every tensor but the token
/// embedding table, of which the lookup reads one row (the whole table when the output head
/// is tied to it), with a mixture of experts' expert tensors scaled to the `used` of the `n`
/// experts a token runs. The KV cache (a few hundred kB a token at short contexts) is left
/// out, so the share of the read bandwidth this gives is slightly low, never flattering.
pub fn decode_bytes(file: &GgufFile, experts: Option<(usize, usize)>) -> u64 {
    let tied = file.tensor("output.weight").is_none();
    let mut total = 0.0;
    for t in file.tensors() {
        if t.name == "token_embd.weight" && !tied {
            continue;
        }
        let share = match experts {
            Some((used, n)) if t.name.contains("_exps.") => used as f64 / n as f64,
            _ => 1.0,
        };
        total += t.n_bytes as f64 * share;
    }
    total as u64
}

/// What every run of one `ferrox bench` shares.
struct Setup<'a> {
    m: &'a Model,
    shape: KvShape,
    depth: usize,
}

const BLOCK: usize = 16;

fn prompt_tokens(n: usize, seed: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (1000 + (i * 7919 + seed * 104_729) % (vocab - 2000)) as u32)
        .collect()
}

/// Runs `n_seqs` sequences: `depth` tokens each (untimed), then a prefill of `prompt` each,
/// then `n_gen` steps decoding all together. Returns (prefill seconds, decode seconds).
fn run_once(setup: &Setup, n_seqs: usize, prompt: usize, n_gen: usize) -> (f64, f64) {
    let (m, depth) = (setup.m, setup.depth);
    let per_seq = (depth + prompt + n_gen).div_ceil(BLOCK) + 1;
    let mut kv = m.new_kv_cache_of(setup.shape, BLOCK, per_seq * n_seqs);
    let tables: Vec<Vec<u32>> = (0..n_seqs)
        .map(|s| ((s * per_seq) as u32..((s + 1) * per_seq) as u32).collect())
        .collect();
    for (s, table) in tables.iter().enumerate() {
        let toks = prompt_tokens(depth, s + 1000, m.vocab_size());
        for (i, piece) in toks.chunks(512).enumerate() {
            let chunk = SeqChunk {
                tokens: piece,
                start_pos: i * 512,
                blocks: table,
                logit_rows: 0,
                want_hidden: false,
            };
            m.forward_multi_seq(&mut kv, &[chunk]).expect("depth");
        }
    }
    let t0 = Instant::now();
    let mut last = vec![0u32; n_seqs];
    for (s, table) in tables.iter().enumerate() {
        let toks = prompt_tokens(prompt.max(1), s, m.vocab_size());
        let chunk = SeqChunk {
            tokens: &toks,
            start_pos: depth,
            blocks: table,
            logit_rows: usize::from(n_gen > 0),
            want_hidden: false,
        };
        m.forward_multi_seq(&mut kv, &[chunk]).expect("prefill");
        last[s] = toks[toks.len() - 1];
    }
    let t_prefill = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut logits = Vec::new();
    for step in 0..n_gen {
        let toks: Vec<[u32; 1]> = last.iter().map(|&t| [t]).collect();
        let chunks: Vec<SeqChunk> = tables
            .iter()
            .zip(&toks)
            .map(|(table, t)| SeqChunk {
                tokens: t,
                start_pos: depth + prompt.max(1) + step,
                blocks: table,
                logit_rows: 1,
                want_hidden: false,
            })
            .collect();
        m.forward_multi_seq_into(&mut kv, &chunks, &mut logits)
            .expect("decode");
        let v = m.vocab_size();
        for (s, t) in last.iter_mut().enumerate() {
            // Greedy, as a temperature-0 request samples (the sampler's vectorized argmax).
            *t = ferrox_engine::sampler::argmax(&logits[s * v..(s + 1) * v]);
        }
    }
    (t_prefill, t1.elapsed().as_secs_f64())
}

#[derive(serde::Serialize)]
struct Stat {
    min: f64,
    median: f64,
    max: f64,
}

fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Stat {
        min: v[0],
        median: v[v.len() / 2],
        max: v[v.len() - 1],
    }
}

pub fn bench(args: BenchArgs) -> Result<(), String> {
    let path = crate::resolve_model(args.model)?;
    let m = Model::load(&path, args.threads).map_err(|e| e.to_string())?;
    let kv_type = |name: &str, flag: &str| {
        KvType::parse(name).ok_or_else(|| format!("{flag} {name:?}: one of {}", KvType::NAMES))
    };
    let (k, v) = (
        kv_type(&args.cache_type_k, "--cache-type-k")?,
        kv_type(&args.cache_type_v, "--cache-type-v")?,
    );
    let setup = Setup {
        m: &m,
        shape: m.kv_shape_of(k, v).map_err(|e| e.to_string())?,
        depth: args.depth,
    };
    let at = if args.depth > 0 {
        format!(" @ d{}", args.depth)
    } else {
        String::new()
    };
    let reps = args.reps.max(1);
    let mut results: Vec<(String, Stat)> = Vec::new();
    // Warm up: page the weights in.
    run_once(&Setup { depth: 0, ..setup }, 1, 8, 2);
    if args.prompt > 0 {
        let v = (0..reps)
            .map(|_| args.prompt as f64 / run_once(&setup, 1, args.prompt, 0).0)
            .collect();
        results.push((format!("pp{}{at}", args.prompt), stat(v)));
    }
    let experts = m.config().moe.as_ref().map(|e| (e.n_used, e.n_expert));
    let bytes = decode_bytes(m.file(), experts);
    // With `--bandwidth`, the weights' own memory is read plainly right before and right
    // after each decode run, and the run is judged against the mean of the two: this host's
    // memory was seen to change speed within one process (a run reading 135 % of a plain read
    // taken seconds later), so only reads beside the run in time compare like with like.
    let weights = args.bandwidth.then(|| m.decode_memory());
    let own_read = |w: &[&[u8]]| ferrox_kernels::read_bandwidth_of(m.pool(), w, 3);
    let (mut own, mut shares) = (Vec::new(), Vec::new());
    if args.n_gen > 0 {
        let v = (0..reps)
            .map(|_| {
                let before = weights.as_deref().map(own_read);
                let tps = args.n_gen as f64 / run_once(&setup, 1, 1, args.n_gen).1;
                if let (Some(before), Some(w)) = (before, weights.as_deref()) {
                    let after = own_read(w);
                    own.extend([before, after]);
                    shares.push(100.0 * tps * bytes as f64 / 1e9 / ((before + after) / 2.0));
                }
                tps
            })
            .collect();
        results.push((format!("tg{}{at}", args.n_gen), stat(v)));
        for &b in &args.batch {
            let v = (0..reps)
                .map(|_| {
                    (b * args.n_gen) as f64 / run_once(&setup, b, args.batch_prompt, args.n_gen).1
                })
                .collect();
            results.push((format!("batch{b}{at}"), stat(v)));
        }
    }
    // (plain read GB/s of a fresh probe buffer, measured after the tests so that its 512 MB
    // is not resident while they run; the weights' own reads; the decode's shares of them).
    let bandwidth = args.bandwidth.then(|| {
        let probe = (0..reps.max(3))
            .map(|_| ferrox_kernels::read_bandwidth(m.pool(), 512 << 20, 5))
            .collect();
        let own = (!own.is_empty()).then(|| (stat(own), stat(shares)));
        (stat(probe), own)
    });
    if args.json {
        let mut obj: serde_json::Map<String, serde_json::Value> = results
            .into_iter()
            .map(|(k, s)| (k, serde_json::to_value(s).expect("stat serializes")))
            .collect();
        if let Some((probe, own)) = bandwidth {
            obj.insert("decode_bytes".into(), bytes.into());
            let probe = serde_json::to_value(probe).expect("stat serializes");
            obj.insert("read_gbps".into(), probe);
            if let Some((own, shares)) = own {
                let own = serde_json::to_value(own).expect("stat serializes");
                obj.insert("weights_read_gbps".into(), own);
                let shares = serde_json::to_value(shares).expect("stat serializes");
                obj.insert("tg_weights_read_pct".into(), shares);
            }
        }
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!(
            "model: {} | threads: {} | reps: {reps} | isa: {} | kv: {}/{}",
            path.display(),
            m.n_threads(),
            ferrox_kernels::Isa::best().name(),
            k.name(),
            v.name()
        );
        println!(
            "{:>16} {:>10} {:>10} {:>10}",
            "test", "min t/s", "median", "max"
        );
        for (name, s) in &results {
            println!(
                "{name:>16} {:>10.2} {:>10.2} {:>10.2}",
                s.min, s.median, s.max
            );
        }
        if let Some((probe, own)) = bandwidth {
            println!(
                "plain read: {:.1} GB/s (median of {}); decode reads {:.1} MB of weights per token",
                probe.median,
                reps.max(3),
                bytes as f64 / 1e6
            );
            for (name, s) in results.iter().filter(|(n, _)| n.starts_with("tg")) {
                let read = s.median * bytes as f64 / 1e9;
                println!(
                    "{name}: {read:.1} GB/s read, {:.0} % of the plain read",
                    100.0 * read / probe.median
                );
                if let Some((own, shares)) = &own {
                    println!(
                        "{name}: {:.0} % of a plain read of its weights beside each run \
                         (median of {reps}, {:.0}-{:.0} %; those reads {:.1}-{:.1} GB/s)",
                        shares.median, shares.min, shares.max, own.min, own.max
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::decode_bytes;
    use ferrox_engine::config::Arch;
    use ferrox_engine::synthetic::{build_gguf, SyntheticSpec};
    use ferrox_gguf::GgufFile;

    fn file(spec: &SyntheticSpec) -> GgufFile {
        GgufFile::from_bytes(build_gguf(spec)).expect("a synthetic model parses")
    }

    fn bytes_where(f: &GgufFile, keep: impl Fn(&str) -> bool) -> u64 {
        f.tensors()
            .iter()
            .filter(|t| keep(&t.name))
            .map(|t| t.n_bytes)
            .sum()
    }

    #[test]
    fn a_token_reads_every_weight_but_the_unread_embedding_rows_and_unused_experts() {
        for untied in [true, false] {
            let mut spec = SyntheticSpec::tiny(Arch::Llama, 1).with_experts(8, 2, 32);
            spec.untied_output = untied;
            let moe = file(&spec);
            let experts = bytes_where(&moe, |n| n.contains("_exps."));
            let embd = bytes_where(&moe, |n| n == "token_embd.weight");
            let all = bytes_where(&moe, |_| true);
            assert!(
                experts > 0 && embd > 0,
                "the model has experts and an embedding table"
            );
            assert_eq!(moe.tensor("output.weight").is_some(), untied);
            // Untied, the embedding table is read one row a token; tied, whole, as the head.
            let unread = if untied { embd } else { 0 };
            // Two of eight experts run: a quarter of their bytes.
            assert_eq!(
                decode_bytes(&moe, Some((2, 8))),
                all - unread - experts + experts / 4,
                "untied {untied}"
            );
            assert_eq!(decode_bytes(&moe, Some((8, 8))), all - unread);
        }
    }
}
