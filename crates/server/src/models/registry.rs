//! The [`Registry`]: every model the server knows, by id, with what is loaded of each.
//!
//! One lock guards the table and is never held across a load or an await: a load runs on
//! the blocking pool and takes the lock only to reserve room and to publish its result.
//!
//! **Busy** means some request holds the model's `Arc<ServedModel>` (its pin, taken under the
//! lock, kept until its last byte is sent), so `Arc::strong_count > 1`. Since pins are only
//! taken under the lock, a count of one seen under the lock cannot change before the lock is
//! released: that is when a model may be unloaded, and the only time. Requests waiting on a
//! load hold the result through the load's channel, so a model is busy from the moment its
//! load finishes for anyone waiting on it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use ferrox_engine::{Model, ModelConfig, ThreadPool};
use ferrox_sched::{Limits, SchedulerConfig, SpecKind};
use tokio::sync::watch;

use super::keep_alive::KeepAlive;
use super::table::{self, Bounds, Entry, Table};
use crate::config::ServerConfig;
use crate::core::error::ApiError;
use crate::core::served::ServedModel;
use crate::http::metrics::Metrics;

/// What the registry loads models with, and what bounds it.
#[derive(Debug, Clone)]
pub struct ModelsConfig {
    /// The scheduler of every model (each gets its own worker and KV pool of this size).
    pub scheduler: SchedulerConfig,
    /// Threads of the one kernel pool every model loaded from a file runs on.
    pub threads: usize,
    /// Most models resident at once (`--max-loaded-models`); `None`: no cap.
    pub max_loaded: Option<usize>,
    /// Most bytes of weights and KV pools resident at once (`--memory-budget`).
    pub memory_budget: Option<u64>,
    /// How long an idle model stays loaded when its request says nothing (`--keep-alive`).
    pub keep_alive: KeepAlive,
    /// How long a load waits for busy models to make room before its requests get a 503
    /// `models_busy` (300 s: a long generation on the busy model should finish first).
    pub room_wait: Duration,
    /// A draft model for the default model's speculation (`--model-draft`, llama-server's
    /// one target and one draft): loaded with it, priced with it, dropped with it. Other
    /// models draft by prompt lookup when the speculation type is `draft`.
    pub draft: Option<PathBuf>,
}

impl ModelsConfig {
    /// What bounds residency, for the table's policy.
    fn bounds(&self) -> Bounds {
        Bounds {
            max_loaded: self.max_loaded,
            memory_budget: self.memory_budget,
        }
    }
}

impl Default for ModelsConfig {
    fn default() -> Self {
        ModelsConfig {
            scheduler: SchedulerConfig::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_loaded: None,
            memory_budget: None,
            keep_alive: KeepAlive::Forever,
            room_wait: ROOM_WAIT,
            draft: None,
        }
    }
}

/// How often idle models are checked against their keep-alive.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// How often a load waiting for a busy model to go idle looks again.
const ROOM_POLL: Duration = Duration::from_millis(50);

/// How long a load waits for busy models to make room before its requests get a 503, by
/// default.
pub const ROOM_WAIT: Duration = Duration::from_secs(300);

/// A load's outcome, as its waiters receive it.
type LoadResult = table::LoadResult<ServedModel>;

/// A model's state in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Loaded,
    Loading,
    Unloaded,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Loaded => "loaded",
            Status::Loading => "loading",
            Status::Unloaded => "unloaded",
            Status::Failed => "failed",
        }
    }
}

/// One model of a listing (`/v1/models`, `ferrox ps`).
pub struct ModelInfo {
    pub id: String,
    pub status: Status,
    /// The version serving now, if one is.
    pub served: Option<Arc<ServedModel>>,
    /// Why the last load failed.
    pub reason: Option<String>,
    /// Weights and KV pool of the version serving, as priced before it loaded.
    pub memory_bytes: u64,
    /// Requests holding the serving version.
    pub busy: bool,
    pub keep_alive: KeepAlive,
    /// When an idle model's keep-alive runs out; `None` while busy or kept for ever.
    pub expires_in: Option<Duration>,
    /// Loads started since the server started.
    pub loads: u64,
    /// The file it loads from (`None`: handed over loaded).
    pub path: Option<PathBuf>,
}

/// What [`Registry::unload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unload {
    /// It was idle and is gone.
    Now,
    /// It is busy: it goes when its last request ends.
    WhenIdle,
    /// It was not loaded.
    NotLoaded,
}

/// Every model the server serves; see the module docs.
pub struct Registry {
    table: Mutex<Table<ServedModel>>,
    config: ModelsConfig,
    server: Arc<ServerConfig>,
    metrics: Arc<Metrics>,
    pool: OnceLock<Arc<ThreadPool>>,
    /// Set when the shutdown grace is over; every served model's streams watch it.
    stop_streams: watch::Sender<bool>,
}

impl Registry {
    /// An empty registry, and the thread that unloads models whose keep-alive ran out (it
    /// ends with the registry).
    pub fn new(
        config: ModelsConfig,
        server: Arc<ServerConfig>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let registry = Arc::new(Registry {
            table: Mutex::new(Table {
                entries: Vec::new(),
                clock: 0,
            }),
            config,
            server,
            metrics,
            pool: OnceLock::new(),
            stop_streams: watch::channel(false).0,
        });
        let weak: Weak<Registry> = Arc::downgrade(&registry);
        let _ = std::thread::Builder::new()
            .name("ferrox-models".into())
            .spawn(move || loop {
                std::thread::sleep(SWEEP_EVERY);
                match weak.upgrade() {
                    Some(r) => r.sweep(Instant::now()),
                    None => return,
                }
            });
        registry
    }

    fn table(&self) -> MutexGuard<'_, Table<ServedModel>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the model in `path` under `id`, unloaded; the first one added is the
    /// default. A second model under one id is refused.
    pub fn add(&self, id: &str, path: PathBuf) -> Result<(), String> {
        let mut t = self.table();
        if t.position(id).is_some() {
            return Err(format!("two models are named {id:?}"));
        }
        t.entries
            .push(Entry::new(id, Some(path), self.config.keep_alive));
        Ok(())
    }

    /// Serves an already loaded model under `id` (it is never unloaded).
    pub fn insert(&self, id: &str, model: Arc<Model>) -> Result<Arc<ServedModel>, String> {
        let g = Arc::new(self.start(model, id)?);
        let mut t = self.table();
        let at = match t.position(id) {
            Some(at) => at,
            None => {
                t.entries.push(Entry::new(id, None, KeepAlive::Forever));
                t.entries.len() - 1
            }
        };
        t.entries[at].serving = Some(Arc::clone(&g));
        Ok(g)
    }

    fn start(&self, model: Arc<Model>, id: &str) -> Result<ServedModel, String> {
        let mut scheduler = self.config.scheduler.clone();
        let draft = match self.draft_path(id) {
            Some(path) => {
                let draft = Model::load_in(&path, Arc::clone(self.pool()))
                    .map_err(|e| format!("the draft model {}: {e}", path.display()))?;
                Some(Arc::new(draft))
            }
            None => {
                if scheduler.speculation.kind == SpecKind::Draft {
                    scheduler.speculation.kind = SpecKind::Ngram;
                }
                None
            }
        };
        ServedModel::start(
            model,
            draft,
            id.to_string(),
            scheduler,
            &self.server.serve_options(),
            Arc::clone(&self.metrics),
            self.stop_streams.subscribe(),
        )
        .map_err(|e| e.to_string())
    }

    /// The model a request names (`None`: the default), loaded if it is not, pinned for the
    /// request. Requests for a model that is loading wait for that one load. `keep_alive`
    /// is the request's (`None`: the server's default).
    pub async fn acquire(
        self: &Arc<Self>,
        name: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<Arc<ServedModel>, ApiError> {
        let rx = {
            let mut t = self.table();
            let at = t.find(name)?;
            t.clock += 1;
            let clock = t.clock;
            let e = &mut t.entries[at];
            e.used = clock;
            e.keep_alive = keep_alive.unwrap_or(self.config.keep_alive);
            e.idle_since = None;
            if let Some(g) = &e.serving {
                return Ok(Arc::clone(g));
            }
            match &e.loading {
                Some(rx) => rx.clone(),
                None => self.start_load(e, None)?,
            }
        };
        wait(rx).await
    }

    /// Loads `id` again (from `path`, or its own file) and switches new requests to it once
    /// it is up; requests already running finish on the version they started with. An id
    /// not known yet is registered with `path`. If the load fails, the version serving
    /// stays. Waits for a load already running first.
    pub async fn load(
        self: &Arc<Self>,
        id: &str,
        path: Option<PathBuf>,
    ) -> Result<Arc<ServedModel>, ApiError> {
        if let Some(p) = &path {
            if !p.is_file() {
                return Err(ApiError::invalid(
                    "path",
                    format!("{} is not a file this server can read", p.display()),
                ));
            }
        }
        let mut new = false;
        loop {
            // Ok: our load; Err: one already running, to wait for before starting ours.
            let rx = {
                let mut t = self.table();
                let at = match (t.position(id), &path) {
                    (Some(at), _) => at,
                    (None, Some(p)) => {
                        let keep = self.config.keep_alive;
                        t.entries.push(Entry::new(id, Some(p.clone()), keep));
                        new = true;
                        t.entries.len() - 1
                    }
                    (None, None) => {
                        return Err(ApiError::ModelNotFound {
                            model: id.to_string(),
                            available: t.ids(),
                        })
                    }
                };
                let e = &mut t.entries[at];
                match &e.loading {
                    Some(rx) => Err(rx.clone()),
                    None => Ok(self.start_load(e, path.clone())?),
                }
            };
            match rx {
                Ok(ours) => {
                    let result = wait(ours).await;
                    if result.is_err() && new {
                        self.forget_if_never_loaded(id);
                    }
                    return result;
                }
                Err(running) => {
                    let _ = wait(running).await;
                }
            }
        }
    }

    /// Drops the entry an admin load registered, when that load failed and nothing else
    /// loaded it since: a typo in a path does not stay listed.
    fn forget_if_never_loaded(&self, id: &str) {
        let mut t = self.table();
        if let Some(at) = t.position(id) {
            let e = &t.entries[at];
            if e.serving.is_none() && e.loading.is_none() {
                t.entries.remove(at);
            }
        }
    }

    /// Unloads `id` now if idle, else as soon as its last request ends (or, if it is
    /// loading, as soon as it is loaded and idle).
    pub fn unload(&self, id: &str) -> Result<Unload, ApiError> {
        let mut t = self.table();
        let at = t.find(Some(id))?;
        let e = &mut t.entries[at];
        if e.path.is_none() {
            return Err(ApiError::invalid(
                "model",
                format!("`{id}` was handed over loaded, with no file to load it again from"),
            ));
        }
        if e.serving.is_none() && e.loading.is_none() {
            return Ok(Unload::NotLoaded);
        }
        if e.evictable() {
            e.unload("asked to");
            return Ok(Unload::Now);
        }
        e.keep_alive = KeepAlive::For(Duration::ZERO);
        Ok(Unload::WhenIdle)
    }

    /// Starts loading entry `e` on the blocking pool; its waiters watch the receiver.
    fn start_load(
        self: &Arc<Self>,
        e: &mut Entry<ServedModel>,
        path: Option<PathBuf>,
    ) -> Result<watch::Receiver<Option<LoadResult>>, ApiError> {
        let Some(path) = path.or_else(|| e.path.clone()) else {
            return Err(ApiError::ModelLoadFailed {
                model: e.id.clone(),
                path: "(none)".into(),
                reason: "the model was handed over loaded and has no file".into(),
            });
        };
        let (tx, rx) = watch::channel(None);
        e.loading = Some(rx.clone());
        e.loads += 1;
        let (this, id) = (Arc::clone(self), e.id.clone());
        tokio::task::spawn_blocking(move || this.run_load(&id, path, tx));
        Ok(rx)
    }

    /// A load from start to end: price, make room, load, publish.
    fn run_load(&self, id: &str, path: PathBuf, tx: watch::Sender<Option<LoadResult>>) {
        let started = Instant::now();
        tracing::info!(model = %id, path = %path.display(), "loading the model");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.load_file(id, &path, &tx)
        }))
        .unwrap_or_else(|_| Err(load_failed(id, &path, "the loader panicked".into())));
        {
            let mut t = self.table();
            if let Some(at) = t.position(id) {
                t.clock += 1;
                let clock = t.clock;
                let e = &mut t.entries[at];
                e.loading = None;
                match &result {
                    Ok((g, bytes)) => {
                        // The old version, if any, drops when its last request ends.
                        e.serving = Some(Arc::clone(g));
                        e.bytes = *bytes;
                        e.path = Some(path.clone());
                        e.failed = None;
                        e.used = clock;
                        e.idle_since = None;
                    }
                    Err(err) => e.failed = Some(err.to_string()),
                }
                e.reserved = 0;
            }
        }
        match &result {
            Ok((g, bytes)) => {
                tracing::info!(model = %id, bytes, secs = started.elapsed().as_secs_f64(), "model loaded");
                warm_grammars(g.grammars.clone());
            }
            Err(e) => tracing::warn!(model = %id, "{e}"),
        }
        tx.send_replace(Some(result.map(|(g, _)| g)));
    }

    fn load_file(
        &self,
        id: &str,
        path: &Path,
        tx: &watch::Sender<Option<LoadResult>>,
    ) -> Result<(Arc<ServedModel>, u64), ApiError> {
        let needed = self
            .price(id, path)
            .map_err(|reason| load_failed(id, path, reason))?;
        let waiting = Instant::now();
        loop {
            let mut t = self.table();
            let Some(at) = t.position(id) else {
                return Err(load_failed(id, path, "the model was removed".into()));
            };
            match t.reserve(at, needed, self.config.bounds()) {
                Ok(true) => break,
                Ok(false) => {}
                Err(()) => {
                    return Err(ApiError::ModelTooLarge {
                        model: id.to_string(),
                        needed_bytes: needed,
                        budget_bytes: self.config.memory_budget.unwrap_or(0),
                    })
                }
            }
            drop(t);
            // Only the entry's own receiver left: every request that wanted it has gone.
            let abandoned = tx.receiver_count() <= 1;
            if abandoned || waiting.elapsed() > self.config.room_wait {
                return Err(ApiError::ModelsBusy {
                    model: id.to_string(),
                    waited_secs: waiting.elapsed().as_secs(),
                });
            }
            std::thread::sleep(ROOM_POLL);
        }
        let model = Model::load_in(path, Arc::clone(self.pool()))
            .map_err(|e| load_failed(id, path, e.to_string()))?;
        tracing::info!(
            model = %id,
            huge_page_copy_bytes = model.copied_bytes(),
            "weights placed"
        );
        let g = self
            .start(Arc::new(model), id)
            .map_err(|reason| load_failed(id, path, reason))?;
        Ok((Arc::new(g), needed))
    }

    /// The one kernel pool every model loaded from a file runs on.
    fn pool(&self) -> &Arc<ThreadPool> {
        self.pool
            .get_or_init(|| Arc::new(ThreadPool::new(self.config.threads.max(1))))
    }

    /// The draft model's file, if `id` is the default model and one is configured.
    fn draft_path(&self, id: &str) -> Option<PathBuf> {
        let draft = self.config.draft.clone()?;
        let t = self.table();
        // With no entry yet, `id` is the first model: the default.
        let default = t.entries.first().is_none_or(|e| e.id == id);
        default.then_some(draft)
    }

    /// What model `id` in `path` takes when resident: its file (the weights are mapped from
    /// it) and its KV pool (none for an encoder), and its draft model's file and KV, from the
    /// GGUF headers alone.
    fn price(&self, id: &str, path: &Path) -> Result<u64, String> {
        let file = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
        let config = ModelConfig::read(path).map_err(|e| e.to_string())?;
        if config.arch.is_encoder() {
            // An encoder never writes its KV pool, so its zeroed pages are never resident.
            return Ok(file);
        }
        let (draft_file, draft_kv) = match self.draft_path(id) {
            Some(d) => {
                let bytes = std::fs::metadata(&d).map_err(|e| e.to_string())?.len();
                let c = ModelConfig::read(&d).map_err(|e| e.to_string())?;
                (bytes, Some(c.kv_shape()))
            }
            None => (0, None),
        };
        let limits = Limits::with_draft(
            &self.config.scheduler,
            config.kv_shape(),
            draft_kv,
            config.context_length,
            config.n_vocab,
        )
        .map_err(|e| e.to_string())?;
        Ok(file + draft_file + limits.pool_bytes())
    }

    /// Unloads every idle model whose keep-alive has run out.
    fn sweep(&self, now: Instant) {
        let mut t = self.table();
        for e in &mut t.entries {
            if !e.evictable() {
                if e.busy() {
                    e.idle_since = None;
                }
                continue;
            }
            let since = *e.idle_since.get_or_insert(now);
            if let KeepAlive::For(d) = e.keep_alive {
                if now.duration_since(since) >= d {
                    e.unload("its keep-alive ran out");
                }
            }
        }
    }

    /// Every model, in the order they were added.
    pub fn list(&self) -> Vec<ModelInfo> {
        let t = self.table();
        let now = Instant::now();
        t.entries.iter().map(|e| info_of(e, now)).collect()
    }

    /// The listing of the model `name` names, resolved as a request's name is (Ollama's
    /// `:latest` included); a 404 naming the models there are.
    pub fn info(&self, name: &str) -> Result<ModelInfo, ApiError> {
        let t = self.table();
        let at = t.find(Some(name))?;
        Ok(info_of(&t.entries[at], Instant::now()))
    }

    /// The versions serving now.
    pub fn loaded(&self) -> Vec<Arc<ServedModel>> {
        self.table()
            .entries
            .iter()
            .filter_map(|e| e.serving.clone())
            .collect()
    }

    /// The version of `id` serving now, without loading it (`None`: the default model).
    pub fn get(&self, id: Option<&str>) -> Option<Arc<ServedModel>> {
        let t = self.table();
        let at = t.find(id).ok()?;
        t.entries[at].serving.clone()
    }

    /// Ends every stream still running, on every version (the shutdown grace is over).
    pub fn stop_streams(&self) {
        self.stop_streams.send_replace(true);
    }
}

fn load_failed(id: &str, path: &Path, reason: String) -> ApiError {
    ApiError::ModelLoadFailed {
        model: id.to_string(),
        path: path.display().to_string(),
        reason,
    }
}

/// The load's result, once it is there.
async fn wait(mut rx: watch::Receiver<Option<LoadResult>>) -> LoadResult {
    match rx.wait_for(Option::is_some).await {
        Ok(done) => done.clone().expect("waited for Some"),
        Err(_) => Err(ApiError::Internal {
            message: "a model load ended without a result".into(),
        }),
    }
}

/// An entry as a listing shows it at `now`.
fn info_of(e: &Entry<ServedModel>, now: Instant) -> ModelInfo {
    // Before the listing takes its own handle, which would make every model busy.
    let busy = e.busy();
    // An idle model the sweep has not seen yet went idle just now.
    let expires_in = match e.keep_alive {
        KeepAlive::For(d) if e.evictable() => {
            let since = e.idle_since.unwrap_or(now);
            Some(d.saturating_sub(now.duration_since(since)))
        }
        _ => None,
    };
    let status = match (&e.serving, &e.loading, &e.failed) {
        (Some(_), _, _) => Status::Loaded,
        (None, Some(_), _) => Status::Loading,
        (None, None, Some(_)) => Status::Failed,
        (None, None, None) => Status::Unloaded,
    };
    ModelInfo {
        id: e.id.clone(),
        status,
        served: e.serving.clone(),
        reason: e.failed.clone(),
        memory_bytes: e.bytes,
        busy,
        keep_alive: e.keep_alive,
        expires_in,
        loads: e.loads,
        path: e.path.clone(),
    }
}

/// Builds the grammar engine's token trie (about a second on a large vocabulary) off the
/// request path, on idle CPU only: at normal priority it took a core from the first
/// request's prefill (turn 1 of a conversation 0.7-1 s slower when it came right after a
/// load). It holds the grammars, not the served model, so it never makes the model busy.
fn warm_grammars(grammars: crate::core::grammar::Grammars) {
    let _ = std::thread::Builder::new()
        .name("ferrox-grammar-warm".into())
        .spawn(move || {
            lowest_priority();
            grammars.warm();
        });
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
