//! Byte-level BPE tokenization (llama.cpp's `llm_tokenizer_bpe_session`).
//!
//! Each pre-tokenized word is first byte-encoded (every UTF-8 byte becomes one printable code
//! point, GPT-2's `bytes_to_unicode` table), then split into characters, and the adjacent pair
//! with the lowest merge rank is merged until no ranked pair remains (ties: leftmost). A final
//! piece that is not a token falls back to its bytes looked up as one-byte tokens; bytes
//! without such a token are dropped, as llama.cpp drops them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use super::pretokenize;
use super::vocab::Vocab;

/// GPT-2's byte to code point table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100.. in byte order.
pub(crate) fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..256u32 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            t[b as usize] = if printable {
                char::from_u32(b).expect("Latin-1 is valid")
            } else {
                let c = char::from_u32(next).expect("U+0100.. is valid");
                next += 1;
                c
            };
        }
        t
    })
}

/// The inverse of [`byte_to_char_table`]: code point to byte, for decoding.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cp as u8),
        0x100..=0x143 => {
            let table = byte_to_char_table();
            table.iter().position(|&t| t == c).map(|b| b as u8)
        }
        _ => None,
    }
}

/// Byte-encode `word`.
pub(crate) fn encode_bytes(word: &str) -> String {
    let table = byte_to_char_table();
    word.bytes().map(|b| table[b as usize]).collect()
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    /// The merged text when the candidate was made, to detect stale candidates.
    text: String,
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
    /// Max-heap order: lowest rank first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenize one raw-text fragment and append the ids to `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let mut key = String::new();
    for word in pretokenize::split(vocab.pre, text) {
        let word = encode_bytes(&word);
        merge_word(vocab, &word, &mut key, out);
    }
}

fn merge_word(vocab: &Vocab, word: &str, key: &mut String, out: &mut Vec<u32>) {
    if word.is_empty() {
        return;
    }
    if vocab.ignore_merges {
        if let Some(id) = vocab.lookup(word.as_bytes()) {
            out.push(id);
            return;
        }
    }
    let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
    for (i, (start, c)) in word.char_indices().enumerate() {
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
    let piece = |s: &Symbol| &word[s.start..s.start + s.len];

    let mut queue = BinaryHeap::new();
    let mut try_add =
        |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
            let (l, r) = (piece(&symbols[left]), piece(&symbols[right]));
            key.clear();
            key.push_str(l);
            key.push(' ');
            key.push_str(r);
            if let Some(&rank) = vocab.merge_ranks.get(key.as_str()) {
                queue.push(Bigram {
                    rank,
                    left,
                    right,
                    text: format!("{l}{r}"),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&mut queue, &symbols, i - 1, i);
    }
    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        if l.len == 0 || r.len == 0 {
            continue;
        }
        // Stale unless the two pieces still spell the candidate's text side by side.
        if l.next != Some(b.right)
            || l.len + r.len != b.text.len()
            || word[l.start..l.start + l.len + r.len] != b.text
        {
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
        let s = &symbols[i];
        let text = piece(s);
        match vocab.lookup(text.as_bytes()) {
            Some(id) => out.push(id),
            None => out.extend(text.bytes().filter_map(|b| vocab.lookup(&[b]))),
        }
        cur = s.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_a_bijection() {
        let t = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(encode_bytes("é"), "Ã©");
    }
}
