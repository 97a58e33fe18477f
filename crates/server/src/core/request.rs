//! The protocol-free generation request: what every adapter parses its wire format into.
//!
//! An adapter fills an [`Input`] (a chat, or a raw prompt) and [`GenerationOptions`] (the
//! model, the budget, sampling, stops, choices, logprobs, caching). Everything after the
//! adapter — prompt building, submission, the event stream — reads only these, so a rule
//! (a default, a cap) lives in one place for every protocol.

use ferrox_engine::sampler::SamplingParams;
use ferrox_engine::template::ChatMessage;

use crate::core::grammar::GrammarRequest;
use crate::core::tools::Tools;

/// The prompt of a request, as the protocol gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Messages, rendered through the model's chat template.
    Chat(Vec<ChatMessage>),
    /// A raw prompt.
    Completion(Prompt),
}

/// A raw prompt: text (tokenized with the model's BOS), token ids (used as given), or
/// llama.cpp's mix of both, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Mixed(Vec<PromptPiece>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum PromptPiece {
    Text(String),
    Token(u32),
}

/// What a request asks of a generation, besides the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationOptions {
    /// The model the client named, if any (the registry has resolved it already,
    /// `models::Pinned`; adapters echo it).
    pub model: Option<String>,
    /// `None`: the server's default, capped by the context left after the prompt (or the
    /// whole context left, with `fill_context`).
    pub max_tokens: Option<usize>,
    /// What the client's protocol calls `max_tokens` (`max_output_tokens`, `n_predict`, ...),
    /// so that a context refusal names the parameter the client sent.
    pub max_tokens_param: &'static str,
    /// llama.cpp's `n_predict: -1`: without `max_tokens`, generate until a stop or the end
    /// of the context (the KV for all of it is leased at admission).
    pub fill_context: bool,
    /// Ollama's `num_ctx`: the positions this request may use, prompt and output together,
    /// within the model's context (`None`: the model's). A prompt longer is refused naming
    /// `param`.
    pub context_limit: Option<ContextLimit>,
    /// Ollama's way with a budget past the context: the output stops where the context ends
    /// (a `length` finish) instead of the request being refused.
    pub clamp_to_context: bool,
    /// Everything but the seed, which is per choice.
    pub sampling: SamplingParams,
    /// `None`: a random seed per request.
    pub seed: Option<u64>,
    /// The client's stop strings (a chat's end-of-turn markers are added by the core).
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// `Some(k)`: report each token's logprob and its `k` best alternatives.
    pub logprobs: Option<usize>,
    /// Choices, each generated as its own sequence from the same prompt.
    pub n: usize,
    pub stream: bool,
    /// vLLM's `cache_salt`: only requests with the same salt share cached prompt blocks.
    pub cache_salt: Option<String>,
    /// llama.cpp's `cache_prompt`: `false` computes the whole prompt, reusing nothing cached.
    pub reuse_cached_prompt: bool,
    /// Speculative decoding for this request (`speculative` on every protocol).
    pub speculation: ferrox_sched::SpecParams,
    /// Variables for the chat template besides the messages (`chat_template_kwargs`; Ollama's
    /// `think` as `enable_thinking`), a JSON object.
    pub template_vars: Option<serde_json::Value>,
    /// What the output must obey (a JSON schema, a grammar), compiled before submission.
    pub grammar: Option<GrammarRequest>,
    /// The tools a chat offers (unless there are none or the choice is `none`): the core
    /// describes them as the model's family needs and constrains the answer to calls in its
    /// syntax.
    pub tools: Option<Tools>,
}

impl Default for GenerationOptions {
    fn default() -> Self {
        GenerationOptions {
            model: None,
            max_tokens: None,
            max_tokens_param: "max_tokens",
            fill_context: false,
            context_limit: None,
            clamp_to_context: false,
            sampling: SamplingParams::default(),
            seed: None,
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            n: 1,
            stream: false,
            cache_salt: None,
            reuse_cached_prompt: true,
            speculation: ferrox_sched::SpecParams::default(),
            template_vars: None,
            grammar: None,
            tools: None,
        }
    }
}

/// A request's own context size, and the parameter that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimit {
    pub tokens: usize,
    pub param: &'static str,
}
