//! API keys: with any configured, every route needs one — deny by default.
//!
//! The router (`routes.rs`) puts its key check around every group of routes but one short,
//! explicit public list (`/health`, and `/metrics` with `--metrics-public`; CORS preflights
//! are answered by the CORS layer before any route runs), and the fallbacks for unknown routes
//! check it too, so a route added to any protocol's group is guarded without anyone
//! remembering to guard it. A
//! key travels as `Authorization: Bearer KEY` (OpenAI SDKs, llama.cpp) or `x-api-key: KEY`
//! (Anthropic SDKs); either is accepted on every route. A miss is a 401 in the route's
//! protocol shape, counted in `ferrox_auth_failures_total`.
//!
//! Keys are compared in constant time (in the presented key's content: every configured key is
//! compared whole, without an early exit) and never printed: [`ApiKeys`]' `Debug` shows only
//! how many there are, so a logged config cannot leak one.

use std::sync::Arc;

use axum::http::{header, HeaderMap};

/// The configured keys; empty means no authentication (a loopback server).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiKeys(Arc<Vec<Vec<u8>>>);

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} configured)", self.0.len())
    }
}

impl ApiKeys {
    /// Keys as given (empty strings dropped: they would admit an empty header).
    pub fn new<I: IntoIterator<Item = String>>(keys: I) -> Self {
        Self(Arc::new(
            keys.into_iter()
                .filter(|k| !k.is_empty())
                .map(String::into_bytes)
                .collect(),
        ))
    }

    /// Keys from a file: one a line, surrounding whitespace trimmed; blank lines and lines
    /// starting with `#` skipped.
    pub fn parse_file(text: &str) -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether `presented` is one of the keys. Compares against every key, whole.
    pub fn admits(&self, presented: &[u8]) -> bool {
        self.0
            .iter()
            .fold(false, |found, key| found | constant_time_eq(key, presented))
    }

    /// Whether a request with these headers may pass: no keys configured, or one presented.
    pub fn allow(&self, headers: &HeaderMap) -> bool {
        self.is_empty() || presented_key(headers).is_some_and(|k| self.admits(k))
    }
}

/// Equal contents, in time that depends on the lengths only.
fn constant_time_eq(key: &[u8], presented: &[u8]) -> bool {
    let mut diff = u8::from(key.len() != presented.len());
    for (i, &k) in key.iter().enumerate() {
        let p = presented.get(i).copied().unwrap_or(!k);
        diff |= k ^ p;
    }
    diff == 0
}

/// The key a request presents: `Authorization: Bearer KEY` (the scheme in any case, as
/// RFC 7235 has it), else `x-api-key: KEY`.
fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| {
        let v = v.as_bytes();
        (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")).then(|| &v[7..])
    });
    bearer.or_else(|| headers.get("x-api-key").map(|v| v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_whole_and_only_whole() {
        let keys = ApiKeys::new(["secret".to_string(), "other-key".to_string(), String::new()]);
        assert_eq!(keys.len(), 2);
        assert!(keys.admits(b"secret") && keys.admits(b"other-key"));
        for miss in [&b""[..], b"secre", b"secret2", b"Secret", b"other-ke"] {
            assert!(!keys.admits(miss), "{:?}", String::from_utf8_lossy(miss));
        }
        assert!(!ApiKeys::default().admits(b""));
        assert_eq!(format!("{keys:?}"), "ApiKeys(2 configured)");
    }

    #[test]
    fn either_header_carries_the_key() {
        let keys = ApiKeys::new(["k1".to_string()]);
        let mut h = HeaderMap::new();
        assert!(!keys.allow(&h));
        h.insert(header::AUTHORIZATION, "Bearer k1".parse().unwrap());
        assert!(keys.allow(&h));
        h.insert(header::AUTHORIZATION, "bearer k1".parse().unwrap());
        assert!(keys.allow(&h));
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert!(!keys.allow(&h));
        h.insert(header::AUTHORIZATION, "Basic k1".parse().unwrap());
        assert!(!keys.allow(&h));
        h.remove(header::AUTHORIZATION);
        h.insert("x-api-key", "k1".parse().unwrap());
        assert!(keys.allow(&h));
        assert!(ApiKeys::default().allow(&HeaderMap::new()));
    }

    #[test]
    fn a_key_file_skips_comments_and_blanks() {
        let keys = ApiKeys::parse_file("# team keys\n  alpha \n\n#beta\ngamma\n");
        assert_eq!(keys, ["alpha", "gamma"]);
    }
}
