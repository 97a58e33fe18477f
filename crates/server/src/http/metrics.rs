//! `GET /metrics`: Prometheus text exposition of what the server and the scheduler do.
//!
//! Two sources, read at scrape time:
//! - the server's own [`Metrics`]: requests by route and status (counted by the
//!   [`track_requests`] middleware, which sees every response, errors and panics included),
//!   prompt and generated tokens of finished generations, and three latency histograms
//!   observed by the one generation path (`generate.rs`), so every protocol feeds them;
//! - each loaded model's `SchedulerStatus` snapshot: queue depth, running and prefilling
//!   sequences, KV blocks, refusals by type, finished requests by reason — one series per
//!   model, labelled `model` (`model_name` on the vLLM-named ones).
//!
//! Hand-written rather than a metrics crate: a dozen series, fixed buckets, atomics; the
//! format is a few lines of `writeln!`. Histograms keep their sum in whole microseconds so
//! that every update is one atomic add.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use ferrox_sched::SchedulerStatus;

/// A cumulative-bucket latency histogram in seconds.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending; `+Inf` is implicit.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative; the last is `+Inf`).
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            match self.bounds.get(i) {
                Some(b) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Time to first token: queueing and prefill.
const TTFT_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Inter-token latency: one decode step under the current batch.
const ITL_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0,
];
/// Whole generation, submit to `Done`.
const DURATION_BOUNDS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0];

/// The server's own counters. Shared as `Arc<Metrics>`; every field is updated lock-free
/// except the request table (one short lock per response).
#[derive(Debug)]
pub struct Metrics {
    /// `(route, status) -> count`; route is the matched pattern, or `unmatched`.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub duration: Histogram,
    /// Connections being served now (`server.rs`).
    pub connections_open: AtomicU64,
    /// Connections closed for not sending a request's headers in time: slow, or idle.
    pub header_timeouts: AtomicU64,
    /// Requests refused for a missing or wrong API key.
    pub auth_failures: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Mutex::default(),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BOUNDS),
            itl: Histogram::new(ITL_BOUNDS),
            duration: Histogram::new(DURATION_BOUNDS),
            connections_open: AtomicU64::new(0),
            header_timeouts: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    pub fn count_request(&self, route: &str, status: u16) {
        let mut table = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *table.entry((route.to_string(), status)).or_default() += 1;
    }

    /// Requests answered so far on `route` with `status`.
    pub fn requests(&self, route: &str, status: u16) -> u64 {
        let table = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        table
            .get(&(route.to_string(), status))
            .copied()
            .unwrap_or(0)
    }

    /// The exposition text, with the scheduler series of every loaded model (its status and
    /// id; none while the first model loads).
    pub fn render(&self, models: &[(SchedulerStatus, String)]) -> String {
        let mut out = String::with_capacity(4096);
        let _ = writeln!(
            out,
            "# HELP ferrox_requests_total HTTP requests answered, by route and status.\n\
             # TYPE ferrox_requests_total counter"
        );
        {
            let table = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            for ((route, status), n) in table.iter() {
                let _ = writeln!(
                    out,
                    "ferrox_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        counter(
            &mut out,
            "ferrox_prompt_tokens_total",
            "Prompt tokens of finished generations.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ferrox_generation_tokens_total",
            "Tokens generated by finished generations.",
            self.generation_tokens.load(Ordering::Relaxed),
        );
        self.ttft.render(
            &mut out,
            "ferrox_time_to_first_token_seconds",
            "Time from submission to the first generated token.",
        );
        self.itl.render(
            &mut out,
            "ferrox_inter_token_latency_seconds",
            "Time between consecutive generated tokens of one sequence.",
        );
        self.duration.render(
            &mut out,
            "ferrox_request_duration_seconds",
            "Time from submission to the end of a generation.",
        );
        gauge(
            &mut out,
            "ferrox_connections_open",
            "Connections being served.",
            self.connections_open.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ferrox_connections_timed_out_total",
            "Connections closed for not sending a request's headers within --header-timeout \
             (slow, or idle between requests).",
            self.header_timeouts.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ferrox_auth_failures_total",
            "Requests refused with 401 for a missing or wrong API key.",
            self.auth_failures.load(Ordering::Relaxed),
        );
        if !models.is_empty() {
            render_scheduler(&mut out, models);
            render_gateway(&mut out, models);
        }
        out
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

/// A series: its name, its help, and its value in a status.
type Series<T> = (&'static str, &'static str, fn(&SchedulerStatus) -> T);

/// One series per loaded model, labelled `{label}="id"` (plus `extra` labels), under one
/// HELP and TYPE.
fn per_model(
    out: &mut String,
    (name, kind, help): (&str, &str, &str),
    label: &str,
    models: &[(SchedulerStatus, String)],
    value: impl Fn(&SchedulerStatus) -> String,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (s, id) in models {
        let _ = writeln!(
            out,
            "{name}{{{label}=\"{}\"}} {}",
            escape_label(id),
            value(s)
        );
    }
}

/// A counter with one more label than the model, one series per (model, value).
fn per_model_by(
    out: &mut String,
    (name, help): (&str, &str),
    key: &str,
    models: &[(SchedulerStatus, String)],
    values: impl Fn(&SchedulerStatus) -> Vec<(&'static str, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (s, id) in models {
        for (v, n) in values(s) {
            let _ = writeln!(
                out,
                "{name}{{model=\"{}\",{key}=\"{v}\"}} {n}",
                escape_label(id)
            );
        }
    }
}

/// The scheduler's series, one per loaded model (`model` label).
fn render_scheduler(out: &mut String, models: &[(SchedulerStatus, String)]) {
    let gauges: [Series<usize>; 9] = [
        (
            "ferrox_queue_depth",
            "Requests waiting for admission.",
            |s| s.queued,
        ),
        (
            "ferrox_sequences_running",
            "Sequences generating tokens.",
            |s| s.running,
        ),
        (
            "ferrox_sequences_prefilling",
            "Sequences still computing their prompt.",
            |s| s.prefilling,
        ),
        (
            "ferrox_sequences_preempted",
            "Sequences preempted for KV blocks, waiting to resume.",
            |s| s.preempted,
        ),
        (
            "ferrox_kv_blocks_used",
            "KV cache blocks held by sequences.",
            |s| s.blocks_total.saturating_sub(s.blocks_free),
        ),
        (
            "ferrox_kv_blocks_free",
            "KV cache blocks no sequence holds (free, or cached and reclaimable).",
            |s| s.blocks_free,
        ),
        (
            "ferrox_kv_blocks_cached",
            "KV cache blocks holding a reusable prompt prefix.",
            |s| s.blocks_cached,
        ),
        (
            "ferrox_kv_blocks_total",
            "KV cache blocks in the pool.",
            |s| s.blocks_total,
        ),
        (
            "ferrox_kv_blocks_peak_used",
            "Most KV blocks ever leased at once.",
            |s| s.blocks_peak_used,
        ),
    ];
    per_model(
        out,
        (
            "ferrox_scheduler_healthy",
            "gauge",
            "1 while the scheduler worker runs.",
        ),
        "model",
        models,
        |s| u8::from(s.healthy).to_string(),
    );
    for (name, help, value) in gauges {
        per_model(out, (name, "gauge", help), "model", models, |s| {
            value(s).to_string()
        });
    }
    let counters: [Series<u64>; 11] = [
        (
            "ferrox_preemptions_total",
            "Sequences preempted for KV blocks (each resumes and loses nothing).",
            |s| s.preemptions,
        ),
        (
            "ferrox_prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            |s| s.prefix_cache_queries,
        ),
        (
            "ferrox_prefix_cache_hits_total",
            "Prompt tokens served from the prefix cache instead of computed.",
            |s| s.prefix_cache_hits,
        ),
        (
            "ferrox_prefix_cache_evictions_total",
            "Cached KV blocks reclaimed for new KV.",
            |s| s.prefix_cache_evictions,
        ),
        (
            "ferrox_requests_admitted_total",
            "Requests admitted into the batch.",
            |s| s.requests_admitted,
        ),
        (
            "ferrox_tokens_prefilled_total",
            "Prompt tokens computed by the scheduler.",
            |s| s.tokens_prefilled,
        ),
        (
            "ferrox_tokens_decoded_total",
            "Tokens decoded by the scheduler.",
            |s| s.tokens_decoded,
        ),
        ("ferrox_steps_total", "Forward passes run.", |s| s.steps),
        (
            "ferrox_spec_draft_tokens_total",
            "Drafted tokens speculative decoding verified.",
            |s| s.spec_drafted,
        ),
        (
            "ferrox_spec_accepted_tokens_total",
            "Drafted tokens the model's own draws matched (each saved a step).",
            |s| s.spec_accepted,
        ),
        (
            "ferrox_worker_restarts_total",
            "Panics the scheduler worker recovered from.",
            |s| s.worker_restarts,
        ),
    ];
    for (name, help, value) in counters {
        per_model(out, (name, "counter", help), "model", models, |s| {
            value(s).to_string()
        });
    }
    per_model(
        out,
        (
            "ferrox_spec_acceptance_rate",
            "gauge",
            "Accepted over drafted tokens since start (0 before any draft).",
        ),
        "model",
        models,
        |s| (s.spec_accepted as f64 / s.spec_drafted.max(1) as f64).to_string(),
    );
    per_model_by(
        out,
        (
            "ferrox_refusals_total",
            "Requests the scheduler refused, by type.",
        ),
        "type",
        models,
        |s| {
            let r = &s.refusals;
            vec![
                ("invalid_request", r.invalid_request),
                ("context_length_exceeded", r.context_length_exceeded),
                (
                    "device_memory_budget_exceeded",
                    r.device_memory_budget_exceeded,
                ),
                ("queue_full", r.queue_full),
                ("worker_gone", r.worker_gone),
            ]
        },
    );
    per_model_by(
        out,
        (
            "ferrox_requests_finished_total",
            "Generations finished, by reason.",
        ),
        "reason",
        models,
        |s| {
            let f = &s.finished;
            vec![
                ("stop", f.stop),
                ("length", f.length),
                ("cancelled", f.cancelled),
                ("error", f.error),
            ]
        },
    );
}

/// Middleware: counts every response by matched route and status.
pub async fn track_requests(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(req).await;
    metrics.count_request(&route, response.status().as_u16());
    response
}

/// The series in vLLM's names that gateways and routers scrape to pick a replica (the
/// Gateway API Inference Extension's endpoint picker, vLLM's production-stack router), with
/// vLLM's meanings: waiting = queued or preempted, running = in the batch (prefilling
/// included), KV usage as a fraction, prefix-cache counters in tokens.
fn render_gateway(out: &mut String, models: &[(SchedulerStatus, String)]) {
    let series: [(&str, Series<String>); 8] = [
        (
            "gauge",
            (
                "vllm:num_requests_waiting",
                "Requests waiting: queued, or preempted and waiting to resume.",
                |s| (s.queued + s.preempted).to_string(),
            ),
        ),
        (
            "gauge",
            (
                "vllm:num_requests_running",
                "Sequences in the batch, prefilling or decoding.",
                |s| (s.running + s.prefilling).to_string(),
            ),
        ),
        (
            "gauge",
            (
                "vllm:kv_cache_usage_perc",
                "KV cache usage, 0 to 1 (blocks held by sequences over all blocks).",
                |s| {
                    let used = s.blocks_total.saturating_sub(s.blocks_free);
                    (used as f64 / s.blocks_total.max(1) as f64).to_string()
                },
            ),
        ),
        (
            "counter",
            (
                "vllm:prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
                |s| s.prefix_cache_queries.to_string(),
            ),
        ),
        (
            "counter",
            (
                "vllm:prefix_cache_hits_total",
                "Prompt tokens served from the prefix cache.",
                |s| s.prefix_cache_hits.to_string(),
            ),
        ),
        (
            "counter",
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "Drafted tokens verified.",
                |s| s.spec_drafted.to_string(),
            ),
        ),
        (
            "counter",
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "Drafted tokens accepted.",
                |s| s.spec_accepted.to_string(),
            ),
        ),
        (
            "counter",
            (
                "vllm:num_preemptions_total",
                "Sequences preempted for KV blocks.",
                |s| s.preemptions.to_string(),
            ),
        ),
    ];
    for (kind, (name, help, value)) in series {
        per_model(out, (name, kind, help), "model_name", models, value);
    }
    let _ = writeln!(
        out,
        "# HELP vllm:cache_config_info The KV cache's geometry.\n\
         # TYPE vllm:cache_config_info gauge"
    );
    for (s, id) in models {
        let _ = writeln!(
            out,
            "vllm:cache_config_info{{model_name=\"{}\",block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1",
            escape_label(id),
            s.block_size_tokens,
            s.blocks_total
        );
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.ttft.observe(Duration::from_millis(20));
        m.ttft.observe(Duration::from_millis(700));
        m.ttft.observe(Duration::from_secs(100));
        m.count_request("/v1/completions", 200);
        let text = m.render(&[(SchedulerStatus::default(), "m".to_string())]);
        assert!(text.contains("ferrox_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
        assert!(text.contains("ferrox_time_to_first_token_seconds_bucket{le=\"1\"} 2\n"));
        assert!(text.contains("ferrox_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("ferrox_time_to_first_token_seconds_sum 100.72\n"));
        assert!(
            text.contains("ferrox_requests_total{route=\"/v1/completions\",status=\"200\"} 1\n")
        );
        assert!(text.contains("ferrox_refusals_total{model=\"m\",type=\"queue_full\"} 0\n"));
    }

    #[test]
    fn gateway_series_carry_vllms_names_and_meanings() {
        let s = SchedulerStatus {
            queued: 2,
            preempted: 1,
            running: 3,
            prefilling: 1,
            blocks_total: 200,
            blocks_free: 150,
            block_size_tokens: 16,
            prefix_cache_queries: 1000,
            prefix_cache_hits: 640,
            preemptions: 4,
            ..SchedulerStatus::default()
        };
        let text = Metrics::default().render(&[(s, "my \"model\"".to_string())]);
        let m = "{model_name=\"my \\\"model\\\"\"}";
        for line in [
            format!("vllm:num_requests_waiting{m} 3"),
            format!("vllm:num_requests_running{m} 4"),
            format!("vllm:kv_cache_usage_perc{m} 0.25"),
            format!("vllm:prefix_cache_queries_total{m} 1000"),
            format!("vllm:prefix_cache_hits_total{m} 640"),
            format!("vllm:num_preemptions_total{m} 4"),
            "vllm:cache_config_info{model_name=\"my \\\"model\\\"\",block_size=\"16\",num_gpu_blocks=\"200\"} 1".to_string(),
        ] {
            assert!(text.contains(&format!("{line}\n")), "no {line} in\n{text}");
        }
    }
}
