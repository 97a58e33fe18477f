//! SentencePiece-style tokenization of one text fragment (llama.cpp's `llm_tokenizer_spm`).
//!
//! The fragment (spaces already escaped to U+2581) is split into UTF-8 characters; then the
//! adjacent pair whose concatenation is a vocabulary token with the highest score is merged,
//! repeatedly, until no adjacent pair forms a token. Ties go to the leftmost pair. Any token
//! type counts as a merge target (llama.cpp does not filter control or unused tokens here).
//! A final piece that is not a token is a single character: it is emitted as its UTF-8
//! bytes through the `<0xNN>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// One piece of the fragment: a byte range, linked to its neighbours. `len == 0` marks a
/// piece that was merged into its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` and its right neighbour into a token of `score`.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Byte length of the merged text when the candidate was made; a stale candidate (one
    /// side already merged elsewhere) no longer adds up to it.
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenize `text` (already whitespace-escaped) and append the ids to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    let bytes = text.as_bytes();
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: None,
        });
        if i > 0 {
            symbols[i - 1].next = Some(i);
        }
    }

    let mut queue = BinaryHeap::new();
    let try_add =
        |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
            let (l, r) = (symbols[left], symbols[right]);
            let merged = &bytes[l.start..l.start + l.len + r.len];
            if let Some(id) = vocab.lookup(merged) {
                queue.push(Bigram {
                    score: vocab.scores[id as usize],
                    left,
                    right,
                    size: merged.len(),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&mut queue, &symbols, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        symbols[b.left].len += r.len;
        symbols[b.right].len = 0;
        symbols[b.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(b.left);
        }
        if let Some(p) = symbols[b.left].prev {
            try_add(&mut queue, &symbols, p, b.left);
        }
        if let Some(n) = symbols[b.left].next {
            try_add(&mut queue, &symbols, b.left, n);
        }
    }

    let mut cur = Some(0);
    while let Some(i) = cur {
        let s = symbols[i];
        let piece = &bytes[s.start..s.start + s.len];
        match vocab.lookup(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.iter().filter_map(|&b| vocab.spm_byte_token(b))),
        }
        cur = s.next;
    }
}
