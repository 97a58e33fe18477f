//! Many models in one server: the [`Registry`] of every model by id (its residency policy a
//! pure table, `table.rs`), the [`Pinned`] extractor that hands a request the model it
//! names, and the routes that list, load and unload models (`routes.rs`).
//!
//! Why a request is pinned: it takes the model's `Arc<ServedModel>` once, from parse to last
//! token, so a hot swap (a new file loaded under an id that is serving) switches only new
//! requests; one running finishes on the version it started with, and no answer splices two
//! checkpoints or takes its context limit from the wrong one. The old version is dropped
//! when its last request ends.
//!
//! What a user of Ollama or llama-swap expects, and what this does:
//! - a request for a model that is not loaded loads it; requests that come while it loads
//!   wait for that one load (none is refused for it, and each then queues in its model's
//!   scheduler as usual);
//! - `--max-loaded-models` and `--memory-budget` bound what is resident (weights plus KV
//!   pool, priced from the GGUF header before loading); the least recently used idle model
//!   is unloaded to make room, a busy one never: a load waits for it to go idle. A model
//!   that could never fit is a typed 400 naming the bytes;
//! - `keep_alive` (per request, Ollama's meaning, `keep_alive.rs`) and `--keep-alive`
//!   unload an idle model after a while; by default a model stays until room is needed;
//! - a failed load (missing file, hostile GGUF, unsupported architecture) is a typed error
//!   naming the file and the reason, and leaves a version already serving untouched.
//!
//! Every model has its own scheduler worker and KV pool; every model loaded from a file runs
//! its kernels on one shared thread pool, which runs one parallel loop at a time, so two
//! models stepping together take turns on the cores instead of oversubscribing them.

pub mod keep_alive;
mod pinned;
pub mod registry;
pub mod routes;
mod table;

pub use keep_alive::KeepAlive;
pub use pinned::{take_keep_alive, Pinned};
pub use registry::{ModelInfo, ModelsConfig, Registry, Status, Unload};
