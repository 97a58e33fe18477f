//! The one generation path: a protocol-free request in, a [`Generation`] (a stream of
//! events, one sub-stream per choice) out. Every adapter calls [`generate`]; each then only
//! encodes what comes out, collected ([`Generation::collect`]) or streamed
//! (`core/stream.rs`).
//!
//! The path, in order (the model the request named is already resolved and pinned: the
//! registry did it, `models::Pinned`, with its 404 for an unknown name):
//! 1. an encoder-only model is refused (it embeds, it cannot generate);
//! 2. a constraint (`options.grammar`, or the call grammar of `options.tools` in the
//!    model's tool format, which holds `options.grammar`'s answer when both are asked for)
//!    is compiled, failing closed (a 400 naming the parameter) before anything is queued;
//! 3. the prompt becomes token ids — a chat prepared for the model's tool format
//!    (`core/conversation.rs`) and rendered through the model's template, tokenized with
//!    special tokens parsed and BOS as the model's metadata says (never twice, even when the
//!    template writes BOS itself); raw text tokenized the same way; token ids taken as given
//!    (llama.cpp's mixed prompts: each text piece tokenized without BOS, ids as given). Rendering and tokenizing run on the blocking pool: a long prompt
//!    costs milliseconds of CPU, which must not stall the async runtime;
//! 4. one [`GenerationRequest`] per choice (`n`), each with its own seed (`seed + i`, or a
//!    random one), the choices of one request in one group (they share at most half the
//!    batch), submitted to the scheduler; a refusal of any choice drops those already
//!    submitted, which cancels them, and names the output limit as the client's protocol
//!    does;
//! 5. the choices' event streams are merged, and the latency metrics are observed as events
//!    pass through, so every protocol feeds them the same way.
//!
//! Cancellation is ownership: a [`Generation`] owns the scheduler's `RequestStream`s, and
//! dropping a stream cancels its request at the worker's next tick. A client that disconnects
//! drops the response body (streaming) or the handler's future (non-streaming), which drops
//! the `Generation` — nothing else needs to notice.

use std::sync::Arc;
use std::time::Instant;

use ferrox_engine::template::{ChatMessage, TemplateError};
use ferrox_sched::{
    Completion, Constraint, Event, FinishReason, GenerationRequest, StopConfig, StopMatch,
    TokenEvent,
};
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};

use crate::core::conversation::prepare;
use crate::core::error::ApiError;
use crate::core::harmony;
use crate::core::request::{GenerationOptions, Input, Prompt, PromptPiece};
use crate::core::served::ServedModel;
use crate::core::tool_syntax::ToolFormat;
use crate::core::tools::Tools;

/// An event of one choice.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceEvent {
    pub index: usize,
    pub event: Event,
}

/// What one choice produced, collected (non-streaming replies).
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceOutput {
    pub tokens: Vec<TokenEvent>,
    pub completion: Completion,
    pub finish: Finish,
}

/// Why a choice that succeeded ended, in the terms every protocol distinguishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn: an end-of-generation token, or the chat format's
    /// end-of-turn text.
    EndOfTurn,
    /// One of the client's stop strings, which is not part of the text.
    StopSequence(String),
    /// The token budget (`max_tokens` or its protocol's name for it) ran out.
    Length,
}

/// Token counts of a whole request: the prompt once, the completions of every choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache: with several choices, the fewest any
    /// choice got (each choice attaches the prompt's shared blocks for itself).
    pub cached_tokens: usize,
    /// Drafted tokens speculative decoding verified, over every choice, and how many were
    /// accepted.
    pub draft_tokens: usize,
    pub draft_accepted: usize,
}

/// Builds the prompt, submits every choice: the whole path from a
/// validated request to a stream of events.
pub async fn generate(
    served: Arc<ServedModel>,
    input: Input,
    options: &GenerationOptions,
) -> Result<Generation, ApiError> {
    let arch = served.model.config().arch;
    if arch.is_encoder() {
        // One check for every generating route: they all come through here.
        return Err(ApiError::invalid(
            "model",
            format!(
                "`{}` is an encoder-only model ({}): it embeds (/v1/embeddings) and cannot \
                 generate",
                served.model_id,
                arch.name()
            ),
        ));
    }
    let chat = matches!(input, Input::Chat(_));
    // With tools, their grammar holds the structured answer too, if one is asked for.
    let tool_grammar = match &options.tools {
        Some(t) => served.tool_format.grammar(t, options.grammar.as_ref())?,
        // A harmony model's structured answer is its final message (`core/harmony.rs`).
        None if chat => match (served.tool_format, options.grammar.as_ref()) {
            (ToolFormat::Harmony(marks), Some(g)) => harmony::answer_grammar(g, marks),
            _ => None,
        },
        None => None,
    };
    let constraint = match tool_grammar.as_ref().or(options.grammar.as_ref()) {
        None => None,
        Some(request) => {
            let (g, request) = (Arc::clone(&served), request.clone());
            let compiled = tokio::task::spawn_blocking(move || g.grammars.compile(&request));
            Some(compiled.await.map_err(|e| ApiError::Internal {
                message: format!("grammar compilation failed: {e}"),
            })??)
        }
    };
    let prompt_ids = prompt_ids_with(
        &served,
        input,
        options.tools.clone(),
        options.template_vars.clone(),
    )
    .await?;
    submit(&served, prompt_ids, options, chat, constraint)
}

/// The prompt's token ids (a chat with the tools it offers), rendered and tokenized on the
/// blocking pool.
pub async fn prompt_ids(
    served: &Arc<ServedModel>,
    input: Input,
    tools: Option<Tools>,
) -> Result<Vec<u32>, ApiError> {
    prompt_ids_with(served, input, tools, None).await
}

/// [`prompt_ids`] with template variables for a chat (`GenerationOptions::template_vars`).
pub async fn prompt_ids_with(
    served: &Arc<ServedModel>,
    input: Input,
    tools: Option<Tools>,
    vars: Option<serde_json::Value>,
) -> Result<Vec<u32>, ApiError> {
    let g = Arc::clone(served);
    tokio::task::spawn_blocking(move || tokenize_input(&g, input, tools.as_ref(), vars.as_ref()))
        .await
        .map_err(|e| ApiError::Internal {
            message: format!("prompt preparation failed: {e}"),
        })?
}

/// The prompt's token ids (blocking: renders and tokenizes).
fn tokenize_input(
    served: &ServedModel,
    input: Input,
    tools: Option<&Tools>,
    vars: Option<&serde_json::Value>,
) -> Result<Vec<u32>, ApiError> {
    let tokenizer = served.model.tokenizer();
    let text = match input {
        Input::Completion(Prompt::Tokens(ids)) => return Ok(ids),
        Input::Completion(Prompt::Mixed(pieces)) => {
            let mut ids = Vec::new();
            for piece in pieces {
                match piece {
                    PromptPiece::Token(id) => ids.push(id),
                    PromptPiece::Text(text) => ids.extend(tokenizer.encode(&text, false, true)),
                }
            }
            return Ok(ids);
        }
        Input::Completion(Prompt::Text(text)) => text,
        Input::Chat(messages) => render_chat(served, messages, tools, vars)?,
    };
    let add_bos = tokenizer.add_bos_default();
    let mut ids = tokenizer.encode(&text, add_bos, true);
    // A template (or a prompt) that writes the BOS text itself would give two.
    if let (true, Some(bos)) = (add_bos, tokenizer.bos()) {
        if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    Ok(ids)
}

/// A chat's prompt text: the conversation prepared for the model's tool format
/// (`core/tools.rs`), through its template (with `tools` when the template knows them).
fn render_chat(
    served: &ServedModel,
    messages: Vec<ChatMessage>,
    tools: Option<&Tools>,
    vars: Option<&serde_json::Value>,
) -> Result<String, ApiError> {
    let format = served.tool_format;
    let messages = prepare(messages, tools, format);
    let tools_json = tools.filter(|_| format.native()).map(Tools::template_json);
    served
        .template
        .render_with_vars(&messages, tools_json.as_ref(), true, vars)
        .map_err(|e| match e {
            TemplateError::Raised { message } => ApiError::invalid("messages", message),
            TemplateError::Render { detail } => ApiError::invalid("messages", detail),
            other => ApiError::Internal {
                message: other.to_string(),
            },
        })
}

/// One request per choice, submitted; the merged stream of their events.
fn submit(
    served: &Arc<ServedModel>,
    prompt_ids: Vec<u32>,
    options: &GenerationOptions,
    chat: bool,
    constraint: Option<Constraint>,
) -> Result<Generation, ApiError> {
    let context = match options.context_limit {
        Some(limit) if prompt_ids.len() >= limit.tokens => {
            return Err(ApiError::invalid(
                limit.param,
                format!(
                    "the prompt has {} tokens, and {} = {} leaves no room to answer",
                    prompt_ids.len(),
                    limit.param,
                    limit.tokens
                ),
            ))
        }
        Some(limit) => limit.tokens.min(served.context_tokens),
        None => served.context_tokens,
    };
    let left = context.saturating_sub(prompt_ids.len());
    let max_tokens = match options.max_tokens {
        Some(n) if options.clamp_to_context => n.min(left).max(1),
        Some(n) => n,
        None if options.fill_context => left.max(1),
        None => served.default_max_tokens.min(left).max(1),
    };
    let mut stop = StopConfig {
        stop_strings: options.stop.clone(),
        stop_token_ids: Vec::new(),
        ignore_eos: options.ignore_eos,
    };
    if chat && !options.ignore_eos {
        stop.stop_token_ids.extend(&served.chat_stop_ids);
        stop.stop_strings
            .extend(served.chat_stop_strings.iter().cloned());
    }
    let base_seed = options.seed.unwrap_or_else(rand::random);
    // Several choices share the batch with everyone else: at most half its rows at once.
    let group = (options.n > 1).then(rand::random);
    let prompt_tokens = prompt_ids.len();
    let mut choices = SelectAll::new();
    for index in 0..options.n {
        let request = GenerationRequest {
            prompt_ids: prompt_ids.clone(),
            max_tokens,
            sampling: ferrox_sched::SamplingParams {
                seed: base_seed.wrapping_add(index as u64),
                ..options.sampling.clone()
            },
            stop: stop.clone(),
            logprobs: options.logprobs,
            cache_salt: options.cache_salt.clone(),
            reuse_cached_prompt: options.reuse_cached_prompt,
            constraint: constraint.clone(),
            embedding: None,
            group,
            speculation: options.speculation,
        };
        // On a refusal, `choices` drops here with the streams already accepted, which
        // cancels them.
        let events = served
            .scheduler
            .submit(request)
            .map_err(|r| ApiError::from(r).for_limit(options.max_tokens_param))?;
        choices.push(
            stream::unfold(events, move |mut events| async move {
                let event = events.recv().await?;
                Some((ChoiceEvent { index, event }, events))
            })
            .boxed(),
        );
    }
    Ok(Generation {
        served: Arc::clone(served),
        choices,
        last_token: vec![None; options.n],
        first_token: None,
        started: Instant::now(),
        client_stops: options.stop.clone(),
        n: options.n,
        usage: RequestUsage {
            prompt_tokens,
            completion_tokens: 0,
            cached_tokens: prompt_tokens,
            ..RequestUsage::default()
        },
    })
}

/// A request in flight: the merged events of its choices. Dropping it cancels every choice
/// that has not finished.
pub struct Generation {
    /// The served model the request started on, kept for its tokenizer and metrics.
    pub served: Arc<ServedModel>,
    choices: SelectAll<BoxStream<'static, ChoiceEvent>>,
    /// When each choice's last token arrived (`None` before its first).
    last_token: Vec<Option<Instant>>,
    /// When the first token of any choice arrived.
    first_token: Option<Instant>,
    started: Instant,
    /// The client's stop strings, to tell [`Finish::StopSequence`] from [`Finish::EndOfTurn`].
    client_stops: Vec<String>,
    n: usize,
    usage: RequestUsage,
}

impl Generation {
    pub fn choices(&self) -> usize {
        self.n
    }

    /// Usage so far (complete once every choice is done).
    pub fn usage(&self) -> RequestUsage {
        self.usage
    }

    /// Time to the first token (queueing and the prompt), and from it to the last token
    /// seen; zero where nothing came yet.
    pub fn timings(&self) -> Timings {
        let last = self.last_token.iter().flatten().max().copied();
        match (self.first_token, last) {
            (Some(first), Some(last)) => Timings {
                prompt: first - self.started,
                generation: last - first,
            },
            _ => Timings::default(),
        }
    }

    /// How a finished choice ended, or the error a failed choice ends the request with.
    pub fn finish(&self, completion: &Completion) -> Result<Finish, ApiError> {
        match &completion.finish_reason {
            FinishReason::Stop => Ok(match &completion.stopped_by {
                Some(StopMatch::String(s)) if self.client_stops.contains(s) => {
                    Finish::StopSequence(s.clone())
                }
                _ => Finish::EndOfTurn,
            }),
            FinishReason::Length => Ok(Finish::Length),
            FinishReason::Cancelled => Err(ApiError::GenerationFailed {
                message: "the request was cancelled".into(),
            }),
            FinishReason::Error(message) => Err(ApiError::GenerationFailed {
                message: message.clone(),
            }),
        }
    }

    /// The next event of any choice, in the order they happen; `None` once every choice is
    /// done.
    pub async fn next(&mut self) -> Option<ChoiceEvent> {
        let ev = self.choices.next().await?;
        let now = Instant::now();
        let metrics = &self.served.metrics;
        match &ev.event {
            Event::Token(_) => {
                let i = ev.index;
                self.first_token.get_or_insert(now);
                match self.last_token[i] {
                    None => metrics.ttft.observe(now - self.started),
                    Some(last) => metrics.itl.observe(now - last),
                }
                self.last_token[i] = Some(now);
            }
            Event::Done(c) => {
                self.usage.completion_tokens += c.usage.completion_tokens;
                self.usage.cached_tokens = self.usage.cached_tokens.min(c.usage.cached_tokens);
                self.usage.draft_tokens += c.usage.draft_tokens;
                self.usage.draft_accepted += c.usage.draft_accepted;
                metrics.duration.observe(now - self.started);
                let relaxed = std::sync::atomic::Ordering::Relaxed;
                metrics
                    .prompt_tokens
                    .fetch_add(c.usage.prompt_tokens as u64, relaxed);
                metrics
                    .generation_tokens
                    .fetch_add(c.usage.completion_tokens as u64, relaxed);
            }
        }
        Some(ev)
    }

    /// Waits for every choice and returns them in index order; the first failed choice
    /// fails the request (the others are cancelled as the generation drops). Usage and
    /// timings are complete afterwards.
    pub async fn collect(&mut self) -> Result<Vec<ChoiceOutput>, ApiError> {
        let mut tokens: Vec<Vec<TokenEvent>> = vec![Vec::new(); self.n];
        let mut done: Vec<Option<(Completion, Finish)>> = vec![None; self.n];
        while let Some(ChoiceEvent { index, event }) = self.next().await {
            match event {
                Event::Token(t) => tokens[index].push(t),
                Event::Done(c) => {
                    let finish = self.finish(&c)?;
                    done[index] = Some((c, finish));
                }
            }
        }
        let outputs = tokens
            .into_iter()
            .zip(done)
            .map(|(tokens, completion)| {
                completion
                    .map(|(completion, finish)| ChoiceOutput {
                        tokens,
                        completion,
                        finish,
                    })
                    .ok_or_else(|| ApiError::Internal {
                        message: "a choice ended without its Done event".into(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(outputs)
    }
}

/// Where a request's time went, as the server saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Submission to the first token: queueing and computing the prompt.
    pub prompt: std::time::Duration,
    /// The first token to the last.
    pub generation: std::time::Duration,
}
