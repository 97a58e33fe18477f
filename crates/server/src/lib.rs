//! ferrox's HTTP server: the OpenAI-compatible API (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`), llama-server's `/tokenize` and `/detokenize`, `/health`
//! and Prometheus `/metrics`, in front of the continuous-batching scheduler.
//!
//! A request's path, each arrow a call you can follow: the protocol handler
//! (`openai::chat::handle`) gets the pinned [`Generator`] ([`state::Ready`]) and the body
//! ([`params::JsonBody`]) → `validation::parse_chat` turns the body into a validated request
//! once → [`generate::generate`], the one generation path, renders and tokenizes the prompt
//! off the async runtime and submits one scheduler request per choice → the handler encodes
//! the merged events, as one JSON reply or through [`sse::stream_response`]. Every failure is
//! an [`ApiError`], whose `IntoResponse` is the only place a status is chosen.
//!
//! Modules, one concept each: [`error`], [`params`] (the body as named parameters),
//! [`validation`], [`state`], [`generate`], [`sse`], [`openai`] (chat and completions
//! encoders), [`tokenize`], [`metrics`], [`routes`] (the router and its layers), [`server`]
//! (socket and graceful shutdown), [`client`] (a small HTTP client for the load benchmark and
//! the tests).
//!
//! `docs/API.md` lists every route and parameter, and what is refused and how.

pub mod anthropic;
pub mod client;
pub mod core;
pub mod http;
pub mod llamacpp;
pub mod openai;
pub mod routes;
pub mod server;
pub mod state;

pub use crate::core::error::ApiError;
pub use routes::{app, with_layers};
pub use server::{run, shutdown_signal, DEFAULT_SHUTDOWN_GRACE};
pub use state::{AppState, Generator, ServerConfig};
