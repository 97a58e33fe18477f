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
use std::time::{SystemTime, UNIX_EPOCH};

use ferrox_engine::template::ChatTemplate;
use ferrox_engine::Model;
use ferrox_sched::{Pooling, Scheduler, SchedulerConfig, SchedulerHandle};

use crate::config::ServerConfig;
use crate::core::error::ApiError;
use crate::core::grammar::Grammars;
use crate::core::reasoning::{self, Thinking};
use crate::core::tool_syntax::ToolFormat;
use crate::http::in_flight::InFlight;
use crate::http::metrics::Metrics;
use crate::models::{ModelsConfig, Registry};
use crate::openai::store::ResponseStore;

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
    /// Whole requests being answered: what a graceful shutdown waits for.
    pub in_flight: Arc<InFlight>,
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
            in_flight: Arc::default(),
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
