//! Connection hygiene (`server.rs`): slow and idle connections are closed and counted, a
//! stalled body gets a 408 in its protocol's shape, and the connection cap holds — while
//! everyone else is served.

use std::time::{Duration, Instant};

use ferrox_sched::SchedulerConfig;
use ferrox_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{synthetic_state, tiny, TestServer};

async fn server(config: ServerConfig) -> TestServer {
    TestServer::start(synthetic_state(&tiny(), SchedulerConfig::default(), config)).await
}

/// Everything the server sends until it closes the connection; panics if it has not closed
/// it within 10 s (a server without the timeout would never close it).
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

async fn metric(s: &TestServer, series: &str) -> String {
    let (_, text) = s.get("/metrics").await;
    text.lines()
        .find(|l| l.starts_with(series))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .to_string()
}

#[tokio::test]
async fn slow_and_idle_connections_are_closed_and_counted_while_others_are_served() {
    // Long enough that a client sending its headers at once is never cut, even with the
    // suite's other tests sharing the cores; short enough to wait for.
    let s = server(ServerConfig {
        header_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    let addr = s.endpoint.authority.clone();
    // Slowloris: headers begun, never finished.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")
        .await
        .unwrap();
    // Connected, silent.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    // Keep-alive: one request answered, then nothing.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // Meanwhile everyone else is served at once.
    let (status, _) = s.get("/health").await;
    assert_eq!(status, 200);
    for (what, stream) in [
        ("slow", &mut slow),
        ("silent", &mut silent),
        ("idle", &mut idle),
    ] {
        let text = read_until_closed(stream).await;
        if what == "idle" {
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        }
    }
    assert_eq!(
        metric(&s, "ferrox_connections_timed_out_total ").await,
        "ferrox_connections_timed_out_total 3"
    );
}

/// A body that stops arriving gets a 408 in the route's protocol shape, and the connection
/// is closed rather than left waiting for the rest.
#[tokio::test]
async fn a_stalled_body_gets_408_in_its_protocols_shape() {
    let s = server(ServerConfig {
        body_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    for (path, error_type) in [
        ("/v1/completions", "invalid_request_error"),
        ("/v1/messages", "timeout_error"),
    ] {
        let mut stream = TcpStream::connect(&s.endpoint.authority).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{\"prompt\": "
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let text = read_until_closed(&mut stream).await;
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        assert!(text.contains("request_timeout"), "{path}: {text}");
        assert!(text.contains(error_type), "{path}: {text}");
    }
    let series = "ferrox_requests_total{route=\"/v1/messages\",status=\"408\"}";
    assert_eq!(metric(&s, series).await, format!("{series} 1"));
}

/// The body timeout is a deadline for the whole body: a client trickling a byte every 100 ms
/// gets its 408 when the deadline passes, not when it stops trickling.
#[tokio::test]
async fn a_trickled_body_gets_408_at_the_deadline() {
    let s = server(ServerConfig {
        body_timeout: Duration::from_millis(600),
        ..ServerConfig::default()
    })
    .await;
    let mut stream = TcpStream::connect(&s.endpoint.authority).await.unwrap();
    stream
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 100\r\n\r\n",
        )
        .await
        .unwrap();
    let (mut read, mut write) = stream.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..60 {
            if write.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let start = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut out))
        .await
        .expect("closed")
        .expect("read");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    // 60 bytes at 100 ms would keep an idle timer from firing for 6 s.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    trickle.abort();
}

/// With the cap at two connections, two idle keep-alive ones hold it, and a third client
/// waits in the backlog until the header timeout closes one of them; then it is served.
#[tokio::test]
async fn past_the_connection_cap_a_new_connection_waits_for_a_free_one() {
    let timeout = Duration::from_secs(2);
    let s = server(ServerConfig {
        header_timeout: timeout,
        max_connections: 2,
        ..ServerConfig::default()
    })
    .await;
    let addr = s.endpoint.authority.clone();
    // Each answered once, so both are certainly accepted; now idle, their timers running.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = c.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(c);
    }
    let waited = Instant::now();
    let (status, _) = tokio::time::timeout(Duration::from_secs(10), s.get("/health"))
        .await
        .expect("served once an idle connection is closed");
    assert_eq!(status, 200);
    assert!(
        waited.elapsed() >= timeout / 2,
        "served after {:?}, before an idle connection timed out",
        waited.elapsed()
    );
}
