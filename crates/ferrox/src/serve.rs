//! `ferrox serve`: the HTTP server, on one model or many (`-m` repeated, `--alias
//! NAME=FILE`, `--models-dir`; `ferrox_server::models` loads them on demand).
//!
//! Flags follow llama-server where they mean the same thing (`-m`, `--host`, `--port`, `-t`,
//! `-c`, `-np`/`--parallel`, `-a`/`--alias`); each also reads a `FERROX_*` environment
//! variable, and the scheduler's knobs use the same `FERROX_CB_*` names as
//! `SchedulerConfig::from_lookup` reads. This file only turns flags into the two config structs
//! (`ServerConfig`, `SchedulerConfig`); everything else is `ferrox_server`.
//!
//! Start-up order: bind the socket first (so `/health` answers 503 while loading and a
//! client can wait on it), then fetch the default model if no model is given, register
//! every model, load the first (the default for requests that name none), then mark the
//! server ready. The others load when a request names them. SIGINT or SIGTERM, at any point, stops
//! accepting, lets in-flight requests finish for `--shutdown-grace` seconds, and exits 0.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrox_sched::{KvBudget, Pooling, SchedulerConfig, SpecKind};
use ferrox_server::{
    ApiKeys, AppState, HostPolicy, KeepAlive, ModelsConfig, Registry, ServerConfig, TlsConfig,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// GGUF model file; repeat to serve several (id: the file name without .gguf). The
    /// first is the default for requests that name no model. Default: the cached default
    /// model, fetched on first use.
    #[arg(short = 'm', long, env = "FERROX_MODEL")]
    pub model: Vec<PathBuf>,
    /// Serve every .gguf file in this directory too (id: the file name without .gguf).
    #[arg(long, env = "FERROX_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Most models loaded at once; loading another unloads the least recently used idle
    /// one [default: no limit].
    #[arg(long, env = "FERROX_MAX_LOADED_MODELS")]
    pub max_loaded_models: Option<usize>,
    /// Most bytes of weights and KV cache loaded at once (each model priced from its GGUF
    /// header before it loads); the least recently used idle models make room
    /// [default: no limit].
    #[arg(long, env = "FERROX_MEMORY_BUDGET")]
    pub memory_budget: Option<u64>,
    /// How long an idle model stays loaded, as Ollama's keep_alive: `5m`, `30s`, `0` (unload
    /// when idle), `-1` (keep) [default: -1]. A request's `keep_alive` overrides it.
    #[arg(long, env = "FERROX_KEEP_ALIVE", allow_hyphen_values = true)]
    pub keep_alive: Option<String>,
    /// Address to listen on. The default is loopback only; use 0.0.0.0 to accept remote
    /// clients under any Host name (then set --api-key).
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
    /// Most prompt tokens per step while no sequence is decoding (the larger of this and
    /// --prefill-chunk applies then; 0 turns it off) [default: 512].
    #[arg(long, env = "FERROX_CB_PREFILL_CHUNK_IDLE")]
    pub prefill_chunk_idle: Option<usize>,
    /// Which prompt gets each step's chunk: `oldest` or `round-robin` [default: oldest].
    #[arg(long, env = "FERROX_CB_PREFILL_ORDER")]
    pub prefill_order: Option<String>,
    /// Turn the automatic prefix cache off (`FERROX_PREFIX_CACHE=0` does the same): every
    /// prompt is computed in full, nothing is shared between requests.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Speculative decoding (llama-server's flag): `ngram` drafts each row's next tokens
    /// from its own prompt and output and verifies them in the same step; `draft` has the
    /// `--model-draft` model guess them; `none` turns it off [default: ngram, or draft with
    /// --model-draft]. It never changes the tokens drawn, only how many steps they take.
    #[arg(long = "spec-type", env = "FERROX_SPEC_TYPE")]
    pub spec_type: Option<String>,
    /// A smaller model of the same vocabulary that drafts for the default (first) model
    /// (llama-server's `-md`); its KV cache is kept beside the target's, in the same budget.
    #[arg(long = "model-draft", env = "FERROX_MODEL_DRAFT")]
    pub model_draft: Option<PathBuf>,
    /// Most drafted tokens a row verifies per step [default: 16].
    #[arg(long = "spec-draft-n-max", env = "FERROX_SPEC_N_MAX")]
    pub spec_draft_n_max: Option<usize>,
    /// Fewer drafted tokens than this are not verified [default: 0: the measured step costs
    /// decide].
    #[arg(long = "spec-draft-n-min", env = "FERROX_SPEC_N_MIN")]
    pub spec_draft_n_min: Option<usize>,
    /// How the KV cache stores keys: `f16`, `q8_0` or `q4_0` (llama-server's flag; q8_0
    /// takes 0.53× the bytes, q4_0 0.28×) [default: f16].
    #[arg(
        long = "cache-type-k",
        visible_alias = "ctk",
        env = "FERROX_CACHE_TYPE_K"
    )]
    pub cache_type_k: Option<String>,
    /// How the KV cache stores values: `f16`, `q8_0` or `q4_0` [default: f16].
    #[arg(
        long = "cache-type-v",
        visible_alias = "ctv",
        env = "FERROX_CACHE_TYPE_V"
    )]
    pub cache_type_v: Option<String>,
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
    /// `NAME=FILE` serves FILE under the id NAME (repeatable); a plain `NAME` renames the
    /// one `-m` model (llama-server's meaning).
    #[arg(short = 'a', long = "alias", env = "FERROX_ALIAS")]
    pub alias: Vec<String>,
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
    /// Answer only these `Host` names besides loopback ones (comma-separated; `*`: any; the
    /// `--host` address is added when it is a specific one); others get 403. Default: on a
    /// loopback address, loopback names only (DNS rebinding protection); on any other
    /// address, every name (the server is meant to be reached over the network).
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
    /// Do not serve the chat page at `/`.
    #[arg(long, env = "FERROX_NO_WEBUI")]
    pub no_webui: bool,
    /// Origins browsers may call from, exactly (`http://localhost:3000`, comma-separated;
    /// `*`: any). Default: no CORS headers.
    #[arg(long, env = "FERROX_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// How /v1/embeddings pools a prompt's hidden states [default: the GGUF's
    /// `pooling_type`, else mean]; `rank` is --reranking.
    #[arg(long, env = "FERROX_POOLING", value_enum)]
    pub pooling: Option<PoolingArg>,
    /// Serve the model as a reranker (/v1/rerank): refused at load unless it has a
    /// classification head (a cross-encoder); /v1/embeddings is off. llama-server's flag.
    #[arg(
        long,
        alias = "rerank",
        env = "FERROX_RERANKING",
        conflicts_with = "pooling"
    )]
    pub reranking: bool,
    /// How a thinking model's `<think>` block is returned: `auto` (or llama-server's
    /// `deepseek`) splits it into the protocols' reasoning fields; `none` leaves it in the
    /// text [default: auto].
    #[arg(long, env = "FERROX_REASONING_FORMAT", value_enum)]
    pub reasoning_format: Option<ReasoningArg>,
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
        if let Some(n) = self.prefill_chunk_idle {
            c.prefill_chunk_idle_tokens = n;
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
        // The switches parse as the scheduler's own reader parses them.
        let switches = SchedulerConfig::from_lookup(|var| match var {
            "FERROX_PREFIX_CACHE" | "FERROX_SPEC_ADAPTIVE" => std::env::var(var).ok(),
            "FERROX_CB_PREFILL_ORDER" => self.prefill_order.clone(),
            "FERROX_SPEC_TYPE" => self.spec_type.clone(),
            "FERROX_CACHE_TYPE_K" => self.cache_type_k.clone(),
            "FERROX_CACHE_TYPE_V" => self.cache_type_v.clone(),
            _ => None,
        })
        .map_err(|e| e.to_string())?;
        c.prefix_cache = switches.prefix_cache && !self.no_prefix_cache;
        c.prefill_order = switches.prefill_order;
        c.speculation.kind = switches.speculation.kind;
        match (&self.model_draft, &self.spec_type) {
            (Some(_), None) => c.speculation.kind = SpecKind::Draft,
            (Some(_), Some(_)) if c.speculation.kind != SpecKind::Draft => {
                return Err(format!(
                    "--model-draft is given, but --spec-type is {:?}: leave it out or say draft",
                    c.speculation.kind
                ))
            }
            (None, _) if c.speculation.kind == SpecKind::Draft => {
                return Err("--spec-type draft needs --model-draft FILE".into())
            }
            _ => {}
        }
        c.speculation.adaptive = switches.speculation.adaptive;
        c.cache_type_k = switches.cache_type_k;
        c.cache_type_v = switches.cache_type_v;
        if let Some(n) = self.spec_draft_n_max {
            c.speculation.n_max = n;
        }
        if let Some(n) = self.spec_draft_n_min {
            c.speculation.n_min = n;
        }
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// The registry's config: the scheduler's, the kernel threads, the residency bounds.
    pub fn models_config(&self) -> Result<ModelsConfig, String> {
        let keep_alive = match &self.keep_alive {
            Some(text) => KeepAlive::parse(text).map_err(|e| format!("--keep-alive: {e}"))?,
            None => KeepAlive::Forever,
        };
        Ok(ModelsConfig {
            scheduler: self.scheduler_config()?,
            threads: self
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            max_loaded: self.max_loaded_models.map(|n| n.max(1)),
            memory_budget: self.memory_budget,
            keep_alive,
            draft: self.model_draft.clone(),
            ..ModelsConfig::default()
        })
    }

    /// The models the flags name, in order, the default first: each `-m` (a plain
    /// `--alias NAME` renames the only one), each `--alias NAME=FILE`, then the `.gguf`
    /// files of `--models-dir` by name. Empty: serve the default model.
    pub fn models(&self) -> Result<Vec<(String, PathBuf)>, String> {
        let (renames, named): (Vec<&String>, Vec<&String>) =
            self.alias.iter().partition(|a| !a.contains('='));
        let others = !named.is_empty() || self.models_dir.is_some();
        if renames.len() > 1 || (!renames.is_empty() && (self.model.len() > 1 || others)) {
            return Err(
                "a plain --alias NAME names the one model served; with several, use \
                        --alias NAME=FILE"
                    .into(),
            );
        }
        let mut out: Vec<(String, PathBuf)> = self
            .model
            .iter()
            .map(|path| {
                let id = renames
                    .first()
                    .map_or_else(|| stem(path), |n| n.to_string());
                (id, path.clone())
            })
            .collect();
        for a in named {
            let (name, file) = a.split_once('=').expect("partitioned on '='");
            if name.is_empty() || file.is_empty() {
                return Err(format!("--alias {a:?}: expected NAME=FILE"));
            }
            out.push((name.to_string(), PathBuf::from(file)));
        }
        if let Some(dir) = &self.models_dir {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| format!("cannot read --models-dir {}: {e}", dir.display()))?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                })
                .collect();
            if files.is_empty() {
                return Err(format!(
                    "--models-dir {}: no .gguf file in it",
                    dir.display()
                ));
            }
            files.sort();
            out.extend(files.into_iter().map(|f| (stem(&f), f)));
        }
        Ok(out)
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
            max_body_bytes: self.max_body_bytes,
            default_max_tokens: self.default_max_tokens,
            responses_max_entries: self.responses_max_entries,
            responses_max_bytes: self.responses_max_bytes,
            // Set once the listener is bound: it depends on the address (`HostPolicy`).
            hosts: HostPolicy::loopback(),
            // Zero would close every connection at once: at least a second.
            header_timeout: Duration::from_secs(self.header_timeout.max(1)),
            body_timeout: Duration::from_secs(self.body_timeout.max(1)),
            max_connections: self.max_connections.max(1),
            api_keys,
            metrics_public: self.metrics_public,
            cors_origins: self.cors_origins.clone(),
            tls,
            reasoning: self.reasoning_format != Some(ReasoningArg::None),
            pooling: self.pooling.and_then(|p| match p {
                PoolingArg::Mean => Some(Pooling::Mean),
                PoolingArg::Cls => Some(Pooling::Cls),
                PoolingArg::Last => Some(Pooling::Last),
                PoolingArg::Rank => None,
            }),
            reranking: self.reranking || self.pooling == Some(PoolingArg::Rank),
            // `/api/pull` reads HF_ENDPOINT and stores into the model cache.
            hub_endpoint: None,
            pull_dir: None,
            webui: !self.no_webui,
        })
    }
}

/// `--reasoning-format`'s values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningArg {
    /// Split the block into reasoning fields.
    Auto,
    /// The same (llama-server's name for it).
    Deepseek,
    /// Leave the block in the answer's text.
    None,
}

/// `--pooling`'s values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingArg {
    /// The mean of every token's hidden state.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
    /// A reranker's score (the classification head on the first token): --reranking.
    Rank,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn serve(args: ServeArgs) -> Result<(), String> {
    let models = args.models_config()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ferrox-http")
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(serve_async(args, models));
    // A model still loading when a signal came keeps a blocking thread; do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve_async(args: ServeArgs, models: ModelsConfig) -> Result<(), String> {
    // Before binding: a bad key file, certificate or model list stops the server here.
    let mut config = args.server_config()?;
    let listed = args.models()?;
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
    config.hosts = HostPolicy::for_listener(local.ip(), &args.host, &args.allowed_hosts);
    // Say exactly what this listener will answer, and to whom.
    let loopback = local.ip().to_canonical().is_loopback();
    let clients = if loopback {
        "clients on this machine"
    } else {
        "every client that can reach this address"
    };
    let keys = if config.api_keys.is_empty() {
        "no API key: every route is open".to_string()
    } else {
        format!(
            "API keys: {} configured, every route but /health{} needs one",
            config.api_keys.len(),
            if config.metrics_public {
                " and /metrics"
            } else {
                ""
            }
        )
    };
    tracing::info!("serving {clients}, {}; {keys}", config.hosts.describe());
    tracing::info!(
        "kernels: {} (FERROX_ISA=scalar|avx2|avxvnni|avx512|amx forces one)",
        ferrox_kernels::Isa::best().name()
    );
    if !loopback && config.api_keys.is_empty() {
        tracing::warn!(
            "listening on {local} without an API key: anyone who can reach it can use it \
             (set --api-key or FERROX_API_KEY)"
        );
    }
    let state = AppState::new(config, models);
    let grace = Duration::from_secs(args.shutdown_grace);
    let mut server = tokio::spawn(ferrox_server::run(
        listener,
        state.clone(),
        ferrox_server::shutdown_signal(),
        grace,
    ));
    let load_default = async {
        let (registry, alias) = (std::sync::Arc::clone(&state.models), args.alias.clone());
        let default = tokio::task::spawn_blocking(move || register(listed, &alias, &registry))
            .await
            .map_err(|e| e.to_string())??;
        // As a request would: a request that came first and started the load is joined.
        state
            .models
            .acquire(Some(&default), None)
            .await
            .map_err(|e| e.to_string())
    };
    tokio::select! {
        loaded = load_default => {
            let served = loaded.map_err(|e| format!("loading failed: {e}"))?;
            tracing::info!(
                model = %served.model_id,
                models = state.models.list().len(),
                context_tokens = served.context_tokens,
                "ready on {scheme}://{local}"
            );
            state.set_ready();
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

/// Registers every model (fetching the default model when none is given) and returns the
/// default's id.
fn register(
    listed: Vec<(String, PathBuf)>,
    alias: &[String],
    registry: &Registry,
) -> Result<String, String> {
    let listed = if listed.is_empty() {
        let path = crate::resolve_model(None)?;
        let id = alias.first().cloned().unwrap_or_else(|| stem(&path));
        vec![(id, path)]
    } else {
        listed
    };
    for (id, path) in &listed {
        // A typo in a path stops the start, not the first request for it.
        std::fs::metadata(path).map_err(|e| format!("model {id:?}: {}: {e}", path.display()))?;
        registry.add(id, path.clone())?;
    }
    Ok(listed[0].0.clone())
}

/// A model's default id: its file name without `.gguf`.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// llama-server spells `--parallel` as `-np` and `--model-draft` as `-md`, which are not
/// valid short flags for clap (one letter only). `main` can pass its arguments through this before parsing so that
/// `ferrox serve -np 4` works: `Cli::parse_from(serve::llama_style_args(std::env::args_os()))`.
pub fn llama_style_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    args.into_iter()
        .map(|a| {
            if a == "-np" {
                OsString::from("--parallel")
            } else if a == "-md" {
                OsString::from("--model-draft")
            } else {
                a
            }
        })
        .collect()
}
