//! `POST /tokenize` and `POST /detokenize`, in llama-server's shapes, so tools written for it
//! (and our own golden comparisons) work unchanged.
//!
//! - `/tokenize {"content", "add_special" = false, "parse_special" = true, "with_pieces" =
//!   false}` → `{"tokens": [ids]}`, or with pieces `{"tokens": [{"id", "piece"}]}`, where a
//!   piece that is not valid UTF-8 on its own (one byte of a multi-byte character) is a list
//!   of byte values. `add_special` is llama.cpp's: BOS (and EOS) as the model's metadata says.
//! - `/detokenize {"tokens": [ids]}` → `{"content"}`, control tokens rendered as their text
//!   (llama-server's `tokens_to_str`).
//!
//! Tokenizing is CPU work proportional to the input, so it runs on the blocking pool.

use axum::Json;
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::http::params::Fields;
use crate::models::Pinned;

pub async fn tokenize(Pinned { served: g, body }: Pinned) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    let content: String = f.require("content")?;
    // Which model's tokenizer: `Pinned` resolved it from this field.
    f.take::<String>("model")?;
    let add_special: bool = f.take("add_special")?.unwrap_or(false);
    let parse_special: bool = f.take("parse_special")?.unwrap_or(true);
    let with_pieces: bool = f.take("with_pieces")?.unwrap_or(false);
    f.finish()?;
    let out = tokio::task::spawn_blocking(move || {
        let tok = g.model.tokenizer();
        let ids = if add_special {
            tok.encode_special(&content, parse_special)
        } else {
            tok.encode(&content, false, parse_special)
        };
        if !with_pieces {
            return json!({ "tokens": ids });
        }
        let tokens: Vec<Value> = ids
            .iter()
            .map(|&id| {
                let bytes = tok.token_bytes_special(id);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": id, "piece": piece})
            })
            .collect();
        json!({ "tokens": tokens })
    })
    .await
    .map_err(|e| ApiError::Internal {
        message: format!("tokenize failed: {e}"),
    })?;
    Ok(Json(out))
}

pub async fn detokenize(Pinned { served: g, body }: Pinned) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    let tokens: Vec<u32> = f.require("tokens")?;
    f.take::<String>("model")?;
    f.finish()?;
    let vocab = g.model.tokenizer().vocab_size();
    if let Some((i, t)) = tokens
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= vocab)
    {
        return Err(ApiError::invalid(
            format!("tokens[{i}]"),
            format!("token {t} is outside the vocabulary of {vocab}"),
        ));
    }
    Ok(Json(
        json!({ "content": g.model.tokenizer().decode_special(&tokens) }),
    ))
}
