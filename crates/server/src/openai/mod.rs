//! The OpenAI protocol adapters: `/v1/chat/completions` ([`chat`]) and `/v1/completions`
//! ([`completions`]). Each parses its body with `validation.rs`, calls the one generation
//! path (`generate.rs`) and encodes what comes out, as one JSON reply or as SSE chunks
//! through `sse.rs`. Nothing here schedules, samples or counts tokens.
//!
//! This module holds what the two share: the reply envelope (`id`, `object`, `created`,
//! `model`).

pub mod chat;
pub mod completions;

use rand::Rng;
use serde_json::{json, Value};

use crate::state::unix_now;

/// The fields every reply and chunk of one request carries.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    /// A fresh envelope: `id` is `prefix` and 24 random hex digits.
    pub fn new(prefix: &str, model: &str) -> Envelope {
        let mut rng = rand::thread_rng();
        let suffix: String = (0..24)
            .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0'))
            .collect();
        Envelope {
            id: format!("{prefix}-{suffix}"),
            created: unix_now(),
            model: model.to_string(),
        }
    }

    /// `{"id", "object", "created", "model", "system_fingerprint": null, "choices"}`.
    pub fn wrap(&self, object: &str, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }
}
