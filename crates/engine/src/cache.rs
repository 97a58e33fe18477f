//! Where models live on disk.
//!
//! The default model is fetched once into a cache directory (`ferrox pull`) and found there
//! by the CLI, the server and the tests. `FERROX_MODEL` names a model file directly;
//! `FERROX_CACHE_DIR` moves the cache (default `$XDG_CACHE_HOME/ferrox`, else
//! `$HOME/.cache/ferrox`).

use std::path::PathBuf;

/// File name of the default model (Gemma 3 270M Q4_K_M).
pub const DEFAULT_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The cache directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FERROX_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("ferrox");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| ".".into());
    home.join(".cache").join("ferrox")
}

/// Where the default model is (or will be, once fetched).
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FERROX_MODEL") {
        return PathBuf::from(p);
    }
    cache_dir().join("models").join(DEFAULT_MODEL_FILE)
}

/// The default model for a test that needs it: `Some(path)` when the file is there. When it
/// is not, the test is skipped with a note, unless `FERROX_REQUIRE_MODEL=1` (which
/// `scripts/test.sh` sets after fetching the model): then a missing model fails the test
/// instead of letting it pass without testing.
pub fn model_for_tests() -> Option<PathBuf> {
    let path = default_model_path();
    if path.exists() {
        return Some(path);
    }
    if std::env::var("FERROX_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!(
            "the default model is missing at {} and FERROX_REQUIRE_MODEL=1",
            path.display()
        );
    }
    eprintln!(
        "SKIP: the default model is not at {} (run `ferrox pull`)",
        path.display()
    );
    None
}
