//! The scheduler's knobs: one plain struct, built by the caller.
//!
//! Tests build [`SchedulerConfig`] directly: parallel tests race on the process environment,
//! so nothing in this crate reads it but [`SchedulerConfig::from_env`] (for tools that want
//! the `FERROX_CB_*` variables alone), a thin wrapper over [`SchedulerConfig::from_lookup`],
//! which is tested with a map instead of the environment. `ferrox serve` reads its flags
//! (each with its `FERROX_CB_*` variable, through clap) and parses the two switches with
//! `from_lookup`, so every spelling is read by one parser.

use ferrox_engine::KvType;
use std::num::ParseIntError;

/// How the KV cache is sized: a block count, or a byte budget divided by the bytes of one
/// block (from the model's `KvShape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvBudget {
    Blocks(usize),
    Bytes(u64),
}

/// Continuous-batching knobs. Each field names its environment variable (read only by
/// [`SchedulerConfig::from_env`]) and says why its default is what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most sequences in flight (prefilling ones count). `FERROX_CB_MAX_SEQS`, default 16:
    /// on a 2-core CPU aggregate decode throughput keeps growing up to about 16 parallel
    /// sequences (llama-batched-bench: 40 tok/s at 1, 104 at 16) while each sequence slows.
    pub max_seqs: usize,
    /// Most prompt tokens prefilled per tick, which is also the most a prompt joining the
    /// batch delays the running decodes. `FERROX_CB_PREFILL_CHUNK`, default 128: a chunk that
    /// holds a typical prompt whole halves the median time to first token under load, at the
    /// price of one ~0.4 s stall for the decoders (docs/SCHEDULER.md has the measurement).
    pub prefill_chunk_tokens: usize,
    /// Most prompt tokens per tick while no row is decoding (the larger of this and
    /// `prefill_chunk_tokens` applies then). Nothing waits on such a step, and each step
    /// reads every weight once (and on AVX2 repacks the K-quant ones), so one long prompt
    /// alone prefills in fewer, larger steps. `FERROX_CB_PREFILL_CHUNK_IDLE`, default 512:
    /// the engine's longest step (`ferrox_engine::MAX_STEP_ROWS`) and llama-server's
    /// micro-batch; 0 (or any value up to `prefill_chunk_tokens`) turns it off. On the 4B
    /// shape with the `avx2` spelling the weight repack is ~8 % of a prefill in 128-token
    /// steps and ~2 % in 512-token ones (docs/PERFORMANCE.md).
    pub prefill_chunk_idle_tokens: usize,
    /// Most requests waiting for admission; one more is refused with `QueueFull`.
    /// `FERROX_CB_MAX_QUEUE`, default 256: a few minutes of work at 16-way batching, after
    /// which a client is better told to retry than left waiting.
    pub max_queue: usize,
    /// Token positions per KV block. `FERROX_CB_KV_BLOCK_SIZE`, default 16: small enough that
    /// rounding wastes little (under 16 positions per request), large enough that block tables
    /// stay short.
    pub kv_block_size_tokens: usize,
    /// The KV cache size. `FERROX_CB_KV_BLOCKS` sets a block count, `FERROX_CB_KV_BUDGET_BYTES`
    /// a byte budget; default 1 GiB, which holds one full 32k-token context of Gemma 3 270M
    /// (18,432 bytes per position) or many shorter ones, within a small share of a 24 GB host.
    pub kv_budget: KvBudget,
    /// Longest prompt + max_tokens accepted. `FERROX_CB_MAX_CONTEXT`, default `None`: the
    /// model's trained context. A larger value is capped at the trained context.
    pub max_context_tokens: Option<usize>,
    /// A status line is logged every this many decode steps (0: never). Default 256.
    pub log_every_decode_steps: u64,
    /// Reuse the KV of full prompt blocks another request already computed
    /// ([`crate::prefix`]). `FERROX_PREFIX_CACHE` (`0` turns it off), default on: a
    /// conversation that resends its history is otherwise prefilled again every turn.
    pub prefix_cache: bool,
    /// Which prefilling row gets the tick's prompt chunk. `FERROX_CB_PREFILL_ORDER`
    /// (`oldest` or `round-robin`), default oldest: docs/SCHEDULER.md has the measurement.
    pub prefill_order: PrefillOrder,
    /// Speculative decoding (`crate::speculate`): which drafter, and how long a draft may be.
    pub speculation: SpecConfig,
    /// How the KV cache stores K and V (llama-server's `--cache-type-k` / `--cache-type-v`).
    /// `FERROX_CACHE_TYPE_K` / `FERROX_CACHE_TYPE_V` (`f16`, `q8_0` or `q4_0`), default f16:
    /// q8_0 halves the KV of a long context (34 bytes per 32 values) for a small change in the
    /// numbers (docs/PERFORMANCE.md has its KL divergence beside llama.cpp's).
    pub cache_type_k: KvType,
    pub cache_type_v: KvType,
}

/// The server's speculative decoding: llama-server's `--spec-type`, `--spec-draft-n-max`,
/// `--spec-draft-n-min`. A request may lower or raise its own limits, or turn it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecConfig {
    pub kind: SpecKind,
    /// Most drafted tokens a row verifies in one step. `FERROX_SPEC_N_MAX`, default 16
    /// (llama-server's): past that a draft is rarely still right on a CPU-sized model.
    pub n_max: usize,
    /// Fewer drafted tokens than this are not verified. `FERROX_SPEC_N_MIN`, default 0: the
    /// measured cost model decides (`crate::speculate`).
    pub n_min: usize,
    /// Let measured step costs and acceptance decide how much of each draft to verify
    /// (`crate::speculate`); `false` verifies every draft up to `n_max`, as llama-server
    /// does. `FERROX_SPEC_ADAPTIVE` (`0` turns it off), default on; off is for measuring the
    /// cost model against, and for tests that must see drafts verified whatever the timing.
    pub adaptive: bool,
}

impl Default for SpecConfig {
    fn default() -> Self {
        Self {
            kind: SpecKind::Ngram,
            n_max: 16,
            n_min: 0,
            adaptive: true,
        }
    }
}

/// Where drafted tokens come from. `FERROX_SPEC_TYPE`, default `ngram`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    /// No speculation: every row decodes one token per step.
    None,
    /// Prompt lookup: the continuation of the row's latest earlier n-gram (`crate::draft`).
    Ngram,
    /// A second, smaller model of the same vocabulary guesses greedily
    /// (`crate::draft_model`); the scheduler must be started with it
    /// ([`crate::Scheduler::start_with_draft`]).
    Draft,
}

impl SpecKind {
    /// The names `--spec-type` and `FERROX_SPEC_TYPE` take (llama-server's `ngram-simple`
    /// and `draft-simple` are accepted as their equivalents).
    pub const NAMES: &'static str = "none, ngram, draft (with a draft model)";

    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "none" | "off" => Some(Self::None),
            "ngram" | "ngram-simple" | "prompt-lookup" => Some(Self::Ngram),
            "draft" | "draft-simple" => Some(Self::Draft),
            _ => None,
        }
    }
}

/// Which prompt the tick's one prefill chunk goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillOrder {
    /// The oldest prefilling row: prompts finish one after another, so the first gets its
    /// first token after its own prefill, not after everyone's.
    Oldest,
    /// The next prefilling row after the last one served: every prompt progresses, and all
    /// of them get their first token near the end.
    RoundRobin,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_seqs: 16,
            prefill_chunk_tokens: 128,
            prefill_chunk_idle_tokens: 512,
            max_queue: 256,
            kv_block_size_tokens: 16,
            kv_budget: KvBudget::Bytes(1 << 30),
            max_context_tokens: None,
            log_every_decode_steps: 256,
            prefix_cache: true,
            prefill_order: PrefillOrder::Oldest,
            speculation: SpecConfig::default(),
            cache_type_k: KvType::F16,
            cache_type_v: KvType::F16,
        }
    }
}

/// The longest draft a row may verify in one step, server-wide or per request: a step's
/// positions are bounded, and past this a draft is wasted work on any model.
pub const MAX_DRAFT_TOKENS: usize = 64;

/// A knob that cannot work; names it and the value given.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{field} must be at least 1, got {value}")]
    Zero { field: &'static str, value: usize },
    #[error("environment variable {var}={value:?} is not a number: {source}")]
    NotANumber {
        var: &'static str,
        value: String,
        source: ParseIntError,
    },
    #[error("the KV budget of {budget_bytes} bytes holds no block of {bytes_per_block} bytes")]
    BudgetBelowOneBlock {
        budget_bytes: u64,
        bytes_per_block: u64,
    },
    #[error("environment variable {var}={value:?} must be one of {expected}")]
    NotAChoice {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error(
        "speculative draft limits n_min {n_min}, n_max {n_max}: need n_min <= n_max <= {}",
        MAX_DRAFT_TOKENS
    )]
    DraftLimits { n_min: usize, n_max: usize },
    #[error(
        "a {ty} KV cache needs heads of whole 32-value blocks; this model's are {head_dim} values"
    )]
    KvType { ty: &'static str, head_dim: usize },
    #[error("speculation type draft needs a draft model (--model-draft)")]
    NoDraftModel,
    #[error("a draft model was given but the speculation type is {kind:?}, not draft")]
    DraftUnused { kind: SpecKind },
    #[error("the draft model's vocabulary differs from the target's: {0}")]
    DraftVocab(String),
    #[error("could not start the scheduler worker thread: {0}")]
    Spawn(#[from] std::io::Error),
}

impl SchedulerConfig {
    /// The defaults, overridden by any `FERROX_CB_*` variable that is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// The defaults, overridden by whatever `lookup` returns for each variable name.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let number = |var: &'static str| -> Result<Option<u64>, ConfigError> {
            match lookup(var) {
                None => Ok(None),
                Some(value) => match value.trim().parse::<u64>() {
                    Ok(n) => Ok(Some(n)),
                    Err(source) => Err(ConfigError::NotANumber { var, value, source }),
                },
            }
        };
        let mut c = Self::default();
        if let Some(n) = number("FERROX_CB_MAX_SEQS")? {
            c.max_seqs = n as usize;
        }
        if let Some(n) = number("FERROX_CB_PREFILL_CHUNK")? {
            c.prefill_chunk_tokens = n as usize;
        }
        if let Some(n) = number("FERROX_CB_PREFILL_CHUNK_IDLE")? {
            c.prefill_chunk_idle_tokens = n as usize;
        }
        if let Some(n) = number("FERROX_CB_MAX_QUEUE")? {
            c.max_queue = n as usize;
        }
        if let Some(n) = number("FERROX_CB_KV_BLOCK_SIZE")? {
            c.kv_block_size_tokens = n as usize;
        }
        if let Some(n) = number("FERROX_CB_KV_BUDGET_BYTES")? {
            c.kv_budget = KvBudget::Bytes(n);
        }
        if let Some(n) = number("FERROX_CB_KV_BLOCKS")? {
            c.kv_budget = KvBudget::Blocks(n as usize);
        }
        if let Some(n) = number("FERROX_CB_MAX_CONTEXT")? {
            c.max_context_tokens = Some(n as usize);
        }
        if let Some(n) = number("FERROX_SPEC_N_MAX")? {
            c.speculation.n_max = n as usize;
        }
        if let Some(n) = number("FERROX_SPEC_N_MIN")? {
            c.speculation.n_min = n as usize;
        }
        let choice = |var: &'static str, expected: &'static str| {
            lookup(var).map(|value| {
                let v = value.trim().to_ascii_lowercase();
                (v, move |value: String| ConfigError::NotAChoice {
                    var,
                    value,
                    expected,
                })
            })
        };
        if let Some((v, err)) = choice("FERROX_PREFIX_CACHE", "1, 0, on, off, true, false") {
            c.prefix_cache = match v.as_str() {
                "1" | "on" | "true" => true,
                "0" | "off" | "false" => false,
                _ => return Err(err(v)),
            };
        }
        if let Some((v, err)) = choice("FERROX_CB_PREFILL_ORDER", "oldest, round-robin") {
            c.prefill_order = match v.as_str() {
                "oldest" => PrefillOrder::Oldest,
                "round-robin" => PrefillOrder::RoundRobin,
                _ => return Err(err(v)),
            };
        }
        for (var, slot) in [
            ("FERROX_CACHE_TYPE_K", &mut c.cache_type_k),
            ("FERROX_CACHE_TYPE_V", &mut c.cache_type_v),
        ] {
            if let Some((v, err)) = choice(var, KvType::NAMES) {
                *slot = KvType::parse(&v).ok_or_else(|| err(v))?;
            }
        }
        if let Some((v, err)) = choice("FERROX_SPEC_ADAPTIVE", "1, 0, on, off, true, false") {
            c.speculation.adaptive = match v.as_str() {
                "1" | "on" | "true" => true,
                "0" | "off" | "false" => false,
                _ => return Err(err(v)),
            };
        }
        if let Some((v, err)) = choice("FERROX_SPEC_TYPE", SpecKind::NAMES) {
            c.speculation.kind = SpecKind::parse(&v).ok_or_else(|| err(v))?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Every count that must be positive is. (A `max_queue` of 0 is allowed: no waiting,
    /// a request is admitted at once or refused.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("max_seqs", self.max_seqs),
            ("prefill_chunk_tokens", self.prefill_chunk_tokens),
            ("kv_block_size_tokens", self.kv_block_size_tokens),
            ("max_context_tokens", self.max_context_tokens.unwrap_or(1)),
            (
                "kv_budget (blocks)",
                match self.kv_budget {
                    KvBudget::Blocks(n) => n,
                    KvBudget::Bytes(_) => 1,
                },
            ),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::Zero { field, value });
            }
        }
        let spec = self.speculation;
        if spec.n_max > MAX_DRAFT_TOKENS || spec.n_min > spec.n_max {
            return Err(ConfigError::DraftLimits {
                n_min: spec.n_min,
                n_max: spec.n_max,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> Result<SchedulerConfig, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SchedulerConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn variables_override_defaults() {
        assert_eq!(from(&[]).unwrap(), SchedulerConfig::default());
        let c = from(&[
            ("FERROX_CB_MAX_SEQS", "4"),
            ("FERROX_CB_PREFILL_CHUNK", "32"),
            ("FERROX_CB_PREFILL_CHUNK_IDLE", "0"),
            ("FERROX_CB_MAX_QUEUE", "0"),
            ("FERROX_CB_KV_BLOCK_SIZE", "8"),
            ("FERROX_CB_KV_BLOCKS", "100"),
            ("FERROX_CB_MAX_CONTEXT", " 2048 "),
            ("FERROX_PREFIX_CACHE", "0"),
            ("FERROX_CB_PREFILL_ORDER", "Round-Robin"),
            ("FERROX_SPEC_TYPE", "none"),
            ("FERROX_SPEC_N_MAX", "8"),
            ("FERROX_SPEC_N_MIN", "2"),
            ("FERROX_SPEC_ADAPTIVE", "off"),
            ("FERROX_CACHE_TYPE_K", "Q8_0"),
        ])
        .unwrap();
        assert_eq!(
            c,
            SchedulerConfig {
                max_seqs: 4,
                prefill_chunk_tokens: 32,
                prefill_chunk_idle_tokens: 0,
                max_queue: 0,
                kv_block_size_tokens: 8,
                kv_budget: KvBudget::Blocks(100),
                max_context_tokens: Some(2048),
                log_every_decode_steps: 256,
                prefix_cache: false,
                prefill_order: PrefillOrder::RoundRobin,
                speculation: SpecConfig {
                    kind: SpecKind::None,
                    n_max: 8,
                    n_min: 2,
                    adaptive: false,
                },
                cache_type_k: KvType::Q8_0,
                cache_type_v: KvType::F16,
            }
        );
        let c = from(&[("FERROX_CB_KV_BUDGET_BYTES", "1000000")]).unwrap();
        assert_eq!(c.kv_budget, KvBudget::Bytes(1_000_000));
    }

    #[test]
    fn bad_values_name_the_knob() {
        let e = from(&[("FERROX_CB_MAX_SEQS", "lots")]).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::NotANumber {
                var: "FERROX_CB_MAX_SEQS",
                ..
            }
        ));
        let e = from(&[("FERROX_PREFIX_CACHE", "maybe")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable FERROX_PREFIX_CACHE=\"maybe\" must be one of 1, 0, on, off, true, false"
        );
        let e = from(&[("FERROX_SPEC_TYPE", "eagle")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable FERROX_SPEC_TYPE=\"eagle\" must be one of none, ngram, \
             draft (with a draft model)"
        );
        let e = from(&[("FERROX_SPEC_N_MIN", "9"), ("FERROX_SPEC_N_MAX", "8")]).unwrap_err();
        assert!(matches!(e, ConfigError::DraftLimits { n_min: 9, n_max: 8 }));
        let e = from(&[("FERROX_CB_PREFILL_CHUNK", "0")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "prefill_chunk_tokens must be at least 1, got 0"
        );
    }
}
