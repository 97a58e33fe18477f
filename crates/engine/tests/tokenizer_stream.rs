//! `StreamDecoder`: a character split over several tokens is emitted whole, exactly once, and
//! the streamed text always equals `decode` of the same ids. Uses a small synthetic SPM
//! vocabulary (no model file), plus the default model when present.

use ferrox_engine::tokenizer::{StreamDecoder, Tokenizer, VocabMetadata};

/// Llama-2-style SPM vocabulary: `<unk> <s> </s>`, 256 byte tokens, a few pieces.
fn spm_tokenizer() -> Tokenizer {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in [
        ("▁", -1.0),
        ("H", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("He", -1.5),
        ("ll", -1.5),
        ("llo", -1.2),
        ("▁Hello", -0.5),
        ("Hello", -0.6),
        ("é", -3.0),
    ] {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(score);
    }
    Tokenizer::from_metadata(VocabMetadata {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        ..Default::default()
    })
    .unwrap()
}

fn stream_all(tok: &Tokenizer, ids: &[u32]) -> (Vec<String>, String) {
    let mut d = StreamDecoder::new(tok);
    let parts: Vec<String> = ids.iter().map(|&id| d.push(id)).collect();
    let tail = d.finish();
    (parts, tail)
}

#[test]
fn emoji_over_byte_tokens_is_emitted_once_and_whole() {
    let tok = spm_tokenizer();
    // 😀 is not in the vocabulary: four byte-fallback tokens F0 9F 98 80.
    let ids = tok.encode("😀", false, false);
    assert_eq!(ids.len(), 5, "space prefix + four bytes: {ids:?}");
    let (parts, tail) = stream_all(&tok, &ids);
    assert_eq!(parts, [" ", "", "", "", "😀"]);
    assert_eq!(tail, "");
}

#[test]
fn streamed_text_equals_decode() {
    let tok = spm_tokenizer();
    for text in [
        "Hello",
        "Hello Hello",
        "héllo 😀 wörld",
        "ab\u{10FFFF}c",
        "日本",
    ] {
        let ids = tok.encode(text, true, true);
        let (parts, tail) = stream_all(&tok, &ids);
        assert_eq!(parts.concat() + &tail, tok.decode(&ids), "{text:?}");
        assert_eq!(
            tok.decode(&ids),
            format!(" {text}"),
            "SPM adds the space prefix"
        );
    }
}

#[test]
fn invalid_bytes_do_not_hold_back_the_stream() {
    let tok = spm_tokenizer();
    let byte = |b: u8| tok.token_id(&format!("<0x{b:02X}>")).unwrap();
    let mut d = StreamDecoder::new(&tok);
    // A lone continuation byte can never start a character: replaced at once.
    assert_eq!(d.push(byte(0x80)), "\u{FFFD}");
    // A truncated 3-byte character, then an ASCII byte: the broken prefix is replaced.
    assert_eq!(d.push(byte(0xE6)), "");
    assert_eq!(d.push(byte(0x97)), "");
    assert!(d.has_pending());
    assert_eq!(d.push(byte(b'A')), "\u{FFFD}A");
    // A truncated character at the very end is flushed lossily by finish.
    assert_eq!(d.push(byte(0xF0)), "");
    assert_eq!(d.finish(), "\u{FFFD}");
    assert!(!d.has_pending());
}

#[test]
fn control_tokens_are_skipped_or_rendered() {
    let tok = spm_tokenizer();
    let ids = tok.encode("<s>Hello</s>", false, true);
    assert_eq!(ids[0], 1);
    let mut plain = StreamDecoder::new(&tok);
    let mut special = StreamDecoder::with_special(&tok);
    let a: String = ids.iter().map(|&id| plain.push(id)).collect();
    let b: String = ids.iter().map(|&id| special.push(id)).collect();
    assert_eq!(a, " Hello");
    assert_eq!(b, "<s> Hello</s>");
}

#[test]
fn spm_space_prefix_follows_special_tokens() {
    let tok = spm_tokenizer();
    let hello = tok.token_id("▁Hello").unwrap();
    let hello_bare = tok.token_id("Hello").unwrap();
    // add_space_prefix defaults to true for "llama": the text start and every text fragment
    // after a special token get "▁"; text after text does not.
    assert_eq!(tok.encode("Hello", false, false), [hello]);
    assert_eq!(tok.encode("Hello", true, false), [1, hello]);
    assert_eq!(tok.encode("</s>Hello", false, true), [2, hello]);
    assert_eq!(tok.encode("HelloHello", false, false), [hello, hello_bare]);
}

#[test]
fn gemma_fraktur_letter_spans_four_tokens() {
    let Some(path) = ferrox_engine::cache::model_for_tests() else {
        return;
    };
    let tok = Tokenizer::from_gguf(&ferrox_gguf::GgufFile::open(&path).unwrap()).unwrap();
    // llama.cpp: "𝔘" = <0xF0> <0x9D> <0x94> <0x98> (golden row "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 fraktur").
    let ids = tok.encode("𝔘", false, true);
    assert_eq!(ids, [478, 395, 386, 390]);
    let (parts, tail) = stream_all(&tok, &ids);
    assert_eq!(parts, ["", "", "", "𝔘"]);
    assert_eq!(tail, "");
    let text = "Mixed 中文 and 😀👨‍👩‍👧 𝔘𝔫𝔦 <end_of_turn> done";
    let ids = tok.encode(text, true, true);
    let mut d = StreamDecoder::with_special(&tok);
    let streamed: String = ids.iter().map(|&id| d.push(id)).collect::<String>() + &d.finish();
    assert_eq!(streamed, format!("<bos>{text}"));
}
