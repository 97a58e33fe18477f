//! The served model: [`ServedModel`], one loaded version of a model with everything serving
//! it takes, and the few server options it is built with ([`ServeOptions`]).
//!
//! A request holds its `Arc<ServedModel>` until it ends (the registry hands it out pinned,
//! `models/pinned.rs`): the `Arc` is the pin, so a request finishes on the model, template
//! and scheduler it started with, whatever happens to the registry meanwhile (a hot swap, an
//! unload).

use std::sync::Arc;

use ferrox_engine::template::ChatTemplate;
use ferrox_engine::Model;
use ferrox_sched::{Pooling, Scheduler, SchedulerConfig, SchedulerHandle};

use crate::core::grammar::Grammars;
use crate::core::ids::unix_now;
use crate::core::reasoning::{self, Thinking};
use crate::core::tool_syntax::ToolFormat;
use crate::http::metrics::Metrics;

/// The server's options a served model is built with (from `ServerConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// `max_tokens` for requests that give none (capped by the context left).
    pub default_max_tokens: usize,
    /// How embeddings pool (`--pooling`); `None`: as the GGUF says, else the mean.
    pub pooling: Option<Pooling>,
    /// The model must be a reranker (`--reranking`); embeddings are off.
    pub reranking: bool,
    /// Split a thinking model's `<think>` block from its answer (`--reasoning-format`).
    pub reasoning: bool,
}

/// Why a model that loaded cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// Its chat template does not compile.
    #[error("chat template: {0}")]
    Template(String),
    /// Its scheduler refused the configuration (a KV pool too small for one block, ...).
    #[error("scheduler: {0}")]
    Scheduler(String),
    /// `--reranking` on a model that cannot score pairs.
    #[error(
        "--reranking: `{0}` has no classification head (`cls.output`), so it cannot score \
         (query, document) pairs; serve a cross-encoder GGUF, or drop --reranking"
    )]
    NotAReranker(String),
}

/// One loaded version of a model, with what serving it takes: its chat template and stop
/// tokens, its scheduler, its grammar compiler, how it thinks and calls tools. Built once
/// when the model has loaded; every generating route takes it (through
/// `models::Pinned`), and `generate.rs` is the one path that uses it.
pub struct ServedModel {
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
    /// every version of every model (`Registry::stop_streams`).
    stop_streams: tokio::sync::watch::Receiver<bool>,
}

impl ServedModel {
    /// Starts the scheduler on `model` (with `draft` proposing its drafts, if given) and
    /// reads its chat template.
    pub fn start(
        model: Arc<Model>,
        draft: Option<Arc<Model>>,
        model_id: String,
        scheduler: SchedulerConfig,
        config: &ServeOptions,
        metrics: Arc<Metrics>,
        stop_streams: tokio::sync::watch::Receiver<bool>,
    ) -> Result<ServedModel, StartError> {
        if config.reranking && !model.has_classifier() {
            return Err(StartError::NotAReranker(model_id));
        }
        let tokenizer = model.tokenizer();
        let template = ChatTemplate::from_gguf(model.file(), model.config().arch.name(), tokenizer)
            .map_err(|e| StartError::Template(e.to_string()))?;
        let (mut chat_stop_ids, mut chat_stop_strings) = (Vec::new(), Vec::new());
        for s in template.stop_strings() {
            match tokenizer.token_id(s).filter(|&id| tokenizer.is_control(id)) {
                Some(id) => chat_stop_ids.push(id),
                None => chat_stop_strings.push(s.clone()),
            }
        }
        let scheduler = Scheduler::start_with_draft(Arc::clone(&model), draft, scheduler)
            .map_err(|e| StartError::Scheduler(e.to_string()))?;
        let context_tokens = scheduler.limits().max_context_tokens;
        let pooling = match (config.pooling, model.config().pooling_type) {
            _ if config.reranking => None,
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
        let tool_format = match (ToolFormat::detect(source, tokenizer), thinking) {
            (ToolFormat::Harmony(marks), Some(t)) if t.opened_by_prompt => {
                ToolFormat::Harmony(marks.in_analysis())
            }
            (format, _) => format,
        };
        Ok(ServedModel {
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
            default_max_tokens: config.default_max_tokens,
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
    /// grammar shape the answer. Harmony's grammars leave its reasoning free and hold calls
    /// and a JSON answer in their own messages (`core/harmony.rs`), so a gpt-oss answer
    /// with tools or a schema is split too.
    pub fn thinking_for(&self, tools: bool, grammar: bool) -> Option<Thinking> {
        let harmony = matches!(self.tool_format, ToolFormat::Harmony(_));
        self.thinking
            .filter(|t| match harmony && (tools || grammar) {
                true => t.tags == reasoning::HARMONY,
                false => !tools && !grammar,
            })
    }

    /// What a stream watches to learn that it must end.
    pub fn streams_stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop_streams.clone()
    }
}

/// A template that writes `</think>` belongs to a thinking family, one that writes harmony's
/// analysis channel (gpt-oss) too; whether its prompt opens the block is seen by rendering a
/// one-message conversation.
fn thinking_of(model: &Model, template: &ChatTemplate) -> Option<Thinking> {
    let source = model.file().get("tokenizer.chat_template")?.as_str()?;
    let tags = reasoning::tags_of_template(source)?;
    let prompt = template
        .render(
            &[ferrox_engine::template::ChatMessage::new("user", "x")],
            true,
        )
        .ok()?;
    Some(Thinking {
        opened_by_prompt: prompt.trim_end().ends_with(tags.open),
        tags,
    })
}
