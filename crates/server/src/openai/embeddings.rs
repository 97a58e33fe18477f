//! `POST /v1/embeddings`: OpenAI's embeddings protocol, over the core's one embedding path
//! (`core/embed.rs`).
//!
//! `input` is a string, a list of strings, a list of token ids or a list of token-id lists
//! (at most [`MAX_INPUTS`]); `encoding_format` is `float` (the default) or `base64` (the
//! little-endian f32 bytes); `dimensions` is refused by name (no served model is trained to be
//! truncated); `user` is accepted. Reply: `{object: "list", data: [{object: "embedding",
//! index, embedding}], model, usage: {prompt_tokens, total_tokens}}`, vectors L2-normalised.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::core::embed::embed;
use crate::core::error::ApiError;
use crate::core::request::Prompt;
use crate::http::params::{kind, Fields};
use crate::models::Pinned;

/// The most inputs one request may carry (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Float,
    Base64,
}

pub async fn handle(Pinned { served, body }: Pinned) -> Result<Response, ApiError> {
    let mut f = Fields::from_body(body)?;
    // Taken for its type check; `Pinned` resolved the model from it.
    f.take::<String>("model")?;
    let inputs = parse_inputs(f.take_raw("input"))?;
    let encoding = match f.take::<String>("encoding_format")?.as_deref() {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("expected \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    if f.take_raw("dimensions").is_some() {
        return Err(ApiError::invalid(
            "dimensions",
            "this model's embeddings cannot be truncated: leave `dimensions` out",
        ));
    }
    f.accept("user");
    f.finish()?;
    let embeddings = embed(&served, inputs).await?;
    let tokens: usize = embeddings.iter().map(|e| e.tokens).sum();
    let data: Vec<Value> = embeddings
        .iter()
        .enumerate()
        .map(|(index, e)| {
            let embedding = match encoding {
                Encoding::Float => json!(e.vector),
                Encoding::Base64 => json!(base64(&e.vector)),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": served.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

/// Every input as a prompt; a list of numbers is one token-id input.
fn parse_inputs(value: Option<Value>) -> Result<Vec<Prompt>, ApiError> {
    let items = match value {
        None => {
            return Err(ApiError::MissingParameter {
                param: "input".into(),
            })
        }
        Some(Value::String(s)) => return Ok(vec![one_text("input", s)?]),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) && !items.is_empty() => {
            return Ok(vec![token_ids("input", &items)?]);
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "expected a string, a list of strings or of token ids, got {}",
                    kind(&other)
                ),
            ))
        }
    };
    if items.is_empty() || items.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            "input",
            format!("must hold 1 to {MAX_INPUTS} inputs, got {}", items.len()),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let name = format!("input[{i}]");
            match item {
                Value::String(s) => one_text(&name, s),
                Value::Array(ids) => token_ids(&name, &ids),
                other => Err(ApiError::invalid(
                    &name,
                    format!(
                        "expected a string or a list of token ids, got {}",
                        kind(&other)
                    ),
                )),
            }
        })
        .collect()
}

fn one_text(name: &str, s: String) -> Result<Prompt, ApiError> {
    if s.is_empty() {
        return Err(ApiError::invalid(name, "an input may not be empty"));
    }
    Ok(Prompt::Text(s))
}

fn token_ids(name: &str, items: &[Value]) -> Result<Prompt, ApiError> {
    if items.is_empty() {
        return Err(ApiError::invalid(name, "an input may not be empty"));
    }
    items
        .iter()
        .enumerate()
        .map(|(j, v)| {
            v.as_u64()
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(|| ApiError::invalid(format!("{name}[{j}]"), "expected a token id"))
        })
        .collect::<Result<Vec<u32>, _>>()
        .map(Prompt::Tokens)
}

/// The vector's little-endian f32 bytes in standard base64 (with padding).
fn base64(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        // 1.0f32 is 00 00 80 3F; two floats are 8 bytes: 10 chars + "==" padding.
        assert_eq!(base64(&[1.0]), "AACAPw==");
        assert_eq!(base64(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64(&[]), "");
    }

    #[test]
    fn inputs_take_every_documented_shape_and_refuse_the_rest() {
        let p = |v: Value| parse_inputs(Some(v));
        assert_eq!(p(json!("hi")).unwrap(), [Prompt::Text("hi".into())]);
        assert_eq!(p(json!([1, 2])).unwrap(), [Prompt::Tokens(vec![1, 2])]);
        assert_eq!(
            p(json!(["a", [3]])).unwrap(),
            [Prompt::Text("a".into()), Prompt::Tokens(vec![3])]
        );
        for (bad, param) in [
            (json!(""), "input"),
            (json!([]), "input"),
            (json!(["a", ""]), "input[1]"),
            (json!([[]]), "input[0]"),
            (json!([[1, -1]]), "input[0][1]"),
            (json!(3), "input"),
            (json!([{"a": 1}]), "input[0]"),
        ] {
            let e = p(bad.clone()).unwrap_err();
            assert_eq!(e.param(), Some(param), "{bad}: {e}");
        }
        assert!(parse_inputs(None).is_err());
    }
}
