//! The registry's table and its residency policy, apart from loading: which models are
//! resident, which are busy, and which idle ones make room for a load — the least recently
//! used first, a busy one never, within `--max-loaded-models` and `--memory-budget`.
//!
//! Generic over what a resident model is (`S`: the registry's `ServedModel`), so the policy
//! is a pure table that tests drive directly with seeded random operations; busy means some
//! holder has a clone of the entry's `Arc<S>`, as for the registry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::keep_alive::KeepAlive;
use crate::core::error::ApiError;

/// What bounds residency (`ModelsConfig`'s `--max-loaded-models` and `--memory-budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Bounds {
    pub(super) max_loaded: Option<usize>,
    pub(super) memory_budget: Option<u64>,
}

/// A load's outcome, as its waiters receive it.
pub(super) type LoadResult<S> = Result<Arc<S>, ApiError>;

pub(super) struct Entry<S> {
    pub(super) id: String,
    /// The file a load reads; `None` for a model handed over already loaded (tests), which
    /// is never unloaded since it could not come back.
    pub(super) path: Option<PathBuf>,
    pub(super) serving: Option<Arc<S>>,
    /// Set while a load runs; every request for an unloaded model waits on this one.
    pub(super) loading: Option<watch::Receiver<Option<LoadResult<S>>>>,
    pub(super) failed: Option<String>,
    /// The registry's clock at the last request: the least recent idle model goes first.
    pub(super) used: u64,
    pub(super) keep_alive: KeepAlive,
    /// When the sweep first saw the serving version idle.
    pub(super) idle_since: Option<Instant>,
    pub(super) bytes: u64,
    /// Bytes a running load has reserved.
    pub(super) reserved: u64,
    /// Loads started (a listing shows it: coalesced requests start one).
    pub(super) loads: u64,
}

impl<S> Entry<S> {
    pub(super) fn new(id: &str, path: Option<PathBuf>, keep_alive: KeepAlive) -> Entry<S> {
        Entry {
            id: id.to_string(),
            path,
            serving: None,
            loading: None,
            failed: None,
            used: 0,
            keep_alive,
            idle_since: None,
            bytes: 0,
            reserved: 0,
            loads: 0,
        }
    }

    pub(super) fn busy(&self) -> bool {
        self.serving
            .as_ref()
            .is_some_and(|g| Arc::strong_count(g) > 1)
    }

    /// Loaded, idle, not being replaced, and able to come back: may be unloaded.
    pub(super) fn evictable(&self) -> bool {
        self.serving.is_some() && !self.busy() && self.loading.is_none() && self.path.is_some()
    }

    pub(super) fn unload(&mut self, why: &str) {
        tracing::info!(model = %self.id, "unloading the model ({why})");
        self.serving = None;
        self.bytes = 0;
        self.idle_since = None;
    }
}

pub(super) struct Table<S> {
    pub(super) entries: Vec<Entry<S>>,
    pub(super) clock: u64,
}

impl<S> Table<S> {
    pub(super) fn ids(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.id.clone()).collect()
    }

    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.id == id)
    }

    /// The entry `name` names; no name is the first (the default model). With no model at
    /// all the server is still starting: 503. A name with Ollama's default tag (`gemma:latest`)
    /// also names the model without it (`gemma`), since Ollama's clients add the tag.
    pub(super) fn find(&self, name: Option<&str>) -> Result<usize, ApiError> {
        match name {
            _ if self.entries.is_empty() => Err(ApiError::Loading),
            None => Ok(0),
            Some(name) => self
                .position(name)
                .or_else(|| self.position(name.strip_suffix(":latest")?))
                .ok_or_else(|| ApiError::ModelNotFound {
                    model: name.to_string(),
                    available: self.ids(),
                }),
        }
    }

    /// Makes room for `needed` more bytes and one more resident model beside entry `at`
    /// (unloading the least recently used idle others), and reserves it. `Ok(false)`: only
    /// busy models stand in the way, so the caller waits and asks again; then nothing was
    /// unloaded. Resident means serving or holding a reservation: a load that has not
    /// reserved yet does not count, so the first load to reserve wins and two loads never
    /// wait on each other. A hot swap's bytes are counted for the new version only: both are
    /// resident only until the old one's last request ends.
    pub(super) fn reserve(&mut self, at: usize, needed: u64, config: Bounds) -> Result<bool, ()> {
        if config.memory_budget.is_some_and(|b| needed > b) {
            return Err(());
        }
        let others: Vec<usize> = (0..self.entries.len()).filter(|&i| i != at).collect();
        let resident = |e: &Entry<S>| e.serving.is_some() || e.reserved > 0;
        let mut count = 1 + others
            .iter()
            .filter(|&&i| resident(&self.entries[i]))
            .count();
        let mut bytes = needed
            + others
                .iter()
                .map(|&i| self.entries[i].bytes + self.entries[i].reserved)
                .sum::<u64>();
        let over = |count: usize, bytes: u64| {
            config.max_loaded.is_some_and(|m| count > m)
                || config.memory_budget.is_some_and(|b| bytes > b)
        };
        let mut victims: Vec<usize> = others
            .into_iter()
            .filter(|&i| self.entries[i].evictable())
            .collect();
        victims.sort_by_key(|&i| self.entries[i].used);
        let mut take = 0;
        while over(count, bytes) {
            let Some(&v) = victims.get(take) else {
                return Ok(false);
            };
            count -= 1;
            bytes -= self.entries[v].bytes;
            take += 1;
        }
        for &v in &victims[..take] {
            self.entries[v].unload("to make room for another model");
        }
        self.entries[at].reserved = needed;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_name_finds_its_model_with_or_without_ollamas_default_tag() {
        let t: Table<()> = Table {
            entries: ["gemma", "qwen:7b", "m:latest"]
                .iter()
                .map(|id| Entry::new(id, None, KeepAlive::Forever))
                .collect(),
            clock: 0,
        };
        let at = |name| t.find(Some(name)).ok();
        assert_eq!(at("gemma"), Some(0));
        assert_eq!(at("gemma:latest"), Some(0));
        assert_eq!(at("qwen:7b"), Some(1));
        assert_eq!(at("qwen:latest"), None);
        assert_eq!(at("qwen"), None);
        assert_eq!(at("m:latest"), Some(2));
        assert_eq!(at("m"), None);
        assert_eq!(t.find(None).ok(), Some(0));
    }

    /// What each entry was before a `reserve`: serving, busy, evictable, when last used.
    fn snapshot(t: &Table<()>) -> Vec<(bool, bool, bool, u64)> {
        t.entries
            .iter()
            .map(|e| (e.serving.is_some(), e.busy(), e.evictable(), e.used))
            .collect()
    }

    /// Seeded random requests against random bounds: after every `reserve`, a busy model is
    /// still loaded, the bounds hold when it says yes, nothing moved when it says wait or
    /// never, and the models it unloaded were idle and the least recently used of the idle.
    #[test]
    fn reserve_keeps_the_bounds_spares_the_busy_and_evicts_the_least_recent() {
        let (mut yes, mut wait) = (0, 0);
        for seed in 0..300 {
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(2..7);
            let mut config = Bounds {
                max_loaded: rng.gen_bool(0.6).then(|| rng.gen_range(1..n)),
                memory_budget: rng.gen_bool(0.6).then(|| rng.gen_range(100..400u64)),
            };
            if config.max_loaded.is_none() && config.memory_budget.is_none() {
                config.max_loaded = Some(1);
            }
            let mut t: Table<()> = Table {
                entries: (0..n)
                    .map(|i| {
                        Entry::new(&format!("m{i}"), Some("m.gguf".into()), KeepAlive::Forever)
                    })
                    .collect(),
                clock: 0,
            };
            let mut holders: Vec<Arc<()>> = Vec::new();
            for _ in 0..40 {
                let at = rng.gen_range(0..n);
                t.clock += 1;
                t.entries[at].used = t.clock;
                if let Some(s) = &t.entries[at].serving {
                    // A request for a loaded model holds it for a while.
                    if rng.gen_bool(0.5) {
                        holders.push(Arc::clone(s));
                    }
                } else {
                    let needed = rng.gen_range(10..150u64);
                    let before = snapshot(&t);
                    match t.reserve(at, needed, config) {
                        Err(()) => {
                            assert!(config.memory_budget.is_some_and(|b| needed > b));
                            assert_eq!(
                                snapshot(&t),
                                before,
                                "seed {seed}: a refusal unloads nothing"
                            );
                        }
                        Ok(false) => {
                            wait += 1;
                            assert_eq!(snapshot(&t), before, "seed {seed}: a wait unloads nothing");
                            assert_eq!(t.entries[at].reserved, 0);
                        }
                        Ok(true) => {
                            yes += 1;
                            let after = snapshot(&t);
                            let gone: Vec<usize> =
                                (0..n).filter(|&i| before[i].0 && !after[i].0).collect();
                            for &g in &gone {
                                assert!(
                                    before[g].2,
                                    "seed {seed}: unloaded m{g}, which was not idle"
                                );
                            }
                            for i in 0..n {
                                assert!(
                                    !before[i].1 || after[i].0,
                                    "seed {seed}: busy m{i} unloaded"
                                );
                                // Least recent first: an idle model that stayed was used
                                // after every one that went.
                                if i != at && before[i].2 && after[i].0 {
                                    assert!(
                                        gone.iter().all(|&g| before[g].3 < before[i].3),
                                        "seed {seed}: m{i} stayed, {gone:?} went"
                                    );
                                }
                            }
                            let resident = t
                                .entries
                                .iter()
                                .filter(|e| e.serving.is_some() || e.reserved > 0)
                                .count();
                            let bytes: u64 = t.entries.iter().map(|e| e.bytes + e.reserved).sum();
                            assert!(
                                config.max_loaded.is_none_or(|m| resident <= m),
                                "seed {seed}"
                            );
                            assert!(
                                config.memory_budget.is_none_or(|b| bytes <= b),
                                "seed {seed}"
                            );
                            // The load finishes: the reservation becomes the model.
                            let e = &mut t.entries[at];
                            e.serving = Some(Arc::new(()));
                            e.bytes = std::mem::take(&mut e.reserved);
                        }
                    }
                }
                // Some requests end.
                holders.retain(|_| rng.gen_bool(0.7));
            }
        }
        // Both outcomes were exercised many times.
        assert!(yes > 500 && wait > 50, "yes {yes}, wait {wait}");
    }
}
