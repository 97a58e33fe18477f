//! What every `ferrox bench serve` scenario shares, as a client of the server: the flags
//! ([`BenchServeArgs`], whose defaults depend on the [`Scenario`]), one streaming request
//! timed ([`stream_within`]: TTFT, the gaps between chunks, the usage's token counts), waves
//! of them level by level ([`run_levels`]), and the statistics and rows they report.
//!
//! Why a module of its own: the scenarios (`bench_serve`'s load, `bench_reuse`,
//! `bench_spec`) all build on these pieces, and `bench_serve` also dispatches to the
//! scenarios; kept here, every scenario imports this module and none imports another.

use std::time::{Duration, Instant};

use ferrox_server::client::Endpoint;
use serde_json::{json, Value};

use crate::bench_route::Route;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchServeArgs {
    /// Base URL of the server (http only).
    #[arg(
        long,
        env = "FERROX_BENCH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// What to send: unique completions per level (load), one multi-turn chat
    /// (conversation), or concurrent chats behind one system prompt (shared-prefix).
    #[arg(long, value_enum, default_value_t = Scenario::Load)]
    pub scenario: Scenario,
    /// The protocol to send through [default: completions for load, chat otherwise]; the
    /// conversation, shared-prefix and speculation scenarios take the chat-shaped routes only.
    #[arg(long, value_enum)]
    pub route: Option<Route>,
    /// Constrain every output to this JSON schema (a file), as the route spells it:
    /// measures constrained decoding under load (not on `messages`: Anthropic has no
    /// schema-constrained text).
    #[arg(long)]
    pub schema: Option<std::path::PathBuf>,
    /// Concurrency levels, comma-separated [default: 1,4,8,16; shared-prefix: 16].
    #[arg(short = 'n', long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Approximate prompt length in tokens (words of a unique generated text); load only.
    #[arg(long, default_value_t = 100)]
    pub prompt_words: usize,
    /// Tokens generated per request [default: 128 (load, with ignore_eos: exactly this
    /// many); conversation: 16 per turn; shared-prefix: 32].
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// User turns of the conversation scenario.
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Words of the generated system prompt [default: conversation 1500 (~1,780 Gemma 3
    /// tokens); shared-prefix 1270 (~1,500 tokens)].
    #[arg(long)]
    pub system_words: Option<usize>,
    /// Waves per level (conversations, for conversation); the statistics pool every wave.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// `model` to send (ferrox and llama-server accept requests without one).
    #[arg(long)]
    pub model: Option<String>,
    /// Give up on a request after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The speculation scenarios' requests: each round with `"speculative": false` and
    /// without it, interleaved (both), or one of them (for a server without the switch).
    #[arg(long, value_enum, default_value_t = SpecMode::Both)]
    pub spec: SpecMode,
    /// The speculation scenarios' sampling temperature [default: chat 1 with a seed per
    /// user, the others 0]: `--temperature 0` makes the chat scenario greedy (a draft model's
    /// best case), a positive one samples the others with a seed per user.
    #[arg(long)]
    pub temperature: Option<f32>,
}

/// The load `ferrox bench serve` generates.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// N concurrent completions, every prompt unique (the default).
    Load,
    /// One chat resending its growing history each turn; TTFT per turn.
    Conversation,
    /// N concurrent chats behind one system prompt, each with its own question.
    SharedPrefix,
    /// A source file returned whole with a small change (speculative decoding).
    CodeEdit,
    /// A section quoted verbatim, a JSON config returned with one value changed.
    Extract,
    /// Free-form questions: little to draft from.
    Chat,
}

impl BenchServeArgs {
    /// `--max-tokens`, or the scenario's default.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens.unwrap_or(match self.scenario {
            Scenario::Load => 128,
            Scenario::Conversation => 16,
            Scenario::SharedPrefix => 32,
            // The speculation scenarios: enough for the whole file or section.
            Scenario::CodeEdit => 1024,
            Scenario::Extract => 384,
            Scenario::Chat => 256,
        })
    }

    /// `--system-words`, or the scenario's default.
    pub fn system_words(&self) -> usize {
        self.system_words
            .unwrap_or(if self.scenario == Scenario::SharedPrefix {
                1270
            } else {
                1500
            })
    }

    /// `-n`, or the scenario's default levels.
    pub fn levels(&self) -> Vec<usize> {
        match (self.concurrency.is_empty(), self.scenario) {
            (false, _) => self.concurrency.clone(),
            (true, Scenario::SharedPrefix) => vec![16],
            (true, Scenario::Chat) => vec![1, 16],
            (true, Scenario::CodeEdit | Scenario::Extract) => vec![1],
            (true, _) => vec![1, 4, 8, 16],
        }
    }

    /// The `--schema` file's JSON (`check` made sure it reads); read once per run.
    pub fn schema_value(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.schema.as_ref()?).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// `--route`, or the scenario's default.
    pub fn route(&self) -> Route {
        self.route.unwrap_or(match self.scenario {
            Scenario::Load => Route::Completions,
            _ => Route::Chat,
        })
    }

    /// Refuses flags the scenario cannot honour, before anything is sent.
    pub fn check(&self) -> Result<(), String> {
        if self.schema.is_some() && self.route() == Route::Messages {
            return Err("--schema does not apply to --route messages".into());
        }
        if self.route() == Route::Ollama && self.model.is_none() {
            return Err("--route ollama needs --model: Ollama's API names the model".into());
        }
        if let Some(p) = &self.schema {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            serde_json::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        if self.scenario != Scenario::Load && !self.route().is_chat() {
            return Err(
                "this scenario sends chats: use --route chat, messages, responses or \
                        ollama"
                    .into(),
            );
        }
        if self.scenario == Scenario::Conversation {
            if !self.concurrency.is_empty() {
                return Err("-n does not apply to --scenario conversation: it runs one \
                            conversation at a time (--rounds repeats it)"
                    .into());
            }
            if self.turns == 0 {
                return Err("--turns must be at least 1".into());
            }
        }
        Ok(())
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

/// Which requests a round sends: with speculation off, on (the server's default), or both.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMode {
    Off,
    On,
    Both,
}

/// One streaming request to send: its route and its JSON body.
#[derive(Debug, Clone)]
pub struct Request {
    pub route: Route,
    pub body: Value,
}

/// What one streaming request measured.
#[derive(Debug, Default, Clone)]
pub struct RequestTiming {
    pub ttft: Option<Duration>,
    pub itl: Vec<Duration>,
    /// The usage's `completion_tokens`, else the number of chunks with text.
    pub output_tokens: usize,
    pub prompt_tokens: Option<usize>,
    /// The reply's text, every chunk's joined (a conversation sends it back).
    pub text: String,
    /// Drafted tokens accepted and rejected, where the usage reports them (OpenAI's
    /// `completion_tokens_details.{accepted,rejected}_prediction_tokens`).
    pub drafts: Option<(usize, usize)>,
}

/// One level's results.
#[derive(Debug, Clone)]
pub struct LevelReport {
    concurrency: usize,
    requests: usize,
    failed: usize,
    output_tokens: usize,
    wall: Duration,
    ttft: Vec<Duration>,
    itl: Vec<Duration>,
    mean_prompt_tokens: Option<f64>,
}

/// Every level of `args.levels()` in turn, its rows printed as they finish unless `--json`.
/// `request_for(n, round, i)` is the request of user `i` in wave `round` of level `n`.
pub async fn run_levels(
    endpoint: &Endpoint,
    args: &BenchServeArgs,
    request_for: impl Fn(usize, usize, usize) -> Request,
) -> Vec<LevelReport> {
    let mut reports = Vec::new();
    for n in args.levels() {
        let report = level(endpoint, args, n, &request_for).await;
        if !args.json {
            print_row(&report, reports.is_empty());
        }
        reports.push(report);
    }
    reports
}

async fn level(
    endpoint: &Endpoint,
    args: &BenchServeArgs,
    n: usize,
    request_for: &impl Fn(usize, usize, usize) -> Request,
) -> LevelReport {
    let mut report = LevelReport {
        concurrency: n,
        requests: 0,
        failed: 0,
        output_tokens: 0,
        wall: Duration::ZERO,
        ttft: Vec::new(),
        itl: Vec::new(),
        mean_prompt_tokens: None,
    };
    let mut prompt_tokens = Vec::new();
    for round in 0..args.rounds.max(1) {
        let requests: Vec<Request> = (0..n).map(|i| request_for(n, round, i)).collect();
        let start = Instant::now();
        for timing in wave(endpoint, requests, args.timeout()).await {
            report.requests += 1;
            match timing {
                Some(t) => {
                    report.output_tokens += t.output_tokens;
                    report.ttft.extend(t.ttft);
                    report.itl.extend(t.itl);
                    prompt_tokens.extend(t.prompt_tokens);
                }
                None => report.failed += 1,
            }
        }
        report.wall += start.elapsed();
    }
    if !prompt_tokens.is_empty() {
        report.mean_prompt_tokens =
            Some(prompt_tokens.iter().sum::<usize>() as f64 / prompt_tokens.len() as f64);
    }
    report
}

/// Xorshift64 over word lists: generated prompts are the same on every machine and run, so
/// two servers measured side by side see the same bytes. The state must not be zero.
pub struct WordRng(pub u64);

impl WordRng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next_u64() % words.len() as u64) as usize]
    }
}

/// Sends `requests` at once and waits for them all: each one's timing, or `None` for one
/// that failed (why is printed as it is found).
pub async fn wave(
    endpoint: &Endpoint,
    requests: Vec<Request>,
    timeout: Duration,
) -> Vec<Option<RequestTiming>> {
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|request| {
            let endpoint = endpoint.clone();
            tokio::spawn(async move { stream_within(&endpoint, request, timeout).await })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(match task.await {
            Ok(Ok(t)) => Some(t),
            Ok(Err(e)) => {
                eprintln!("request failed: {e}");
                None
            }
            Err(e) => {
                eprintln!("request task failed: {e}");
                None
            }
        });
    }
    out
}

/// `stream`, given up after `timeout`.
pub async fn stream_within(
    endpoint: &Endpoint,
    request: Request,
    timeout: Duration,
) -> Result<RequestTiming, String> {
    tokio::time::timeout(timeout, stream(endpoint, &request))
        .await
        .map_err(|_| format!("no answer within {} s", timeout.as_secs()))?
}

/// Sends one streaming request and times its events. What text an event carries and what
/// usage it reports is the route's to say; events without text (a chat's role chunk, the
/// finish chunk, the usage chunk, Anthropic's block markers) are not timed.
async fn stream(endpoint: &Endpoint, request: &Request) -> Result<RequestTiming, String> {
    let sent = Instant::now();
    let response = endpoint
        .post_json(request.route.path(), &request.body)
        .await
        .map_err(|e| e.to_string())?;
    if response.status != 200 {
        let status = response.status;
        let text = response.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {text}"));
    }
    let mut chunks = Chunks::of(response, request.route);
    let mut timing = RequestTiming::default();
    let mut last: Option<Instant> = None;
    let mut chunks_with_text = 0;
    let mut usage_tokens = None;
    while let Some(data) = chunks.next().await? {
        if data == "[DONE]" {
            break;
        }
        let now = Instant::now();
        let chunk: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        let route = request.route;
        if let Some(err) = route.error(&chunk) {
            return Err(format!("stream error: {err}"));
        }
        if let Some(u) = route.usage(&chunk) {
            usage_tokens = Some(u.output_tokens);
            timing.prompt_tokens = u.prompt_tokens;
        }
        if let Some(d) = chunk.pointer("/usage/completion_tokens_details") {
            let count = |k: &str| d[k].as_u64().map(|v| v as usize);
            timing.drafts =
                count("accepted_prediction_tokens").zip(count("rejected_prediction_tokens"));
        }
        let text = route.text(&chunk).filter(|t| !t.is_empty());
        if let Some(text) = text {
            timing.text.push_str(text);
            chunks_with_text += 1;
            match last {
                None => timing.ttft = Some(now - sent),
                Some(prev) => timing.itl.push(now - prev),
            }
            last = Some(now);
        }
    }
    timing.output_tokens = usage_tokens.unwrap_or(chunks_with_text);
    Ok(timing)
}

/// A stream's chunks as JSON texts: server-sent events' data, or NDJSON lines.
enum Chunks {
    Events(ferrox_server::client::EventReader),
    Lines(ferrox_server::client::LineReader),
}

impl Chunks {
    fn of(response: ferrox_server::client::Response, route: Route) -> Chunks {
        match route.ndjson() {
            true => Chunks::Lines(response.lines()),
            false => Chunks::Events(response.events()),
        }
    }

    async fn next(&mut self) -> Result<Option<String>, String> {
        let next = match self {
            Chunks::Events(e) => e.next_data().await,
            Chunks::Lines(l) => l.next_line().await,
        };
        next.map_err(|e| e.to_string())
    }
}

/// The percentile `p` (0..=100) of `xs` in milliseconds, interpolated linearly between the
/// two nearest ranks: numpy's default, which vLLM's `benchmark_serving` (np.percentile,
/// np.median) and the anchors in `../shared/anchors.md` use. It matters at a step in the
/// distribution: with 16 requests and 8 slots, the median lies halfway between the last
/// request of the first wave and the first of the second, where nearest-rank would report
/// the first wave's last one.
pub fn percentile_ms(xs: &[Duration], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = xs.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(f64::total_cmp);
    let pos = (p / 100.0).clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

pub fn tok_per_s(r: &LevelReport) -> f64 {
    r.output_tokens as f64 / r.wall.as_secs_f64().max(1e-9)
}

fn print_row(r: &LevelReport, header: bool) {
    if header {
        println!(
            "{:>4} {:>5} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}",
            "N",
            "reqs",
            "failed",
            "out tok/s",
            "TTFT p50",
            "TTFT p90",
            "ITL p50",
            "ITL p90",
            "prompt"
        );
    }
    let ms = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    println!(
        "{:>4} {:>5} {:>6} {:>10.1} {:>10} {:>10} {:>9} {:>9} {:>8}",
        r.concurrency,
        r.requests,
        r.failed,
        tok_per_s(r),
        ms(percentile_ms(&r.ttft, 50.0)),
        ms(percentile_ms(&r.ttft, 90.0)),
        ms(percentile_ms(&r.itl, 50.0)),
        ms(percentile_ms(&r.itl, 90.0)),
        r.mean_prompt_tokens
            .map_or("-".into(), |p| format!("{p:.0}")),
    );
}

pub fn report_json(r: &LevelReport) -> Value {
    json!({
        "concurrency": r.concurrency,
        "requests": r.requests,
        "failed": r.failed,
        "output_tokens": r.output_tokens,
        "wall_s": r.wall.as_secs_f64(),
        "output_tok_per_s": tok_per_s(r),
        "ttft_p50_ms": percentile_ms(&r.ttft, 50.0),
        "ttft_p90_ms": percentile_ms(&r.ttft, 90.0),
        "itl_p50_ms": percentile_ms(&r.itl, 50.0),
        "itl_p90_ms": percentile_ms(&r.itl, 90.0),
        "mean_prompt_tokens": r.mean_prompt_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile([1..=10], [50, 90]) = [5.5, 9.1]
        let xs: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(near(percentile_ms(&xs, 50.0), 5.5));
        assert!(near(percentile_ms(&xs, 90.0), 9.1));
        assert!(near(percentile_ms(&xs, 0.0), 1.0));
        assert!(near(percentile_ms(&xs, 100.0), 10.0));
        assert!(near(percentile_ms(&xs[..1], 50.0), 1.0));
        assert_eq!(percentile_ms(&[], 50.0), None);
    }

    #[test]
    fn scenario_defaults() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchServeArgs,
        }
        let parse = |argv: &[&str]| Cli::parse_from(argv).args;
        let load = parse(&["x"]);
        assert_eq!((load.scenario, load.max_tokens()), (Scenario::Load, 128));
        assert_eq!(load.levels(), vec![1, 4, 8, 16]);
        let shared = parse(&["x", "--scenario", "shared-prefix"]);
        assert_eq!((shared.max_tokens(), shared.levels()), (32, vec![16]));
        assert_eq!((shared.system_words(), load.system_words()), (1270, 1500));
        let conv = parse(&["x", "--scenario", "conversation", "--max-tokens", "8"]);
        assert_eq!((conv.max_tokens(), conv.turns), (8, 4));
        assert_eq!(parse(&["x", "-n", "2,3"]).levels(), vec![2, 3]);
        for (scenario, tokens) in [("code-edit", 1024), ("extract", 384), ("chat", 256)] {
            let spec = parse(&["x", "--scenario", scenario]);
            assert_eq!(spec.max_tokens(), tokens, "{scenario}");
        }
        assert!(parse(&["x", "--scenario", "conversation", "-n", "2"])
            .check()
            .is_err());
        assert!(parse(&["x", "--scenario", "conversation", "--turns", "0"])
            .check()
            .is_err());
        assert!(parse(&["x", "-n", "2"]).check().is_ok());
    }
}
