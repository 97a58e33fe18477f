//! [`Pinned`]: the extractor of every route that runs a model. It reads the JSON body,
//! takes the model the body names (`model`; none: the default model) from the registry —
//! loading it, or waiting for its load — and hands the route both. The one place a request's
//! model is resolved, for every protocol.

use std::sync::Arc;

use axum::async_trait;
use axum::extract::{FromRequest, Request};
use serde_json::Value;

use super::keep_alive::KeepAlive;
use crate::core::error::ApiError;
use crate::core::served::ServedModel;
use crate::http::params::JsonBody;
use crate::state::AppState;

/// The model a request runs on, pinned until the request ends, and its body.
pub struct Pinned {
    pub served: Arc<ServedModel>,
    /// The body without `keep_alive`, which is the registry's and is taken here; `model` is
    /// left for the protocol's parser, which checks its type with the rest.
    pub body: Value,
}

#[async_trait]
impl FromRequest<AppState> for Pinned {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let JsonBody(mut body) = JsonBody::from_request(req, state).await?;
        let keep_alive = take_keep_alive(&mut body)?;
        let name = body.get("model").and_then(Value::as_str);
        let served = state.models.acquire(name, keep_alive).await?;
        Ok(Pinned { served, body })
    }
}

/// Takes `keep_alive` out of a request body: the registry's, not the protocol's (`None`: not
/// sent, or null).
pub fn take_keep_alive(body: &mut Value) -> Result<Option<KeepAlive>, ApiError> {
    match body.as_object_mut().and_then(|o| o.remove("keep_alive")) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ok(Some(KeepAlive::from_json(&v)?)),
    }
}
