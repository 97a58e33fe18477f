//! The vocabulary as llama.cpp sees it after loading: token texts, scores, attributes, the
//! special ids, the end-of-generation set and the special-token list used for partitioning.
//!
//! Everything here is decided once, at load time, from [`VocabMetadata`]. The rules follow
//! llama.cpp's `llama_vocab::impl::load` so that the same GGUF gives the same ids:
//! default special ids per model family, token-type to attribute mapping, the name-based
//! detection of EOT/EOM/FIM tokens (which also *adds the control attribute* to those tokens,
//! which changes how `parse_special=false` partitions them), and the end-of-generation set.

use std::collections::HashMap;

use super::TokenizerError;

/// Token attributes (a bit set, as in llama.cpp: one GGUF token type can gain extra bits at
/// load time, e.g. a user-defined `</s>` also becomes control because it ends generation).
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
}

/// Which tokenization algorithm the vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `"llama"`: SentencePiece-style merges by score, with byte fallback.
    Spm,
    /// `"gpt2"`: byte-level BPE with ranked merges and a regex pre-tokenizer.
    Bpe,
    /// `"bert"`: WordPiece, greedy longest match per word (`wpm.rs`).
    Wpm,
}

/// BPE pre-tokenizer (`tokenizer.ggml.pre`), i.e. how text is split into words before merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// No `pre` key, or `"default"`: llama.cpp's four-regex default chain.
    Default,
    /// GPT-2's regex (`"gpt-2"`, `"phi-2"`, `"mpt"`, `"olmo"`, ...).
    Gpt2,
    /// Llama 3's regex (`"llama-bpe"`, `"llama3"`, ...): digits in runs of up to 3.
    Llama3,
    /// Qwen 2's regex (`"qwen2"`, ...): like Llama 3 but one digit per word.
    Qwen2,
    /// Every digit alone, then GPT-2's regex (`"starcoder"`, `"refact"`, `"command-r"`, `"smollm"`, ...).
    Starcoder,
    /// Falcon's chain: punctuation runs (backtick included), GPT-2's regex, digit triples.
    Falcon,
    /// gpt-4o's o200k regex (`"gpt-4o"`, gpt-oss): words split at case changes, digits in
    /// threes, `/` and newlines kept on punctuation runs.
    Gpt4o,
    /// Mistral's Tekken (`"tekken"`: Mistral Nemo, Ministral 3, Devstral): gpt-4o's words
    /// without its contractions, every digit alone.
    Tekken,
}

/// The tokenizer-related GGUF metadata, already read into plain values.
///
/// [`super::Tokenizer::from_gguf`] fills this from a file; tests build it directly (e.g. a
/// small synthetic BPE vocabulary). Field names follow the `tokenizer.ggml.*` keys.
/// A vocabulary's fill-in-the-middle tokens (`/infill` lays a prompt out with them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: Option<u32>,
    pub suf: Option<u32>,
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct VocabMetadata {
    /// `tokenizer.ggml.model`
    pub model: String,
    /// `tokenizer.ggml.pre`
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges` (BPE only), each `"left right"`
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`
    pub eot_id: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`
    pub eom_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`
    pub unknown_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`
    pub padding_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.seperator_token_id` (sic: the format's spelling): BERT's `[SEP]`.
    pub separator_id: Option<u32>,
    /// `tokenizer.ggml.cls_token_id`: BERT's `[CLS]` in older files (newer ones write it as
    /// the BOS).
    pub cls_id: Option<u32>,
    /// `tokenizer.ggml.normalizer.lowercase` (WordPiece; default true).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (WordPiece; default: as `lowercase`).
    pub strip_accents: Option<bool>,
}

/// The loaded vocabulary. Immutable after [`Vocab::build`].
#[derive(Debug)]
pub(crate) struct Vocab {
    pub kind: VocabKind,
    pub pre: PreTokenizer,
    /// Token texts, by id.
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    /// `attr::*` bits, by id.
    pub attrs: Vec<u16>,
    pub text_to_id: HashMap<Box<[u8]>, u32>,
    /// BPE merge ranks keyed by `"left right"` (byte-level halves never contain a space);
    /// empty for SPM.
    pub merge_ranks: HashMap<Box<str>, u32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    /// WordPiece normalisation: lowercase, and strip accents (`wpm.rs`).
    pub lowercase: bool,
    pub strip_accents: bool,
    /// The longest token text in bytes (WordPiece's longest possible match).
    pub max_token_len: usize,
    /// BPE only: a word that is itself a token skips merging (llama3 family).
    pub ignore_merges: bool,
    /// End-of-generation ids, sorted ascending.
    pub eog: Vec<u32>,
    /// Fill-in-the-middle tokens, found by name as llama.cpp finds them.
    pub fim: FimTokens,
    /// Control, user-defined and unknown tokens, longest text first (ties: lower id first),
    /// which is the order llama.cpp carves them out of the input.
    pub special_by_len: Vec<u32>,
}

const EOT_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_NAMES: &[&str] = &["<|eom_id|>"];
const FIM_PRE_NAMES: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_NAMES: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_NAMES: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_NAMES: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_NAMES: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_NAMES: &[&str] = &["<|file_sep|>"];
/// Token texts that end generation wherever they appear in a vocabulary.
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// gpt-oss chat markers that llama.cpp always renders (forced to user-defined).
const ALWAYS_RENDERED_NAMES: &[&str] =
    &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

fn pre_tokenizer_from_name(
    name: Option<&str>,
) -> Result<(PreTokenizer, bool, bool), TokenizerError> {
    // Returns (pre-tokenizer, ignore_merges, forces add_bos default).
    let Some(name) = name else {
        return Ok((PreTokenizer::Default, false, false));
    };
    Ok(match name {
        "" | "default" => (PreTokenizer::Default, false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => (PreTokenizer::Llama3, true, true),
        // Same regex as Llama 3, without its merge and BOS defaults.
        "dbrx" | "smaug-bpe" => (PreTokenizer::Llama3, false, false),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "trillion"
        | "granite-docling" | "exaone4" => (PreTokenizer::Gpt2, false, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2" | "hunyuan"
        | "solar-open" => (PreTokenizer::Qwen2, false, false),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => (PreTokenizer::Starcoder, false, false),
        "falcon" => (PreTokenizer::Falcon, false, false),
        "gpt-4o" => (PreTokenizer::Gpt4o, false, false),
        "tekken" => (PreTokenizer::Tekken, true, false),
        // GLM-4's regex is Llama 3's; it has no BOS default (see `Vocab::build`).
        "glm4" | "glm5" => (PreTokenizer::Llama3, true, false),
        "chatglm-bpe" => (PreTokenizer::Llama3, false, false),
        other => {
            return Err(TokenizerError::UnsupportedPreTokenizer {
                name: other.to_string(),
            });
        }
    })
}

fn attr_from_type(t: i32) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

/// Keep `id` only if it names a token of this vocabulary.
fn in_range(id: Option<u32>, n: usize) -> Option<u32> {
    id.filter(|&i| (i as usize) < n)
}

impl Vocab {
    pub fn build(meta: VocabMetadata) -> Result<Vocab, TokenizerError> {
        let kind = match meta.model.as_str() {
            "llama" => VocabKind::Spm,
            "gpt2" => VocabKind::Bpe,
            "bert" => VocabKind::Wpm,
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    name: other.to_string(),
                })
            }
        };
        let n = meta.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }

        // Family defaults, before metadata overrides (llama.cpp's values, odd ones included).
        let (mut bos, mut eos, mut unk) = match kind {
            VocabKind::Spm => (Some(1), Some(2), Some(0)),
            VocabKind::Bpe => (Some(11), Some(11), None),
            // [CLS] as the BOS, [SEP] as the EOS: what an encoder's input starts and ends with.
            VocabKind::Wpm => (Some(101), Some(102), Some(100)),
        };
        let (pre, ignore_merges, mut add_bos, mut add_space_prefix) = match kind {
            VocabKind::Spm => (PreTokenizer::Default, false, true, true),
            VocabKind::Bpe => {
                let (pre, ignore, bos_default) = pre_tokenizer_from_name(meta.pre.as_deref())?;
                // llama.cpp clears the BOS of GLM's vocabularies (the file may still name one).
                if matches!(meta.pre.as_deref(), Some("glm4" | "glm5" | "chatglm-bpe")) {
                    bos = None;
                }
                (pre, ignore, bos_default, false)
            }
            VocabKind::Wpm => (PreTokenizer::Default, false, true, false),
        };
        // llama.cpp always ends a WordPiece input with [SEP], whatever the flags say.
        let mut add_eos = kind == VocabKind::Wpm;
        if let Some(v) = meta.add_space_prefix {
            add_space_prefix = v;
        }

        let check_len = |key: &'static str, len: usize| {
            if len < n {
                Err(TokenizerError::LengthMismatch {
                    key,
                    len,
                    n_tokens: n,
                })
            } else {
                Ok(())
            }
        };
        if let Some(s) = &meta.scores {
            check_len("tokenizer.ggml.scores", s.len())?;
        }
        if let Some(t) = &meta.token_types {
            check_len("tokenizer.ggml.token_type", t.len())?;
        }

        let mut texts = Vec::with_capacity(n);
        let mut text_to_id: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(n);
        for (i, word) in meta.tokens.into_iter().enumerate() {
            let word = if word.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                word
            };
            if let Some(&first) = text_to_id.get(word.as_bytes()) {
                return Err(TokenizerError::DuplicateToken {
                    text: word,
                    first,
                    second: i as u32,
                });
            }
            text_to_id.insert(word.as_bytes().into(), i as u32);
            texts.push(word);
        }
        let scores = match meta.scores {
            Some(mut s) => {
                s.truncate(n);
                s
            }
            None => vec![0.0; n],
        };
        let mut attrs: Vec<u16> = match &meta.token_types {
            Some(t) => t[..n].iter().map(|&t| attr_from_type(t)).collect(),
            None => vec![attr::NORMAL; n],
        };

        let mut merge_ranks = HashMap::new();
        if kind == VocabKind::Bpe {
            let merges = meta.merges.ok_or(TokenizerError::MissingKey {
                key: "tokenizer.ggml.merges",
            })?;
            for (rank, m) in merges.iter().enumerate() {
                // Split at the first space after the first byte, as llama.cpp does; a line
                // without one becomes the ("", "") pair, which can never match.
                let (l, r) = match m.bytes().skip(1).position(|b| b == b' ') {
                    Some(p) => (&m[..p + 1], &m[p + 2..]),
                    None => ("", ""),
                };
                merge_ranks
                    .entry(format!("{l} {r}").into_boxed_str())
                    .or_insert(rank as u32);
            }
        }

        // Special ids: metadata wins when in range; out-of-range defaults are disabled.
        bos = in_range(bos, n);
        eos = in_range(eos, n);
        unk = in_range(unk, n);
        let mut pad = None;
        let mut eot = None;
        let mut eom = None;
        let override_id = |slot: &mut Option<u32>, v: Option<u32>| {
            if let Some(id) = in_range(v, n) {
                *slot = Some(id);
            }
        };
        override_id(&mut bos, meta.cls_id);
        override_id(&mut bos, meta.bos_id);
        override_id(&mut eos, meta.eos_id);
        if kind == VocabKind::Wpm {
            override_id(&mut eos, meta.separator_id);
        }
        override_id(&mut unk, meta.unknown_id);
        override_id(&mut pad, meta.padding_id);
        override_id(&mut eot, meta.eot_id);
        override_id(&mut eom, meta.eom_id);

        // WordPiece always adds [CLS] and [SEP] (llama.cpp ignores the flags for it).
        if kind != VocabKind::Wpm {
            if let Some(v) = meta.add_bos {
                add_bos = v;
            }
            if let Some(v) = meta.add_eos {
                add_eos = v;
            }
        }
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken {
                add_key: "tokenizer.ggml.add_bos_token",
                id_key: "tokenizer.ggml.bos_token_id",
            });
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken {
                add_key: "tokenizer.ggml.add_eos_token",
                id_key: "tokenizer.ggml.eos_token_id",
            });
        }

        // Name-based detection. llama.cpp walks a hash map (unspecified order); we walk ids in
        // ascending order, so with several candidates of one kind the lowest id wins.
        let find_first = |names: &[&str]| -> Option<u32> {
            names
                .iter()
                .filter_map(|name| text_to_id.get(name.as_bytes()).copied())
                .min()
        };
        let mark_control = |id: u32, attrs: &mut Vec<u16>| attrs[id as usize] |= attr::CONTROL;
        if eot.is_none() {
            eot = find_first(EOT_NAMES);
            if let Some(id) = eot {
                mark_control(id, &mut attrs);
            }
        }
        if eom.is_none() {
            eom = find_first(EOM_NAMES);
            if let Some(id) = eom {
                mark_control(id, &mut attrs);
            }
        }
        let mut fim_eog = Vec::new();
        let mut found = [None; 6];
        for (i, names) in [
            FIM_PRE_NAMES,
            FIM_SUF_NAMES,
            FIM_MID_NAMES,
            FIM_PAD_NAMES,
            FIM_REP_NAMES,
            FIM_SEP_NAMES,
        ]
        .iter()
        .enumerate()
        {
            if let Some(id) = find_first(names) {
                found[i] = Some(id);
                mark_control(id, &mut attrs);
                // pad, repo and file-separator FIM tokens also end generation.
                if i >= 3 {
                    fim_eog.push(id);
                }
            }
        }

        let [fim_pre, suf, mid, fim_pad, rep, sep] = found;
        let fim = FimTokens {
            pre: fim_pre,
            suf,
            mid,
            pad: fim_pad,
            rep,
            sep,
        };
        let mut eog: Vec<u32> = fim_eog;
        for name in EOG_NAMES {
            if let Some(&id) = text_to_id.get(name.as_bytes()) {
                eog.push(id);
                mark_control(id, &mut attrs);
            }
        }
        for name in ALWAYS_RENDERED_NAMES {
            if let Some(&id) = text_to_id.get(name.as_bytes()) {
                attrs[id as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend(eos);
        eog.extend(eot);
        eog.extend(eom);
        eog.sort_unstable();
        eog.dedup();

        let id_of = |name: &str| text_to_id.get(name.as_bytes()).copied();
        let eog_has = |eog: &[u32], name: &str| id_of(name).is_some_and(|id| eog.contains(&id));
        // Harmony / solar-open: `<|end|>` closes a message but does not end generation.
        if eog_has(&eog, "<|end|>")
            && ((eog_has(&eog, "<|return|>")
                && (eog_has(&eog, "<|call|>") || eog_has(&eog, "<|calls|>")))
                || ((eog_has(&eog, "<|call|>") || eog_has(&eog, "<|calls|>"))
                    && eog_has(&eog, "<|flush|>")))
        {
            let end = id_of("<|end|>").expect("checked above");
            eog.retain(|&id| id != end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
        // Gemma 4 / PaddleOCR: `</s>` is ordinary text there.
        if eog_has(&eog, "<|tool_response>") && eog_has(&eog, "</s>") {
            let s = id_of("</s>").expect("checked above");
            eog.retain(|&id| id != s);
            attrs[s as usize] = attr::NORMAL;
        }

        let mut special_by_len: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        special_by_len.sort_by(|&a, &b| texts[b as usize].len().cmp(&texts[a as usize].len()));

        let lowercase = meta.lowercase.unwrap_or(true);
        let strip_accents = meta.strip_accents.unwrap_or(lowercase);
        let max_token_len = texts.iter().map(String::len).max().unwrap_or(0);
        Ok(Vocab {
            kind,
            pre,
            lowercase,
            strip_accents,
            max_token_len,
            texts,
            scores,
            attrs,
            text_to_id,
            merge_ranks,
            bos,
            eos,
            eot,
            unk,
            pad,
            add_bos,
            add_eos,
            add_space_prefix,
            ignore_merges,
            eog,
            fim,
            special_by_len,
        })
    }

    pub fn lookup(&self, text: &[u8]) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }

    pub fn has_attr(&self, id: u32, bits: u16) -> bool {
        self.attrs.get(id as usize).is_some_and(|a| a & bits != 0)
    }

    /// The token for one raw byte in an SPM vocabulary: `<0xNN>`, else the byte as a
    /// one-character token, else UNK (llama.cpp would abort here).
    pub fn spm_byte_token(&self, b: u8) -> Option<u32> {
        let hex = format!("<0x{b:02X}>");
        self.lookup(hex.as_bytes())
            .or_else(|| self.lookup(&[b]))
            .or(self.unk)
    }
}
