//! What a request is served with: [`Generator`], the one struct that carries everything a
//! generation on one model needs, and [`AppState`], the router's state, which holds the
//! [`Registry`] of every model (`models/`).
//!
//! A route gets its generator through the [`crate::models::Pinned`] extractor, as an
//! `Arc<Generator>` that the request keeps until it ends. The `Arc` is the pin: a request
//! finishes on the model, template and scheduler it started with, whatever happens to the
//! registry meanwhile (a hot swap, an unload).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrox_engine::template::ChatTemplate;
use ferrox_engine::Model;
use ferrox_sched::{Pooling, Scheduler, SchedulerConfig, SchedulerHandle};

use crate::core::error::ApiError;
use crate::core::grammar::Grammars;
use crate::core::reasoning::{self, Thinking};
use crate::core::tool_syntax::ToolFormat;
use crate::http::auth::ApiKeys;
use crate::http::metrics::Metrics;
use crate::http::params::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES};
use crate::models::{ModelsConfig, Registry};
use crate::openai::store::{self, ResponseStore};
use crate::tls::TlsConfig;

/// The server's own knobs (the scheduler's are in [`SchedulerConfig`]). Built by the
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
    /// Caps of the Responses API's store (`openai/store.rs`): most responses kept, and most
    /// bytes; past either, the least recently used are evicted.
    pub responses_max_entries: usize,
    pub responses_max_bytes: usize,
    /// Host names (without port) requests may name in `Host` besides the loopback ones
    /// (`localhost`, `127.0.0.1`, `::1`); `*` allows any. Protects a local server from DNS
    /// rebinding: a web page whose name resolves to 127.0.0.1 still sends its own name.
    pub allowed_hosts: Vec<String>,
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
    /// Split a thinking model's `<think>` block from its answer (`--reasoning-format`;
    /// `core/reasoning.rs`).
    pub reasoning: bool,
}

impl ServerConfig {
    /// Whether a request's `Host` header value may be served.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            // An IPv6 literal: `[::1]:8080`.
            Some(rest) => rest.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(name, port)| {
                if port.chars().all(|c| c.is_ascii_digit()) {
                    name
                } else {
                    host
                }
            }),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1")
            || self
                .allowed_hosts
                .iter()
                .any(|a| a == "*" || a.eq_ignore_ascii_case(&name))
    }
}

/// How long a connection may take to send a request's headers, by default: hyper's own
/// default (nginx's `client_header_timeout` is 60 s).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once, by default: far above what 16 batched sequences need, and
/// well under a default file-descriptor limit of 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            default_max_tokens: 2048,
            responses_max_entries: store::DEFAULT_MAX_ENTRIES,
            responses_max_bytes: store::DEFAULT_MAX_BYTES,
            allowed_hosts: Vec::new(),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            api_keys: ApiKeys::default(),
            metrics_public: false,
            cors_origins: Vec::new(),
            tls: None,
            pooling: None,
            reasoning: true,
        }
    }
}

/// Everything a generation on one model needs, built once when the model has loaded. Every
/// generating route takes it (through [`crate::models::Pinned`]), and `generate.rs` is the
/// one path that uses it.
pub struct Generator {
    /// The model: its tokenizer renders prompts and logprob pieces, and the scheduler's
    /// worker runs its forward pass.
    pub model: Arc<Model>,
    /// The chat format: the GGUF's template, or the architecture's builtin one.
    pub template: ChatTemplate,
    /// End-of-turn tokens of the chat format that are single control tokens (`<end_of_turn>`
    /// for Gemma); chat generations stop on them. The format's other end-of-turn texts are
    /// in `chat_stop_strings`.
    pub chat_stop_ids: Vec<u32>,
    pub chat_stop_strings: Vec<String>,
    pub scheduler: SchedulerHandle,
    /// Compiles constraints (JSON schemas, grammars) for this model's tokenizer.
    pub grammars: Grammars,
    /// The id clients name and `/v1/models` lists.
    pub model_id: String,
    /// Longest `prompt + max_tokens` the scheduler admits (its `Limits`).
    pub context_tokens: usize,
    pub default_max_tokens: usize,
    /// How a thinking model's answers begin, if its template says it thinks and the split is
    /// on (`core/reasoning.rs`).
    pub thinking: Option<Thinking>,
    /// How the model's family writes tool calls, read off its template.
    pub tool_format: ToolFormat,
    /// How `/v1/embeddings` pools a prompt's hidden states; `None`: it cannot (a reranker
    /// whose GGUF says `rank`, with no `--pooling`).
    pub pooling: Option<Pooling>,
    pub metrics: Arc<Metrics>,
    /// Unix seconds when the model was loaded (`created` in `/v1/models`).
    pub created: u64,
    /// Set when the shutdown grace is over: every stream still running ends with its
    /// protocol's error event and terminator instead of being cut mid-body. One signal for
    /// every version of every model ([`Registry::stop_streams`]).
    stop_streams: tokio::sync::watch::Receiver<bool>,
}

impl Generator {
    /// Starts the scheduler on `model` and reads its chat template.
    pub fn start(
        model: Arc<Model>,
        model_id: String,
        scheduler: SchedulerConfig,
        config: &ServerConfig,
        metrics: Arc<Metrics>,
        stop_streams: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Generator, String> {
        let tokenizer = model.tokenizer();
        let template = ChatTemplate::from_gguf(model.file(), model.config().arch.name(), tokenizer)
            .map_err(|e| format!("chat template: {e}"))?;
        let (mut chat_stop_ids, mut chat_stop_strings) = (Vec::new(), Vec::new());
        for s in template.stop_strings() {
            match tokenizer.token_id(s).filter(|&id| tokenizer.is_control(id)) {
                Some(id) => chat_stop_ids.push(id),
                None => chat_stop_strings.push(s.clone()),
            }
        }
        let scheduler = Scheduler::start(Arc::clone(&model), scheduler)
            .map_err(|e| format!("scheduler: {e}"))?;
        let context_tokens = scheduler.limits().max_context_tokens;
        let pooling = match (config.pooling, model.config().pooling_type) {
            (Some(p), _) => Some(p),
            (None, Some(2)) => Some(Pooling::Cls),
            (None, Some(3)) => Some(Pooling::Last),
            // A reranker's rank pooling is a score, not an embedding.
            (None, Some(4)) => None,
            // Mean (1), and for files that say none (0) or nothing.
            (None, _) => Some(Pooling::Mean),
        };
        let thinking = config
            .reasoning
            .then(|| thinking_of(&model, &template))
            .flatten();
        let source = model
            .file()
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str());
        let tool_format = ToolFormat::detect(source, tokenizer);
        Ok(Generator {
            thinking,
            tool_format,
            grammars: Grammars::new(Arc::clone(&model)),
            model,
            template,
            chat_stop_ids,
            chat_stop_strings,
            scheduler,
            model_id,
            context_tokens,
            default_max_tokens: config.default_max_tokens.max(1),
            pooling,
            metrics,
            created: unix_now(),
            stop_streams,
        })
    }

    /// The text and bytes of token `id` for logprobs (control tokens as their text).
    pub fn token_piece(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.model.tokenizer().token_bytes_special(id).to_vec();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    /// The reasoning split for a chat request: a thinking model's, unless tools or a
    /// grammar shape the answer.
    pub fn thinking_for(&self, tools: bool, grammar: bool) -> Option<Thinking> {
        self.thinking.filter(|_| !tools && !grammar)
    }

    /// What a stream watches to learn that it must end.
    pub fn streams_stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop_streams.clone()
    }
}

/// The router's state: the models, the metrics (which exist from the start, so requests
/// during loading are counted) and the config.
#[derive(Clone)]
pub struct AppState {
    pub models: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub config: Arc<ServerConfig>,
    /// Stored responses of the Responses API; they outlive any one model.
    pub responses: Arc<ResponseStore>,
    /// Set once the default model has loaded at start: `/health` answers 503 until then.
    ready: Arc<AtomicBool>,
    /// Set on the shutdown signal: `/health` answers 503 from then on, so a load balancer
    /// takes the replica out while its in-flight requests finish.
    draining: Arc<AtomicBool>,
}

impl AppState {
    /// A state with no model yet: `/health` answers 503 until [`Self::set_ready`], and so
    /// does every model route until a model is added to [`Self::models`] (the registry
    /// answers 503 while it holds none).
    pub fn new(config: ServerConfig, models: ModelsConfig) -> AppState {
        let config = Arc::new(config);
        let metrics = Arc::new(Metrics::default());
        AppState {
            models: Registry::new(models, Arc::clone(&config), Arc::clone(&metrics)),
            metrics,
            responses: Arc::new(ResponseStore::new(
                config.responses_max_entries,
                config.responses_max_bytes,
            )),
            config,
            ready: Arc::new(AtomicBool::new(false)),
            draining: Arc::new(AtomicBool::new(false)),
        }
    }

    /// [`Self::new`] with the default models config.
    pub fn loading(config: ServerConfig) -> AppState {
        AppState::new(config, ModelsConfig::default())
    }

    /// The default model is up: `/health` answers 200.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The shutdown signal came (`server.rs`): no longer ready for new work.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The default model's version serving now (tests and status lines; requests go
    /// through [`crate::models::Pinned`]).
    pub fn generator(&self) -> Result<Arc<Generator>, ApiError> {
        self.models.get(None).ok_or(ApiError::Loading)
    }
}

/// A template that writes `</think>` belongs to a thinking family; whether its prompt opens
/// the block is seen by rendering a one-message conversation.
fn thinking_of(model: &Model, template: &ChatTemplate) -> Option<Thinking> {
    let source = model.file().get("tokenizer.chat_template")?.as_str()?;
    if !source.contains(reasoning::CLOSE) {
        return None;
    }
    let prompt = template
        .render(
            &[ferrox_engine::template::ChatMessage::new("user", "x")],
            true,
        )
        .ok()?;
    Some(Thinking {
        opened_by_prompt: prompt.trim_end().ends_with(reasoning::OPEN),
    })
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
