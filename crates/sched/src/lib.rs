//! The continuous-batching scheduler: one worker, one decode path, for every request.
//!
//! A request's path, each arrow a call you can follow:
//! the server builds a [`GenerationRequest`] → [`SchedulerHandle::submit`] checks it against
//! the [`Limits`] and takes a queue slot (or returns a typed [`Refusal`]) → the worker's tick
//! drains cancels, admits from the queue with a [`KvLease`] on its blocks, plans the decode
//! rows plus prompt chunks of one chunk's worth of tokens in all, runs ONE
//! [`StepModel::forward`], samples each row with its own seeded sampler and stop matcher,
//! sends [`Event`]s → a finished row retires through one exit, which sends `Done` and drops
//! the lease.
//!
//! Modules, one concept each:
//! - [`config`]: the knobs ([`SchedulerConfig`]), and the `FERROX_CB_*` reader for `main`;
//! - [`admission`]: the ceilings ([`Limits`]) and the refusals, in their order;
//! - [`blocks`]: the KV block pool (reference counts, the cache's index of named blocks,
//!   eviction) and the lease returned in `Drop`;
//! - [`prefix`]: naming a full block by its content (the chain hash), so a prefix computed
//!   once is found again;
//! - [`queue`]: the FIFO waiting queue and the slot counted until admission;
//! - [`constraint`]: a row's grammar (what it may draw next), compiled by the caller;
//! - [`stop`]: the stop matcher (stop tokens, stop strings, withheld tails, UTF-8);
//! - `row`: one request in the batch (tokens held vs. computed);
//! - `pooling`: an embedding row's running pool of hidden states;
//! - `draft`: guessing a row's next tokens from its own history (prompt lookup);
//! - `draft_model`: guessing them with a second, smaller model, in a KV cache of its own;
//! - `speculate`: how many drafted tokens each row verifies, from measured step costs;
//! - `worker`: the tick;
//! - [`handle`]: `start`, `submit`, `cancel`, `status`, and the request stream;
//! - [`status`]: the snapshot for metrics;
//! - [`model`]: the narrow trait the scheduler sees a model through;
//! - [`testkit`]: a fake model and a recording / gating probe, for tests.
//!
//! `docs/SCHEDULER.md` explains every rule and why it is that way.

pub mod admission;
pub mod blocks;
pub mod config;
pub mod constraint;
mod draft;
mod draft_model;
mod engine_model;
pub mod handle;
pub mod model;
mod pooling;
pub mod prefix;
pub mod queue;
pub mod request;
mod row;
mod speculate;
pub mod status;
pub mod stop;
pub mod testkit;
mod worker;

pub use admission::{InvalidRequest, Limits, Refusal};
pub use blocks::{BlockPool, KvLease, PoolCounts, PoolStats};
pub use config::{
    ConfigError, KvBudget, PrefillOrder, SchedulerConfig, SpecConfig, SpecKind, MAX_DRAFT_TOKENS,
};
pub use constraint::{Constraint, ConstraintFactory, TokenConstraint};
pub use handle::{Collected, RequestStream, Scheduler, SchedulerHandle};
pub use model::StepModel;
pub use request::{
    Completion, Event, FinishReason, GenerationRequest, Pooling, RequestId, SamplingParams,
    SpecParams, StopConfig, StopMatch, TokenEvent, Usage,
};
pub use status::SchedulerStatus;
