//! Ollama's routes about models: `/api/tags` (every model the server can serve),
//! `/api/show` (one model's metadata, template and capabilities), `/api/ps` (what is
//! loaded), `/api/version`, and the model-management routes this server cannot honour (`/api/create`, `/api/copy`, `/api/push`, `/api/delete`, blobs), each a 501
//! saying what to do instead.
//!
//! Everything is read from the GGUF itself: a model that is not loaded has its header read
//! (a memory map of the file; its tensors are not touched), so a client that shows every
//! model (VS Code's Copilot calls `/api/show` for each) loads nothing.
//!
//! Choices, written down:
//! - `name` and `model` are the server's model id (`--alias`, else the file's stem); a
//!   request may add Ollama's `:latest` tag;
//! - `digest` is a SHA-256 of the file's path, size and modification time: it changes when
//!   the file does, but it is not a hash of the contents (hashing gigabytes per listing is
//!   too slow);
//! - `capabilities`: `completion` and `tools` for every generating model (tools work with
//!   every template, `core/tool_syntax.rs`), `insert` with fill-in-the-middle tokens,
//!   `thinking` when the template thinks and `--reasoning-format` splits it, `embedding`
//!   for encoder-only models; never `vision`;
//! - `/api/version` answers the Ollama API version whose routes this server follows
//!   ([`OLLAMA_API_VERSION`]; clients such as VS Code compare it), and ours beside it.

use std::path::Path;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::Json;
use ferrox_engine::tokenizer::Tokenizer;
use ferrox_engine::Arch;
use ferrox_gguf::{GgufFile, Value as Meta};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::parse;
use crate::core::error::ApiError;
use crate::core::ids::rfc3339;
use crate::core::reasoning;
use crate::http::params::{Fields, JsonBody};
use crate::models::{ModelInfo, Status};
use crate::state::AppState;

/// The Ollama version whose API this server follows.
pub const OLLAMA_API_VERSION: &str = "0.12.0";

pub async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_API_VERSION, "ferrox": env!("CARGO_PKG_VERSION")}))
}

pub async fn tags(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let models = state.models.list();
    let listed = blocking(move || models.iter().filter_map(tag).collect::<Vec<_>>()).await?;
    Ok(Json(json!({ "models": listed })))
}

pub async fn ps(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let loaded: Vec<ModelInfo> = state
        .models
        .list()
        .into_iter()
        .filter(|m| m.status == Status::Loaded)
        .collect();
    let listed = blocking(move || loaded.iter().filter_map(running).collect::<Vec<_>>()).await?;
    Ok(Json(json!({ "models": listed })))
}

/// `{"model"}` (or the older `"name"`), `verbose`: the model's metadata.
pub async fn show(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let mut f = Fields::from_body(body)?;
    if let Some(name) = f.take_raw("name") {
        if f.take_raw("model").is_none() {
            f.map_insert("model", name);
        }
    }
    let name = parse::model(&mut f)?;
    let verbose: bool = f.take("verbose")?.unwrap_or(false);
    f.take::<String>("system")?;
    f.finish()?;
    let info = state.models.info(&name)?;
    let reasoning = state.config.reasoning;
    Ok(Json(
        blocking(move || describe(&info, verbose, reasoning)).await??,
    ))
}

/// The model-management routes of Ollama this server does not have: a 501 saying why.
pub async fn unsupported(uri: axum::http::Uri) -> ApiError {
    let what = match uri.path() {
        "/api/create" => "models are GGUF files: serve one with `ferrox serve -m FILE --alias NAME`",
        "/api/copy" => "give a model another name with `--alias NAME=FILE`",
        "/api/delete" => "unload a model with keep_alive: 0 (or POST /admin/models/unload); files are yours to delete",
        "/api/push" => "this server does not publish models",
        _ => "models are GGUF files given to `ferrox serve`; there are no blobs",
    };
    ApiError::NotImplemented {
        message: format!("{} is not supported by this server: {what}", uri.path()),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal {
            message: format!("reading model files failed: {e}"),
        })
}

/// A model's GGUF: the loaded version's, else its file's header.
fn gguf(info: &ModelInfo) -> Option<GgufOrLoaded> {
    if let Some(g) = &info.served {
        return Some(GgufOrLoaded::Loaded(g.model.clone()));
    }
    let path = info.path.as_ref()?;
    GgufFile::open(path).ok().map(GgufOrLoaded::File)
}

enum GgufOrLoaded {
    Loaded(std::sync::Arc<ferrox_engine::Model>),
    File(GgufFile),
}

impl GgufOrLoaded {
    fn file(&self) -> &GgufFile {
        match self {
            GgufOrLoaded::Loaded(m) => m.file(),
            GgufOrLoaded::File(f) => f,
        }
    }
}

/// `/api/tags`' entry: skipped if its file cannot be read any more.
fn tag(info: &ModelInfo) -> Option<Value> {
    let file = gguf(info)?;
    let (size, modified) = file_facts(info.path.as_deref());
    Some(json!({
        "name": info.id,
        "model": info.id,
        "modified_at": rfc3339(modified),
        "size": size,
        "digest": digest(info.path.as_deref(), size, modified),
        "details": details(file.file()),
    }))
}

/// `/api/ps`' entry of a loaded model.
fn running(info: &ModelInfo) -> Option<Value> {
    let served = info.served.as_ref()?;
    let file = gguf(info)?;
    let (size, modified) = file_facts(info.path.as_deref());
    // Kept for good: Ollama's far-future time.
    let expires = info
        .expires_in
        .unwrap_or(Duration::from_secs(100 * 365 * 86_400));
    Some(json!({
        "name": info.id,
        "model": info.id,
        "size": info.memory_bytes,
        "digest": digest(info.path.as_deref(), size, modified),
        "details": details(file.file()),
        "expires_at": rfc3339(SystemTime::now() + expires),
        "size_vram": 0,
        "context_length": served.context_tokens,
    }))
}

/// `/api/show`'s answer.
fn describe(info: &ModelInfo, verbose: bool, reasoning: bool) -> Result<Value, ApiError> {
    // Verbose wants the arrays a loaded model's tokenizer took out of memory: from the file.
    let from_file = verbose
        .then(|| info.path.as_ref().and_then(|p| GgufFile::open(p).ok()))
        .flatten()
        .map(GgufOrLoaded::File);
    let file = from_file
        .or_else(|| gguf(info))
        .ok_or_else(|| ApiError::ModelLoadFailed {
            model: info.id.clone(),
            path: info
                .path
                .as_ref()
                .map_or("(none)".into(), |p| p.display().to_string()),
            reason: "its file can no longer be read".into(),
        })?;
    let f = file.file();
    let template = f
        .get("tokenizer.chat_template")
        .and_then(Meta::as_str)
        .unwrap_or("")
        .to_string();
    let (_, modified) = file_facts(info.path.as_deref());
    let mut out = json!({
        "modelfile": format!("FROM {}\n", info.path.as_ref().map_or(String::new(), |p| p.display().to_string())),
        "parameters": "",
        "template": template,
        "details": details(f),
        "model_info": model_info(f, verbose),
        "capabilities": capabilities(&file, &template, reasoning),
        "modified_at": rfc3339(modified),
    });
    if let Some(license) = f.get("general.license").and_then(Meta::as_str) {
        out["license"] = json!(license);
    }
    Ok(out)
}

/// What the model can do, as Ollama names it.
fn capabilities(file: &GgufOrLoaded, template: &str, reasoning: bool) -> Vec<&'static str> {
    let f = file.file();
    let arch = f
        .get("general.architecture")
        .and_then(Meta::as_str)
        .and_then(|a| Arch::from_name(a).ok());
    if arch.is_some_and(Arch::is_encoder) {
        return vec!["embedding"];
    }
    let mut caps = vec!["completion", "tools"];
    let fim = match file {
        GgufOrLoaded::Loaded(m) => m.tokenizer().fim(),
        GgufOrLoaded::File(f) => match Tokenizer::from_gguf(f) {
            Ok(t) => t.fim(),
            Err(_) => Default::default(),
        },
    };
    if fim.pre.is_some() && fim.suf.is_some() && fim.mid.is_some() {
        caps.push("insert");
    }
    if reasoning && reasoning::tags_of_template(template).is_some() {
        caps.push("thinking");
    }
    caps
}

/// Ollama's `details`: the format, the family, the size and the quantization.
fn details(f: &GgufFile) -> Value {
    let arch = f
        .get("general.architecture")
        .and_then(Meta::as_str)
        .unwrap_or("unknown");
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": arch,
        "families": [arch],
        "parameter_size": parameter_size(parameter_count(f)),
        "quantization_level": f
            .get("general.file_type")
            .and_then(Meta::as_u64)
            .map_or("unknown", file_type_name),
    })
}

/// The GGUF's metadata as `model_info`: every scalar; arrays (the vocabulary, merges) only
/// when `verbose`, else `null`, as Ollama does; `general.parameter_count` counted from the
/// tensors when the file does not say it.
fn model_info(f: &GgufFile, verbose: bool) -> Value {
    let mut info = Map::new();
    for (key, value) in f.metadata() {
        let v = match value {
            Meta::Array(_) if !verbose => Value::Null,
            v => meta_json(v),
        };
        info.insert(key.clone(), v);
    }
    info.entry("general.parameter_count")
        .or_insert_with(|| json!(parameter_count(f)));
    Value::Object(info)
}

fn meta_json(v: &Meta) -> Value {
    match v {
        Meta::Bool(b) => json!(b),
        Meta::String(s) => json!(s),
        Meta::F32(x) => json!(x),
        Meta::F64(x) => json!(x),
        Meta::Array(items) => Value::Array(items.iter().map(meta_json).collect()),
        other => other
            .as_i64()
            .map(|i| json!(i))
            .or_else(|| other.as_u64().map(|u| json!(u)))
            .unwrap_or(Value::Null),
    }
}

fn parameter_count(f: &GgufFile) -> u64 {
    f.get("general.parameter_count")
        .and_then(Meta::as_u64)
        .unwrap_or_else(|| f.tensors().iter().map(|t| t.n_elems()).sum())
}

/// `268.10M`, `3.88B`: Ollama's way of writing a parameter count.
fn parameter_size(n: u64) -> String {
    let n = n as f64;
    match n {
        n if n >= 1e9 => format!("{:.2}B", n / 1e9),
        n if n >= 1e6 => format!("{:.2}M", n / 1e6),
        n => format!("{:.2}K", n / 1e3),
    }
}

/// llama.cpp's name of a `general.file_type` (`llama_ftype`).
fn file_type_name(t: u64) -> &'static str {
    match t {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => "unknown",
    }
}

/// The file's size and modification time (zero and the epoch when it cannot be read).
fn file_facts(path: Option<&Path>) -> (u64, SystemTime) {
    let meta = path.and_then(|p| std::fs::metadata(p).ok());
    (
        meta.as_ref().map_or(0, |m| m.len()),
        meta.and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH),
    )
}

/// A SHA-256 of the file's path, size and modification time (module docs say why not of
/// its contents).
fn digest(path: Option<&Path>, size: u64, modified: SystemTime) -> String {
    let mut h = Sha256::new();
    h.update(path.map_or(String::new(), |p| p.display().to_string()));
    h.update(size.to_le_bytes());
    let nanos = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.update(nanos.to_le_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_quantizations_are_written_as_ollama_writes_them() {
        assert_eq!(parameter_size(268_098_176), "268.10M");
        assert_eq!(parameter_size(3_880_000_000), "3.88B");
        assert_eq!(file_type_name(15), "Q4_K_M");
        assert_eq!(file_type_name(99), "unknown");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
        let d = digest(Some(Path::new("/m.gguf")), 10, t);
        assert_eq!(d.len(), 64);
        assert_ne!(d, digest(Some(Path::new("/m.gguf")), 11, t));
    }
}
