//! The server's own configuration: [`ServerConfig`] (built by the binary from flags and
//! environment, by tests directly) and the [`HostPolicy`] that decides which `Host` names
//! it answers.

use std::net::IpAddr;
use std::time::Duration;

use ferrox_sched::Pooling;

use crate::core::served::ServeOptions;
use crate::http::auth::ApiKeys;
use crate::http::params::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES};
use crate::tls::TlsConfig;

/// The server's own knobs (the scheduler's are in [`ferrox_sched::SchedulerConfig`]). Built by the
/// binary from flags and environment, by tests directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Largest request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none, capped by the context left after the prompt.
    /// KV grows as a request generates, so this reserves nothing; it only bounds a runaway
    /// generation that never emits an end-of-turn token (2048 unless the client asks for
    /// more).
    pub default_max_tokens: usize,
    /// Caps of the Responses API's store (`openai/responses/store.rs`): most responses kept, and most
    /// bytes; past either, the least recently used are evicted.
    pub responses_max_entries: usize,
    pub responses_max_bytes: usize,
    /// Which `Host` values requests may carry ([`HostPolicy`]; the binary picks it from the
    /// address it listens on and `--allowed-hosts`).
    pub hosts: HostPolicy,
    /// How long a connection may take to send a request's headers, counted from when it
    /// opens or from the end of its previous response: a slowloris connection, or a
    /// keep-alive one left idle, is closed after it (`server.rs`).
    pub header_timeout: Duration,
    /// How long a whole request body may take to arrive: then 408, and the connection is
    /// closed.
    pub body_timeout: Duration,
    /// Most connections served at once; more wait in the listener's backlog until one
    /// closes, so a flood of idle sockets cannot take every file descriptor.
    pub max_connections: usize,
    /// With any key, every route but `/health` needs one (`http/auth.rs`).
    pub api_keys: ApiKeys,
    /// Serve `/metrics` without a key even when keys are configured (for a scraper).
    pub metrics_public: bool,
    /// Origins a browser may call from (exact `scheme://host[:port]` matches; `*`: any);
    /// empty: no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// Serve HTTPS with this certificate (`--tls-cert`, `--tls-key`); `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    /// How embeddings pool (`--pooling`); `None`: as the GGUF says (`pooling_type`), else
    /// the mean.
    pub pooling: Option<Pooling>,
    /// Serve the model as a reranker (`--reranking`, `--pooling rank`: llama-server's
    /// names): a model without a classification head is refused at load, and
    /// `/v1/embeddings` is off (a reranker's pooled row is a score).
    pub reranking: bool,
    /// Split a thinking model's `<think>` block from its answer (`--reasoning-format`;
    /// `core/reasoning.rs`).
    pub reasoning: bool,
    /// Where Ollama's `/api/pull` fetches models by name from: `None` is the hub
    /// `HF_ENDPOINT` names, else Hugging Face's (`ferrox_hub`).
    pub hub_endpoint: Option<String>,
    /// Where pulled models go: `None` is the model cache (`~/.cache/ferrox/models`).
    pub pull_dir: Option<std::path::PathBuf>,
    /// Serve the chat page at `/` (`--no-webui` turns it off).
    pub webui: bool,
}

/// The Responses API store's default caps (`openai/responses/store.rs`): 1,024 responses, 64 MiB.
pub const DEFAULT_RESPONSES_MAX_ENTRIES: usize = 1024;
pub const DEFAULT_RESPONSES_MAX_BYTES: usize = 64 << 20;

/// How long a connection may take to send a request's headers, by default: hyper's own
/// default (nginx's `client_header_timeout` is 60 s).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once, by default: far above what 16 batched sequences need, and
/// well under a default file-descriptor limit of 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

impl ServerConfig {
    /// What a served model is built with (`core/served.rs`).
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions {
            default_max_tokens: self.default_max_tokens.max(1),
            pooling: self.pooling,
            reranking: self.reranking,
            reasoning: self.reasoning,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            default_max_tokens: 2048,
            responses_max_entries: DEFAULT_RESPONSES_MAX_ENTRIES,
            responses_max_bytes: DEFAULT_RESPONSES_MAX_BYTES,
            hosts: HostPolicy::loopback(),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            api_keys: ApiKeys::default(),
            metrics_public: false,
            cors_origins: Vec::new(),
            tls: None,
            pooling: None,
            reranking: false,
            reasoning: true,
            hub_endpoint: None,
            pull_dir: None,
            webui: true,
        }
    }
}

/// Which `Host` header values the server answers; others get 403 `host_not_allowed`.
///
/// The check is a defence against DNS rebinding, and that attack only matters for a server
/// that nothing but loopback clients should reach: a web page whose name an attacker points
/// at 127.0.0.1 still sends its own name in `Host`, so a loopback server that answers only
/// loopback names cannot be driven from a browser. A server listening on a routable address
/// is reached under whatever name or address its clients use — a pod IP in kubelet's
/// probes, a Service name through a gateway, a LAN address — and checking `Host` there
/// refuses exactly those clients while protecting nothing the network does not already
/// expose (its protection is an API key). Ollama draws the line in the same place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPolicy {
    /// Every `Host` (a server meant to be reached over the network).
    Any,
    /// The loopback names (`localhost`, `127.0.0.1`, `::1`) and these names, without port.
    Only(Vec<String>),
}

impl HostPolicy {
    /// Loopback names only: the default for a server on loopback.
    pub fn loopback() -> HostPolicy {
        HostPolicy::Only(Vec::new())
    }

    /// The policy of a server listening on `bound` (the address `--host` resolved to)
    /// with `--allowed-hosts` `listed`:
    /// - names listed: loopback names, those names (`*`: any) and `host` (what `--host`
    ///   said, when it names one address rather than all of them);
    /// - none listed, on loopback: loopback names only;
    /// - none listed, on any other address (`0.0.0.0`, `::`, a routable one): any.
    pub fn for_listener(bound: IpAddr, host: &str, listed: &[String]) -> HostPolicy {
        if listed.iter().any(|h| h == "*") {
            return HostPolicy::Any;
        }
        if listed.is_empty() {
            // `::ffff:127.0.0.1` is loopback too.
            return if bound.to_canonical().is_loopback() {
                HostPolicy::loopback()
            } else {
                HostPolicy::Any
            };
        }
        // Names as `allows` compares them: no port, no brackets, lower case.
        let mut names: Vec<String> = listed.iter().map(|h| host_name(h)).collect();
        if !bound.is_unspecified() {
            names.push(host_name(host));
            names.push(bound.to_string());
        }
        HostPolicy::Only(names)
    }

    /// Whether a request's `Host` header value may be served.
    pub fn allows(&self, host: &str) -> bool {
        let names = match self {
            HostPolicy::Any => return true,
            HostPolicy::Only(names) => names,
        };
        let name = host_name(host);
        matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1")
            || names.iter().any(|a| a.eq_ignore_ascii_case(&name))
    }

    /// What the server answers, in words, for the start-up log.
    pub fn describe(&self) -> String {
        match self {
            HostPolicy::Any => "requests under any Host name or address".into(),
            HostPolicy::Only(names) if names.is_empty() => {
                "requests whose Host is a loopback name (localhost, 127.0.0.1, ::1); any other \
                 Host gets 403 (list names with --allowed-hosts)"
                    .into()
            }
            HostPolicy::Only(names) => format!(
                "requests whose Host is a loopback name or one of {}; any other Host gets 403",
                names.join(", ")
            ),
        }
    }
}

/// The name in a `Host` value (or an `--allowed-hosts` entry): without its port, an IPv6
/// literal without brackets, a trailing dot dropped, lower case.
fn host_name(host: &str) -> String {
    let name = match host.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            // `a:b:c` (a bare IPv6 literal) has no port.
            if !name.contains(':') && port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_loopback_server_answers_loopback_names_only() {
        for bound in ["127.0.0.1", "::1"] {
            let policy = HostPolicy::for_listener(ip(bound), bound, &[]);
            assert_eq!(policy, HostPolicy::loopback(), "{bound}");
            assert!(policy.allows("localhost:8080"));
            assert!(!policy.allows("10.0.0.5:8080"), "{bound}");
            assert!(!policy.allows("evil.example"), "{bound}");
        }
    }

    #[test]
    fn a_server_on_the_network_answers_every_name() {
        // What kubelet and a gateway send to a pod: its IP, a Service name.
        for bound in ["0.0.0.0", "::", "10.0.0.5"] {
            let policy = HostPolicy::for_listener(ip(bound), bound, &[]);
            assert_eq!(policy, HostPolicy::Any, "{bound}");
            for host in [
                "10.0.0.5:8080",
                "ferrox.default.svc.cluster.local:8080",
                "[fd00::1]:8080",
            ] {
                assert!(policy.allows(host), "{bound} {host}");
            }
        }
    }

    #[test]
    fn listed_names_restrict_any_address() {
        let listed = ["ferrox.lan".to_string()];
        let all = HostPolicy::for_listener(ip("0.0.0.0"), "0.0.0.0", &listed);
        assert_eq!(all, HostPolicy::Only(vec!["ferrox.lan".into()]));
        assert!(all.allows("ferrox.lan:8080") && all.allows("127.0.0.1"));
        assert!(!all.allows("10.0.0.5:8080"));
        // A specific address is added, as the name `--host` gave and as the address.
        let one = HostPolicy::for_listener(ip("10.0.0.5"), "10.0.0.5", &listed);
        assert!(one.allows("10.0.0.5:8080") && !one.allows("10.0.0.6:8080"));
        let v6 = HostPolicy::for_listener(ip("fd00::1"), "[fd00::1]", &listed);
        assert!(v6.allows("[fd00::1]:8080"));
        // Entries are names: a port or brackets in one are dropped, case ignored.
        let odd = ["Ferrox.LAN:8080".to_string(), "[fd00::2]".to_string()];
        let odd = HostPolicy::for_listener(ip("0.0.0.0"), "0.0.0.0", &odd);
        assert!(odd.allows("ferrox.lan") && odd.allows("[fd00::2]:9") && !odd.allows("x"));
        // An IPv4-mapped loopback listener is a loopback one.
        let mapped = HostPolicy::for_listener(ip("::ffff:127.0.0.1"), "::ffff:127.0.0.1", &[]);
        assert_eq!(mapped, HostPolicy::loopback());
        // `*` among them is any.
        let star = ["ferrox.lan".to_string(), "*".to_string()];
        assert_eq!(
            HostPolicy::for_listener(ip("127.0.0.1"), "127.0.0.1", &star),
            HostPolicy::Any
        );
    }
}
