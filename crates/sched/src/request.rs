//! What goes in ([`GenerationRequest`]) and what comes out ([`Event`]) of the scheduler.
//!
//! The request is already tokenized and protocol-free: the server turns its wire format
//! (OpenAI completions, chat, ...) into one of these, and encodes the events back. A stream of
//! events is some [`Event::Token`]s then exactly one [`Event::Done`]; the concatenation of
//! every `Token::text` and the final `Done::flushed_text` is `Completion::text`.

pub use ferrox_engine::sampler::SamplingParams;

use crate::constraint::Constraint;

/// Names one request for its whole life. Assigned by the handle at submission, unique per
/// scheduler, never reused. Rows in the batch are keyed by it, never by batch position.
pub type RequestId = u64;

/// One generation, ready to schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// The prompt, tokenized (BOS included if the model wants one). Must not be empty.
    pub prompt_ids: Vec<u32>,
    /// Most tokens to generate; at least 1. `prompt + max_tokens` is what the context and the
    /// KV budget are checked against.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: StopConfig,
    /// Report the chosen token's log-probability and the `n` most likely alternatives with
    /// every token (`Some(0)`: only the chosen one).
    pub logprobs: Option<usize>,
    /// Requests share cached prompt blocks only with requests of the same salt (`None` is
    /// a tenant of its own): one tenant's prompts stay out of another's lookups and timing.
    pub cache_salt: Option<String>,
    /// Attach cached prompt blocks (the default). `false` computes the whole prompt, as
    /// llama.cpp's `cache_prompt: false` asks; its blocks are still published for others.
    pub reuse_cached_prompt: bool,
    /// What each drawn token must obey (a grammar, a JSON schema), if anything; each row
    /// starts its own state from it. See `constraint.rs`.
    pub constraint: Option<Constraint>,
    /// Embed the prompt instead of generating: the row only prefills, pooling the final
    /// hidden states of its tokens this way, and ends with `Completion::embedding` (no token
    /// is sampled; `max_tokens` only counts against the context). It never attaches cached
    /// blocks — pooling needs every position's hidden state — but still publishes its own.
    pub embedding: Option<Pooling>,
    /// The choices of one client request (`n` > 1) share a group: together they hold at most
    /// half the batch's rows, the others waiting in their place in the queue, so that one
    /// request cannot take every slot for its whole length (docs/SCHEDULER.md). `None`: a
    /// request of its own.
    pub group: Option<u64>,
    /// This request's speculative decoding: the server's unless it says otherwise.
    pub speculation: SpecParams,
}

/// A request's own speculative decoding settings (llama-server's `speculative.n_max`,
/// `speculative.n_min`, `speculative.p_min` on `/completion`). Speculation never changes
/// what a request draws (`docs/SCHEDULER.md`), only how many steps it takes, so turning it
/// off is for measuring, not for correctness.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpecParams {
    /// `false`: this request decodes one token per step whatever the server's setting.
    pub enabled: bool,
    /// Most drafted tokens per step; `None`: the server's `--spec-draft-n-max`.
    pub n_max: Option<usize>,
    /// Fewer drafted tokens are not verified; `None`: the server's `--spec-draft-n-min`.
    pub n_min: Option<usize>,
    /// A drafted token whose estimated chance of yielding a token (`a^i`: accepted, and every
    /// drafted token before it too) is below this is not verified; `None`: 0, the measured
    /// cost model decides alone.
    pub p_min: Option<f32>,
}

impl Default for SpecParams {
    fn default() -> Self {
        Self {
            enabled: true,
            n_max: None,
            n_min: None,
            p_min: None,
        }
    }
}

impl SpecParams {
    /// No speculation for this request.
    pub fn off() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }
}

/// How an embedding pools its tokens' hidden states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token.
    Mean,
    /// The first token's (BERT's `[CLS]`).
    Cls,
    /// The last token's (decoder embedding models).
    Last,
}

impl GenerationRequest {
    /// Whether the request may take its prompt's KV from the cache: it asked to (the
    /// default), and it is not an embedding (which must compute every position to pool it).
    pub fn reuses_cache(&self) -> bool {
        self.reuse_cached_prompt && self.embedding.is_none()
    }

    /// A greedy request with no stop strings and no logprobs.
    pub fn greedy(prompt_ids: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt_ids,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: StopConfig::default(),
            logprobs: None,
            cache_salt: None,
            reuse_cached_prompt: true,
            constraint: None,
            embedding: None,
            group: None,
            speculation: SpecParams::default(),
        }
    }
}

/// When to stop before `max_tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopConfig {
    /// Stop when the output text contains one of these; the match and anything after it are
    /// not emitted. Empty strings are ignored.
    pub stop_strings: Vec<String>,
    /// Stop on these token ids, in addition to the model's end-of-generation tokens.
    pub stop_token_ids: Vec<u32>,
    /// Do not stop on the model's end-of-generation tokens (`stop_token_ids` still apply).
    pub ignore_eos: bool,
}

/// One message on a request's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Token(TokenEvent),
    Done(Completion),
}

/// A generated token that was not a stop token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub id: u32,
    /// The text this token releases, which may be empty (bytes of an unfinished UTF-8
    /// character, or a tail that could still become a stop string, are held back until they
    /// are decided) or longer than the token (it releases what earlier tokens held back).
    pub text: String,
    /// log-softmax of the model's raw logits for this token, if logprobs were asked for.
    pub logprob: Option<f32>,
    /// The most likely tokens at this position with their log-probabilities, best first.
    pub top_logprobs: Vec<(u32, f32)>,
}

/// The last message of every stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub finish_reason: FinishReason,
    /// What ended it, when `finish_reason` is `Stop`.
    pub stopped_by: Option<StopMatch>,
    pub usage: Usage,
    /// Every sampled token, including a stop token that ended generation.
    pub token_ids: Vec<u32>,
    /// The whole output text (stop string and what follows it excluded).
    pub text: String,
    /// Text held back until the end and released by it (a tail that never became a stop
    /// string); a streaming client sends it after the last token.
    pub flushed_text: String,
    /// The pooled hidden state of an embedding request (not normalized); `None` otherwise,
    /// and for an embedding that did not finish.
    pub embedding: Option<Vec<f32>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// Cancelled by the caller, or the stream was dropped.
    Cancelled,
    /// The model failed or the worker panicked; the text says which.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopMatch {
    TokenId(u32),
    String(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Tokens sampled, a final stop token included.
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache instead of being computed.
    pub cached_tokens: usize,
    /// Drafted tokens speculative decoding verified for this request, and how many of them
    /// the model's own draws matched (each of those saved a step).
    pub draft_tokens: usize,
    pub draft_accepted: usize,
}
