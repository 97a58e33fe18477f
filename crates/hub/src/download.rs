//! One file from the hub to the cache: written to `NAME.part`, resumed with a `Range`
//! request where a transfer broke (a few times in one run, and in the next run from what the
//! last one left), then its SHA-256 checked against the hub's, and only then renamed to
//! `NAME`. A file that fails the check is removed, so the next pull starts clean.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Hub, HubError, Progress, RemoteFile};

/// How many requests one run makes for a file before giving up.
const ATTEMPTS: u32 = 5;

/// The first wait before trying again; it doubles each time (0.5 s, 1 s, 2 s, 4 s).
const BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// Progress is reported about every this many bytes.
const REPORT_EVERY: u64 = 1 << 20;

/// Downloads `file` from `url` to `dest`, resuming a `.part` left by an earlier run.
pub fn fetch(
    hub: &Hub,
    url: &str,
    file: &RemoteFile,
    dest: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), HubError> {
    if dest.is_file() {
        return Ok(());
    }
    let part = part_path(dest);
    let size_of = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    // Longer than the file: not this file's start; begin again.
    if size_of(&part) > file.size {
        std::fs::remove_file(&part)?;
    }
    let mut attempt = 0;
    while size_of(&part) < file.size {
        match transfer(hub, url, file, &part, size_of(&part), progress) {
            Ok(()) => {}
            Err(e) if !retryable(&e) || attempt + 1 >= ATTEMPTS => return Err(e),
            // A network blip or a busy hub: wait a little longer each time.
            Err(_) => std::thread::sleep(BACKOFF * (1 << attempt)),
        }
        attempt += 1;
        if attempt >= ATTEMPTS && size_of(&part) < file.size {
            return Err(HubError::Http {
                url: url.to_string(),
                detail: format!("still incomplete after {ATTEMPTS} attempts"),
            });
        }
    }
    progress(Progress::Verifying {
        file: file.path.clone(),
    });
    let got = sha256_of(&part)?;
    if !got.eq_ignore_ascii_case(&file.sha256) {
        std::fs::remove_file(&part)?;
        return Err(HubError::Checksum {
            path: file.path.clone(),
            expected: file.sha256.clone(),
            got,
        });
    }
    std::fs::rename(&part, dest)?;
    Ok(())
}

/// `NAME.part` beside `dest`.
fn part_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".part");
    dest.with_file_name(name)
}

/// Whether trying again may help: a broken connection, a timeout, a server error, or the
/// hub asking to slow down (408, 429); not another 4xx, which it will answer again.
fn retryable(e: &HubError) -> bool {
    match e {
        HubError::Http { detail, .. } => match detail.strip_prefix("status ") {
            Some(code) => code.starts_with('5') || code == "408" || code == "429",
            None => true,
        },
        _ => false,
    }
}

/// One request: appends to `part` from byte `have` (or starts it again if the server sends
/// the whole file), until the body ends or breaks.
fn transfer(
    hub: &Hub,
    url: &str,
    file: &RemoteFile,
    part: &Path,
    have: u64,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), HubError> {
    let http = |detail: String| HubError::Http {
        url: url.to_string(),
        detail,
    };
    let response = hub
        .get(url, (have > 0).then_some(have))
        .call()
        .map_err(|e| http(e.to_string()))?;
    let (mut out, mut done) = match response.status().as_u16() {
        206 => (OpenOptions::new().append(true).open(part)?, have),
        200 => (File::create(part)?, 0),
        status => return Err(http(format!("status {status}"))),
    };
    let mut body = response.into_body().into_reader();
    let mut buf = vec![0u8; 256 << 10];
    let mut reported = done;
    loop {
        let n = body.read(&mut buf).map_err(|e| http(e.to_string()))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
        if done - reported >= REPORT_EVERY || done == file.size {
            reported = done;
            progress(Progress::Downloading {
                file: file.path.clone(),
                sha256: file.sha256.clone(),
                done,
                total: file.size,
            });
        }
    }
    out.flush()?;
    if done < file.size {
        return Err(http(format!(
            "the transfer ended at byte {done} of {}",
            file.size
        )));
    }
    Ok(())
}

/// The hex SHA-256 of a file, read in chunks.
fn sha256_of(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
