//! Byte-level BPE against llama.cpp, family by family: every `tokenizer.ggml.pre` we
//! implement (llama.cpp's default chain, Llama 3's, GPT-2's, Qwen 2's, StarCoder's,
//! Falcon's, gpt-4o's o200k, GLM-4's, Mistral's Tekken) on one vocabulary built to the families' rules, and texts with
//! code, CJK, emoji, accented capitals, numbers, contractions, URLs and whitespace runs,
//! with and without special-token parsing (control tokens and gpt-oss's harmony markers,
//! which both engines render as user-defined). The ids are `llama-tokenize`'s on the same
//! vocabulary written as a GGUF (`scripts/gen-bpe-goldens.py`, which says why the vocabulary
//! is built rather than fetched).

use ferrox_engine::tokenizer::{Tokenizer, VocabMetadata};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    tokens: Vec<String>,
    token_types: Vec<i32>,
    merges: Vec<String>,
    bos: String,
    eos: String,
    families: std::collections::BTreeMap<String, Vec<Row>>,
}

#[derive(Deserialize)]
struct Row {
    text: String,
    parse_special: bool,
    ids: Vec<u32>,
}

#[test]
fn every_pre_tokenizer_family_gives_llama_cpps_ids() {
    let text = include_str!("data/bpe_goldens.json");
    let golden: Golden = serde_json::from_str(text).expect("the golden file");
    let id_of = |t: &str| golden.tokens.iter().position(|x| x == t).unwrap() as u32;
    assert_eq!(golden.families.len(), 9);
    let mut checked = 0;
    for (pre, rows) in &golden.families {
        let tok = Tokenizer::from_metadata(VocabMetadata {
            model: "gpt2".into(),
            pre: Some(pre.clone()),
            tokens: golden.tokens.clone(),
            token_types: Some(golden.token_types.clone()),
            merges: Some(golden.merges.clone()),
            bos_id: Some(id_of(&golden.bos)),
            eos_id: Some(id_of(&golden.eos)),
            add_bos: Some(false),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{pre}: {e}"));
        for row in rows {
            let ids = tok.encode(&row.text, false, row.parse_special);
            assert_eq!(
                ids, row.ids,
                "{pre}, parse_special {}: {:?}",
                row.parse_special, row.text
            );
            // And the ids spell the text back (parsed specials render as their text).
            if !row.parse_special {
                assert_eq!(tok.decode(&ids), row.text, "{pre}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 360);
}
