//! llama.cpp's own token ids for Gemma 3 (`shared/golden/gemma3-270m/tokenize.jsonl`, 148 rows)
//! must come out of `Tokenizer::encode` id for id, and decoding must give the text back.
//!
//! Needs the default model (env `FERROX_MODEL`, else
//! `$HOME/.cache/ferrox/models/gemma-3-270m-q4_k_m.gguf`); without it the tests say so and pass.

use std::path::PathBuf;

use ferrox_engine::tokenizer::Tokenizer;
use ferrox_gguf::GgufFile;

/// `shared/` sits beside the project root; `FERROX_SHARED_DIR` overrides.
fn shared_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("FERROX_SHARED_DIR") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

fn load() -> Option<Tokenizer> {
    let path = ferrox_engine::cache::model_for_tests()?;
    let f = GgufFile::open(&path).expect("open model");
    Some(Tokenizer::from_gguf(&f).expect("load tokenizer"))
}

struct Row {
    text: String,
    add_bos: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

fn rows() -> Vec<Row> {
    let path = shared_dir().join("golden/gemma3-270m/tokenize.jsonl");
    let data =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    data.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("valid JSON line");
            Row {
                text: v["text"].as_str().expect("text").to_owned(),
                add_bos: v["add_bos"].as_bool().expect("add_bos"),
                parse_special: v["parse_special"].as_bool().expect("parse_special"),
                ids: v["ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|x| x.as_u64().expect("id") as u32)
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn every_golden_row_matches_llama_cpp() {
    let Some(tok) = load() else { return };
    let rows = rows();
    assert_eq!(rows.len(), 148, "golden file changed size");
    let mut failures = Vec::new();
    for r in &rows {
        let got = tok.encode(&r.text, r.add_bos, r.parse_special);
        if got != r.ids {
            failures.push(format!(
                "text={:?} add_bos={} parse_special={}\n  want {:?}\n  got  {:?}",
                r.text, r.add_bos, r.parse_special, r.ids, got
            ));
        }
    }
    println!(
        "{} passed, {} failed",
        rows.len() - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} rows differ:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn golden_ids_decode_back_to_the_text() {
    let Some(tok) = load() else { return };
    for r in rows() {
        // Rendering control tokens gives back exactly the input (BOS excepted).
        let ids = if r.add_bos { &r.ids[1..] } else { &r.ids[..] };
        assert_eq!(tok.decode_special(ids), r.text, "ids {:?}", r.ids);
    }
}

#[test]
fn gemma_special_ids_and_eog_set() {
    let Some(tok) = load() else { return };
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.eos(), Some(1));
    assert_eq!(tok.eot(), Some(106));
    assert!(tok.add_bos_default());
    assert!(!tok.add_eos_default());
    assert_eq!(tok.eog_ids(), &[1, 106, 212]);
    assert!(tok.is_eog(106) && !tok.is_eog(2));
    assert_eq!(tok.token_id("<end_of_turn>"), Some(106));
    assert_eq!(tok.token_to_piece(1902), "▁world");
}
