//! HTTPS switched on through the binary's own flags (`--tls-cert`, `--tls-key`), end to end: a
//! certificate made here, `ferrox serve` started with it on a random-weight model, a client
//! that trusts only that certificate; plain HTTP on the port gets nothing; a connection that
//! never finishes its handshake is closed at `--header-timeout` and counted, while others are
//! served; SIGTERM stops it with status 0.

use std::io::Read;
use std::net::TcpStream as StdTcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_engine::synthetic::{build_gguf, SyntheticSpec};
use ferrox_engine::Arch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_rustls::TlsConnector;

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One request over TLS, trusting only `root`; the whole reply. `None` if the server is not
/// there yet.
async fn https(port: u16, root: &CertificateDer<'static>, request: &str) -> Option<String> {
    let mut roots = RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("the handshake succeeds");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The server closes after a `Connection: close` reply; some peers skip close_notify.
    let _ = tls.read_to_end(&mut out).await;
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_over_tls_from_its_own_flags() {
    let dir = std::env::temp_dir().join(format!("ferrox-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert_path, key_path, model) = (
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("m.gguf"),
    );
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key_pair.serialize_pem()).unwrap();
    std::fs::write(&model, build_gguf(&SyntheticSpec::tiny(Arch::Gemma3, 3))).unwrap();
    let root = cert.der().clone();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port_arg = port.to_string();
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args([
                "serve",
                "--port",
                &port_arg,
                "--header-timeout",
                "1",
                "--threads",
                "1",
            ])
            .arg("-m")
            .arg(&model)
            .arg("--tls-cert")
            .arg(&cert_path)
            .arg("--tls-key")
            .arg(&key_path)
            .env("RUST_LOG", "warn")
            .env_remove("FERROX_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ferrox starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(reply) = https(port, &root, &get("/health")).await {
            if reply.starts_with("HTTP/1.1 200") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "not healthy over TLS in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A generation, streamed, whole.
    let body = r#"{"prompt": "hello", "max_tokens": 5, "ignore_eos": true, "stream": true}"#;
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let reply = https(port, &root, &request).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains(r#""finish_reason":"length""#) && reply.contains("data: [DONE]"),
        "{reply}"
    );
    // Plain HTTP on the TLS port is served nothing.
    let plain = tokio::task::spawn_blocking(move || {
        let mut s = StdTcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut s, get("/health").as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    })
    .await
    .unwrap();
    assert!(
        !String::from_utf8_lossy(&plain).contains("200 OK"),
        "{plain:?}"
    );
    // A connection that never sends its ClientHello is closed at the header timeout (1 s),
    // and served clients are not held up by it meanwhile.
    let started = Instant::now();
    let silent = tokio::task::spawn_blocking(move || {
        let mut s = StdTcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut byte = [0u8; 1];
        let read = s.read(&mut byte);
        (read.map_err(|e| e.kind()), started.elapsed())
    });
    let reply = https(port, &root, &get("/health")).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let (read, closed_after) = silent.await.unwrap();
    assert_eq!(read, Ok(0), "closed by the server");
    assert!(
        closed_after >= Duration::from_millis(900) && closed_after < Duration::from_secs(10),
        "{closed_after:?}"
    );
    let metrics = https(port, &root, &get("/metrics")).await.unwrap();
    let timed_out = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ferrox_connections_timed_out_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no timeout counter: {metrics}"));
    assert!(timed_out >= 1.0, "{timed_out}");
    // SIGTERM: a graceful stop, status 0.
    let pid = server.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
