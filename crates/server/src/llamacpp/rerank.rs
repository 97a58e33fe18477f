//! `POST /rerank` (also `/reranking`, `/v1/rerank`, `/v1/reranking`): llama-server's
//! reranking route, in the Jina / Cohere shapes it speaks, over the core's reranker
//! (`core/rerank.rs`).
//!
//! Request: `query` (a string), `documents` (strings, or `{"text": …}` objects, at least one,
//! at most [`MAX_DOCUMENTS`]), `top_n` (how many results to return, best first; default all),
//! `return_documents` (echo each document's text; default false, as Cohere's); `model` picks
//! the served model. Reply: `{model, object: "list", usage: {prompt_tokens, total_tokens},
//! results: [{index, relevance_score, document?: {text}}]}`, sorted by score, best first,
//! ties by index.

use axum::Json;
use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::core::rerank::rerank;
use crate::http::params::Fields;
use crate::models::Pinned;

/// The most documents one request may rank.
pub const MAX_DOCUMENTS: usize = 1024;

pub async fn handle(Pinned { served, body }: Pinned) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    f.take::<String>("model")?;
    let query = f
        .take::<String>("query")?
        .ok_or_else(|| ApiError::MissingParameter {
            param: "query".into(),
        })?;
    let documents = parse_documents(f.take_raw("documents"))?;
    let top_n = match f.take::<u64>("top_n")? {
        None => documents.len(),
        Some(0) => return Err(ApiError::invalid("top_n", "must be at least 1")),
        Some(n) => (n as usize).min(documents.len()),
    };
    let return_documents = f.take::<bool>("return_documents")?.unwrap_or(false);
    f.finish()?;
    let scores = rerank(&served, &query, &documents).await?;
    let tokens: usize = scores.iter().map(|s| s.tokens).sum();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].score.total_cmp(&scores[a].score).then(a.cmp(&b)));
    let results: Vec<Value> = order
        .into_iter()
        .take(top_n)
        .map(|i| {
            let mut r = json!({"index": i, "relevance_score": scores[i].score});
            if return_documents {
                r["document"] = json!({"text": documents[i]});
            }
            r
        })
        .collect();
    Ok(Json(json!({
        "model": served.model_id,
        "object": "list",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results,
    })))
}

/// The documents' texts: strings or `{"text": …}` objects.
fn parse_documents(value: Option<Value>) -> Result<Vec<String>, ApiError> {
    let bad = |why: &str| ApiError::invalid("documents", why.to_string());
    let Some(value) = value else {
        return Err(ApiError::MissingParameter {
            param: "documents".into(),
        });
    };
    let Value::Array(items) = value else {
        return Err(bad("expected an array of strings or {\"text\": …} objects"));
    };
    if items.is_empty() {
        return Err(bad("must hold at least one document"));
    }
    if items.len() > MAX_DOCUMENTS {
        return Err(bad(&format!(
            "at most {MAX_DOCUMENTS} documents per request"
        )));
    }
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) => Ok(s),
            Value::Object(mut o) => match o.remove("text") {
                Some(Value::String(s)) => Ok(s),
                _ => Err(bad("a document object needs a string `text`")),
            },
            _ => Err(bad("each document is a string or a {\"text\": …} object")),
        })
        .collect()
}
