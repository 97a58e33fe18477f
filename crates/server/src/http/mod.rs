//! HTTP plumbing every protocol uses, and nothing protocol-specific: the body as named
//! parameters ([`params`]), API keys ([`auth`]), statuses and the error-rendering layer
//! ([`errors`]), SSE framing ([`sse`]) and Prometheus metrics ([`metrics`]).

pub mod auth;
pub mod errors;
pub mod metrics;
pub mod params;
pub mod sse;
