//! The engine: everything needed to turn token ids into logits and logits into tokens.
//!
//! - [`config`]: a model's hyper-parameters, read from GGUF metadata.
//! - [`tokenizer`]: SentencePiece and byte-level BPE, matching llama.cpp token for token.
//! - [`kv`]: the paged KV cache (storage only; the scheduler owns block tables).
//! - [`model`]: weights and the one batched forward pass, `forward_multi_seq`.
//! - [`sampler`]: seeded samplers (argmax at temperature 0, top-k/top-p/min-p, penalties).

pub mod kv;
pub mod sampler;
pub mod tokenizer;
