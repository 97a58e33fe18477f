//! llama-server's native request bodies (`/completion`, `/infill`) to protocol-free
//! requests. Parameter names, shapes and defaults are llama-server's, so its scripts and
//! tools get what they got there:
//!
//! - sampling defaults are llama-server's (temperature 0.8, top_k 40, top_p 0.95, min_p
//!   0.05, repeat_last_n 64), not the OpenAI routes' neutral ones; a temperature <= 0 is
//!   greedy, as there;
//! - `n_predict` (or `max_tokens`) -1, the default, generates until a stop or the end of
//!   the context; `seed` -1 (or 4294967295) is a random seed;
//! - `logit_bias` in both of its shapes: `[[token, bias], ...]` or `{"token": bias}`, a
//!   token being an id or a text (every token of the text gets the bias), a bias `false`
//!   banning the token;
//! - `cache_prompt: false` computes the whole prompt, reusing nothing cached;
//! - `speculative.n_max`, `speculative.n_min`, `speculative.p_min` set the request's
//!   speculative decoding (and `speculative: false` turns it off, as on every protocol);
//! - `json_schema`, or `grammar` — GBNF as llama.cpp takes it (translated to the grammar
//!   engine's Lark, `core/gbnf.rs`), or Lark after a `%llguidance` line as llama.cpp's
//!   llguidance builds take it — constrain the output; a grammar that cannot be translated
//!   or compiled is a 400 naming the reason, never an unconstrained answer;
//! - parameters of samplers this server does not have are accepted at their neutral value
//!   (what llama.cpp's web UI and scripts send by default) and refused by name otherwise.

use ferrox_engine::sampler::SamplingParams;
use serde_json::{Map, Value};

use crate::core::error::ApiError;
use crate::core::fim::Infill;
use crate::core::gbnf;
use crate::core::grammar::{GrammarRequest, GrammarSpec};
use crate::core::request::{GenerationOptions, Prompt, PromptPiece};
use crate::http::params::{kind, Fields, MAX_TOKENS_LIMIT};

/// Most alternatives reported per token (`n_probs`).
pub const MAX_N_PROBS: usize = 20;

/// A bias `false`: the token is never sampled.
pub const BANNED: f32 = -1e30;

/// What `/completion` and `/infill` share besides the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeOptions {
    pub options: GenerationOptions,
    /// `return_tokens`: the generated ids in `tokens`.
    pub return_tokens: bool,
    /// `logit_bias` entries given as text, resolved with the tokenizer by the handler.
    pub bias_texts: Vec<(String, f32)>,
    /// `n_predict` as given (-1 when absent), for `generation_settings`.
    pub n_predict: i64,
}

/// A `/completion` body.
pub fn parse_completion(body: Value) -> Result<(Prompt, NativeOptions), ApiError> {
    let mut f = Fields::from_body(body)?;
    let prompt = prompt(f.take_raw("prompt"))?;
    let native = options(&mut f)?;
    f.finish()?;
    Ok((prompt, native))
}

/// An `/infill` body.
pub fn parse_infill(body: Value) -> Result<(Infill, NativeOptions), ApiError> {
    let mut f = Fields::from_body(body)?;
    let prefix = f.take("input_prefix")?.unwrap_or_default();
    let suffix = f.take("input_suffix")?.unwrap_or_default();
    let prompt = f.take("prompt")?.unwrap_or_default();
    let mut extra = Vec::new();
    if let Some(items) = f.take::<Vec<Value>>("input_extra")? {
        for (i, item) in items.into_iter().enumerate() {
            let mut c = Fields::nested(item, &format!("input_extra[{i}]"))?;
            let filename = c.take("filename")?.unwrap_or_default();
            let text = c.require("text")?;
            c.finish()?;
            extra.push((filename, text));
        }
    }
    let native = options(&mut f)?;
    f.finish()?;
    let infill = Infill {
        prefix,
        suffix,
        extra,
        prompt,
    };
    Ok((infill, native))
}

/// A string, a list of token ids, or a mixed list of both; a list of several strings (a
/// batch of prompts) is refused: send one prompt per request.
fn prompt(value: Option<Value>) -> Result<Prompt, ApiError> {
    let items = match value {
        None => {
            return Err(ApiError::MissingParameter {
                param: "prompt".into(),
            })
        }
        Some(Value::String(s)) => return Ok(Prompt::Text(s)),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::invalid(
                "prompt",
                format!("expected a string or an array, got {}", kind(&other)),
            ))
        }
    };
    let mut pieces = Vec::with_capacity(items.len());
    for (i, v) in items.into_iter().enumerate() {
        match v {
            Value::String(s) => pieces.push(PromptPiece::Text(s)),
            Value::Number(n) => match n.as_u64().and_then(|t| u32::try_from(t).ok()) {
                Some(t) => pieces.push(PromptPiece::Token(t)),
                None => {
                    return Err(ApiError::invalid(
                        format!("prompt[{i}]"),
                        format!("expected a token id, got {n}"),
                    ))
                }
            },
            other => {
                return Err(ApiError::invalid(
                    format!("prompt[{i}]"),
                    format!(
                        "expected a string or a token id, got {}; batches of prompts are \
                         not supported: send one prompt per request",
                        kind(&other)
                    ),
                ))
            }
        }
    }
    let texts = pieces
        .iter()
        .filter(|p| matches!(p, PromptPiece::Text(_)))
        .count();
    Ok(match (texts, pieces.len()) {
        (0, _) => Prompt::Tokens(
            pieces
                .into_iter()
                .filter_map(|p| match p {
                    PromptPiece::Token(t) => Some(t),
                    PromptPiece::Text(_) => None,
                })
                .collect(),
        ),
        (1, 1) => match pieces.pop() {
            Some(PromptPiece::Text(s)) => Prompt::Text(s),
            _ => unreachable!("one piece, which is text"),
        },
        (t, n) if t == n => {
            return Err(ApiError::invalid(
                "prompt",
                "batches of prompts are not supported: send one prompt per request",
            ))
        }
        _ => Prompt::Mixed(pieces),
    })
}

/// Parameters of llama.cpp samplers this server does not have, with the value at which
/// they do nothing.
fn neutral(name: &str, v: &Value) -> Option<bool> {
    let num = v.as_f64();
    Some(match name {
        "typical_p" => num == Some(1.0),
        "mirostat" | "dynatemp_range" | "xtc_probability" | "dry_multiplier" | "n_indent" => {
            num == Some(0.0)
        }
        "top_n_sigma" => num.is_some_and(|x| x <= 0.0),
        "penalize_nl" | "post_sampling_probs" | "timings_per_token" | "return_progress" => {
            v == false
        }
        "id_slot" | "slot_id" => num == Some(-1.0),
        "t_max_predict_ms" | "t_max_prompt_ms" => num.is_some_and(|x| x <= 0.0),
        "n" | "n_cmpl" => num == Some(1.0),
        // Settings of a sampler that is off, or of context shifting (which this server does
        // not do: a request never outgrows its lease): any value changes nothing.
        "mirostat_tau"
        | "mirostat_eta"
        | "dynatemp_exponent"
        | "xtc_threshold"
        | "dry_base"
        | "dry_allowed_length"
        | "dry_penalty_last_n"
        | "dry_sequence_breakers"
        | "n_keep"
        | "min_keep" => true,
        _ => return None,
    })
}

const NEUTRAL: &[&str] = &[
    "typical_p",
    "mirostat",
    "dynatemp_range",
    "xtc_probability",
    "dry_multiplier",
    "n_indent",
    "top_n_sigma",
    "penalize_nl",
    "post_sampling_probs",
    "timings_per_token",
    "return_progress",
    "id_slot",
    "slot_id",
    "t_max_predict_ms",
    "t_max_prompt_ms",
    "n",
    "n_cmpl",
    "mirostat_tau",
    "mirostat_eta",
    "dynatemp_exponent",
    "xtc_threshold",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "n_keep",
    "min_keep",
];

/// llama.cpp parameters that change what is generated in ways this server cannot do yet.
const UNSUPPORTED: &[&str] = &[
    "response_fields",
    "lora",
    "samplers",
    "image_data",
    "multimodal_data",
];

fn options(f: &mut Fields) -> Result<NativeOptions, ApiError> {
    for name in NEUTRAL {
        if let Some(v) = f.take_raw(name) {
            if neutral(name, &v) != Some(true) {
                return Err(ApiError::invalid(
                    *name,
                    format!("{v} is not supported by this server (only the neutral value)"),
                ));
            }
        }
    }
    f.refuse_unsupported(UNSUPPORTED)?;
    let (n_predict, max_tokens_param) =
        match (f.take::<i64>("n_predict")?, f.take::<i64>("max_tokens")?) {
            (Some(n), _) => (n, "n_predict"),
            (None, Some(n)) => (n, "max_tokens"),
            (None, None) => (-1, "n_predict"),
        };
    let max_tokens = match n_predict {
        -1 => None,
        n if (1..=MAX_TOKENS_LIMIT).contains(&n) => Some(n as usize),
        n => {
            return Err(ApiError::invalid(
                "n_predict",
                format!("must be -1 (until a stop or the context) or at least 1, got {n}"),
            ))
        }
    };
    let temperature: f32 = f.take("temperature")?.unwrap_or(0.8);
    let mut sampling = SamplingParams {
        temperature: temperature.max(0.0),
        top_k: match f.take::<i64>("top_k")? {
            None => 40,
            Some(k) if k <= 0 => 0,
            Some(k) => k as usize,
        },
        top_p: f.take("top_p")?.unwrap_or(0.95),
        min_p: f.take("min_p")?.unwrap_or(0.05),
        repetition_penalty: f.take("repeat_penalty")?.unwrap_or(1.0),
        presence_penalty: f.take("presence_penalty")?.unwrap_or(0.0),
        frequency_penalty: f.take("frequency_penalty")?.unwrap_or(0.0),
        ..SamplingParams::default()
    };
    sampling.penalty_last_n = match f.take::<i64>("repeat_last_n")? {
        None => 64,
        Some(-1) => usize::MAX,
        Some(n) if n >= 0 => n as usize,
        Some(n) => {
            return Err(ApiError::invalid(
                "repeat_last_n",
                format!("must be -1 (the whole history) or >= 0, got {n}"),
            ))
        }
    };
    let (ids, bias_texts) = logit_bias(f.take_raw("logit_bias"))?;
    sampling.logit_bias = ids;
    let seed = match f.seed("seed")? {
        Some(s) if s == u64::MAX || s == u64::from(u32::MAX) => None,
        other => other,
    };
    let logprobs = match f.take::<usize>("n_probs")? {
        None | Some(0) => None,
        Some(k) if k > MAX_N_PROBS => {
            return Err(ApiError::invalid(
                "n_probs",
                format!("must be in 0..={MAX_N_PROBS}, got {k}"),
            ))
        }
        Some(k) => Some(k),
    };
    let grammar = grammar(f)?;
    let options = GenerationOptions {
        grammar,
        model: f.take("model")?,
        max_tokens,
        max_tokens_param,
        fill_context: true,
        sampling,
        seed,
        stop: f.stop("stop")?,
        ignore_eos: f.take("ignore_eos")?.unwrap_or(false),
        logprobs,
        stream: f.take("stream")?.unwrap_or(false),
        reuse_cached_prompt: f.take("cache_prompt")?.unwrap_or(true),
        speculation: f.speculative()?,
        ..GenerationOptions::default()
    };
    Ok(NativeOptions {
        options,
        return_tokens: f.take("return_tokens")?.unwrap_or(false),
        bias_texts,
        n_predict,
    })
}

/// `json_schema` (an object), or `grammar`: empty (none), a Lark grammar marked as
/// llama.cpp marks it, `%llguidance` on its first line, or else GBNF.
fn grammar(f: &mut Fields) -> Result<Option<GrammarRequest>, ApiError> {
    let schema = f.take_raw("json_schema");
    let grammar = f
        .take::<String>("grammar")?
        .filter(|g| !g.trim().is_empty());
    match (schema, grammar) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "grammar",
            "send json_schema or grammar, not both",
        )),
        (Some(schema), None) => {
            if !schema.is_object() && !schema.is_boolean() {
                return Err(ApiError::invalid(
                    "json_schema",
                    format!("a JSON schema is an object, got {}", kind(&schema)),
                ));
            }
            Ok(Some(GrammarRequest {
                spec: GrammarSpec::JsonSchema(schema),
                param: "json_schema".into(),
            }))
        }
        // llguidance reads the `%llguidance` line itself.
        (None, Some(g)) => match g.trim_start().starts_with("%llguidance") {
            true => Ok(Some(GrammarRequest {
                spec: GrammarSpec::Lark(g),
                param: "grammar".into(),
            })),
            false => Ok(Some(GrammarRequest {
                spec: GrammarSpec::Lark(
                    gbnf::to_lark(&g)
                        .map_err(|e| ApiError::invalid("grammar", format!("GBNF: {e}")))?,
                ),
                param: "grammar".into(),
            })),
        },
        (None, None) => Ok(None),
    }
}

/// Both shapes of llama.cpp's `logit_bias`: ids with their bias, and texts to tokenize.
#[allow(clippy::type_complexity)]
fn logit_bias(value: Option<Value>) -> Result<(Vec<(u32, f32)>, Vec<(String, f32)>), ApiError> {
    let entries: Vec<(Value, Value, String)> = match value {
        None => return Ok((Vec::new(), Vec::new())),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, pair)| match pair {
                Value::Array(mut kv) if kv.len() == 2 => {
                    let bias = kv.pop().unwrap_or_default();
                    let key = kv.pop().unwrap_or_default();
                    Ok((key, bias, format!("logit_bias[{i}]")))
                }
                other => Err(ApiError::invalid(
                    format!("logit_bias[{i}]"),
                    format!("expected a [token, bias] pair, got {}", kind(&other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Object(map)) => map_entries(map),
        Some(other) => {
            return Err(ApiError::invalid(
                "logit_bias",
                format!(
                    "expected an array of pairs or an object, got {}",
                    kind(&other)
                ),
            ))
        }
    };
    let (mut ids, mut texts) = (Vec::new(), Vec::new());
    for (key, bias, path) in entries {
        let bias = match bias {
            Value::Bool(false) => BANNED,
            Value::Number(n) => n.as_f64().unwrap_or(0.0) as f32,
            other => {
                return Err(ApiError::invalid(
                    path,
                    format!("a bias is a number or false, got {}", kind(&other)),
                ))
            }
        };
        match key {
            Value::Number(n) => match n.as_u64().and_then(|t| u32::try_from(t).ok()) {
                Some(t) => ids.push((t, bias)),
                None => return Err(ApiError::invalid(path, format!("{n} is not a token id"))),
            },
            // An object's keys are strings: a number in one is a token id.
            Value::String(s) => match s.trim().parse::<u32>() {
                Ok(t) => ids.push((t, bias)),
                Err(_) => texts.push((s, bias)),
            },
            other => {
                return Err(ApiError::invalid(
                    path,
                    format!("a token is an id or a text, got {}", kind(&other)),
                ))
            }
        }
    }
    Ok((ids, texts))
}

fn map_entries(map: Map<String, Value>) -> Vec<(Value, Value, String)> {
    map.into_iter()
        .map(|(k, v)| {
            let path = format!("logit_bias.{k}");
            (Value::String(k), v, path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompts_in_every_shape() {
        let p = |v: Value| prompt(Some(v));
        assert_eq!(p(json!("hi")).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(p(json!([1, 2])).unwrap(), Prompt::Tokens(vec![1, 2]));
        assert_eq!(p(json!(["hi"])).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(
            p(json!([1, "a", 2])).unwrap(),
            Prompt::Mixed(vec![
                PromptPiece::Token(1),
                PromptPiece::Text("a".into()),
                PromptPiece::Token(2)
            ])
        );
        assert_eq!(p(json!(["a", "b"])).unwrap_err().param(), Some("prompt"));
        assert_eq!(p(json!([1, -3])).unwrap_err().param(), Some("prompt[1]"));
    }

    #[test]
    fn options_take_llama_server_defaults_and_shapes() {
        let (_, n) = parse_completion(json!({"prompt": "x"})).unwrap();
        let o = &n.options;
        assert_eq!((o.max_tokens, o.fill_context, o.seed), (None, true, None));
        assert_eq!((o.sampling.top_k, o.sampling.min_p), (40, 0.05));
        let (_, n) = parse_completion(json!({
            "prompt": "x", "n_predict": 5, "seed": -1, "temperature": -1.0, "n_probs": 3,
            "cache_prompt": false, "logit_bias": [[15, -2.0], ["Hello", false]],
            "typical_p": 1.0, "mirostat": 0, "repeat_last_n": -1,
        }))
        .unwrap();
        let o = &n.options;
        assert_eq!((o.max_tokens, o.seed, o.logprobs), (Some(5), None, Some(3)));
        assert_eq!(o.sampling.temperature, 0.0);
        assert!(!o.reuse_cached_prompt);
        assert_eq!(o.sampling.logit_bias, vec![(15, -2.0)]);
        assert_eq!(n.bias_texts, vec![("Hello".to_string(), BANNED)]);
        let (_, n) = parse_completion(json!({"prompt": "x", "logit_bias": {"7": 1.5}})).unwrap();
        assert_eq!(n.options.sampling.logit_bias, vec![(7, 1.5)]);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let param = |body: Value| {
            parse_completion(body)
                .unwrap_err()
                .param()
                .map(str::to_string)
        };
        assert_eq!(
            param(json!({"prompt": "x", "mirostat": 2})).as_deref(),
            Some("mirostat")
        );
        assert_eq!(
            param(json!({"prompt": "x", "grammar": "root ::= \"a"})).as_deref(),
            Some("grammar")
        );
        assert_eq!(
            param(json!({"prompt": "x", "n_predict": 0})).as_deref(),
            Some("n_predict")
        );
        assert_eq!(
            param(json!({"prompt": "x", "wat": 0})).as_deref(),
            Some("wat")
        );
        assert_eq!(
            parse_infill(json!({"input_extra": [{"filename": "a"}]}))
                .unwrap_err()
                .param(),
            Some("input_extra[0].text")
        );
    }
}
