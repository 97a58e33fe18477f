//! `ferrox serve` with several models and `ferrox ps`, as a user runs them: the binary, its
//! flags, a real port. The models are random-weight GGUFs the test writes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrox_engine::synthetic::{build_gguf, SyntheticSpec};
use ferrox_engine::Arch;
use serde_json::Value;

/// One HTTP/1.1 request on its own connection: the status and the body.
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_model(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let path = dir.join(format!("{name}.gguf"));
    std::fs::write(&path, build_gguf(&SyntheticSpec::tiny(Arch::Gemma3, seed))).unwrap();
    path
}

#[test]
fn serve_takes_several_models_and_ps_shows_what_is_loaded() {
    let dir = std::env::temp_dir().join(format!("ferrox-cli-models-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = write_model(&dir, "first", 1);
    let b = write_model(&dir, "second", 2);
    let port = free_port();
    let alias = format!("other={}", b.display());
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args(["serve", "-t", "1", "--port", &port.to_string()])
            .args(["-m", a.to_str().unwrap(), "--alias", &alias])
            .args(["--max-loaded-models", "1", "--kv-blocks", "64"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ferrox starts"),
    );
    let start = Instant::now();
    while http(port, "GET", "/health", "").map(|r| r.0) != Some(200) {
        assert!(start.elapsed() < Duration::from_secs(60), "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ps = |all: bool| {
        let url = format!("http://127.0.0.1:{port}");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferrox"));
        cmd.args(["ps", "--url", &url]);
        if all {
            cmd.arg("--all");
        }
        let out = cmd.output().expect("ferrox ps runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // The first -m is the default and loads at start; the alias waits for a request.
    let table = ps(false);
    assert!(
        table.lines().nth(1).unwrap().starts_with("first "),
        "{table}"
    );
    assert!(!table.contains("other"), "{table}");
    let (status, body) = http(
        port,
        "POST",
        "/v1/completions",
        r#"{"model": "other", "prompt": "a", "max_tokens": 2}"#,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], "other");
    // One model at most: the default made room.
    let table = ps(true);
    let row = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no {id} in\n{table}"))
            .to_string()
    };
    assert!(row("first").contains("unloaded"), "{table}");
    assert!(
        row("other").contains("loaded") && row("other").contains("MB"),
        "{table}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The model flags' refusals, before anything loads.
#[test]
fn serve_refuses_a_model_list_it_cannot_serve() {
    let serve = |args: &[&str]| {
        let mut child = Server(
            Command::new(env!("CARGO_BIN_EXE_ferrox"))
                .args(["serve", "--port", "0"])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("ferrox starts"),
        );
        // A refusal that regressed would serve for ever: give up after a while.
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{args:?} is serving"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success(), "{args:?} must not serve");
        let mut err = String::new();
        child
            .0
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        err
    };
    let err = serve(&["-m", "x.gguf", "-m", "y.gguf", "--alias", "name"]);
    assert!(err.contains("plain --alias"), "{err}");
    let err = serve(&["--alias", "=y.gguf"]);
    assert!(err.contains("NAME=FILE"), "{err}");
    let err = serve(&["--models-dir", "/nonexistent/models"]);
    assert!(err.contains("--models-dir"), "{err}");
    let err = serve(&["-m", "missing.gguf"]);
    assert!(err.contains("missing.gguf"), "{err}");
    let err = serve(&["--keep-alive", "soon", "-m", "missing.gguf"]);
    assert!(err.contains("--keep-alive"), "{err}");
    let dup = std::env::temp_dir().join(format!("ferrox-dup-{}.gguf", std::process::id()));
    std::fs::write(&dup, b"x").unwrap();
    let alias = format!("same={}", dup.display());
    let err = serve(&["--alias", &alias, "--alias", &alias]);
    assert!(err.contains("two models are named"), "{err}");
    let _ = std::fs::remove_file(&dup);
}

/// The server's resident memory, in bytes (`VmRSS` in `/proc/PID/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Memory really comes back: a model's weights and KV cache leave the process's resident
/// set when it is unloaded, and the old version's when a hot swap replaces it.
#[test]
fn unload_and_hot_swap_give_the_memory_back() {
    let dir = std::env::temp_dir().join(format!("ferrox-cli-rss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = write_model(&dir, "small", 1);
    // About 100 MB of f32 weights, all read by a forward.
    let spec = SyntheticSpec {
        n_vocab: 8192,
        n_embd: 512,
        n_ff: 2048,
        n_head: 8,
        n_head_kv: 4,
        head_dim: 64,
        n_layer: 6,
        ..SyntheticSpec::tiny(Arch::Gemma3, 5)
    };
    let write_big = |name: &str| {
        let path = dir.join(format!("{name}.gguf"));
        std::fs::write(&path, build_gguf(&spec)).unwrap();
        path
    };
    let (big, big2) = (write_big("big"), write_big("big2"));
    let big_bytes = std::fs::metadata(&big).unwrap().len();
    assert!(big_bytes > 90 << 20, "{big_bytes}");
    let port = free_port();
    let alias = format!("big={}", big.display());
    let server = Server(
        Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args(["serve", "-t", "1", "--port", &port.to_string()])
            .args([
                "-m",
                small.to_str().unwrap(),
                "--alias",
                &alias,
                "--kv-blocks",
                "256",
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ferrox starts"),
    );
    let pid = server.0.id();
    let start = Instant::now();
    while http(port, "GET", "/health", "").map(|r| r.0) != Some(200) {
        assert!(start.elapsed() < Duration::from_secs(60), "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ask = |model: &str| {
        let body = format!(r#"{{"model": "{model}", "prompt": "a b", "max_tokens": 2}}"#);
        let (status, body) = http(port, "POST", "/v1/completions", &body).unwrap();
        assert_eq!(status, 200, "{body}");
    };
    ask("small");
    let base = rss(pid);
    ask("big");
    let loaded = rss(pid);
    assert!(
        loaded > base + big_bytes * 8 / 10,
        "a forward reads every weight: {base} -> {loaded}"
    );
    let unload = |model: &str| {
        let body = format!(r#"{{"model": "{model}"}}"#);
        let (status, body) = http(port, "POST", "/admin/models/unload", &body).unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"unloaded\""), "{body}");
    };
    // What is left after an unload: the base plus allocator slack, far under the model.
    let settled = |what: &str| {
        // Generous: under a loaded CI machine the worker that drops the model may run late.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = rss(pid);
            if now < base + (big_bytes / 5) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: resident {now} bytes, {base} before the big model ({big_bytes} bytes)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    unload("big");
    let after_unload = settled("after unload");
    // Hot swap: load big again, then swap in another file under the same id; once the old
    // version is gone, only one copy is resident.
    ask("big");
    let body = format!(r#"{{"model": "big", "path": "{}"}}"#, big2.display());
    let (status, body) = http(port, "POST", "/admin/models/load", &body).unwrap();
    assert_eq!(status, 200, "{body}");
    ask("big");
    let swapped = rss(pid);
    assert!(
        swapped < base + big_bytes * 14 / 10,
        "one version resident after the swap: {swapped} ({base} + {big_bytes})"
    );
    unload("big");
    let after_swap = settled("after the swap's unload");
    eprintln!(
        "resident MB: base {}, big loaded {}, unloaded {}, swapped {}, unloaded {}",
        base >> 20,
        loaded >> 20,
        after_unload >> 20,
        swapped >> 20,
        after_swap >> 20
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
