//! HTTPS (`tls.rs`): a certificate made here, a round trip and an SSE stream over TLS, and a
//! key that does not fit its certificate refused at load.

use std::sync::Arc;

use ferrox_sched::SchedulerConfig;
use ferrox_server::{ServerConfig, TlsConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::common::{synthetic_state, tiny, TestServer};

/// A self-signed certificate for `localhost` and 127.0.0.1, PEM: (certificate, key, DER).
fn certificate() -> (String, String, CertificateDer<'static>) {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    (cert.pem(), key_pair.serialize_pem(), cert.der().clone())
}

/// Sends `request` over TLS (trusting only `root`) and reads the reply to the end.
async fn https(addr: &str, root: CertificateDer<'static>, request: &str) -> String {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("the handshake succeeds");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The server closes after a `Connection: close` reply; some peers skip close_notify.
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn requests_and_streams_work_over_tls() {
    let (cert, key, der) = certificate();
    let tls = TlsConfig::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let config = ServerConfig {
        tls: Some(tls),
        ..ServerConfig::default()
    };
    let s = TestServer::start(synthetic_state(&tiny(), SchedulerConfig::default(), config)).await;
    let addr = s.endpoint.authority.clone();
    let reply = https(
        &addr,
        der.clone(),
        "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let body = r#"{"prompt": "hello", "max_tokens": 5, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}}"#;
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let reply = https(&addr, der, &request).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // Every event arrived: the finish, the usage of all five tokens, the terminator.
    assert!(reply.contains(r#""finish_reason":"length""#), "{reply}");
    assert!(reply.contains(r#""completion_tokens":5"#), "{reply}");
    assert!(reply.contains("data: [DONE]"), "{reply}");
    // Plain HTTP on the TLS port gets nothing served.
    let plain = s.endpoint.get("/health").await;
    assert!(plain.is_err() || plain.unwrap().status != 200);
}

#[test]
fn a_key_that_does_not_fit_its_certificate_is_refused() {
    let (cert, _, _) = certificate();
    let (_, other_key, _) = certificate();
    let e = TlsConfig::from_pem(cert.as_bytes(), other_key.as_bytes()).unwrap_err();
    assert!(e.contains("does not fit"), "{e}");
    let e = TlsConfig::from_pem(b"not pem", other_key.as_bytes()).unwrap_err();
    assert!(e.contains("no certificate"), "{e}");
    let e = TlsConfig::from_pem(cert.as_bytes(), b"").unwrap_err();
    assert!(e.contains("no private key"), "{e}");
}
