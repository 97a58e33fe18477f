//! Pulls against a stand-in hub this test serves on a loopback port: the hub's file API
//! (`/api/models/{repo}/tree/main`) and its downloads (`/{repo}/resolve/main/{path}`,
//! redirected to a storage path as the real hub redirects to its CDN, with `Range`), with
//! faults on demand — a transfer cut in the middle, a file whose listed SHA-256 is wrong.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use ferrox_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use ferrox_hub::{Hub, HubError, ModelRef, Progress};
use sha2::{Digest, Sha256};

#[derive(Clone, Default)]
struct Files {
    /// repo → (path, bytes, the SHA-256 listed for it).
    repos: HashMap<String, Vec<(String, Vec<u8>, String)>>,
}

/// A download request: the path, and its Range header.
type Download = (String, Option<String>);

#[derive(Clone, Default)]
struct Hits {
    /// Every download request.
    downloads: Arc<Mutex<Vec<Download>>>,
    /// Paths whose next transfer is cut after half the bytes.
    cut: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct Hubs {
    files: Arc<Files>,
    hits: Hits,
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn tree(
    State(h): State<Hubs>,
    UrlPath((owner, repo)): UrlPath<(String, String)>,
) -> Response {
    let Some(files) = h.files.repos.get(&format!("{owner}/{repo}")) else {
        return (StatusCode::NOT_FOUND, "no such repo").into_response();
    };
    let mut listing = vec![serde_json::json!({"type": "file", "path": "README.md", "size": 3})];
    listing.extend(files.iter().map(|(path, bytes, sha)| {
        serde_json::json!({"type": "file", "path": path, "size": bytes.len(),
                           "lfs": {"oid": sha, "size": bytes.len(), "pointerSize": 130}})
    }));
    Json(listing).into_response()
}

async fn resolve(UrlPath((owner, repo, path)): UrlPath<(String, String, String)>) -> Redirect {
    Redirect::temporary(&format!("/storage/{owner}/{repo}/{path}"))
}

async fn storage(
    State(h): State<Hubs>,
    UrlPath((owner, repo, path)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    h.hits
        .downloads
        .lock()
        .unwrap()
        .push((path.clone(), range.clone()));
    let files = &h.files.repos[&format!("{owner}/{repo}")];
    let (_, bytes, _) = files.iter().find(|(p, _, _)| *p == path).unwrap();
    let from: usize = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .unwrap_or(0);
    let rest = bytes[from..].to_vec();
    let status = if from > 0 {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let cut = {
        let mut cut = h.hits.cut.lock().unwrap();
        let at = cut.iter().position(|p| *p == path);
        at.map(|at| cut.remove(at)).is_some()
    };
    let len = rest.len();
    let body = if cut {
        // Half the bytes, then the connection breaks.
        let half = rest[..len / 2].to_vec();
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            vec![Ok(half), Err(std::io::Error::other("cut"))];
        Body::from_stream(futures_util::stream::iter(chunks))
    } else {
        Body::from(rest)
    };
    (status, [(header::CONTENT_LENGTH, len.to_string())], body).into_response()
}

/// A hub serving `files` on a loopback port: its endpoint, and what it saw.
fn serve(files: Files) -> (String, Hits) {
    let hits = Hits::default();
    let state = Hubs {
        files: Arc::new(files),
        hits: hits.clone(),
    };
    let app = Router::new()
        .route("/api/models/:owner/:repo/tree/main", get(tree))
        .route("/:owner/:repo/resolve/main/*path", get(resolve))
        .route("/storage/:owner/:repo/*path", get(storage))
        .with_state(state);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{addr}"), hits)
}

fn cache(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrox-hub-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Bytes that look like nothing in particular, `n` of them.
fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn one_repo(files: Vec<(&str, Vec<u8>)>) -> Files {
    let listed = files
        .into_iter()
        .map(|(p, b)| {
            let s = sha(&b);
            (p.to_string(), b, s)
        })
        .collect();
    Files {
        repos: HashMap::from([("o/m-GGUF".to_string(), listed)]),
    }
}

fn pull(endpoint: &str, name: &str, dir: &Path) -> (Result<PathBuf, HubError>, Vec<Progress>) {
    let mut seen = Vec::new();
    let r = Hub::new(endpoint).pull(&ModelRef::parse(name).unwrap(), dir, &mut |p| seen.push(p));
    (r, seen)
}

#[test]
fn a_quantization_is_fetched_verified_and_not_fetched_again() {
    let (q4, q8) = (payload(3 << 20, 1), payload(1 << 20, 2));
    let (endpoint, hits) = serve(one_repo(vec![
        ("m-Q4_K_M.gguf", q4.clone()),
        ("m-Q8_0.gguf", q8),
    ]));
    let dir = cache("plain");
    let (path, seen) = pull(&endpoint, "o/m-GGUF", &dir);
    let path = path.unwrap();
    assert_eq!(path, dir.join("hub/o/m-GGUF/m-Q4_K_M.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), q4);
    let last = seen
        .iter()
        .rev()
        .find_map(|p| match p {
            Progress::Downloading { done, total, .. } => Some((*done, *total)),
            _ => None,
        })
        .unwrap();
    assert_eq!(last, (q4.len() as u64, q4.len() as u64));
    assert!(seen.contains(&Progress::Verifying {
        file: "m-Q4_K_M.gguf".into()
    }));
    // Cached: the hub is asked for the listing, the file is not fetched again.
    let before = hits.downloads.lock().unwrap().len();
    assert_eq!(
        pull(&endpoint, "hf.co/o/m-GGUF:Q4_K_M", &dir).0.unwrap(),
        path
    );
    assert_eq!(hits.downloads.lock().unwrap().len(), before);
    // An unknown quantization names the ones there are; an unknown repository is a 404.
    let e = pull(&endpoint, "o/m-GGUF:Q2_K", &dir).0.unwrap_err();
    assert!(e.to_string().contains("Q4_K_M, Q8_0"), "{e}");
    let e = pull(&endpoint, "o/none", &dir).0.unwrap_err();
    assert!(e.to_string().contains("no such repository"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_transfer_resumes_in_the_same_run_and_in_the_next() {
    let q8 = payload(2 << 20, 3);
    let (endpoint, hits) = serve(one_repo(vec![("m-Q8_0.gguf", q8.clone())]));
    let dir = cache("resume");
    hits.cut.lock().unwrap().push("m-Q8_0.gguf".into());
    let path = pull(&endpoint, "o/m-GGUF:Q8_0", &dir).0.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), q8);
    let downloads = hits.downloads.lock().unwrap().clone();
    assert_eq!(downloads.len(), 2, "{downloads:?}");
    assert_eq!(downloads[0].1, None);
    let resumed_at: usize = downloads[1]
        .1
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .expect("a Range request");
    assert!(resumed_at > 0 && resumed_at < q8.len(), "{resumed_at}");
    // A run that stopped part-way left a .part: the next run asks for the rest only.
    std::fs::remove_file(&path).unwrap();
    let part = dir.join("hub/o/m-GGUF/m-Q8_0.gguf.part");
    std::fs::write(&part, &q8[..1000]).unwrap();
    let path = pull(&endpoint, "o/m-GGUF:Q8_0", &dir).0.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), q8);
    let last = hits.downloads.lock().unwrap().last().unwrap().clone();
    assert_eq!(last.1.as_deref(), Some("bytes=1000-"));
    assert!(!part.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_that_fails_its_checksum_is_removed_and_reported() {
    let bytes = payload(1 << 20, 4);
    let mut files = one_repo(vec![("m-Q8_0.gguf", bytes)]);
    files.repos.get_mut("o/m-GGUF").unwrap()[0].2 = sha(b"something else");
    let (endpoint, _) = serve(files);
    let dir = cache("corrupt");
    let e = pull(&endpoint, "o/m-GGUF", &dir).0.unwrap_err();
    assert!(matches!(e, HubError::Checksum { .. }), "{e}");
    let folder = dir.join("hub/o/m-GGUF");
    assert_eq!(
        std::fs::read_dir(&folder).unwrap().count(),
        0,
        "nothing left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shard of a split GGUF holding `tensors` (name, first value).
fn shard(no: u16, count: u16, total: i32, tensors: &[(&str, f32)]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if no == 0 {
        w.add_metadata("general.architecture", Value::String("llama".into()));
    }
    w.add_metadata("split.no", Value::U16(no))
        .add_metadata("split.count", Value::U16(count))
        .add_metadata("split.tensors.count", Value::I32(total));
    for (name, v) in tensors {
        let data = [*v; 4].iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(name, &[4], GgmlType::F32, data);
    }
    w.to_bytes()
}

#[test]
fn a_split_model_is_fetched_shard_by_shard_and_joined() {
    let files = one_repo(vec![
        (
            "Q8_0/m-Q8_0-00002-of-00002.gguf",
            shard(1, 2, 3, &[("c", 3.0)]),
        ),
        (
            "Q8_0/m-Q8_0-00001-of-00002.gguf",
            shard(0, 2, 3, &[("a", 1.0), ("b", 2.0)]),
        ),
        ("m-Q4_K_M.gguf", payload(100, 5)),
    ]);
    let (endpoint, _) = serve(files);
    let dir = cache("split");
    let (path, seen) = pull(&endpoint, "o/m-GGUF:Q8_0", &dir);
    let path = path.unwrap();
    assert_eq!(path, dir.join("hub/o/m-GGUF/m-Q8_0.gguf"));
    assert!(seen.contains(&Progress::Joining));
    let f = GgufFile::open(&path).unwrap();
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["m-Q8_0.gguf"], "the shards are removed once joined");
    let _ = std::fs::remove_dir_all(&dir);
}
