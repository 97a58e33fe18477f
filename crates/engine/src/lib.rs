//! The engine: everything needed to turn token ids into logits and logits into tokens.
//!
//! - [`config`]: a model's hyper-parameters, read from GGUF metadata.
//! - [`tokenizer`]: SentencePiece, byte-level BPE and WordPiece, matching llama.cpp token for
//!   token.
//! - [`kv`]: the paged KV cache (storage only; the scheduler owns block tables).
//! - [`model`]: weights and the one batched forward pass, `forward_multi_seq` (a decoder's;
//!   an encoder's — BERT — is its own module, bidirectional and prefill-only); `moe`: the
//!   mixture-of-experts feed-forward block it calls for MoE models.
//! - [`cache`]: where the default model lives on disk, for the CLI, the server and tests.
//! - [`sampler`]: seeded samplers (argmax at temperature 0, top-k/top-p/min-p, penalties).
//! - [`synthetic`]: small random-weight GGUF models of every architecture, for tests.
//! - [`template`]: chat templates (GGUF Jinja via MiniJinja, or the architecture's own format).

mod attention;
pub mod cache;
pub mod config;
mod encoder;
pub mod error;
pub mod kv;
pub mod model;
mod moe;
mod ops;
pub mod sampler;
pub mod synthetic;
pub mod template;
pub mod tokenizer;
mod weights;

pub use config::{Arch, ModelConfig};
pub use error::EngineError;
/// The kernels' thread pool, which a server shares between its models ([`Model::load_in`]).
pub use ferrox_kernels::ThreadPool;
pub use kv::{BlockId, KvCache, KvShape, KvType, SeqChunk};
pub use model::{release_freed_memory, Model};
