//! Byte-level BPE on a small synthetic GPT-2-style vocabulary (no model file needed):
//! pre-tokenizer splits, merges by rank, special tokens, EOG detection, decoding, and the
//! refusals for unsupported `model` / `pre` values.

use ferrox_engine::tokenizer::{PreTokenizer, Tokenizer, TokenizerError, VocabKind, VocabMetadata};

/// GPT-2's byte-to-character table (printable Latin-1 maps to itself, the rest to U+0100..).
fn byte_char(b: u8) -> char {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    if printable(b as u32) {
        return char::from(b);
    }
    let n = (0..b as u32).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// 256 byte tokens, then the merges' results, then special tokens.
fn metadata(pre: &str) -> VocabMetadata {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let merges: Vec<&str> = vec![
        "Ġ 1", // Ġ1: lowest rank, so it wins whenever a word holds " 1"
        "H e", "l l", "He ll", "Hell o", // Hello
        "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", // Ġworld
        "' s",     // 's
        "1 2", "12 3", // 123
        "4 5",  // 45
        "Ġ Ġ",  // ĠĠ
    ];
    for m in &merges {
        tokens.push(m.replace(' ', ""));
    }
    let n_normal = tokens.len();
    for s in ["<|begin_of_text|>", "<|eot_id|>", "<|im_end|>", "<tool>"] {
        tokens.push(s.to_string());
    }
    let mut types = vec![1; n_normal];
    types.extend([3, 3, 3, 4]);
    VocabMetadata {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        token_types: Some(types),
        merges: Some(merges.iter().map(|s| s.to_string()).collect()),
        bos_id: Some(n_normal as u32),
        eos_id: Some(n_normal as u32 + 1),
        tokens,
        ..Default::default()
    }
}

fn pieces(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| tok.token_to_piece(id).to_string())
        .collect()
}

#[test]
fn llama3_pre_tokenizer_and_merges() {
    let tok = Tokenizer::from_metadata(metadata("llama-bpe")).unwrap();
    assert_eq!(tok.kind(), VocabKind::Bpe);
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Llama3);
    let ids = tok.encode("Hello world's 12345", false, true);
    assert_eq!(
        pieces(&tok, &ids),
        ["Hello", "Ġworld", "'s", "Ġ", "123", "45"]
    );
    assert_eq!(tok.decode(&ids), "Hello world's 12345");
    // Llama 3 defaults to adding BOS when the metadata is silent.
    assert!(tok.add_bos_default());
    assert_eq!(tok.encode_special("Hello", true)[0], tok.bos().unwrap());
}

#[test]
fn gpt2_pre_tokenizer_keeps_the_space_with_digits() {
    let tok = Tokenizer::from_metadata(metadata("gpt-2")).unwrap();
    let ids = tok.encode("Hello world's 12345", false, true);
    // " 12345" is one word: "Ġ1" (rank 0) merges first, which leaves no bare "1" for "12";
    // with Llama 3's splitter the space is its own word and "123" forms instead.
    assert_eq!(
        pieces(&tok, &ids),
        ["Hello", "Ġworld", "'s", "Ġ1", "2", "3", "45"]
    );
    assert!(!tok.add_bos_default());
}

#[test]
fn qwen2_pre_tokenizer_splits_single_digits() {
    let tok = Tokenizer::from_metadata(metadata("qwen2")).unwrap();
    let ids = tok.encode("12345", false, true);
    assert_eq!(pieces(&tok, &ids), ["1", "2", "3", "4", "5"]);
}

#[test]
fn non_ascii_text_goes_through_byte_tokens_and_decodes_back() {
    let tok = Tokenizer::from_metadata(metadata("llama-bpe")).unwrap();
    for text in ["héllo 世界 😀", "a\r\n\tb", "  x  ", "€100"] {
        let ids = tok.encode(text, false, false);
        assert_eq!(tok.decode(&ids), text);
    }
    // 😀 = F0 9F 98 80: four byte tokens, each the byte-level character of one byte.
    let ids = tok.encode("😀", false, false);
    assert_eq!(ids.len(), 4);
}

#[test]
fn special_tokens_partition_and_eog() {
    let tok = Tokenizer::from_metadata(metadata("llama-bpe")).unwrap();
    let bos = tok.bos().unwrap();
    let eot = tok.token_id("<|eot_id|>").unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let tool = tok.token_id("<tool>").unwrap();
    // EOS, plus every name llama.cpp treats as end of generation.
    assert_eq!(tok.eog_ids(), &[eot, im_end]);
    assert_eq!(tok.eos(), Some(eot));
    assert_eq!(tok.eot(), Some(eot));

    let ids = tok.encode("<|begin_of_text|>Hello<|eot_id|>", false, true);
    assert_eq!(ids, vec![bos, tok.token_id("Hello").unwrap(), eot]);
    // Control tokens are plain text without parse_special; user-defined ones still split.
    let ids = tok.encode("<|eot_id|><tool>", false, false);
    assert!(!ids.contains(&eot));
    assert_eq!(*ids.last().unwrap(), tool);
    assert_eq!(tok.decode(&ids), "<|eot_id|><tool>");
    // Control tokens render as nothing, or as their text on request.
    assert_eq!(tok.decode(&[eot]), "");
    assert_eq!(tok.decode_special(&[eot]), "<|eot_id|>");
}

#[test]
fn refusals_name_the_value() {
    let mut m = metadata("llama-bpe");
    m.pre = Some("no-such-pre".into());
    match Tokenizer::from_metadata(m) {
        Err(TokenizerError::UnsupportedPreTokenizer { name }) => assert_eq!(name, "no-such-pre"),
        other => panic!("expected UnsupportedPreTokenizer, got {other:?}"),
    }
    let mut m = metadata("llama-bpe");
    m.model = "t5".into();
    match Tokenizer::from_metadata(m) {
        Err(TokenizerError::UnsupportedModel { name }) => assert_eq!(name, "t5"),
        other => panic!("expected UnsupportedModel, got {other:?}"),
    }
    let mut m = metadata("llama-bpe");
    m.merges = None;
    assert!(matches!(
        Tokenizer::from_metadata(m),
        Err(TokenizerError::MissingKey {
            key: "tokenizer.ggml.merges"
        })
    ));
    let mut m = metadata("llama-bpe");
    m.tokens.push("Hello".into());
    m.token_types.as_mut().unwrap().push(1);
    let r = Tokenizer::from_metadata(m);
    assert!(
        matches!(r, Err(TokenizerError::DuplicateToken { .. })),
        "{r:?}"
    );
}

#[test]
fn missing_pre_means_the_default_chain() {
    let mut m = metadata("x");
    m.pre = None;
    let tok = Tokenizer::from_metadata(m).unwrap();
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Default);
    let ids = tok.encode("Hello, world", false, false);
    assert_eq!(pieces(&tok, &ids), ["Hello", ",", "Ġworld"]);
}
