//! Stored responses for the Responses API (`store: true`, OpenAI's default): a bounded,
//! in-memory LRU map from a response id to the response object and the conversation it
//! ends, so `previous_response_id` can continue it and `GET`/`DELETE
//! /v1/responses/{id}` work.
//!
//! Bounded twice, and documented in docs/CONFIGURATION.md: at most `max_entries`
//! responses, and at most `max_bytes` of stored text (a rough size: the JSON object and the
//! conversation's text). Storing past either cap evicts the least recently used responses;
//! a lookup counts as a use. An evicted id is then a 404, exactly as one never stored.
//! Nothing is written to disk: a restart forgets every response.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use ferrox_engine::template::ChatMessage;
use serde_json::Value;

/// A stored response.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The response object as `GET /v1/responses/{id}` returns it.
    pub response: Value,
    /// The conversation up to and including this response's output, without its
    /// `instructions` (which, as OpenAI does, a continuation does not inherit).
    pub history: Vec<ChatMessage>,
}

impl Stored {
    fn bytes(&self) -> usize {
        self.response.to_string().len()
            + self
                .history
                .iter()
                .map(|m| m.content.len() + m.role.len() + 32)
                .sum::<usize>()
    }
}

/// The store. Cheap to share: one mutex over the map, held for a lookup or an insert.
#[derive(Debug)]
pub struct ResponseStore {
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// id → (last use, size in bytes, the response).
    entries: HashMap<String, (u64, usize, Arc<Stored>)>,
    /// last use → id, oldest first.
    by_use: BTreeMap<u64, String>,
    clock: u64,
    bytes: usize,
    evictions: u64,
}

impl ResponseStore {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        ResponseStore {
            max_entries,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `stored` under `id`, evicting the least recently used responses past the
    /// caps. A response larger than the whole byte cap is not stored.
    pub fn insert(&self, id: String, stored: Stored) {
        let size = stored.bytes();
        if size > self.max_bytes || self.max_entries == 0 {
            tracing::warn!(
                id,
                size,
                "response not stored: larger than the store's byte cap"
            );
            return;
        }
        let mut inner = self.lock();
        inner.remove(&id);
        while inner.entries.len() + 1 > self.max_entries || inner.bytes + size > self.max_bytes {
            let Some((_, oldest)) = inner.by_use.pop_first() else {
                break;
            };
            inner.remove(&oldest);
            inner.evictions += 1;
        }
        inner.clock += 1;
        let tick = inner.clock;
        inner.by_use.insert(tick, id.clone());
        inner.entries.insert(id, (tick, size, Arc::new(stored)));
        inner.bytes += size;
    }

    /// The response stored under `id`, now the most recently used.
    pub fn get(&self, id: &str) -> Option<Arc<Stored>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let tick = inner.clock;
        let (used, _, stored) = inner.entries.get_mut(id)?;
        let old = std::mem::replace(used, tick);
        let stored = Arc::clone(stored);
        inner.by_use.remove(&old);
        inner.by_use.insert(tick, id.to_string());
        Some(stored)
    }

    /// Deletes `id`; whether it was there.
    pub fn delete(&self, id: &str) -> bool {
        self.lock().remove(id)
    }

    /// (responses, bytes, evictions so far).
    pub fn stats(&self) -> (usize, usize, u64) {
        let inner = self.lock();
        (inner.entries.len(), inner.bytes, inner.evictions)
    }
}

impl Inner {
    fn remove(&mut self, id: &str) -> bool {
        match self.entries.remove(id) {
            Some((tick, size, _)) => {
                self.by_use.remove(&tick);
                self.bytes -= size;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(text: &str) -> Stored {
        Stored {
            response: json!({"text": text}),
            history: vec![ChatMessage::new("user", text)],
        }
    }

    #[test]
    fn the_least_recently_used_goes_first_and_the_caps_hold() {
        let store = ResponseStore::new(3, 1 << 20);
        for id in ["a", "b", "c"] {
            store.insert(id.into(), stored(id));
        }
        assert!(store.get("a").is_some(), "a is now the most recent");
        store.insert("d".into(), stored("d"));
        assert!(store.get("b").is_none(), "b was the least recently used");
        for id in ["a", "c", "d"] {
            assert!(store.get(id).is_some(), "{id} evicted");
        }
        assert_eq!(store.stats().0, 3);
        assert!(store.delete("c") && !store.delete("c"));

        let one = stored(&"x".repeat(100)).bytes();
        let store = ResponseStore::new(100, one * 2);
        for i in 0..10 {
            store.insert(format!("r{i}"), stored(&"x".repeat(100)));
            let (n, bytes, _) = store.stats();
            assert!(n <= 2 && bytes <= one * 2, "{n} entries, {bytes} bytes");
        }
        assert_eq!(store.stats().2, 8);
        store.insert("huge".into(), stored(&"x".repeat(one * 3)));
        assert!(store.get("huge").is_none());
    }
}
