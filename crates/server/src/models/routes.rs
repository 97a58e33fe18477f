//! The routes about models: `GET /v1/models` (every model with its status, OpenAI's list
//! shape plus ours), `GET /v1/models/{id}`, and the admin routes `POST /admin/models/load`
//! (load, or hot-swap a new file in under an id that is serving) and
//! `POST /admin/models/unload`. The admin routes are guarded by the API keys like the rest.

use std::path::PathBuf;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::registry::{ModelInfo, Status, Unload};
use crate::core::error::ApiError;
use crate::core::ids::unix_now;
use crate::core::served::ServedModel;
use crate::http::params::{Fields, JsonBody};
use crate::state::AppState;

/// A model in OpenAI's shape, plus `status` and what a `ferrox ps` shows in `ferrox`.
fn model_object(m: &ModelInfo) -> Value {
    let mut obj = json!({
        "id": m.id,
        "object": "model",
        "created": m.served.as_ref().map_or(0, |g| g.created),
        "owned_by": "ferrox",
        "status": m.status.name(),
        "ferrox": {
            "memory_bytes": m.memory_bytes,
            "busy": m.busy,
            "keep_alive_secs": m.keep_alive.as_secs_f64(),
            "expires_at": m.expires_in.map(|d| unix_now().saturating_add(d.as_secs())),
            "loads": m.loads,
        },
    });
    if let Some(reason) = &m.reason {
        obj["ferrox"]["reason"] = json!(reason);
    }
    if let Some(g) = &m.served {
        obj["meta"] = meta(g);
        // How its template writes tool calls (`core/tool_syntax.rs`).
        obj["ferrox"]["tool_format"] = json!(g.tool_format.name());
    }
    obj
}

/// llama-server's `meta` of a loaded model.
fn meta(g: &ServedModel) -> Value {
    json!({
        "arch": g.model.config().arch.name(),
        "n_vocab": g.model.vocab_size(),
        "n_ctx_train": g.model.max_context(),
        "n_ctx": g.context_tokens,
    })
}

/// Every model; 503 while the server is still starting and has none.
fn listed(state: &AppState) -> Result<Vec<ModelInfo>, ApiError> {
    let models = state.models.list();
    if models.is_empty() {
        return Err(ApiError::Loading);
    }
    Ok(models)
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let data: Vec<Value> = listed(&state)?.iter().map(model_object).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

pub async fn one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let models = listed(&state)?;
    match models.iter().find(|m| m.id == id) {
        Some(m) => Ok(Json(model_object(m))),
        None => Err(ApiError::ModelNotFound {
            model: id,
            available: models.into_iter().map(|m| m.id).collect(),
        }),
    }
}

/// `{"model": id, "path"?: file}`: loads `id` (from `path`, registering it if new) and
/// answers once it serves, with its listing; a running request stays on its version.
pub async fn load(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    let id: String = f.require("model")?;
    let path: Option<String> = f.take("path")?;
    f.finish()?;
    state.models.load(&id, path.map(PathBuf::from)).await?;
    let models = state.models.list();
    let m = models.iter().find(|m| m.id == id).expect("just loaded");
    Ok(Json(model_object(m)))
}

/// `{"model": id}`: unloads it now if idle, else when its last request ends.
pub async fn unload(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    let id: String = f.require("model")?;
    f.finish()?;
    let status = match state.models.unload(&id)? {
        Unload::Now | Unload::NotLoaded => Status::Unloaded.name(),
        Unload::WhenIdle => "unloading",
    };
    Ok(Json(json!({"model": id, "status": status})))
}
