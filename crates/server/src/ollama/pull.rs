//! `/api/pull`: a model by name, as `ollama pull` fetches one. A name this server already
//! serves is done at once (`{"status": "success"}`); an `OWNER/REPO[:QUANT]` name is fetched
//! from the hub (`ferrox_hub`: resumable, checked against the hub's SHA-256, shards joined)
//! into the model cache and registered under that name, so the next request can use it.
//! The registration lasts until the server stops (the file stays in the cache: serve it
//! with `-m`, or pull again, which finds it there and fetches nothing). The
//! download runs on the blocking pool; streamed (the default), its progress comes as Ollama's
//! objects — `pulling manifest`, `pulling <digest>` with `digest`, `total` and `completed`,
//! `verifying sha256 digest`, `success` — and a failure as an `{"error"}` line.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_hub::{Hub, HubError, ModelRef, Progress};
use futures_util::stream;
use serde_json::{json, Value};

use super::parse;
use crate::core::error::ApiError;
use crate::http::ndjson::ndjson_response;
use crate::http::params::{Fields, JsonBody};
use crate::state::AppState;

pub async fn pull(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut f = Fields::from_body(body)?;
    if let Some(name) = f.take_raw("name") {
        if f.take_raw("model").is_none() {
            f.map_insert("model", name);
        }
    }
    let name = parse::model(&mut f)?;
    f.take::<bool>("insecure")?;
    let stream: bool = f.take("stream")?.unwrap_or(true);
    f.finish()?;
    let done = json!({"status": "success"});
    if state.models.info(&name).is_ok() {
        return Ok(match stream {
            true => ndjson_response(stream::iter([done])),
            false => Json(done).into_response(),
        });
    }
    let Some(model) = ModelRef::parse(&name) else {
        return Err(ApiError::invalid(
            "model",
            format!(
                "{name:?} is neither a model this server has nor a hub name \
                 (OWNER/REPO or OWNER/REPO:QUANT)"
            ),
        ));
    };
    let hub = match &state.config.hub_endpoint {
        Some(endpoint) => Hub::new(endpoint.clone()),
        None => Hub::from_env(),
    };
    let dir = state
        .config
        .pull_dir
        .clone()
        .unwrap_or_else(|| ferrox_engine::cache::cache_dir().join("models"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let task = tokio::task::spawn_blocking(move || {
        let result = hub.pull(&model, &dir, &mut |p| {
            let _ = tx.send(progress(&p));
        });
        let result = result.map_err(hub_error).map(|path| {
            tracing::info!(model = %name, path = %path.display(), "pulled");
            // An error: pulled by another request meanwhile, and there either way.
            let _ = state.models.add(&name, path);
        });
        let _ = tx.send(match &result {
            Ok(()) => json!({"status": "success"}),
            Err(e) => json!({"error": e.to_string()}),
        });
        result
    });
    if stream {
        let lines = stream::unfold(rx, |mut rx| async move {
            let line = rx.recv().await?;
            Some((line, rx))
        });
        return Ok(ndjson_response(lines));
    }
    task.await.map_err(|e| ApiError::Internal {
        message: format!("the pull failed: {e}"),
    })??;
    Ok(Json(done).into_response())
}

/// Ollama's progress object for `p`.
fn progress(p: &Progress) -> Value {
    match p {
        Progress::Listing => json!({"status": "pulling manifest"}),
        Progress::Downloading {
            sha256,
            done,
            total,
            ..
        } => json!({
            "status": format!("pulling {}", &sha256[..sha256.len().min(12)]),
            "digest": format!("sha256:{sha256}"),
            "total": total,
            "completed": done,
        }),
        Progress::Verifying { .. } => json!({"status": "verifying sha256 digest"}),
        Progress::Joining => json!({"status": "joining shards"}),
    }
}

/// A failed pull as a request error: a name the hub cannot resolve (no such repository, a
/// gated one, no such quantization) is the client's (400); a transfer that failed is ours
/// (500, its message saying what).
fn hub_error(e: HubError) -> ApiError {
    let refused = match &e {
        HubError::BadName { .. }
        | HubError::NoGguf { .. }
        | HubError::NoSuchQuant { .. }
        | HubError::Ambiguous { .. }
        | HubError::Incomplete { .. }
        | HubError::Unverifiable { .. } => true,
        // The listing's "404: no such repository", "401: … gated …".
        HubError::Http { detail, .. } => detail.starts_with('4'),
        HubError::Checksum { .. } | HubError::Io(_) | HubError::Join(_) => false,
    };
    match refused {
        true => ApiError::invalid("model", e.to_string()),
        false => ApiError::Internal {
            message: format!("pulling failed: {e}"),
        },
    }
}
