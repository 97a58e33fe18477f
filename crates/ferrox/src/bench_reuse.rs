//! `ferrox bench serve --scenario conversation | shared-prefix`: load that reuses prompts.
//!
//! The default load gives every request a prompt of its own, so no server can reuse
//! anything. Chat traffic reuses a lot, and these two scenarios measure what that is worth:
//!
//! - **conversation**: one chat over `/v1/chat/completions`, a 1,500-word system prompt
//!   (~1,780 Gemma 3 tokens) and `--turns` short user questions (default 4). Each turn
//!   resends the whole history (system, every question, every reply so far) plus its new
//!   question, as a chat client does, and reports its TTFT. Turn 1 pays for the whole
//!   prompt; from turn 2 a server that kept the conversation's KV computes only the new
//!   tokens. llama-server keeps a slot's prompt: `../shared/anchors.md` has its turns 2-4 at
//!   ~0.2 s after a 5.3 s first turn, where ferrox `631309c` re-prefilled everything (3.6 s
//!   every turn).
//! - **shared-prefix**: N users at once (`-n`, default 16), one 1,270-word system prompt
//!   (~1,500 Gemma 3 tokens), each user's own question, one request each; TTFT p50/p90 and
//!   output tok/s as the default load reports them. The prompt can be computed once for all
//!   N; computed N times, the wave's TTFT is N prefills deep.
//!
//! Every round starts from a system prompt no earlier round used (seeded by scenario, level
//! and round), so a round never finds the previous one's prefix cached: rounds repeat one
//! cold experiment rather than measuring a warm cache.
//!
//! Requests carry only standard OpenAI chat fields (`model` if given, `messages`,
//! `max_tokens`, `temperature` 0, `stream`, `stream_options.include_usage`), so ferrox,
//! which refuses fields it cannot honour, and llama-server (whose `cache_prompt` is on by
//! default) take the same bodies. No `ignore_eos`: a reply may end at the end of its turn
//! before `max_tokens`; the reports carry the output tokens each server counted.
//!
//! The system prompt is generated, not copied: sentences drawn from small word lists by a
//! seeded `WordRng`, the same bytes on every machine, so both servers see one prompt.

use std::time::{Duration, Instant};

use ferrox_server::client::Endpoint;
use serde_json::{json, Value};

use crate::bench_client::{
    percentile_ms, report_json, run_levels, stream_within, BenchServeArgs, Request, WordRng,
};

const ADJECTIVES: &[&str] = &[
    "quiet", "bright", "narrow", "ancient", "golden", "hollow", "gentle", "rusty", "tall",
    "frozen", "crooked", "painted", "heavy", "distant", "silent", "wooden", "northern", "humble",
    "restless", "careful", "broken", "clever", "patient", "proud",
];
const NOUNS: &[&str] = &[
    "lantern",
    "harbor",
    "orchard",
    "bridge",
    "market",
    "tower",
    "meadow",
    "mill",
    "chapel",
    "ferry",
    "forge",
    "garden",
    "library",
    "well",
    "stable",
    "bakery",
    "lighthouse",
    "quarry",
    "vineyard",
    "school",
    "granary",
    "workshop",
    "square",
    "canal",
];
const KEEPERS: &[&str] = &[
    "baker",
    "ferryman",
    "weaver",
    "smith",
    "miller",
    "teacher",
    "gardener",
    "sailor",
    "mason",
    "potter",
    "fisher",
    "carpenter",
    "shepherd",
    "clerk",
    "brewer",
    "tailor",
];
const VERBS: &[&str] = &[
    "guards",
    "repairs",
    "visits",
    "paints",
    "watches",
    "cleans",
    "opens",
    "closes",
    "measures",
    "sweeps",
    "counts",
    "lights",
    "inspects",
    "decorates",
    "locks",
    "shares",
];
const PLACES: &[&str] = &[
    "behind",
    "beside",
    "across from",
    "below",
    "above",
    "near",
    "past",
    "facing",
];
const TIMES: &[&str] = &[
    "at dawn",
    "every morning",
    "after the rain",
    "before the market opens",
    "on feast days",
    "in winter",
    "at noon",
    "when the bell rings",
    "once a month",
    "after sunset",
];

/// Seeds of the generated system prompts: a different one per scenario, level and round.
const CONVERSATION_SEED: u64 = 1;
const SHARED_PREFIX_SEED: u64 = 2;

/// What one turn measured over every round (one entry per round).
#[derive(Debug, Clone, Default)]
struct TurnReport {
    ttft: Vec<Duration>,
    total: Vec<Duration>,
    prompt_tokens: Vec<usize>,
    output_tokens: Vec<usize>,
}

/// The multi-turn chat: `--rounds` fresh conversations of `--turns` turns each.
pub async fn conversation(endpoint: &Endpoint, args: &BenchServeArgs) -> Result<(), String> {
    let mut turns = vec![TurnReport::default(); args.turns];
    for round in 0..args.rounds.max(1) {
        let system = system_prompt(
            args.system_words(),
            seed(&[CONVERSATION_SEED, round as u64]),
        );
        let mut messages = vec![message("system", &system)];
        for (t, report) in turns.iter_mut().enumerate() {
            messages.push(message("user", &question(t)));
            let request = chat_request(args, messages.clone(), args.max_tokens());
            let sent = Instant::now();
            let timing = stream_within(endpoint, request, args.timeout())
                .await
                .map_err(|e| format!("conversation {}, turn {}: {e}", round + 1, t + 1))?;
            report.total.push(sent.elapsed());
            report.ttft.extend(timing.ttft);
            report.prompt_tokens.extend(timing.prompt_tokens);
            report.output_tokens.push(timing.output_tokens);
            messages.push(message("assistant", &timing.text));
        }
    }
    let later: Vec<Duration> = turns.iter().skip(1).flat_map(|t| t.ttft.clone()).collect();
    if args.json {
        let per_turn: Vec<Value> = turns.iter().enumerate().map(turn_json).collect();
        println!(
            "{}",
            json!({
                "scenario": "conversation",
                "url": args.url,
                "max_tokens": args.max_tokens(),
                "system_words": args.system_words(),
                "rounds": args.rounds.max(1),
                "turns": per_turn,
                "later_turns_ttft_p50_ms": percentile_ms(&later, 50.0),
            })
        );
    } else {
        print_turns(&turns, &later);
    }
    Ok(())
}

/// N users behind one system prompt, each with a question of its own, all at once.
pub async fn shared_prefix(endpoint: &Endpoint, args: &BenchServeArgs) -> Result<(), String> {
    let reports = run_levels(endpoint, args, |n, round, i| {
        let seed = seed(&[SHARED_PREFIX_SEED, n as u64, round as u64]);
        let messages = vec![
            message("system", &system_prompt(args.system_words(), seed)),
            message("user", &question(i)),
        ];
        chat_request(args, messages, args.max_tokens())
    })
    .await;
    if args.json {
        let levels: Vec<Value> = reports.iter().map(report_json).collect();
        println!(
            "{}",
            json!({
                "scenario": "shared-prefix",
                "url": args.url,
                "max_tokens": args.max_tokens(),
                "system_words": args.system_words(),
                "levels": levels,
            })
        );
    }
    Ok(())
}

/// A streaming chat request through the chosen chat-shaped route; on `chat`, standard
/// OpenAI fields only (see the module doc).
pub fn chat_request(args: &BenchServeArgs, messages: Vec<Value>, max_tokens: usize) -> Request {
    let route = args.route();
    Request {
        route,
        body: route.body(&messages, max_tokens, args.model.as_deref(), None),
    }
}

/// The warm-up chat: a few tokens, sharing nothing with the system prompts but the chat
/// template's opening.
pub fn warm_up_messages() -> Vec<Value> {
    vec![message("user", "Warm up.")]
}

fn message(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

/// One seed from its parts (scenario, level, round), never zero (xorshift's fixed point).
fn seed(parts: &[u64]) -> u64 {
    let h = parts.iter().fold(0x9E37_79B9_7F4A_7C15_u64, |h, &p| {
        (h ^ p).wrapping_mul(0x0100_0000_01B3)
    });
    h.max(1)
}

/// A system prompt of at least `words` words (at most one sentence more): an instruction,
/// then paragraphs of generated sentences about a town, which the questions ask about.
fn system_prompt(words: usize, seed: u64) -> String {
    let mut rng = WordRng(seed);
    let mut out = String::from(
        "You are the keeper of the town archive. The notes below describe the town, its \
         places and its people. Answer every question in one short sentence, using only \
         the notes.",
    );
    let mut count = out.split_whitespace().count();
    let mut sentences = 0;
    while count < words {
        out.push_str(if sentences % 8 == 0 { "\n\n" } else { " " });
        let sentence = sentence(&mut rng);
        count += sentence.split_whitespace().count();
        out.push_str(&sentence);
        sentences += 1;
    }
    out
}

/// One sentence of the notes, in one of four shapes.
fn sentence(rng: &mut WordRng) -> String {
    let (adj, noun, keeper, verb) = (
        rng.pick(ADJECTIVES),
        rng.pick(NOUNS),
        rng.pick(KEEPERS),
        rng.pick(VERBS),
    );
    let (other, place, time) = (rng.pick(NOUNS), rng.pick(PLACES), rng.pick(TIMES));
    match rng.next_u64() % 4 {
        0 => format!("The {adj} {noun} stands {place} the {other}."),
        1 => format!("The {keeper} {verb} the {adj} {noun} {time}."),
        2 => format!("Nobody {verb} the {noun} {place} the {other} {time}, except the {keeper}."),
        _ => format!("When the {noun} is {adj}, the {keeper} {verb} the {other} instead."),
    }
}

/// The `k`-th question: short, about the notes, and different for every `k`.
fn question(k: usize) -> String {
    let shapes = 4;
    let noun = NOUNS[(k / shapes) % NOUNS.len()];
    let keeper = KEEPERS[(k / shapes) % KEEPERS.len()];
    let q = match k % shapes {
        0 => format!("What do the notes say about the {noun}?"),
        1 => format!("Who takes care of the {noun}, and when?"),
        2 => format!("Where is the {noun}?"),
        _ => format!("What does the {keeper} do?"),
    };
    // Past the shapes' combinations a number keeps the questions apart.
    if k < shapes * KEEPERS.len() {
        q
    } else {
        format!("{q} (question {k})")
    }
}

fn median_ms(xs: &[Duration]) -> Option<f64> {
    percentile_ms(xs, 50.0)
}

fn mean(xs: &[usize]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<usize>() as f64 / xs.len() as f64)
}

fn turn_json((t, r): (usize, &TurnReport)) -> Value {
    let each: Vec<f64> = r.ttft.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    json!({
        "turn": t + 1,
        "ttft_ms": median_ms(&r.ttft),
        "ttft_ms_each": each,
        "total_ms": median_ms(&r.total),
        "prompt_tokens": mean(&r.prompt_tokens),
        "output_tokens": mean(&r.output_tokens),
    })
}

fn print_turns(turns: &[TurnReport], later: &[Duration]) {
    println!(
        "{:>4} {:>8} {:>8} {:>10} {:>10}",
        "turn", "prompt", "out tok", "TTFT", "total"
    );
    let ms = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
    for (t, r) in turns.iter().enumerate() {
        println!(
            "{:>4} {:>8} {:>8} {:>10} {:>10}",
            t + 1,
            num(mean(&r.prompt_tokens)),
            num(mean(&r.output_tokens)),
            ms(median_ms(&r.ttft)),
            ms(median_ms(&r.total)),
        );
    }
    if let (Some(first), Some(rest)) = (median_ms(&turns[0].ttft), median_ms(later)) {
        println!(
            "turn 1 TTFT {first:.0} ms; turns 2+ median {rest:.0} ms ({:.2}x turn 1)",
            rest / first
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_prompts_are_deterministic_and_about_the_asked_length() {
        let a = system_prompt(1500, seed(&[CONVERSATION_SEED, 0]));
        assert_eq!(a, system_prompt(1500, seed(&[CONVERSATION_SEED, 0])));
        let words = a.split_whitespace().count();
        assert!((1500..1520).contains(&words), "{words} words");
        // Another round, level or scenario differs from the first paragraph on.
        let first_paragraph = |s: &str| s.split("\n\n").nth(1).unwrap().to_string();
        let others = [
            seed(&[CONVERSATION_SEED, 1]),
            seed(&[SHARED_PREFIX_SEED, 16, 0]),
            seed(&[SHARED_PREFIX_SEED, 4, 0]),
        ];
        for s in others {
            assert_ne!(
                first_paragraph(&a),
                first_paragraph(&system_prompt(1500, s))
            );
        }
    }

    #[test]
    fn questions_differ() {
        let qs: std::collections::HashSet<String> = (0..200).map(question).collect();
        assert_eq!(qs.len(), 200);
        assert!(qs.iter().all(|q| q.split_whitespace().count() <= 12));
    }

    #[test]
    fn chat_requests_carry_standard_fields_only() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchServeArgs,
        }
        let args = Cli::parse_from(["x", "--scenario", "shared-prefix"]).args;
        let request = chat_request(&args, warm_up_messages(), 8);
        assert_eq!(request.route.path(), "/v1/chat/completions");
        let mut keys: Vec<&str> = request
            .body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        let standard = [
            "max_tokens",
            "messages",
            "stream",
            "stream_options",
            "temperature",
        ];
        assert_eq!(keys, standard);
    }
}
