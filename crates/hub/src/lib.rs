//! GGUF models by name from a Hugging Face-style hub — `ferrox pull OWNER/REPO[:QUANT]` and
//! Ollama's `/api/pull`, as `llama-server -hf` and `ollama pull hf.co/…` users expect.
//!
//! A name is resolved with the hub's file API (`GET {endpoint}/api/models/{repo}/tree/main`,
//! which lists each file with its size and, for large files, the SHA-256 of its contents),
//! the model's files chosen from it (`choose`), then each is downloaded from
//! `{endpoint}/{repo}/resolve/main/{path}` (following the hub's redirects to its storage)
//! into the model cache (`download`): resumed where a broken transfer stopped (an HTTP
//! `Range` request, in the same run and the next), checked against the hub's SHA-256 before
//! it takes its final name, so a file under its final name is always whole and verified. A
//! split model's shards are joined into one file (`ferrox_gguf::join_split`). A model whose
//! file is already in the cache is not fetched again. Two pulls of one repository in one
//! process take turns (the second finds the file in place); two processes pulling the same
//! file at once are not guarded against.
//!
//! The hub is `HF_ENDPOINT` when set (as the `huggingface_hub` library reads it), else
//! Hugging Face's; `HF_TOKEN` is sent as a bearer token for gated repositories. Tests point
//! it at a stand-in server that speaks the same API.

mod choose;
mod download;

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

pub use choose::{shard_of, DEFAULT_QUANT};

/// The hub used when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A model named as `OWNER/REPO[:QUANT]` (also with Ollama's `hf.co/` in front).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    /// `OWNER/REPO`.
    pub repo: String,
    /// The quantization asked for (`Q4_K_M`), if any.
    pub quant: Option<String>,
}

impl ModelRef {
    /// Reads a name; `None` if it is not `OWNER/REPO[:QUANT]`.
    pub fn parse(name: &str) -> Option<ModelRef> {
        let name = ["https://huggingface.co/", "huggingface.co/", "hf.co/"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .unwrap_or(name);
        let (repo, quant) = match name.split_once(':') {
            Some((repo, quant)) if !quant.is_empty() => (repo, Some(quant.to_string())),
            Some(_) => return None,
            None => (name, None),
        };
        let (owner, model) = repo.split_once('/')?;
        let ok = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !ok(owner) || !ok(model) {
            return None;
        }
        // `latest` is Ollama's default tag, not a quantization.
        let quant = quant.filter(|q| q != "latest");
        Some(ModelRef {
            repo: repo.to_string(),
            quant,
        })
    }
}

/// A file of a repository, as the hub lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    pub path: String,
    pub size: u64,
    /// The hex SHA-256 of its contents.
    pub sha256: String,
}

/// What a pull is doing, for a progress bar or Ollama's progress objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Asking the hub for the repository's files.
    Listing,
    /// Bytes of `file` on disk so far.
    Downloading {
        file: String,
        sha256: String,
        done: u64,
        total: u64,
    },
    /// Checking a downloaded file's SHA-256.
    Verifying { file: String },
    /// Joining a split model's shards.
    Joining,
}

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{name:?} is not a model name: expected OWNER/REPO or OWNER/REPO:QUANT")]
    BadName { name: String },
    #[error("{url}: {detail}")]
    Http { url: String, detail: String },
    #[error("{repo} has no GGUF file")]
    NoGguf { repo: String },
    #[error("{repo} has no {quant} file; it has: {}", choices.join(", "))]
    NoSuchQuant {
        repo: String,
        quant: String,
        choices: Vec<String>,
    },
    #[error("{repo} holds several models; name one: {}", choices.join(", "))]
    Ambiguous { repo: String, choices: Vec<String> },
    #[error("{repo}: {detail}")]
    Incomplete { repo: String, detail: String },
    #[error("{repo}: the hub gives no SHA-256 for {path}, so it cannot be checked")]
    Unverifiable { repo: String, path: String },
    #[error("{path}: SHA-256 {got}, the hub says {expected}; the download was removed")]
    Checksum {
        path: String,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("joining the shards: {0}")]
    Join(#[from] ferrox_gguf::GgufError),
}

/// The repository folders being pulled into by this process.
static PULLING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static PULLED: Condvar = Condvar::new();

/// This process's pull into one folder, for as long as it lives.
struct InFlight(PathBuf);

impl InFlight {
    fn wait_for(dir: PathBuf) -> InFlight {
        let mut pulling = PULLING.lock().unwrap_or_else(|p| p.into_inner());
        while pulling.contains(&dir) {
            pulling = PULLED.wait(pulling).unwrap_or_else(|p| p.into_inner());
        }
        pulling.push(dir.clone());
        InFlight(dir)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut pulling = PULLING.lock().unwrap_or_else(|p| p.into_inner());
        pulling.retain(|d| *d != self.0);
        PULLED.notify_all();
    }
}

/// A hub to pull from.
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Hub {
    /// `HF_ENDPOINT` (else [`DEFAULT_ENDPOINT`]) with `HF_TOKEN`, if set.
    pub fn from_env() -> Hub {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let mut hub = Hub::new(endpoint);
        hub.token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
        hub
    }

    pub fn new(endpoint: impl Into<String>) -> Hub {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(30)))
            // A stalled transfer fails (and is resumed) instead of hanging; a slow one that
            // keeps moving goes on (this bounds each read, not the whole body).
            .timeout_per_read(Some(Duration::from_secs(60)))
            .build()
            .into();
        Hub {
            endpoint: endpoint.into().trim_end_matches('/').to_string(),
            token: None,
            agent,
        }
    }

    /// Where `name`'s file goes under `cache` (the model cache): `hub/OWNER/REPO/FILE`.
    pub fn dir(cache: &Path, name: &ModelRef) -> PathBuf {
        let mut dir = cache.join("hub");
        for part in name.repo.split('/') {
            dir.push(part);
        }
        dir
    }

    /// Pulls `name` into `cache` and returns the model's file: fetched, resumed, or already
    /// there.
    pub fn pull(
        &self,
        name: &ModelRef,
        cache: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<PathBuf, HubError> {
        progress(Progress::Listing);
        let files = self.list(&name.repo)?;
        let chosen = choose::choose(&name.repo, name.quant.as_deref(), &files)?;
        let dir = Hub::dir(cache, name);
        std::fs::create_dir_all(&dir)?;
        // One pull of a repository at a time in this process; a second waits, then finds
        // the file in place (two writers would append to one `.part`).
        let _turn = InFlight::wait_for(dir.clone());
        let file_name = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
        let target = match shard_of(&chosen[0].path) {
            Some((base, _, _)) => dir.join(format!("{}.gguf", file_name(&base))),
            None => dir.join(file_name(&chosen[0].path)),
        };
        if target.is_file() {
            return Ok(target);
        }
        let mut downloaded = Vec::with_capacity(chosen.len());
        for f in &chosen {
            if f.sha256.is_empty() {
                return Err(HubError::Unverifiable {
                    repo: name.repo.clone(),
                    path: f.path.clone(),
                });
            }
            let dest = dir.join(file_name(&f.path));
            let url = format!("{}/{}/resolve/main/{}", self.endpoint, name.repo, f.path);
            download::fetch(self, &url, f, &dest, progress)?;
            downloaded.push(dest);
        }
        if downloaded.len() > 1 {
            progress(Progress::Joining);
            let part = target.with_extension("gguf.joining");
            ferrox_gguf::join_split(&downloaded, &part)?;
            std::fs::rename(&part, &target)?;
            for shard in &downloaded {
                let _ = std::fs::remove_file(shard);
            }
        }
        Ok(target)
    }

    /// The repository's files with their sizes and SHA-256s.
    pub fn list(&self, repo: &str) -> Result<Vec<RemoteFile>, HubError> {
        let url = format!(
            "{}/api/models/{repo}/tree/main?recursive=true",
            self.endpoint
        );
        let http = |detail: String| HubError::Http {
            url: url.clone(),
            detail,
        };
        let mut response = self
            .get(&url, None)
            .call()
            .map_err(|e| http(e.to_string()))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(http(match status {
                401 | 403 => format!("{status}: the repository is gated or private (set HF_TOKEN)"),
                404 => format!("{status}: no such repository"),
                _ => format!("status {status}"),
            }));
        }
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| http(e.to_string()))?;
        let listing: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| http(format!("not a file listing: {e}")))?;
        let items = listing
            .as_array()
            .ok_or_else(|| http("not a file listing".into()))?;
        Ok(items
            .iter()
            .filter(|i| i["type"] == "file")
            .filter_map(|i| {
                Some(RemoteFile {
                    path: i["path"].as_str()?.to_string(),
                    size: i["lfs"]["size"].as_u64().or(i["size"].as_u64())?,
                    sha256: i["lfs"]["oid"].as_str().unwrap_or("").to_string(),
                })
            })
            .collect())
    }

    /// A GET with the token, and a `Range` from `from` when given.
    fn get(
        &self,
        url: &str,
        from: Option<u64>,
    ) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        let mut request = self.agent.get(url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(from) = from {
            request = request.header("Range", format!("bytes={from}-"));
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_owner_repo_and_an_optional_quantization() {
        let r = |s| ModelRef::parse(s);
        assert_eq!(
            r("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
            Some(ModelRef {
                repo: "bartowski/Llama-3.2-1B-Instruct-GGUF".into(),
                quant: Some("Q4_K_M".into())
            })
        );
        assert_eq!(r("hf.co/o/r").unwrap().repo, "o/r");
        assert_eq!(r("o/r:latest").unwrap().quant, None);
        for bad in ["gemma3", "o/r/x", "o/:q", "/r", "o/r:", "../r/x"] {
            assert_eq!(r(bad), None, "{bad}");
        }
    }
}
