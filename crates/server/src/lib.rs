//! ferrox's HTTP server: every protocol its clients speak — OpenAI (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/models`), Anthropic
//! (`/v1/messages`, `/v1/messages/count_tokens`), llama-server's native routes
//! (`/completion`, `/infill`, `/tokenize`, `/detokenize`), Ollama's (`/api/chat`,
//! `/api/generate`, `/api/embed`, `/api/tags`, `/api/show`, `/api/ps`, ...) — plus `/health`
//! and Prometheus `/metrics`, in front of the continuous-batching scheduler.
//!
//! A request's path, each arrow a call you can follow: a protocol's handler (e.g.
//! `anthropic::messages::handle`) gets the body and the [`ServedModel`] of the model it names,
//! pinned for the request ([`models::Pinned`], which loads the model if it must; Ollama's
//! routes, whose empty request may unload instead, ask the registry themselves) → its
//! parser turns the body into the core's
//! protocol-free request once → [`core::generate::generate`], the one generation path,
//! renders and tokenizes the prompt off the async runtime and submits one scheduler request
//! per choice → the handler encodes the events, collected into one reply or streamed by
//! [`core::stream::drive`] through the protocol's encoder and [`http::sse`] (Ollama's:
//! [`http::ndjson`]). Every failure is
//! an [`ApiError`]; `http/errors.rs` picks its status, and the route's protocol writes its body.
//!
//! Layers, dependencies pointing inward: the protocol adapters ([`openai`], [`anthropic`],
//! [`llamacpp`], [`ollama`]), which never import each other; [`core`], which knows no wire format and no
//! status; [`http`] plumbing. Beside them: [`config`] (the server's knobs and the `Host`
//! names it answers), [`state`], [`models`] (the registry of every
//! model: load on demand, hot swap, unload), [`routes`] (the router, each protocol's
//! routes in its error shape), [`server`] (sockets, connection timeouts and graceful shutdown),
//! [`tls`] (HTTPS on rustls), [`webui`] (the chat page at `/`), [`client`] (a small
//! HTTP client for the load benchmark and the tests).
//!
//! `docs/API.md` lists every route and parameter, and what is refused and how.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod core;
pub mod http;
pub mod llamacpp;
pub mod models;
pub mod ollama;
pub mod openai;
pub mod routes;
pub mod server;
pub mod state;
pub mod tls;
pub mod webui;

pub use crate::core::error::ApiError;
pub use crate::core::served::ServedModel;
pub use crate::http::auth::ApiKeys;
pub use config::{HostPolicy, ServerConfig};
pub use models::{KeepAlive, ModelsConfig, Registry};
pub use routes::{app, check_cors_origin, with_layers};
pub use server::{run, shutdown_signal, DEFAULT_SHUTDOWN_GRACE};
pub use state::AppState;
pub use tls::TlsConfig;
