//! HTTP tests: real servers on loopback ports (and `app()` in-process where a socket adds
//! nothing). One test binary, so the crate links once.

mod common;

mod cancel;
mod default_model;
mod errors;
mod generation;
mod routes;
