//! Which files of a repository a name means, as `llama-server -hf` and `ollama pull
//! hf.co/…` choose them: the `.gguf` files (never a vision projector, `mmproj`), those whose
//! name holds the quantization asked for as a whole part (`Q4_K_M` in
//! `Llama-3.2-1B-Instruct-Q4_K_M.gguf` or in a `Q4_K_M/` folder; case ignored), and without
//! one `Q4_K_M` if the repository has it, else its only model. A split model's shards
//! (`NAME-00001-of-00003.gguf`) are one choice, taken whole and in order.

use crate::{HubError, RemoteFile};

/// The quantization chosen when the name gives none (llama-server's default).
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// The files of one model: one file, or a split model's shards in order.
pub fn choose(
    repo: &str,
    quant: Option<&str>,
    files: &[RemoteFile],
) -> Result<Vec<RemoteFile>, HubError> {
    let models: Vec<&RemoteFile> = files
        .iter()
        .filter(|f| f.path.to_ascii_lowercase().ends_with(".gguf"))
        .filter(|f| !f.path.to_ascii_lowercase().contains("mmproj"))
        .collect();
    if models.is_empty() {
        return Err(HubError::NoGguf {
            repo: repo.to_string(),
        });
    }
    let holding = |q: &str| -> Vec<&RemoteFile> {
        models
            .iter()
            .copied()
            .filter(|f| parts(&f.path).any(|p| p.eq_ignore_ascii_case(q)))
            .collect()
    };
    let picked = match quant {
        Some(q) => holding(q),
        None => match holding(DEFAULT_QUANT) {
            found if !found.is_empty() => found,
            _ => models.clone(),
        },
    };
    if picked.is_empty() {
        return Err(HubError::NoSuchQuant {
            repo: repo.to_string(),
            quant: quant.unwrap_or(DEFAULT_QUANT).to_string(),
            choices: quants(&models),
        });
    }
    // One model: a single file, or the shards of one split.
    let mut groups: Vec<(String, Vec<&RemoteFile>)> = Vec::new();
    for f in picked {
        let key = shard_of(&f.path).map_or(f.path.clone(), |(base, _, _)| base);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(f),
            None => groups.push((key, vec![f])),
        }
    }
    match groups.len() {
        1 => {
            let (_, mut group) = groups.pop().expect("one group");
            group.sort_by_key(|f| shard_of(&f.path).map_or(0, |(_, no, _)| no));
            if let Some((_, _, count)) = shard_of(&group[0].path) {
                if group.len() as u32 != count {
                    return Err(HubError::Incomplete {
                        repo: repo.to_string(),
                        detail: format!(
                            "{} of the {count} shards of {} are listed",
                            group.len(),
                            group[0].path
                        ),
                    });
                }
            }
            Ok(group.into_iter().cloned().collect())
        }
        _ => Err(HubError::Ambiguous {
            repo: repo.to_string(),
            choices: groups.into_iter().map(|(k, _)| k).collect(),
        }),
    }
}

/// A path's parts: folder names and the file name's pieces between `-` and `.`.
fn parts(path: &str) -> impl Iterator<Item = &str> {
    path.split(['/', '-', '.'])
}

/// `(NAME, n, count)` of a shard's path `NAME-0000n-of-0000count.gguf`.
pub fn shard_of(path: &str) -> Option<(String, u32, u32)> {
    let cut = path.len().checked_sub(".gguf".len())?;
    if !path.is_char_boundary(cut) || !path[cut..].eq_ignore_ascii_case(".gguf") {
        return None;
    }
    let stem = &path[..cut];
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (base, no) = rest.rsplit_once('-')?;
    let is_number = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !is_number(no) || !is_number(count) {
        return None;
    }
    Some((base.to_string(), no.parse().ok()?, count.parse().ok()?))
}

/// The quantizations a repository offers, as a user would type them (for an error).
fn quants(models: &[&RemoteFile]) -> Vec<String> {
    let mut out: Vec<String> = models
        .iter()
        .filter_map(|f| {
            let name = f.path.rsplit('/').next()?;
            let stem = shard_of(name).map_or(name.trim_end_matches(".gguf").to_string(), |s| s.0);
            let q = stem.rsplit(['-', '.']).next()?.to_string();
            Some(q)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<RemoteFile> {
        paths
            .iter()
            .map(|p| RemoteFile {
                path: p.to_string(),
                size: 1,
                sha256: "0".repeat(64),
            })
            .collect()
    }

    fn chosen(quant: Option<&str>, paths: &[&str]) -> Result<Vec<String>, HubError> {
        choose("o/r", quant, &files(paths)).map(|v| v.into_iter().map(|f| f.path).collect())
    }

    #[test]
    fn a_quantization_picks_its_file_and_none_picks_q4_k_m_or_the_only_one() {
        let repo = [
            "README.md",
            "M-Q4_K_M.gguf",
            "M-Q4_K_M_L.gguf",
            "M-Q8_0.gguf",
            "mmproj-M-f16.gguf",
        ];
        assert_eq!(chosen(Some("q8_0"), &repo).unwrap(), ["M-Q8_0.gguf"]);
        assert_eq!(chosen(None, &repo).unwrap(), ["M-Q4_K_M.gguf"]);
        assert_eq!(
            chosen(None, &["a.gguf", "mmproj.gguf"]).unwrap(),
            ["a.gguf"]
        );
        match chosen(Some("Q2_K"), &repo) {
            Err(HubError::NoSuchQuant { choices, .. }) => {
                assert_eq!(choices, ["Q4_K_M", "Q4_K_M_L", "Q8_0"])
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            chosen(None, &["a.gguf", "b.gguf"]),
            Err(HubError::Ambiguous { .. })
        ));
        assert!(matches!(
            chosen(None, &["x.bin"]),
            Err(HubError::NoGguf { .. })
        ));
    }

    #[test]
    fn a_split_model_is_all_its_shards_in_order() {
        let repo = [
            "Q8_0/M-Q8_0-00002-of-00002.gguf",
            "Q8_0/M-Q8_0-00001-of-00002.gguf",
            "M-Q4_K_M.gguf",
        ];
        assert_eq!(
            chosen(Some("Q8_0"), &repo).unwrap(),
            [
                "Q8_0/M-Q8_0-00001-of-00002.gguf",
                "Q8_0/M-Q8_0-00002-of-00002.gguf"
            ]
        );
        assert!(matches!(
            chosen(Some("Q8_0"), &repo[..1]),
            Err(HubError::Incomplete { .. })
        ));
        assert_eq!(
            shard_of("a-b-00003-of-00010.gguf"),
            Some(("a-b".into(), 3, 10))
        );
        assert_eq!(shard_of("a-3-of-10.gguf"), None);
        assert_eq!(shard_of("A-00001-of-00002.GGUF"), Some(("A".into(), 1, 2)));
    }
}
