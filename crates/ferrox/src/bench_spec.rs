//! `ferrox bench serve --scenario code-edit | extract | chat`: what speculative decoding is
//! worth where users ask for it, and that it costs nothing where it cannot help.
//!
//! - **code-edit**: a 158-line Python file (`bench_spec/inventory.py`) returned whole with
//!   one small change (a rename; a changed default), the model copying most of its prompt;
//! - **extract**: a section of release notes quoted verbatim, and a JSON config returned
//!   with one value changed (`bench_spec/release-notes.md`, `service-config.json`);
//! - **chat**: free-form questions, answered at temperature 1 (OpenAI's default) with a seed per user, as a
//!   chat client would ask (greedy answers of a small model loop, which drafts love): little
//!   to draft from, so speculation must stand down; at 16 concurrent users, where a step is
//!   compute-bound, too.
//!
//! The other scenarios are greedy (temperature 0); `--temperature` sets every scenario's. Every request goes through the chat route. With `--spec both` (the
//! default) each round sends the level's requests twice, first with `"speculative": false`
//! and then without it (the server's default), so the two are interleaved on one server and
//! the ratio is measured in one run; `--spec on` / `off` send one of them, which is how a
//! server that has no per-request switch (llama-server, started with or without
//! `--spec-type`) is measured. Every request is cold for the drafter: prompt lookup only
//! reads the request's own tokens, so no earlier round warms anything up.
//!
//! Per request it takes the decode rate (output tokens after the first, over the time from
//! the first to the last), and reports per mode the median over requests, the aggregate
//! (tokens over wall time), and the drafted tokens accepted and rejected where the server
//! reports them (OpenAI's `completion_tokens_details`).

use std::time::Instant;

use ferrox_server::client::Endpoint;
use serde_json::{json, Value};

use crate::bench_client::{self, BenchServeArgs, Request, RequestTiming, Scenario, SpecMode};

const INVENTORY: &str = include_str!("bench_spec/inventory.py");
const RELEASE_NOTES: &str = include_str!("bench_spec/release-notes.md");
const SERVICE_CONFIG: &str = include_str!("bench_spec/service-config.json");

/// Questions whose answers are new text.
const QUESTIONS: [&str; 8] = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a rainbow forms, for a ten-year-old.",
    "What should I pack for a three-day hike in the mountains in autumn?",
    "Describe the city of the future in one paragraph.",
    "Give me five ideas for a birthday party for my grandmother.",
    "Why do cats purr? Answer in a few sentences.",
    "Write a poem about the sea in winter.",
    "How do I start learning to play the guitar?",
];

/// The `i`-th user's prompt of a speculation scenario.
pub fn prompt(scenario: Scenario, i: usize) -> String {
    match (scenario, i % 2) {
        (Scenario::CodeEdit, 0) => format!(
            "Rename the function `parse_line` to `parse_catalog_line` everywhere in this \
             file and return the whole file, with no other change and no explanation.\n\n\
             ```python\n{INVENTORY}```"
        ),
        (Scenario::CodeEdit, _) => format!(
            "In this file, change the default `reorder_level` of `Item` from 5 to 8 and \
             return the whole file, with no other change and no explanation.\n\n\
             ```python\n{INVENTORY}```"
        ),
        (Scenario::Extract, 0) => format!(
            "Quote the section \"Upgrading\" of these release notes exactly, word for word, \
             with its numbered steps.\n\n{RELEASE_NOTES}"
        ),
        (Scenario::Extract, _) => format!(
            "Return this JSON with `timeout_s` changed to 45 and nothing else changed, \
             formatted as it is.\n\n```json\n{SERVICE_CONFIG}```"
        ),
        _ => QUESTIONS[i % QUESTIONS.len()].to_string(),
    }
}

/// One mode's requests over every round of a level.
#[derive(Debug, Default)]
struct ModeReport {
    rates: Vec<f64>,
    tokens: usize,
    wall_s: f64,
    accepted: Option<usize>,
    rejected: Option<usize>,
    failed: usize,
}

impl ModeReport {
    fn median_rate(&self) -> Option<f64> {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        (!r.is_empty()).then(|| {
            let m = r.len() / 2;
            if r.len() % 2 == 1 {
                r[m]
            } else {
                (r[m - 1] + r[m]) / 2.0
            }
        })
    }

    fn aggregate(&self) -> f64 {
        self.tokens as f64 / self.wall_s.max(1e-9)
    }

    fn add(&mut self, t: &RequestTiming) {
        let decode_s: f64 = t.itl.iter().map(|d| d.as_secs_f64()).sum();
        if t.output_tokens > 1 && decode_s > 0.0 {
            self.rates.push((t.output_tokens - 1) as f64 / decode_s);
        }
        self.tokens += t.output_tokens;
        if let Some((a, r)) = t.drafts {
            *self.accepted.get_or_insert(0) += a;
            *self.rejected.get_or_insert(0) += r;
        }
    }

    fn json(&self) -> Value {
        json!({
            "median_decode_tok_per_s": self.median_rate(),
            "aggregate_tok_per_s": self.aggregate(),
            "requests": self.rates.len() + self.failed,
            "failed": self.failed,
            "output_tokens": self.tokens,
            "drafts_accepted": self.accepted,
            "drafts_rejected": self.rejected,
        })
    }
}

/// Runs the scenario level by level, printing a row per level and mode (or one JSON object).
pub async fn run(endpoint: &Endpoint, args: &BenchServeArgs) -> Result<(), String> {
    let modes: &[bool] = match args.spec {
        SpecMode::Off => &[false],
        SpecMode::On => &[true],
        SpecMode::Both => &[false, true],
    };
    let mut levels = Vec::new();
    for n in args.levels() {
        let mut reports: Vec<ModeReport> = modes.iter().map(|_| ModeReport::default()).collect();
        for round in 0..args.rounds.max(1) {
            for (&on, report) in modes.iter().zip(&mut reports) {
                wave(endpoint, args, (n, round), on, report).await;
            }
        }
        if !args.json {
            print_level(n, modes, &reports, levels.is_empty());
        }
        let by_mode: Vec<Value> = modes
            .iter()
            .zip(&reports)
            .map(|(&on, r)| json!({"speculative": on, "report": r.json()}))
            .collect();
        let ratio = match reports.as_slice() {
            [off, on] => on.median_rate().zip(off.median_rate()).map(|(a, b)| a / b),
            _ => None,
        };
        levels.push(json!({"concurrency": n, "modes": by_mode, "on_over_off": ratio}));
    }
    if args.json {
        let scenario = format!("{:?}", args.scenario).to_lowercase();
        println!(
            "{}",
            json!({"url": args.url, "scenario": scenario, "max_tokens": args.max_tokens(),
                   "levels": levels})
        );
    }
    Ok(())
}

/// `n` users at once, user `i` with prompt `i + round` (so that a level of one user sees
/// every prompt over the rounds); `on: false` sends `"speculative": false`.
async fn wave(
    endpoint: &Endpoint,
    args: &BenchServeArgs,
    (n, round): (usize, usize),
    on: bool,
    out: &mut ModeReport,
) {
    let route = args.route();
    let start = Instant::now();
    let requests: Vec<Request> = (0..n)
        .map(|i| {
            let text = prompt(args.scenario, i + round);
            let messages = [json!({"role": "user", "content": text})];
            let mut body = route.body(&messages, args.max_tokens(), args.model.as_deref(), None);
            let chat_default = (args.scenario == Scenario::Chat).then_some(1.0);
            if let Some(t) = args.temperature.or(chat_default) {
                body["temperature"] = json!(t);
                body["seed"] = json!(i + round);
            }
            if !on && args.spec == SpecMode::Both {
                body["speculative"] = json!(false);
            }
            Request { route, body }
        })
        .collect();
    for timing in bench_client::wave(endpoint, requests, args.timeout()).await {
        match timing {
            Some(t) => out.add(&t),
            None => out.failed += 1,
        }
    }
    out.wall_s += start.elapsed().as_secs_f64();
}

fn print_level(n: usize, modes: &[bool], reports: &[ModeReport], header: bool) {
    if header {
        println!(
            "{:>4} {:>5} {:>6} {:>14} {:>12} {:>9} {:>9}",
            "N", "spec", "failed", "decode tok/s", "aggr tok/s", "accepted", "rejected"
        );
    }
    for (&on, r) in modes.iter().zip(reports) {
        let count = |x: Option<usize>| x.map_or("-".into(), |v| v.to_string());
        println!(
            "{:>4} {:>5} {:>6} {:>14} {:>12.1} {:>9} {:>9}",
            n,
            if on { "on" } else { "off" },
            r.failed,
            r.median_rate().map_or("-".into(), |v| format!("{v:.1}")),
            r.aggregate(),
            count(r.accepted),
            count(r.rejected),
        );
    }
    if let [off, on] = reports {
        if let (Some(a), Some(b)) = (on.median_rate(), off.median_rate()) {
            println!("{n:>4} on/off {:.2}x (median decode rate)", a / b);
        }
    }
}
