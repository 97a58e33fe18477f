//! WordPiece (`tokenizer.ggml.model = "bert"`), as llama.cpp's `llm_tokenizer_wpm` does it,
//! so that an encoder sees the ids it was trained on.
//!
//! The converter stores the vocabulary with llama.cpp's "phantom space": a piece that starts
//! a word is `▁` + its text (`▁hello`), a continuation piece is its bare text (`ing`, from
//! BERT's `##ing`). So a word is matched as `▁` + word, greedily, longest piece first; a word
//! with any part no piece matches becomes one `[UNK]` (what it had emitted is dropped).
//!
//! Before that the text is normalised and split, code point by code point: accents are
//! stripped (each code point replaced by the first of its canonical decomposition, Hangul
//! syllables kept whole, as llama.cpp's table does), whitespace ends a word, control and
//! format characters (and marks, when stripping accents) are dropped, letters are lowercased,
//! and every punctuation mark, ASCII symbol and CJK ideograph is a word of its own. There is
//! no limit on a word's length (Hugging Face's 100-character `[UNK]` rule is not llama.cpp's).

use super::unicode::{Class, Flags};
use super::vocab::Vocab;

/// Appends the ids of `text` (no `[CLS]`/`[SEP]`: the caller adds those).
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    for word in words(vocab, text) {
        match_word(vocab, &word, out);
    }
}

/// The words of `text` after normalisation.
fn words(vocab: &Vocab, text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    for c in text.chars() {
        let c = if vocab.strip_accents { base(c) } else { c };
        let flags = Flags::of(c);
        if flags.whitespace {
            flush(&mut word, &mut words);
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || flags.class == Class::Control {
            continue;
        }
        if vocab.strip_accents && flags.class == Class::Mark {
            continue;
        }
        let c = if vocab.lowercase {
            // The simple (one code point) lowercase mapping, as llama.cpp's table.
            c.to_lowercase().next().unwrap_or(c)
        } else {
            c
        };
        let alone = flags.class == Class::Punctuation
            || (c.is_ascii() && flags.class == Class::Symbol)
            || is_cjk(c);
        if alone {
            flush(&mut word, &mut words);
            words.push(c.to_string());
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut words);
    words
}

/// Greedy longest match of `▁word`, by bytes; `[UNK]` for the whole word if a part fails.
fn match_word(vocab: &Vocab, word: &str, out: &mut Vec<u32>) {
    let w = format!("\u{2581}{word}");
    let bytes = w.as_bytes();
    let first = out.len();
    let mut i = 0;
    while i < bytes.len() {
        let longest = bytes.len().min(i + vocab.max_token_len + 1);
        match (i + 1..=longest)
            .rev()
            .find_map(|j| Some((j, vocab.lookup(&bytes[i..j])?)))
        {
            Some((j, id)) => {
                out.push(id);
                i = j;
            }
            None => {
                out.truncate(first);
                out.extend(vocab.unk);
                return;
            }
        }
    }
}

/// The first code point of `c`'s canonical decomposition (`é` → `e`); Hangul syllables,
/// which llama.cpp leaves whole, stay as they are.
fn base(c: char) -> char {
    if c.is_ascii() || ('\u{AC00}'..='\u{D7A3}').contains(&c) {
        return c;
    }
    let mut first = None;
    unicode_normalization::char::decompose_canonical(c, |d| {
        first.get_or_insert(d);
    });
    first.unwrap_or(c)
}

/// The CJK ideograph blocks BERT splits one character at a time (llama.cpp's ranges).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}
