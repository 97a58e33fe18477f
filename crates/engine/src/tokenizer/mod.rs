//! Tokenizers: text to token ids and back, matching llama.cpp token for token.
//!
//! This module owns the vocabulary loaded from GGUF metadata and the two algorithms llama.cpp
//! uses for the models we serve:
//!
//! - `tokenizer.ggml.model = "llama"`: SentencePiece-style merges by score with byte fallback
//!   (`spm.rs`), e.g. Gemma 3 and Llama 2;
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE with ranked merges after a regex
//!   pre-tokenizer (`bpe.rs`, `pretokenize.rs`), e.g. Llama 3 and Qwen 2;
//! - `tokenizer.ggml.model = "bert"`: WordPiece (`wpm.rs`), for BERT-family encoders; every
//!   input starts with `[CLS]` and ends with `[SEP]` when special tokens are added.
//!
//! Any other model name is refused with [`TokenizerError::UnsupportedModel`], and a BPE
//! pre-tokenizer we do not implement with [`TokenizerError::UnsupportedPreTokenizer`] (llama.cpp
//! also refuses unknown names; a missing `pre` key means its `default` chain, as in llama.cpp).
//!
//! # How `encode` works (llama.cpp's `llama_vocab::impl::tokenize`)
//!
//! 1. **Special-token partition.** Control, user-defined and unknown tokens are carved out of
//!    the input first, longest token text first; each token takes every non-overlapping
//!    occurrence, left to right, in the text that is still raw. With `parse_special = false`
//!    control and unknown tokens are skipped, so only user-defined tokens (Gemma's `<html>`,
//!    whitespace runs like four spaces, `<start_of_image>`) are carved out. Tokens that llama.cpp
//!    recognizes by name as end-of-turn / end-of-generation / FIM markers gain the control
//!    attribute at load time: Gemma's user-defined `</s>` therefore behaves as control.
//! 2. Each remaining raw fragment goes through SPM or BPE on its own.
//! 3. BOS is prepended when asked; no EOS is appended (see [`Tokenizer::encode_special`] for
//!    llama.cpp's `add_special` behaviour, which also appends EOS when the model asks for it).
//!    A duplicate BOS (`"<bos>Hello"` with `add_bos`) is kept, as llama.cpp keeps it.
//!
//! Invariant pinned by `tests/tokenizer_golden.rs`: for Gemma 3 every row of
//! `shared/golden/gemma3-270m/tokenize.jsonl` (llama.cpp's own output) is reproduced id for id.
//!
//! # Decoding
//!
//! [`Tokenizer::token_bytes`] is llama.cpp's `token_to_piece(special = false)`: control and
//! unknown tokens give nothing, user-defined tokens their text, normal tokens their text with
//! U+2581 turned back into spaces (SPM) or byte-decoded (BPE), byte tokens their byte, and
//! unused tokens nothing. [`Tokenizer::token_bytes_special`] renders control and unknown tokens
//! as their text instead (`special = true`). [`Tokenizer::decode`] concatenates `token_bytes`
//! like llama-server builds its output text: no leading-space stripping and no
//! "clean up tokenization spaces" pass. [`StreamDecoder`] does the same incrementally.
//!
//! # Not implemented (llama.cpp does these for specific models only)
//!
//! lstrip/rstrip attributes on special tokens (set by llama.cpp for Phi-3 and some embedding
//! models by model name), WPM/UGM/RWKV vocabularies, and pre-tokenizers other than those in
//! [`PreTokenizer`].

mod bpe;
mod pretokenize;
mod spm;
mod stream;
mod unicode;
mod vocab;
mod wpm;

use aho_corasick::AhoCorasick;

pub use stream::StreamDecoder;
use vocab::{attr, Vocab};
pub use vocab::{FimTokens, PreTokenizer, VocabKind, VocabMetadata};

/// Why a vocabulary could not be loaded. Each variant names the metadata key or value at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("GGUF metadata key `{key}` is missing")]
    MissingKey { key: &'static str },
    /// A metadata key holds the wrong kind of value.
    #[error("GGUF metadata key `{key}` has the wrong type (expected {expected})")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    /// `tokenizer.ggml.model` names an algorithm we do not implement.
    #[error(
        "tokenizer model `{name}` (tokenizer.ggml.model) is not supported; supported: llama, gpt2"
    )]
    UnsupportedModel { name: String },
    /// `tokenizer.ggml.pre` names a BPE pre-tokenizer we do not implement.
    #[error(
        "BPE pre-tokenizer `{name}` (tokenizer.ggml.pre) is not supported; supported: default, \
         gpt-2, llama-bpe/llama3, qwen2, starcoder, falcon and their aliases"
    )]
    UnsupportedPreTokenizer { name: String },
    /// A per-token array is shorter than `tokenizer.ggml.tokens`.
    #[error("`{key}` has {len} entries but the vocabulary has {n_tokens} tokens")]
    LengthMismatch {
        key: &'static str,
        len: usize,
        n_tokens: usize,
    },
    /// Two ids share one token text.
    #[error("duplicate token {text:?} in tokenizer.ggml.tokens at ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    /// The model asks for BOS/EOS to be added but has no such token.
    #[error("`{add_key}` is true but `{id_key}` is not set")]
    MissingSpecialToken {
        add_key: &'static str,
        id_key: &'static str,
    },
    /// `tokenizer.ggml.tokens` is empty.
    #[error("tokenizer.ggml.tokens is empty")]
    EmptyVocabulary,
}

/// A loaded tokenizer. Immutable and `Send + Sync`: share one behind an `Arc`.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    /// Finds which special tokens occur in an input at all (overlapping search), so the
    /// partition only walks those. Pattern `i` is `vocab.special_by_len[i]`.
    special_finder: Option<AhoCorasick>,
    /// `token_bytes` of every id, concatenated; id `i` is `plain[plain_offsets[i]..plain_offsets[i + 1]]`.
    plain: Vec<u8>,
    plain_offsets: Vec<usize>,
}

/// A piece of the input during the special-token partition.
#[derive(Clone, Copy, Debug)]
enum Fragment {
    /// Raw text `start..end` (byte offsets into the input).
    Text(usize, usize),
    Token(u32),
}

impl Tokenizer {
    /// Load the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(f: &ferrox_gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_metadata(metadata_from_gguf(f)?)
    }

    /// Build from already-extracted metadata (tests use this with synthetic vocabularies).
    pub fn from_metadata(meta: VocabMetadata) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::build(meta)?;
        let special_finder = if vocab.special_by_len.is_empty() {
            None
        } else {
            let patterns = vocab
                .special_by_len
                .iter()
                .map(|&id| vocab.texts[id as usize].as_bytes());
            Some(
                AhoCorasick::new(patterns)
                    .expect("special-token automaton fits the default limits"),
            )
        };
        let mut plain = Vec::new();
        let mut plain_offsets = Vec::with_capacity(vocab.texts.len() + 1);
        plain_offsets.push(0);
        for id in 0..vocab.texts.len() as u32 {
            append_piece(&vocab, id, false, &mut plain);
            plain_offsets.push(plain.len());
        }
        Ok(Tokenizer {
            vocab,
            special_finder,
            plain,
            plain_offsets,
        })
    }

    /// Tokenize `text`. `add_bos` prepends the BOS token (if the vocabulary has one);
    /// `parse_special` lets control-token text in `text` become control tokens.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            out.extend(self.vocab.bos);
        }
        let fragments = self.partition(text, parse_special);
        match self.vocab.kind {
            VocabKind::Spm => {
                let mut prev_special = true;
                let mut buf = String::new();
                for frag in fragments {
                    match frag {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(s, e) => {
                            buf.clear();
                            if self.vocab.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(&text[s..e]);
                            let escaped = buf.replace(' ', "\u{2581}");
                            spm::tokenize(&self.vocab, &escaped, &mut out);
                            prev_special = false;
                        }
                    }
                }
            }
            VocabKind::Bpe => {
                for frag in fragments {
                    match frag {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(s, e) => bpe::tokenize(&self.vocab, &text[s..e], &mut out),
                    }
                }
            }
            VocabKind::Wpm => {
                for frag in fragments {
                    match frag {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(s, e) => wpm::tokenize(&self.vocab, &text[s..e], &mut out),
                    }
                }
            }
        }
        out
    }

    /// Tokenize as llama.cpp's `llama_tokenize(add_special = true)`: BOS if the model's
    /// `add_bos_token` says so, EOS if its `add_eos_token` says so.
    pub fn encode_special(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = self.encode(text, self.vocab.add_bos, parse_special);
        if self.vocab.add_eos {
            out.extend(self.vocab.eos);
        }
        out
    }

    /// Split `text` into special tokens and raw-text fragments (llama.cpp's
    /// `tokenizer_st_partition`).
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(0, text.len()));
        let Some(finder) = &self.special_finder else {
            return frags;
        };
        // Which special tokens occur anywhere (a fragment is a substring of the input, so a
        // token absent from the input cannot occur in a fragment).
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text.as_bytes())
            .map(|m| m.pattern().as_usize())
            .collect();
        present.sort_unstable();
        present.dedup();

        let bytes = text.as_bytes();
        for idx in present {
            let id = self.vocab.special_by_len[idx];
            if !parse_special && self.vocab.has_attr(id, attr::CONTROL | attr::UNKNOWN) {
                continue;
            }
            let needle = self.vocab.texts[id as usize].as_bytes();
            let finder = memchr::memmem::Finder::new(needle);
            let mut next = Vec::with_capacity(frags.len() + 2);
            for frag in frags {
                let Fragment::Text(start, end) = frag else {
                    next.push(frag);
                    continue;
                };
                let mut pos = start;
                while let Some(off) = finder.find(&bytes[pos..end]) {
                    if off > 0 {
                        next.push(Fragment::Text(pos, pos + off));
                    }
                    next.push(Fragment::Token(id));
                    pos += off + needle.len();
                }
                if pos < end {
                    next.push(Fragment::Text(pos, end));
                }
            }
            frags = next;
        }
        frags
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.texts.len()
    }

    /// The algorithm (SPM or byte-level BPE).
    pub fn kind(&self) -> VocabKind {
        self.vocab.kind
    }

    /// The BPE pre-tokenizer (`Default` for SPM, where it is unused).
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.vocab.pre
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// The fill-in-the-middle tokens the vocabulary has.
    pub fn fim(&self) -> FimTokens {
        self.vocab.fim
    }

    /// End-of-turn token (`tokenizer.ggml.eot_token_id`, else found by name, e.g. `<end_of_turn>`).
    pub fn eot(&self) -> Option<u32> {
        self.vocab.eot
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.vocab.unk
    }

    /// Padding token.
    pub fn pad(&self) -> Option<u32> {
        self.vocab.pad
    }

    /// Whether prompts should start with BOS (`tokenizer.ggml.add_bos_token`, else the family default).
    pub fn add_bos_default(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether prompts should end with EOS (`tokenizer.ggml.add_eos_token`, default false).
    pub fn add_eos_default(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether generation stops at `id` (EOS, EOT, EOM and the end-of-turn names llama.cpp knows).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether `id` is a control token (rendered as nothing by [`Self::token_bytes`]).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.has_attr(id, attr::CONTROL)
    }

    /// The bytes `id` contributes to output text (llama.cpp `token_to_piece`, `special = false`):
    /// control, unknown and unused tokens give nothing. Out-of-range ids give nothing.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.vocab.texts.len() {
            return &[];
        }
        &self.plain[self.plain_offsets[i]..self.plain_offsets[i + 1]]
    }

    /// Like [`Self::token_bytes`] but control and unknown tokens render as their text
    /// (llama.cpp `token_to_piece`, `special = true`).
    pub fn token_bytes_special(&self, id: u32) -> &[u8] {
        if self.vocab.has_attr(id, attr::CONTROL | attr::UNKNOWN) {
            return self.vocab.texts[id as usize].as_bytes();
        }
        self.token_bytes(id)
    }

    /// Text of `ids` (control tokens skipped), invalid UTF-8 replaced by U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.token_bytes(id))
            .copied()
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Text of `ids` with control tokens rendered as their text.
    pub fn decode_special(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| self.token_bytes_special(id))
            .copied()
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The raw vocabulary string of `id` (e.g. `"▁world"`, `"<0xF0>"`, `"Ġworld"`); `""` when
    /// out of range.
    pub fn token_to_piece(&self, id: u32) -> &str {
        self.vocab.texts.get(id as usize).map_or("", String::as_str)
    }

    /// The id whose raw vocabulary string is `piece`.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.vocab.lookup(piece.as_bytes())
    }
}

/// Append llama.cpp's `token_to_piece(id, special)` to `out`.
fn append_piece(vocab: &Vocab, id: u32, special: bool, out: &mut Vec<u8>) {
    let a = vocab.attrs[id as usize];
    let text = &vocab.texts[id as usize];
    if a & (attr::CONTROL | attr::UNKNOWN) != 0 {
        if special {
            out.extend_from_slice(text.as_bytes());
        }
        return;
    }
    if a & attr::USER_DEFINED != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if a & attr::NORMAL != 0 {
        match vocab.kind {
            VocabKind::Spm | VocabKind::Wpm => {
                out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes())
            }
            VocabKind::Bpe => {
                for c in text.chars() {
                    match bpe::char_to_byte(c) {
                        Some(b) => out.push(b),
                        // Not a byte-level character: keep it as text.
                        None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            }
        }
    } else if a & attr::BYTE != 0 {
        if let Some(b) = text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()) {
            out.push(b);
        }
    }
}

/// Read the `tokenizer.ggml.*` keys into [`VocabMetadata`], checking each key's type.
pub fn metadata_from_gguf(f: &ferrox_gguf::GgufFile) -> Result<VocabMetadata, TokenizerError> {
    use ferrox_gguf::Value;

    fn wrong(key: &'static str, expected: &'static str) -> TokenizerError {
        TokenizerError::WrongType { key, expected }
    }
    let string = |key: &'static str| -> Result<Option<String>, TokenizerError> {
        f.get(key)
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| wrong(key, "string"))
            })
            .transpose()
    };
    let array = |key: &'static str| -> Result<Option<&[Value]>, TokenizerError> {
        f.get(key)
            .map(|v| v.as_array().ok_or_else(|| wrong(key, "array")))
            .transpose()
    };
    let strings = |key: &'static str| -> Result<Option<Vec<String>>, TokenizerError> {
        array(key)?
            .map(|a| {
                a.iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| wrong(key, "array of string"))
                    })
                    .collect()
            })
            .transpose()
    };
    // llama.cpp reads ids as u32 and ignores values it cannot use; a negative id (some
    // converters write -1 for "none") therefore means "not set".
    let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
        match f.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(i) => Ok(u32::try_from(i).ok()),
                None => Err(wrong(key, "integer")),
            },
        }
    };
    let flag = |key: &'static str| -> Result<Option<bool>, TokenizerError> {
        f.get(key)
            .map(|v| v.as_bool().ok_or_else(|| wrong(key, "bool")))
            .transpose()
    };

    let model = string("tokenizer.ggml.model")?.ok_or(TokenizerError::MissingKey {
        key: "tokenizer.ggml.model",
    })?;
    let tokens = strings("tokenizer.ggml.tokens")?.ok_or(TokenizerError::MissingKey {
        key: "tokenizer.ggml.tokens",
    })?;
    let scores = array("tokenizer.ggml.scores")?
        .map(|a| {
            a.iter()
                .map(|v| {
                    v.as_f32()
                        .ok_or_else(|| wrong("tokenizer.ggml.scores", "array of f32"))
                })
                .collect::<Result<Vec<f32>, _>>()
        })
        .transpose()?;
    let token_types = array("tokenizer.ggml.token_type")?
        .map(|a| {
            a.iter()
                .map(|v| {
                    v.as_i64()
                        .and_then(|t| i32::try_from(t).ok())
                        .ok_or_else(|| wrong("tokenizer.ggml.token_type", "array of i32"))
                })
                .collect::<Result<Vec<i32>, _>>()
        })
        .transpose()?;
    Ok(VocabMetadata {
        model,
        pre: string("tokenizer.ggml.pre")?,
        tokens,
        scores,
        token_types,
        merges: strings("tokenizer.ggml.merges")?,
        bos_id: id("tokenizer.ggml.bos_token_id")?,
        eos_id: id("tokenizer.ggml.eos_token_id")?,
        eot_id: id("tokenizer.ggml.eot_token_id")?,
        eom_id: id("tokenizer.ggml.eom_token_id")?,
        unknown_id: id("tokenizer.ggml.unknown_token_id")?,
        padding_id: id("tokenizer.ggml.padding_token_id")?,
        add_bos: flag("tokenizer.ggml.add_bos_token")?,
        add_eos: flag("tokenizer.ggml.add_eos_token")?,
        add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
        separator_id: id("tokenizer.ggml.seperator_token_id")?,
        cls_id: id("tokenizer.ggml.cls_token_id")?,
        lowercase: flag("tokenizer.ggml.normalizer.lowercase")?,
        strip_accents: flag("tokenizer.ggml.normalizer.strip_accents")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }
}
