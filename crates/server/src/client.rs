//! A small HTTP/1.1 client for plain-`http` URLs: what `ferrox bench serve` and the server's
//! tests need to talk to an OpenAI-compatible server (ours or llama-server) on this machine,
//! and no more — one connection per request, JSON bodies, and a reader for server-sent
//! events. No TLS: the benchmark and the tests only ever target loopback addresses.
//!
//! Built on hyper's connection API rather than a full client crate, which would bring a TLS
//! stack and a connection pool that loopback benchmarking does not want (a pool would also
//! hide per-request connection behaviour that the disconnect tests rely on).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad URL {url:?}: {reason}")]
    Url { url: String, reason: &'static str },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("building the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the body is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the event stream is not UTF-8")]
    Utf8,
}

/// Where a server is: `http://host:port` plus an optional base path (e.g. `/v1` is *not*
/// included; routes are given in full).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, for connecting and for the `Host` header.
    pub authority: String,
    /// Prefixed to every path; empty or starting with `/` without a trailing one.
    pub base_path: String,
    /// Sent as `Authorization: Bearer KEY` with every request.
    pub api_key: Option<String>,
}

impl Endpoint {
    /// Parses `http://host[:port][/base]` (port 80 by default).
    pub fn parse(url: &str) -> Result<Endpoint, ClientError> {
        let bad = |reason| ClientError::Url {
            url: url.to_string(),
            reason,
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            base_path: path.trim_end_matches('/').to_string(),
            api_key: None,
        })
    }

    pub fn from_addr(addr: std::net::SocketAddr) -> Endpoint {
        Endpoint {
            authority: addr.to_string(),
            base_path: String::new(),
            api_key: None,
        }
    }

    /// Sends one request on a new connection and returns once the response head arrived.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(Bytes, &str)>,
    ) -> Result<Response, ClientError> {
        let stream = TcpStream::connect(&self.authority)
            .await
            .map_err(|source| ClientError::Connect {
                addr: self.authority.clone(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let conn = ConnectionTask(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base_path))
            .header(HOST, &self.authority);
        if let Some(key) = &self.api_key {
            builder = builder.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let bytes = match body {
            Some((bytes, content_type)) => {
                builder = builder.header(CONTENT_TYPE, content_type);
                bytes
            }
            None => Bytes::new(),
        };
        let response = sender.send_request(builder.body(Full::new(bytes))?).await?;
        let (parts, body) = response.into_parts();
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            _conn: conn,
        })
    }

    pub async fn get(&self, path: &str) -> Result<Response, ClientError> {
        self.send(Method::GET, path, None).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Response, ClientError> {
        let bytes = Bytes::from(body.to_string());
        self.send(Method::POST, path, Some((bytes, "application/json")))
            .await
    }
}

/// Drives one connection; aborted when the response (or its event reader) is dropped, so
/// dropping a response closes its socket, as a client that goes away would.
#[derive(Debug)]
struct ConnectionTask(tokio::task::JoinHandle<()>);

impl Drop for ConnectionTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A response whose head has arrived; the body is read on demand. Dropping it closes the
/// connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    body: Incoming,
    _conn: ConnectionTask,
}

impl Response {
    pub async fn bytes(self) -> Result<Bytes, ClientError> {
        Ok(self.body.collect().await?.to_bytes())
    }

    pub async fn text(self) -> Result<String, ClientError> {
        Ok(String::from_utf8_lossy(&self.bytes().await?).into_owned())
    }

    pub async fn json(self) -> Result<Value, ClientError> {
        Ok(serde_json::from_slice(&self.bytes().await?)?)
    }

    /// Reads the body as server-sent events.
    pub fn events(self) -> EventReader {
        EventReader {
            body: self.body,
            buf: Vec::new(),
            _conn: self._conn,
        }
    }

    /// Reads the body as newline-delimited JSON (Ollama's streams), one line at a time.
    pub fn lines(self) -> LineReader {
        LineReader {
            body: self.body,
            buf: Vec::new(),
            _conn: self._conn,
        }
    }
}

/// The lines of a response body (NDJSON), one at a time; empty lines are skipped.
#[derive(Debug)]
pub struct LineReader {
    body: Incoming,
    buf: Vec<u8>,
    _conn: ConnectionTask,
}

impl LineReader {
    /// The next line, without its end; `None` at the end of the body (a last line without a
    /// newline is still a line).
    pub async fn next_line(&mut self) -> Result<Option<String>, ClientError> {
        loop {
            if let Some(at) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=at).collect();
                let line = String::from_utf8(line).map_err(|_| ClientError::Utf8)?;
                match line.trim_end() {
                    "" => continue,
                    text => return Ok(Some(text.to_string())),
                }
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None if self.buf.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                None => {
                    let rest = String::from_utf8(std::mem::take(&mut self.buf))
                        .map_err(|_| ClientError::Utf8)?;
                    return Ok(Some(rest.trim_end().to_string()));
                }
            }
        }
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Server-sent events of a response, one at a time.
#[derive(Debug)]
pub struct EventReader {
    body: Incoming,
    buf: Vec<u8>,
    _conn: ConnectionTask,
}

impl EventReader {
    /// The `data` of the next event (its `data:` lines joined by newlines); comments and
    /// events without data are skipped. `None` at the end of the body.
    pub async fn next_data(&mut self) -> Result<Option<String>, ClientError> {
        Ok(self.next_event().await?.map(|e| e.data))
    }

    /// The next event with data: its `event:` name, if it has one, and its data.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, ClientError> {
        loop {
            if let Some(event) = self.take_event()? {
                if let Some(data) = event_data(&event) {
                    let name = event
                        .lines()
                        .find_map(|l| l.strip_prefix("event:"))
                        .map(|n| n.trim().to_string());
                    return Ok(Some(SseEvent { event: name, data }));
                }
                continue;
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next complete event (up to a blank line) in the buffer, if any.
    fn take_event(&mut self) -> Result<Option<String>, ClientError> {
        let text = std::str::from_utf8(&self.buf).map_err(|_| ClientError::Utf8);
        let end = match text {
            Ok(t) => ["\r\n\r\n", "\n\n", "\r\r"]
                .iter()
                .filter_map(|sep| t.find(sep).map(|i| (i, sep.len())))
                .min(),
            // A multi-byte character may be split across frames; wait for the rest.
            Err(_) => None,
        };
        let Some((i, sep_len)) = end else {
            return Ok(None);
        };
        let event = String::from_utf8(self.buf[..i].to_vec()).map_err(|_| ClientError::Utf8)?;
        self.buf.drain(..i + sep_len);
        Ok(Some(event))
    }
}

fn event_data(event: &str) -> Option<String> {
    let lines: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let e = Endpoint::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.base_path.as_str()),
            ("127.0.0.1:8080", "")
        );
        let e = Endpoint::parse("http://localhost/api/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.base_path.as_str()),
            ("localhost:80", "/api")
        );
        assert!(Endpoint::parse("https://x").is_err());
        assert!(Endpoint::parse("http://").is_err());
    }

    #[test]
    fn event_data_joins_lines_and_skips_comments() {
        assert_eq!(event_data("data: a\ndata: b"), Some("a\nb".into()));
        assert_eq!(event_data(": keep-alive"), None);
        assert_eq!(event_data("data:[DONE]"), Some("[DONE]".into()));
    }
}
