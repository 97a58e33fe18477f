//! Ollama's `options` object, mapped onto our sampler and limits. Every option is either
//! honoured or refused by name (`options.mirostat`), never dropped: a client that asks for
//! something this server does not do learns it from the 400, not from different output.
//!
//! Honoured: `num_predict` (`-1` and `-2`, "until the end", generate until a stop or the
//! end of the context), `num_ctx` (this request's context, within the model's; a budget
//! past it stops there, `done_reason: "length"`, as Ollama's answers end), `temperature`,
//! `top_k`, `top_p`, `min_p`, `repeat_penalty`, `repeat_last_n` (`-1`: the whole context,
//! `0`: off), `presence_penalty`, `frequency_penalty`, `seed`, `stop`.
//!
//! Accepted at the value that means what this server does anyway, refused at any other:
//! `mirostat` 0, `tfs_z` 1, `typical_p` 1 (those samplers are off), `penalize_newline`
//! true (a newline is penalized like any token), `num_gpu` 0 or -1 and `main_gpu` 0 (there
//! is no GPU: everything runs on the CPU), `low_vram` false, `f16_kv` true (the KV cache is
//! f16), `use_mmap` true, `use_mlock` false, `numa` false, `vocab_only` false, `logits_all`
//! false, `embedding_only` false; `mirostat_eta` and `mirostat_tau` at any value (they tune
//! a sampler that is off). Refused whatever the value, since the server decides them at
//! start: `num_thread` (`--threads`), `num_batch` (the scheduler's chunk), `num_keep` (a
//! prompt longer than the context is refused, not cut).

use ferrox_engine::sampler::SamplingParams;
use serde_json::Value;

use crate::core::error::ApiError;
use crate::core::request::ContextLimit;
use crate::http::params::Fields;

/// What `options` asks for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Options {
    pub sampling: SamplingParams,
    pub seed: Option<u64>,
    pub max_tokens: Option<usize>,
    /// `num_predict` of `-1` or `-2`: until a stop or the end of the context.
    pub fill_context: bool,
    pub context: Option<ContextLimit>,
    pub stop: Vec<String>,
}

/// Options taken at one value only: (name, the value this server behaves as).
const FIXED: &[(&str, Fixed)] = &[
    ("mirostat", Fixed::Int(&[0])),
    ("tfs_z", Fixed::Float(1.0)),
    ("typical_p", Fixed::Float(1.0)),
    ("penalize_newline", Fixed::Bool(true)),
    ("num_gpu", Fixed::Int(&[0, -1])),
    ("main_gpu", Fixed::Int(&[0])),
    ("low_vram", Fixed::Bool(false)),
    ("f16_kv", Fixed::Bool(true)),
    ("use_mmap", Fixed::Bool(true)),
    ("use_mlock", Fixed::Bool(false)),
    ("numa", Fixed::Bool(false)),
    ("vocab_only", Fixed::Bool(false)),
    ("logits_all", Fixed::Bool(false)),
    ("embedding_only", Fixed::Bool(false)),
];

/// Options the server decides at start, refused whatever the value: (name, what to do).
const SERVER_SET: &[(&str, &str)] = &[
    ("num_thread", "start the server with --threads"),
    ("num_batch", "the scheduler sizes its own prefill chunks"),
    (
        "num_keep",
        "a prompt longer than the context is refused, never cut",
    ),
];

/// Options with no effect once `mirostat` is 0 (the only value taken): their values are
/// accepted, as UIs send the defaults of all three together.
const MIROSTAT_TUNING: &[&str] = &["mirostat_eta", "mirostat_tau"];

#[derive(Debug, Clone, Copy)]
enum Fixed {
    Int(&'static [i64]),
    Float(f64),
    Bool(bool),
}

impl Fixed {
    fn holds(self, v: &Value) -> bool {
        match self {
            Fixed::Int(ok) => v.as_i64().is_some_and(|i| ok.contains(&i)),
            Fixed::Float(x) => v.as_f64() == Some(x),
            Fixed::Bool(b) => v.as_bool() == Some(b),
        }
    }

    fn describe(self) -> String {
        match self {
            Fixed::Int(ok) => ok
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(" or "),
            Fixed::Float(x) => x.to_string(),
            Fixed::Bool(b) => b.to_string(),
        }
    }
}

/// Reads `options` (absent or null: every default).
pub fn parse(value: Option<Value>) -> Result<Options, ApiError> {
    let Some(value) = value else {
        return Ok(Options::default());
    };
    let mut o = Fields::nested(value, "options")?;
    for (name, fixed) in FIXED {
        if let Some(v) = o.take_raw(name) {
            if !fixed.holds(&v) {
                return Err(ApiError::invalid(
                    o.path(name),
                    format!(
                        "{v} is not supported: this server runs as {} (the only value taken)",
                        fixed.describe()
                    ),
                ));
            }
        }
    }
    for name in MIROSTAT_TUNING {
        o.accept(name);
    }
    for (name, instead) in SERVER_SET {
        if o.take_raw(name).is_some() {
            return Err(ApiError::invalid(
                o.path(name),
                format!("not settable per request: {instead}"),
            ));
        }
    }
    let (max_tokens, fill_context) = match o.take::<i64>("num_predict")? {
        None => (None, false),
        Some(-1 | -2) => (None, true),
        Some(n) => {
            o.map_insert("num_predict", n.into());
            (o.max_tokens("num_predict")?, false)
        }
    };
    let context = match o.take::<i64>("num_ctx")? {
        None => None,
        Some(n) if n < 1 => {
            return Err(ApiError::invalid(
                o.path("num_ctx"),
                format!("must be at least 1, got {n}"),
            ))
        }
        Some(n) => Some(ContextLimit {
            tokens: usize::try_from(n).unwrap_or(usize::MAX),
            param: "options.num_ctx",
        }),
    };
    let penalty_last_n = match o.take::<i64>("repeat_last_n")? {
        None => SamplingParams::default().penalty_last_n,
        Some(-1) => usize::MAX,
        Some(n) if n < 0 => {
            return Err(ApiError::invalid(
                o.path("repeat_last_n"),
                format!("must be -1 (the whole context), 0 (off) or more, got {n}"),
            ))
        }
        Some(n) => n as usize,
    };
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: o.take("temperature")?.unwrap_or(defaults.temperature),
        top_k: o.top_k()?,
        top_p: o.take("top_p")?.unwrap_or(defaults.top_p),
        min_p: o.take("min_p")?.unwrap_or(defaults.min_p),
        repetition_penalty: o.take("repeat_penalty")?.unwrap_or(1.0),
        presence_penalty: o.take("presence_penalty")?.unwrap_or(0.0),
        frequency_penalty: o.take("frequency_penalty")?.unwrap_or(0.0),
        penalty_last_n,
        ..defaults
    };
    let seed = o.seed("seed")?;
    let stop = o.stop("stop")?;
    o.finish()?;
    Ok(Options {
        sampling,
        seed,
        max_tokens,
        fill_context,
        context,
        stop,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(v: Value) -> String {
        match parse(Some(v)) {
            Err(ApiError::InvalidParameter { param, .. }) => param,
            Err(ApiError::UnknownParameter { param }) => param,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn honoured_options_reach_the_sampler_and_limits() {
        let o = parse(Some(json!({
            "temperature": 0.5, "top_k": 7, "top_p": 0.9, "min_p": 0.1,
            "repeat_penalty": 1.2, "repeat_last_n": -1, "presence_penalty": 0.3,
            "frequency_penalty": 0.4, "seed": 42, "stop": ["\n\n"], "num_predict": 9,
            "num_ctx": 512, "mirostat": 0, "num_gpu": -1, "f16_kv": true, "mirostat_eta": 0.1,
        })))
        .unwrap();
        let s = &o.sampling;
        assert_eq!(
            (s.temperature, s.top_k, s.top_p, s.min_p),
            (0.5, 7, 0.9, 0.1)
        );
        assert_eq!(
            (
                s.repetition_penalty,
                s.presence_penalty,
                s.frequency_penalty
            ),
            (1.2, 0.3, 0.4)
        );
        assert_eq!(s.penalty_last_n, usize::MAX);
        assert_eq!(
            (o.seed, o.max_tokens, o.fill_context),
            (Some(42), Some(9), false)
        );
        assert_eq!(o.context.map(|c| c.tokens), Some(512));
        assert_eq!(o.stop, vec!["\n\n".to_string()]);
        let o = parse(Some(json!({"num_predict": -1, "repeat_last_n": 0}))).unwrap();
        assert_eq!((o.max_tokens, o.fill_context), (None, true));
        assert_eq!(o.sampling.penalty_last_n, 0);
        assert_eq!(parse(None).unwrap(), Options::default());
    }

    #[test]
    fn options_this_server_cannot_honour_are_refused_by_name() {
        assert_eq!(refused(json!({"mirostat": 2})), "options.mirostat");
        assert_eq!(refused(json!({"tfs_z": 0.9})), "options.tfs_z");
        assert_eq!(refused(json!({"num_gpu": 33})), "options.num_gpu");
        assert_eq!(refused(json!({"f16_kv": false})), "options.f16_kv");
        assert_eq!(refused(json!({"num_thread": 8})), "options.num_thread");
        assert_eq!(refused(json!({"num_keep": 4})), "options.num_keep");
        assert_eq!(refused(json!({"num_predict": 0})), "options.num_predict");
        assert_eq!(refused(json!({"num_ctx": 0})), "options.num_ctx");
        assert_eq!(
            refused(json!({"repeat_last_n": -5})),
            "options.repeat_last_n"
        );
        assert_eq!(refused(json!({"temprature": 0.1})), "options.temprature");
    }
}
