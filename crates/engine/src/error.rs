//! The engine's error type: one enum, each variant naming what was wrong.

use ferrox_gguf::{GgmlType, GgufError};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("gguf: {0}")]
    Gguf(#[from] GgufError),
    #[error(
        "unsupported architecture `{0}` (supported: gemma3, gemma2, llama (with or without \
         experts), qwen2, qwen3, qwen3moe, olmoe, phi3, gpt-oss, granite, granitemoe, bert)"
    )]
    UnsupportedArchitecture(String),
    /// A file that asks for something this engine does not compute.
    #[error("unsupported: {0}")]
    UnsupportedFeature(&'static str),
    #[error("tensor `{name}`: {reason}")]
    UnsupportedTensor { name: String, reason: &'static str },
    #[error("metadata key `{key}` is missing")]
    MissingKey { key: String },
    #[error("metadata key `{key}` has an invalid value: {reason}")]
    BadMetadata { key: String, reason: String },
    #[error("tensor `{name}` is missing")]
    MissingTensor { name: String },
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    BadTensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor `{name}` has type {ty:?}, which this engine cannot use there")]
    UnsupportedTensorType { name: String, ty: GgmlType },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    #[error(
        "position {pos} needs block {block_index} but the sequence's block table has {n_blocks}"
    )]
    BlockTableTooShort {
        pos: usize,
        block_index: usize,
        n_blocks: usize,
    },
    #[error("a chunk of {tokens} tokens cannot return logits for its last {logit_rows}")]
    TooManyLogitRows { logit_rows: usize, tokens: usize },
    #[error(
        "a {ty} KV cache needs heads of whole 32-value blocks; this model's are {head_dim} values"
    )]
    KvType { ty: &'static str, head_dim: usize },
    #[error("block id {block} is outside the KV cache of {n_blocks} blocks")]
    BlockOutOfRange { block: u32, n_blocks: usize },
    /// An encoder's step: a chunk that is not a whole sequence from position 0, or one that
    /// asks for logits (an encoder has no head).
    #[error("an encoder {0}")]
    EncoderStep(&'static str),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
