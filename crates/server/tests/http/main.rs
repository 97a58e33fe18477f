//! HTTP tests: real servers on loopback ports (and `app()` in-process where a socket adds
//! nothing). One test binary, so the crate links once.

mod common;

mod anthropic;
mod architectures;
mod auth;
mod cancel;
mod connections;
mod default_model;
mod embeddings;
mod errors;
mod generation;
mod harmony;
mod kv_types;
mod llamacpp;
mod models;
mod ollama;
mod reasoning;
mod rerank;
mod responses;
mod routes;
mod speculative;
mod structured;
mod tls;
mod tool_families;
mod tools;
mod typed_answer;
