//! `/api/embed` and the older `/api/embeddings`: the one embedding path
//! (`core/embed.rs`), in Ollama's shapes. `/api/embed` answers `{model, embeddings,
//! total_duration, load_duration, prompt_eval_count}`, `/api/embeddings` `{embedding}`.
//! Vectors are L2-normalised on both (Ollama normalises only the newer route's; a
//! normalised vector has the same cosine similarities, which is what they are used for).

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::parse::{self, EmbedRequest};
use crate::core::embed::embed as embed_inputs;
use crate::core::error::ApiError;
use crate::http::params::JsonBody;
use crate::models::take_keep_alive;
use crate::state::AppState;

pub async fn embed(
    State(state): State<AppState>,
    JsonBody(mut body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let arrived = Instant::now();
    let keep_alive = take_keep_alive(&mut body)?;
    let EmbedRequest { model, inputs } = parse::embed(body)?;
    let served = state.models.acquire(Some(&model), keep_alive).await?;
    let load = arrived.elapsed();
    let embeddings = embed_inputs(&served, inputs).await?;
    let tokens: usize = embeddings.iter().map(|e| e.tokens).sum();
    let vectors: Vec<&Vec<f32>> = embeddings.iter().map(|e| &e.vector).collect();
    Ok(Json(json!({
        "model": model,
        "embeddings": vectors,
        "total_duration": arrived.elapsed().as_nanos() as u64,
        "load_duration": load.as_nanos() as u64,
        "prompt_eval_count": tokens,
    })))
}

pub async fn embeddings(
    State(state): State<AppState>,
    JsonBody(mut body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let keep_alive = take_keep_alive(&mut body)?;
    let EmbedRequest { model, inputs } = parse::embeddings(body)?;
    let served = state.models.acquire(Some(&model), keep_alive).await?;
    let mut embeddings = embed_inputs(&served, inputs).await?;
    let vector = embeddings.pop().map(|e| e.vector).unwrap_or_default();
    Ok(Json(json!({ "embedding": vector })))
}
