//! `ferrox serve`: the OpenAI-compatible HTTP server on one model.
//!
//! Flags follow llama-server where they mean the same thing (`-m`, `--host`, `--port`, `-t`,
//! `-c`, `-np`/`--parallel`, `-a`/`--alias`); each also reads a `FERROX_*` environment
//! variable, and the scheduler's knobs use the same `FERROX_CB_*` names as
//! `SchedulerConfig::from_env`. This file only turns flags into the two config structs
//! (`ServerConfig`, `SchedulerConfig`); everything else is `ferrox_server`.
//!
//! Start-up order: bind the socket first (so `/health` answers 503 while loading and a
//! client can wait on it), then fetch the default model if needed and load it on the
//! blocking pool, then mark the server ready. SIGINT or SIGTERM, at any point, stops
//! accepting, lets in-flight requests finish for `--shutdown-grace` seconds, and exits 0.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrox_engine::Model;
use ferrox_sched::{KvBudget, Pooling, SchedulerConfig};
use ferrox_server::{ApiKeys, AppState, Generator, ServerConfig, TlsConfig};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// GGUF model file (default: the cached default model, fetched on first use).
    #[arg(short = 'm', long, env = "FERROX_MODEL")]
    pub model: Option<PathBuf>,
    /// Address to listen on. The default is loopback only; use 0.0.0.0 to accept remote
    /// clients (then set --api-key).
    #[arg(long, env = "FERROX_HOST", default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, env = "FERROX_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Threads for the model's kernels (default: all cores).
    #[arg(short = 't', long, env = "FERROX_THREADS")]
    pub threads: Option<usize>,
    /// Longest prompt + max_tokens of one request (default: the model's trained context).
    #[arg(short = 'c', long = "ctx-size", env = "FERROX_CB_MAX_CONTEXT")]
    pub ctx_size: Option<usize>,
    /// Most sequences decoding together (llama-server's -np) [default: 16].
    #[arg(long = "parallel", visible_alias = "np", env = "FERROX_CB_MAX_SEQS")]
    pub parallel: Option<usize>,
    /// Most prompt tokens computed per scheduler step [default: 128].
    #[arg(long, env = "FERROX_CB_PREFILL_CHUNK")]
    pub prefill_chunk: Option<usize>,
    /// Which prompt gets each step's chunk: `oldest` or `round-robin` [default: oldest].
    #[arg(long, env = "FERROX_CB_PREFILL_ORDER")]
    pub prefill_order: Option<String>,
    /// Turn the automatic prefix cache off (`FERROX_PREFIX_CACHE=0` does the same): every
    /// prompt is computed in full, nothing is shared between requests.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Most requests waiting for a slot; more get 503 [default: 256].
    #[arg(long, env = "FERROX_CB_MAX_QUEUE")]
    pub max_queue: Option<usize>,
    /// Token positions per KV cache block [default: 16].
    #[arg(long, env = "FERROX_CB_KV_BLOCK_SIZE")]
    pub kv_block_size: Option<usize>,
    /// KV cache size in blocks (overrides --kv-budget-bytes).
    #[arg(long, env = "FERROX_CB_KV_BLOCKS")]
    pub kv_blocks: Option<usize>,
    /// KV cache size in bytes [default: 1 GiB].
    #[arg(long, env = "FERROX_CB_KV_BUDGET_BYTES")]
    pub kv_budget_bytes: Option<u64>,
    /// The model id clients use and /v1/models lists (default: the file name without .gguf).
    #[arg(short = 'a', long = "alias", env = "FERROX_ALIAS")]
    pub alias: Option<String>,
    /// max_tokens for requests that give none (capped by the context left).
    #[arg(long, env = "FERROX_DEFAULT_MAX_TOKENS", default_value_t = ServerConfig::default().default_max_tokens)]
    pub default_max_tokens: usize,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, env = "FERROX_MAX_BODY_BYTES", default_value_t = ServerConfig::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// Most responses the Responses API keeps for `previous_response_id` (least recently
    /// used evicted first).
    #[arg(long, env = "FERROX_RESPONSES_MAX_ENTRIES", default_value_t = ServerConfig::default().responses_max_entries)]
    pub responses_max_entries: usize,
    /// Host names clients may use besides loopback ones (comma-separated; `*`: any). The
    /// `--host` address is added when it is a specific one. Requests naming another host in
    /// `Host` get 403 (DNS rebinding protection).
    #[arg(long, env = "FERROX_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Most bytes the Responses API's store holds.
    #[arg(long, env = "FERROX_RESPONSES_MAX_BYTES", default_value_t = ServerConfig::default().responses_max_bytes)]
    pub responses_max_bytes: usize,
    /// An API key clients must send (`Authorization: Bearer KEY` or `x-api-key: KEY`);
    /// repeat for several. With any key, every route but /health needs one.
    #[arg(
        long = "api-key",
        env = "FERROX_API_KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// A file of API keys, one a line (`#` starts a comment line).
    #[arg(long, env = "FERROX_API_KEY_FILE")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Serve /metrics without a key even when keys are set (for a Prometheus scraper).
    #[arg(long, env = "FERROX_METRICS_PUBLIC")]
    pub metrics_public: bool,
    /// Origins browsers may call from, exactly (`http://localhost:3000`, comma-separated;
    /// `*`: any). Default: no CORS headers.
    #[arg(long, env = "FERROX_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// How /v1/embeddings pools a prompt's hidden states [default: the GGUF's
    /// `pooling_type`, else mean].
    #[arg(long, env = "FERROX_POOLING", value_enum)]
    pub pooling: Option<PoolingArg>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, env = "FERROX_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (needs --tls-cert).
    #[arg(long, env = "FERROX_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Seconds a connection may take to send a request's headers, from when it opens or
    /// from its previous response; slow or idle connections are closed after it.
    #[arg(long, env = "FERROX_HEADER_TIMEOUT", default_value_t = ServerConfig::default().header_timeout.as_secs())]
    pub header_timeout: u64,
    /// Seconds a whole request body may take to arrive before the request gets 408.
    #[arg(long, env = "FERROX_BODY_TIMEOUT", default_value_t = ServerConfig::default().body_timeout.as_secs())]
    pub body_timeout: u64,
    /// Most connections served at once; more wait until one closes.
    #[arg(long, env = "FERROX_MAX_CONNECTIONS", default_value_t = ServerConfig::default().max_connections)]
    pub max_connections: usize,
    /// Seconds in-flight requests may run on after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, env = "FERROX_SHUTDOWN_GRACE", default_value_t = ferrox_server::DEFAULT_SHUTDOWN_GRACE.as_secs())]
    pub shutdown_grace: u64,
}

impl ServeArgs {
    /// The scheduler's config: its defaults, overridden by every flag given.
    pub fn scheduler_config(&self) -> Result<SchedulerConfig, String> {
        let mut c = SchedulerConfig::default();
        if let Some(n) = self.parallel {
            c.max_seqs = n;
        }
        if let Some(n) = self.prefill_chunk {
            c.prefill_chunk_tokens = n;
        }
        if let Some(n) = self.max_queue {
            c.max_queue = n;
        }
        if let Some(n) = self.kv_block_size {
            c.kv_block_size_tokens = n;
        }
        if let Some(n) = self.kv_budget_bytes {
            c.kv_budget = KvBudget::Bytes(n);
        }
        if let Some(n) = self.kv_blocks {
            c.kv_budget = KvBudget::Blocks(n);
        }
        if self.ctx_size.is_some() {
            c.max_context_tokens = self.ctx_size;
        }
        // The two switches parse as the scheduler's own reader parses them.
        let switches = SchedulerConfig::from_lookup(|var| match var {
            "FERROX_PREFIX_CACHE" => std::env::var(var).ok(),
            "FERROX_CB_PREFILL_ORDER" => self.prefill_order.clone(),
            _ => None,
        })
        .map_err(|e| e.to_string())?;
        c.prefix_cache = switches.prefix_cache && !self.no_prefix_cache;
        c.prefill_order = switches.prefill_order;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    pub fn server_config(&self) -> Result<ServerConfig, String> {
        let mut keys = self.api_keys.clone();
        if let Some(file) = &self.api_key_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read --api-key-file {}: {e}", file.display()))?;
            keys.extend(ApiKeys::parse_file(&text));
        }
        let asked_for_keys = !self.api_keys.is_empty() || self.api_key_file.is_some();
        let api_keys = ApiKeys::new(keys);
        if asked_for_keys && api_keys.is_empty() {
            // An empty variable or a file of comments must not serve without the
            // authentication it was meant to configure.
            return Err(
                "--api-key / --api-key-file / FERROX_API_KEY gave no key: refusing to \
                        start unauthenticated"
                    .into(),
            );
        }
        for origin in &self.cors_origins {
            ferrox_server::check_cors_origin(origin)?;
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsConfig::load(cert, key)?),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        Ok(ServerConfig {
            model_id: self.alias.clone(),
            max_body_bytes: self.max_body_bytes,
            default_max_tokens: self.default_max_tokens,
            responses_max_entries: self.responses_max_entries,
            responses_max_bytes: self.responses_max_bytes,
            allowed_hosts: {
                let mut hosts = self.allowed_hosts.clone();
                let unspecified = matches!(self.host.as_str(), "0.0.0.0" | "::" | "[::]");
                if !unspecified {
                    hosts.push(self.host.trim_matches(|c| c == '[' || c == ']').to_string());
                }
                hosts
            },
            // Zero would close every connection at once: at least a second.
            header_timeout: Duration::from_secs(self.header_timeout.max(1)),
            body_timeout: Duration::from_secs(self.body_timeout.max(1)),
            max_connections: self.max_connections.max(1),
            api_keys,
            metrics_public: self.metrics_public,
            cors_origins: self.cors_origins.clone(),
            tls,
            pooling: self.pooling.map(|p| match p {
                PoolingArg::Mean => Pooling::Mean,
                PoolingArg::Cls => Pooling::Cls,
                PoolingArg::Last => Pooling::Last,
            }),
        })
    }
}

/// Gives the calling thread the lowest scheduling priority (nice 19; on Linux nice is per
/// thread), so that its work runs on CPU nothing else wants.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours; a
    // failure only leaves the priority as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// `--pooling`'s values.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum PoolingArg {
    /// The mean of every token's hidden state.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn serve(args: ServeArgs) -> Result<(), String> {
    let scheduler_config = args.scheduler_config()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ferrox-http")
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(serve_async(args, scheduler_config));
    // A model still loading when a signal came keeps a blocking thread; do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve_async(args: ServeArgs, scheduler_config: SchedulerConfig) -> Result<(), String> {
    // Before binding: a bad key file or certificate stops the server here.
    let config = args.server_config()?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        "listening on {scheme}://{local} (loading the model; /health is 503 until ready)"
    );
    let loopback = local.ip().is_loopback();
    if !loopback && config.api_keys.is_empty() {
        tracing::warn!(
            "listening on {local} without an API key: anyone who can reach it can use it \
             (set --api-key or FERROX_API_KEY)"
        );
    }
    if !config.api_keys.is_empty() {
        tracing::info!("API keys: {} configured", config.api_keys.len());
    }
    let state = AppState::loading(config);
    let grace = Duration::from_secs(args.shutdown_grace);
    let mut server = tokio::spawn(ferrox_server::run(
        listener,
        state.clone(),
        ferrox_server::shutdown_signal(),
        grace,
    ));
    let load = {
        let state = state.clone();
        let args = args.clone();
        tokio::task::spawn_blocking(move || load(&args, scheduler_config, &state))
    };
    tokio::select! {
        loaded = load => {
            let generator = loaded.map_err(|e| format!("loading failed: {e}"))??;
            tracing::info!(
                model = %generator.model_id,
                context_tokens = generator.context_tokens,
                "ready on {scheme}://{local}"
            );
            let generator = Arc::new(generator);
            state.set_ready_arc(Arc::clone(&generator));
            // The grammar engine's token trie, built off the request path, on idle CPU only:
            // at normal priority it took a core from the first request's prefill (turn 1 of a
            // conversation 0.7-1 s slower when it arrived right after start).
            std::thread::Builder::new()
                .name("ferrox-grammar-warm".into())
                .spawn(move || {
                    lowest_priority();
                    generator.grammars.warm()
                })
                .map_err(|e| format!("cannot start a thread: {e}"))?;
        }
        finished = &mut server => {
            tracing::info!("stopped while the model was loading");
            return finished.map_err(|e| e.to_string())?.map_err(|e| e.to_string());
        }
    }
    server
        .await
        .map_err(|e| format!("the server task failed: {e}"))?
        .map_err(|e| format!("the server failed: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

/// Fetches (if needed) and loads the model, and starts its scheduler.
fn load(
    args: &ServeArgs,
    scheduler: SchedulerConfig,
    state: &AppState,
) -> Result<Generator, String> {
    let path = crate::resolve_model(args.model.clone())?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let model = Model::load(&path, threads).map_err(|e| format!("{}: {e}", path.display()))?;
    Generator::start(
        Arc::new(model),
        &path,
        scheduler,
        &state.config,
        Arc::clone(&state.metrics),
    )
}

/// llama-server spells `--parallel` as `-np`, which is not a valid short flag for clap (one
/// letter only). `main` can pass its arguments through this before parsing so that
/// `ferrox serve -np 4` works: `Cli::parse_from(serve::llama_style_args(std::env::args_os()))`.
pub fn llama_style_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    args.into_iter()
        .map(|a| {
            if a == "-np" {
                OsString::from("--parallel")
            } else {
                a
            }
        })
        .collect()
}
