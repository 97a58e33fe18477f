//! A request body as named parameters: [`JsonBody`] reads it (size limit, JSON syntax) and
//! [`Fields`] hands out one parameter at a time, typed, so that every mistake names the
//! parameter at fault.
//!
//! Why not `#[serde(deny_unknown_fields)]` on one big struct: serde's messages for a wrong
//! type do not say which field (without an extra crate), an unknown field's message lists
//! every expected name, and it cannot tell "not implemented here" (`tools`: a real OpenAI
//! parameter) from "no such parameter" (a typo). Taking fields one by one from the JSON map
//! gives each case its own error, and [`Fields::finish`] refuses whatever was not taken, so
//! nothing a client sends is silently ignored.
//!
//! A `null` value means "not given" for every parameter we know, as the OpenAI API treats it
//! (some SDKs send explicit nulls). An unknown name is refused even with a `null` value.

use std::sync::Arc;
use std::time::Duration;

use axum::async_trait;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};

use crate::core::error::ApiError;
use crate::http::in_flight::Ticket;

/// The body, parsed as JSON, with size and syntax errors in the API's shape (413 / 400)
/// instead of axum's plain-text rejections. The limit is the router's [`BodyLimit`], which
/// also says how long the whole body may take: a client that stops sending (or trickles)
/// gets a 408 and its connection is closed, instead of holding it open for ever.
/// A `Content-Type` other than JSON (`application/json`, `…+json`) from a browser is a 415:
/// browsers send cross-site "simple" requests as forms or text, so a web page cannot post to
/// a local server. A browser's POST always carries `Origin` (the Fetch standard sends it for
/// every method but GET and HEAD); a request without it is not a web page's, so its body is
/// read as JSON whatever it is labelled — `curl -d '{…}'` sends a form's type, and the
/// examples in Ollama's and llama.cpp's docs are written that way.
pub struct JsonBody(pub Value);

#[async_trait]
impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let from_browser = req.headers().contains_key(axum::http::header::ORIGIN);
        if let Some(ct) = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .filter(|_| from_browser)
        {
            let text = ct.to_str().unwrap_or("");
            let mime = text
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if mime != "application/json" && !mime.ends_with("+json") {
                return Err(ApiError::UnsupportedMediaType {
                    content_type: text.to_string(),
                });
            }
        }
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .copied()
            .unwrap_or_default();
        let ticket = req.extensions().get::<Arc<Ticket>>().cloned();
        let bytes = read_limited(req.into_body(), limit).await?;
        // Whole: from now on a shutdown waits for this request.
        if let Some(ticket) = ticket {
            ticket.start();
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::MalformedJson {
                message: e.to_string(),
            })
    }
}

/// How much more than the limit a too-large body is read (and dropped) before the 413 goes
/// out, so that a client that writes its whole body before reading — most blocking HTTP
/// libraries — reads the 413 instead of a broken pipe. Past it the connection is closed.
pub const DRAIN_BYTES: usize = 64 << 20;

/// The body, at most `limit.bytes`: more is a 413, sent after draining up to
/// [`DRAIN_BYTES`] of the rest. A body not whole within `limit.timeout` is a 408: a deadline
/// for the whole body, not an idle timer, so a client cannot hold a connection by sending a
/// byte now and then.
async fn read_limited(body: axum::body::Body, limit: BodyLimit) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let BodyLimit {
        bytes: limit,
        timeout,
    } = limit;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut seen = 0usize;
    let late = || ApiError::BodyTimeout {
        timeout_ms: timeout.as_millis() as u64,
    };
    while let Some(chunk) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .map_err(|_| late())?
    {
        let chunk = chunk.map_err(|e| ApiError::MalformedJson {
            message: format!("the body could not be read: {e}"),
        })?;
        seen += chunk.len();
        if seen <= limit {
            buf.extend_from_slice(&chunk);
        } else if seen > limit.saturating_add(DRAIN_BYTES) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::PayloadTooLarge { limit_bytes: limit });
    }
    Ok(Bytes::from(buf))
}

/// The default request body limit: 2 MiB holds a full 32k-token context as text or as a
/// token-id list several times over.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 << 20;

/// How long a whole request body may take to arrive, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The configured body limits, put in request extensions by the router so that the 413
/// and 408 messages can state them: the most bytes, and the longest a whole body may take.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub bytes: usize,
    pub timeout: Duration,
}

impl Default for BodyLimit {
    fn default() -> Self {
        Self {
            bytes: DEFAULT_MAX_BODY_BYTES,
            timeout: DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// The parameters of one JSON object, taken one at a time.
pub struct Fields {
    map: Map<String, Value>,
    /// Prepended to names in errors (`messages[2].`), empty at the top level.
    prefix: String,
}

impl Fields {
    /// The top-level object of a body.
    pub fn from_body(body: Value) -> Result<Fields, ApiError> {
        match body {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: String::new(),
            }),
            other => Err(ApiError::MalformedJson {
                message: format!("expected a JSON object, got {}", kind(&other)),
            }),
        }
    }

    /// A nested object, named `path` in errors (e.g. `messages[0]`).
    pub fn nested(value: Value, path: &str) -> Result<Fields, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: format!("{path}."),
            }),
            other => Err(ApiError::invalid(
                path,
                format!("expected an object, got {}", kind(&other)),
            )),
        }
    }

    /// The full name of parameter `name` for errors.
    pub fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Parameter `name` as a `T`; `None` if absent or `null`. A value of the wrong type is
    /// refused, naming the parameter.
    pub fn take<T: DeserializeOwned>(&mut self, name: &str) -> Result<Option<T>, ApiError> {
        match self.take_raw(name) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| ApiError::invalid(self.path(name), e.to_string())),
        }
    }

    /// Puts a parameter back (or in), for a reader that looked at it first.
    pub fn map_insert(&mut self, name: &str, value: Value) {
        self.map.insert(name.to_string(), value);
    }

    /// Parameter `name` as raw JSON; `None` if absent or `null`.
    pub fn take_raw(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    /// Parameter `name` as raw JSON (a nested object to read with [`Fields::nested`]), which
    /// must be present and not `null`.
    pub fn require_raw(&mut self, name: &str) -> Result<Value, ApiError> {
        self.take_raw(name)
            .ok_or_else(|| ApiError::MissingParameter {
                param: self.path(name),
            })
    }

    /// Parameter `name`, which must be present and not `null`.
    pub fn require<T: DeserializeOwned>(&mut self, name: &str) -> Result<T, ApiError> {
        self.take(name)?.ok_or_else(|| ApiError::MissingParameter {
            param: self.path(name),
        })
    }

    /// Refuses the first of `names` that is present with a non-null value: parameters of the
    /// API that this server does not implement.
    pub fn refuse_unsupported(&mut self, names: &[&str]) -> Result<(), ApiError> {
        for name in names {
            if self.take_raw(name).is_some() {
                return Err(ApiError::UnsupportedParameter {
                    param: self.path(name),
                });
            }
        }
        Ok(())
    }

    /// Refuses any parameter that was not taken. Names are checked in sorted order, so the
    /// error is the same whatever order the client wrote them in.
    pub fn finish(self) -> Result<(), ApiError> {
        let mut left: Vec<&String> = self.map.keys().collect();
        left.sort();
        match left.first() {
            None => Ok(()),
            Some(name) => Err(ApiError::UnknownParameter {
                param: format!("{}{name}", self.prefix),
            }),
        }
    }
}

/// Most stop strings per request.
pub const MAX_STOP: usize = 16;
/// A token budget above this is refused as absurd before any context arithmetic: no model we
/// load has a context near it, and it keeps sums far from overflow.
pub const MAX_TOKENS_LIMIT: i64 = 1 << 24;

/// Readers for parameters several protocols share, each under the name its protocol uses.
impl Fields {
    /// Speculative decoding for this request, a ferrox extension every protocol takes (and
    /// llama-server's `/completion` spelling): `speculative: false` turns it off,
    /// `speculative: {n_max, n_min, p_min}` sets its limits, and so do the flat keys
    /// `speculative.n_max`, `speculative.n_min`, `speculative.p_min`. Speculation never
    /// changes the tokens drawn (docs/SCHEDULER.md); this is for measuring and tuning.
    pub fn speculative(&mut self) -> Result<ferrox_sched::SpecParams, ApiError> {
        let mut spec = ferrox_sched::SpecParams::default();
        match self.take_raw("speculative") {
            None => {}
            Some(Value::Bool(on)) => spec.enabled = on,
            Some(v @ Value::Object(_)) => {
                let mut f = Fields::nested(v, &self.path("speculative"))?;
                spec.n_max = f.take("n_max")?;
                spec.n_min = f.take("n_min")?;
                spec.p_min = f.take("p_min")?;
                f.finish()?;
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    self.path("speculative"),
                    format!("expected a boolean or an object, got {}", kind(&other)),
                ))
            }
        }
        for (name, slot) in [("n_max", &mut spec.n_max), ("n_min", &mut spec.n_min)] {
            if let Some(n) = self.take(&format!("speculative.{name}"))? {
                *slot = Some(n);
            }
        }
        if let Some(p) = self.take("speculative.p_min")? {
            spec.p_min = Some(p);
        }
        let limit = ferrox_sched::MAX_DRAFT_TOKENS;
        if let Some(n) = spec.n_max.filter(|&n| n > limit) {
            return Err(ApiError::invalid(
                self.path("speculative.n_max"),
                format!("{n} is more than the {limit} drafted tokens a step may verify"),
            ));
        }
        if let (Some(min), Some(max)) = (spec.n_min, spec.n_max) {
            if min > max {
                return Err(ApiError::invalid(
                    self.path("speculative.n_min"),
                    format!("{min} is more than speculative.n_max {max}"),
                ));
            }
        }
        if let Some(p) = spec.p_min.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(ApiError::invalid(
                self.path("speculative.p_min"),
                format!("{p} is not a probability (0 to 1)"),
            ));
        }
        Ok(spec)
    }

    /// A token budget (`max_tokens`, `max_output_tokens`, ...): at least 1 and sane.
    pub fn max_tokens(&mut self, name: &str) -> Result<Option<usize>, ApiError> {
        let path = self.path(name);
        match self.take::<i64>(name)? {
            None => Ok(None),
            Some(t) if t < 1 => Err(ApiError::invalid(
                path,
                format!("must be at least 1, got {t}"),
            )),
            Some(t) if t > MAX_TOKENS_LIMIT => Err(ApiError::invalid(
                path,
                format!("{t} is absurd; the limit is {MAX_TOKENS_LIMIT} (and the model's context)"),
            )),
            Some(t) => Ok(Some(t as usize)),
        }
    }

    /// `top_k`: `0` and `-1` (vLLM's and llama.cpp's spelling) both turn the filter off.
    pub fn top_k(&mut self) -> Result<usize, ApiError> {
        let path = self.path("top_k");
        match self.take::<i64>("top_k")? {
            None | Some(-1) | Some(0) => Ok(0),
            Some(k) if k < 0 => Err(ApiError::invalid(
                path,
                format!("must be >= 0 or -1, got {k}"),
            )),
            Some(k) => Ok(k as usize),
        }
    }

    /// A seed: any JSON integer, negative ones taken as their two's-complement bits.
    pub fn seed(&mut self, name: &str) -> Result<Option<u64>, ApiError> {
        let path = self.path(name);
        let Some(n) = self.take::<Number>(name)? else {
            return Ok(None);
        };
        n.as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .map(Some)
            .ok_or_else(|| ApiError::invalid(path, format!("must be an integer, got {n}")))
    }

    /// Stop strings: one string or an array of at most [`MAX_STOP`].
    pub fn stop(&mut self, name: &str) -> Result<Vec<String>, ApiError> {
        let path = self.path(name);
        let stops = match self.take_raw(name) {
            None => return Ok(Vec::new()),
            Some(Value::String(s)) if s.is_empty() => {
                return Err(ApiError::invalid(path, "a stop string must not be empty"))
            }
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if s.is_empty() => Err(ApiError::invalid(
                        format!("{path}[{i}]"),
                        "a stop string must not be empty",
                    )),
                    Value::String(s) => Ok(s),
                    other => Err(ApiError::invalid(
                        format!("{path}[{i}]"),
                        format!("expected a string, got {}", kind(&other)),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(ApiError::invalid(
                    path,
                    format!(
                        "expected a string or an array of strings, got {}",
                        kind(&other)
                    ),
                ))
            }
        };
        if stops.len() > MAX_STOP {
            return Err(ApiError::invalid(
                path,
                format!("at most {MAX_STOP} stop strings, got {}", stops.len()),
            ));
        }
        Ok(stops)
    }

    /// Takes a parameter whose value is accepted and has no effect here (`metadata`, `user`,
    /// a flag this server always behaves as): logged at debug, never an error.
    pub fn accept(&mut self, name: &str) {
        if let Some(v) = self.take_raw(name) {
            tracing::debug!(param = name, value = %v, "accepted, no effect");
        }
    }
}

/// "a string", "an array", ... for messages about wrong types.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_mistake_names_its_parameter() {
        let mut f = Fields::from_body(json!({
            "temperature": "hot", "tools": [], "response_format": null, "tempreture": 1,
        }))
        .unwrap();
        let e = f.take::<f32>("temperature").unwrap_err();
        assert_eq!(e.param(), Some("temperature"));
        assert_eq!(
            f.refuse_unsupported(&["response_format", "tools"]),
            Err(ApiError::UnsupportedParameter {
                param: "tools".into()
            }),
            "null means not given; an empty list is still given"
        );
        assert_eq!(
            f.finish(),
            Err(ApiError::UnknownParameter {
                param: "tempreture".into()
            })
        );
    }

    #[test]
    fn nested_names_carry_their_path() {
        let mut f = Fields::nested(json!({"role": 3}), "messages[1]").unwrap();
        assert_eq!(
            f.take::<String>("role").unwrap_err().param(),
            Some("messages[1].role")
        );
        assert!(Fields::from_body(json!([1])).is_err());
    }
}
