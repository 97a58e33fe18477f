//! HTTP plumbing every protocol uses, and nothing protocol-specific: the body as named
//! parameters ([`params`]), API keys ([`auth`]), statuses and the error-rendering layer
//! ([`errors`]), SSE framing ([`sse`]) and NDJSON
//! streams ([`ndjson`]), Prometheus metrics ([`metrics`]) and the count of
//! requests a shutdown waits for ([`in_flight`]).

pub mod auth;
pub mod errors;
pub mod in_flight;
pub mod metrics;
pub mod ndjson;
pub mod params;
pub mod sse;
