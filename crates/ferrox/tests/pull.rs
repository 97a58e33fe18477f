//! `ferrox pull OWNER/REPO:QUANT` as a user runs it, against a stand-in hub this test serves
//! (`HF_ENDPOINT`) and a cache of its own (`FERROX_CACHE_DIR`): the path printed, the file
//! verified and in place, progress on stderr, a second pull that fetches nothing, and a
//! wrong name refused with the quantizations there are. (Resumption, checksums and shards
//! are `ferrox-hub`'s own tests.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// Serves the file API and one file over plain HTTP/1.1; counts the file's downloads.
fn stand_in(file: &'static str, bytes: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let listing = format!(
        r#"[{{"type":"file","path":"{file}","size":{n},"lfs":{{"oid":"{sha}","size":{n}}}}}]"#,
        n = bytes.len()
    );
    let downloads = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&downloads);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("");
            let (status, body): (&str, &[u8]) =
                if path.starts_with("/api/models/o/m-GGUF/tree/main") {
                    ("200 OK", listing.as_bytes())
                } else if path == format!("/o/m-GGUF/resolve/main/{file}") {
                    counted.fetch_add(1, Ordering::SeqCst);
                    ("200 OK", &bytes)
                } else {
                    ("404 Not Found", b"not found")
                };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(body);
        }
    });
    (endpoint, downloads)
}

#[test]
fn pull_by_name_fetches_verifies_shows_progress_and_caches() {
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (endpoint, downloads) = stand_in("m-Q8_0.gguf", bytes.clone());
    let cache = std::env::temp_dir().join(format!("ferrox-pull-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let pull = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args(["pull", name])
            .env("HF_ENDPOINT", &endpoint)
            .env("FERROX_CACHE_DIR", &cache)
            .env("RUST_LOG", "warn")
            .output()
            .expect("ferrox starts")
    };
    let out = pull("o/m-GGUF:Q8_0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        std::path::Path::new(&path),
        cache.join("models/hub/o/m-GGUF/m-Q8_0.gguf")
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert!(stderr.contains("100%"), "progress on stderr: {stderr}");
    assert!(stderr.contains("checking SHA-256"), "{stderr}");
    // Cached: printed again, not fetched again.
    let again = pull("o/m-GGUF:Q8_0");
    assert!(again.status.success());
    assert_eq!(String::from_utf8(again.stdout).unwrap().trim(), path);
    assert_eq!(downloads.load(Ordering::SeqCst), 1);
    // A quantization the repository does not have: refused, naming what it has.
    let wrong = pull("o/m-GGUF:Q2_K");
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("Q8_0"));
    let _ = std::fs::remove_dir_all(&cache);
}
