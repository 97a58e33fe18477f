//! BPE pre-tokenization: split text into words before merges run inside each word.
//!
//! llama.cpp states each pre-tokenizer as a list of regexes applied in sequence: every regex
//! splits each current chunk into its matches *and* the gaps between them. For the GPT-2 and
//! Llama 3 regexes it uses hand-written splitters instead of a regex engine; Qwen 2's regex
//! goes through `std::regex` over a "collapsed" text where each non-ASCII code point stands
//! for its category. We write every splitter by hand over code-point classes, which gives the
//! same words as those paths (the Qwen 2 regex is the Llama 3 one with single digits, and
//! the hand-written Llama 3 splitter is exactly that regex's leftmost-first semantics).
//!
//! Chunks are lists of code-point counts covering the text, in order.

use super::unicode::{Class, Flags};
use super::vocab::PreTokenizer;

/// Split `text` into words for `pre`.
pub(crate) fn split(pre: PreTokenizer, text: &str) -> Vec<String> {
    let cpts: Vec<char> = text.chars().collect();
    let flags: Vec<Flags> = cpts.iter().map(|&c| Flags::of(c)).collect();
    let whole = vec![cpts.len()];
    let chunks = match pre {
        PreTokenizer::Gpt2 => split_gpt2(&cpts, &flags, &whole),
        PreTokenizer::Llama3 => split_llama3(&cpts, &flags, &whole, 3),
        PreTokenizer::Qwen2 => split_llama3(&cpts, &flags, &whole, 1),
        PreTokenizer::Gpt4o => split_gpt4o(&cpts, &flags, &whole, true, 3),
        PreTokenizer::Tekken => split_gpt4o(&cpts, &flags, &whole, false, 1),
        PreTokenizer::Starcoder => {
            let c = split_each(&flags, &whole, Flags::is_number);
            split_gpt2(&cpts, &flags, &c)
        }
        PreTokenizer::Falcon => {
            let c = split_runs(&cpts, &flags, &whole, |c, f| {
                c == '`' || is_default_punct(c, f)
            });
            let c = split_gpt2(&cpts, &flags, &c);
            split_ascii_digit_triples(&cpts, &c)
        }
        PreTokenizer::Default => {
            let c = split_runs(&cpts, &flags, &whole, is_default_punct);
            let c = split_gpt2(&cpts, &flags, &c);
            let c = split_runs(&cpts, &flags, &c, |_, f| f.is_number());
            split_ascii_digit_triples(&cpts, &c)
        }
    };
    let mut words = Vec::with_capacity(chunks.len());
    let mut start = 0;
    for len in chunks {
        words.push(cpts[start..start + len].iter().collect());
        start += len;
    }
    words
}

/// Walks one chunk and records word boundaries (the `_add_token` of llama.cpp's splitters).
struct Cuts<'a> {
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Cuts<'_> {
    /// End the current word at `end`; returns its length (0 adds nothing).
    fn cut(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

/// Iterate `(start, end)` code-point ranges of `chunks`.
fn ranges(chunks: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    chunks.iter().scan(0, |start, &len| {
        let r = (*start, *start + len);
        *start += len;
        Some(r)
    })
}

/// Reads code points and classes inside one chunk; outside it they read as "nothing".
struct Window<'a> {
    cpts: &'a [char],
    flags: &'a [Flags],
    ini: usize,
    end: usize,
}

impl Window<'_> {
    fn cpt(&self, pos: usize) -> Option<char> {
        (self.ini <= pos && pos < self.end).then(|| self.cpts[pos])
    }
    fn flags(&self, pos: usize) -> Option<Flags> {
        (self.ini <= pos && pos < self.end).then(|| self.flags[pos])
    }
    fn is_letter(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(Flags::is_letter)
    }
    fn is_number(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(Flags::is_number)
    }
    fn is_whitespace(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(|f| f.whitespace)
    }
    /// `[^\s\p{L}\p{N}]`: a code point that is none of whitespace, letter, number.
    fn is_other(&self, pos: usize) -> bool {
        self.flags(pos)
            .is_some_and(|f| !f.whitespace && !f.is_letter() && !f.is_number())
    }
    /// Length of the whitespace run at `pos`, and the end of its last `\r`/`\n` (if any).
    fn whitespace_run(&self, pos: usize) -> (usize, Option<usize>) {
        let mut n = 0;
        let mut last_newline_end = None;
        while self.is_whitespace(pos + n) {
            if matches!(self.cpt(pos + n), Some('\r' | '\n')) {
                last_newline_end = Some(pos + n + 1);
            }
            n += 1;
        }
        (n, last_newline_end)
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
fn split_gpt2(cpts: &[char], flags: &[Flags], chunks: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let w = Window {
            cpts,
            flags,
            ini,
            end,
        };
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        let mut pos = ini;
        while pos < end {
            let cpt = cpts[pos];
            if let Some(n) = contraction_len(&w, pos, false) {
                pos += cuts.cut(pos + n);
                continue;
            }
            // ` ?X+` for X in letter / number / other: the optional space joins the run.
            let look = if cpt == ' ' { pos + 1 } else { pos };
            let classes: [&dyn Fn(usize) -> bool; 3] =
                [&|p| w.is_letter(p), &|p| w.is_number(p), &|p| w.is_other(p)];
            if let Some(class) = classes.iter().find(|class| class(look)) {
                pos = look;
                while class(pos) {
                    pos += 1;
                }
                cuts.cut(pos);
                continue;
            }
            let (n_ws, _) = w.whitespace_run(pos);
            if n_ws > 1 && pos + n_ws < end {
                // `\s+(?!\S)`: leave the last space to join the next word.
                pos += n_ws - 1;
                cuts.cut(pos);
                continue;
            }
            if n_ws > 0 {
                pos += n_ws;
                cuts.cut(pos);
                continue;
            }
            pos += 1;
            cuts.cut(pos);
        }
    }
    out
}

/// Length of an English contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at `pos`;
/// `fold_case` accepts upper-case letters too (Llama 3 / Qwen 2).
fn contraction_len(w: &Window, pos: usize, fold_case: bool) -> Option<usize> {
    if w.cpt(pos) != Some('\'') || pos + 1 >= w.end {
        return None;
    }
    let lower = |p: usize| {
        w.cpt(p).map(|c| {
            if fold_case {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                c
            }
        })
    };
    if let Some('s' | 't' | 'm' | 'd') = lower(pos + 1) {
        return Some(2);
    }
    if pos + 2 < w.end {
        match (lower(pos + 1), lower(pos + 2)) {
            (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => {
                return Some(3)
            }
            _ => {}
        }
    }
    None
}

/// Llama 3 (`max_digits = 3`) and Qwen 2 (`max_digits = 1`):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn split_llama3(cpts: &[char], flags: &[Flags], chunks: &[usize], max_digits: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let w = Window {
            cpts,
            flags,
            ini,
            end,
        };
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        let mut pos = ini;
        while pos < end {
            let cpt = cpts[pos];
            let f = flags[pos];
            if let Some(n) = contraction_len(&w, pos, true) {
                pos += cuts.cut(pos + n);
                continue;
            }
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            if !(cpt == '\r' || cpt == '\n' || f.is_number())
                && (f.is_letter() || w.is_letter(pos + 1))
            {
                pos += 1;
                while w.is_letter(pos) {
                    pos += 1;
                }
                cuts.cut(pos);
                continue;
            }
            // `\p{N}{1,max}`
            if f.is_number() {
                let mut run_start = pos;
                while w.is_number(pos) {
                    pos += 1;
                    if pos - run_start >= max_digits {
                        cuts.cut(pos);
                        run_start = pos;
                    }
                }
                cuts.cut(pos);
                continue;
            }
            pos = punct_or_space_end(&w, pos, &['\r', '\n']);
            cuts.cut(pos);
        }
    }
    out
}

/// The end of the word at `pos` by the last alternatives Llama 3's and gpt-4o's regexes share,
/// ` ?[^\s\p{L}\p{N}]+[trail]*|\s*[\r\n]+|\s+(?!\S)|\s+`, else the one code point; `trail` is
/// what may follow a punctuation run (`\r\n`, and gpt-4o's `/`).
fn punct_or_space_end(w: &Window, pos: usize, trail: &[char]) -> usize {
    let cpt = w.cpts[pos];
    let look = if cpt == ' ' { pos + 1 } else { pos };
    if w.is_other(look) || (cpt == ' ' && look >= w.end) {
        // (A lone trailing space also lands here in llama.cpp's splitter and becomes its own
        // word, which is what `\s+` would give.)
        let mut e = look;
        while w.is_other(e) {
            e += 1;
        }
        while w.cpt(e).is_some_and(|c| trail.contains(&c)) {
            e += 1;
        }
        return e;
    }
    let (n_ws, last_newline_end) = w.whitespace_run(pos);
    match last_newline_end {
        // `\s*[\r\n]+`
        Some(e) => e,
        // `\s+(?!\S)`: leave the last space to the next word.
        None if n_ws > 1 && pos + n_ws < w.end => pos + n_ws - 1,
        // `\s+`
        None if n_ws > 0 => pos + n_ws,
        None => pos + 1,
    }
}

/// gpt-4o / o200k (gpt-oss), as llama.cpp states it:
/// `[^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
/// where `U` is a letter that is not `a-z`, `L` a letter that is not `A-Z` (a non-ASCII
/// letter is both) and `C` a contraction of either case. Leftmost-first, as a backtracking
/// engine runs it: `U*` takes the longest run, then gives letters back until `L+` can start,
/// so `HTMLParser` is one word and `helloWorld` two (`hello`, `World`); when no `L` can
/// follow, the second alternative takes the upper-case run alone (`ABC`).
/// gpt-4o's regex, and Mistral's Tekken: the same without the contractions (`contractions`
/// false) and with `digits` 1 instead of 3.
fn split_gpt4o(
    cpts: &[char],
    flags: &[Flags],
    chunks: &[usize],
    contractions: bool,
    digits: usize,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let w = Window {
            cpts,
            flags,
            ini,
            end,
        };
        let upper = |p: usize| w.is_letter(p) && !w.cpt(p).is_some_and(|c| c.is_ascii_lowercase());
        let lower = |p: usize| w.is_letter(p) && !w.cpt(p).is_some_and(|c| c.is_ascii_uppercase());
        // The end of the letters part of a word starting at `p` (a letter), contraction included.
        let letters = |p: usize| -> usize {
            let mut u_end = p;
            while upper(u_end) {
                u_end += 1;
            }
            // `U*L+`: the longest `U*` after which an `L` starts.
            let l_start = (p..=u_end).rev().find(|&k| lower(k));
            let mut e = match l_start {
                Some(k) => {
                    let mut e = k;
                    while lower(e) {
                        e += 1;
                    }
                    e
                }
                // `U+L*`: no `L` after any prefix of the run, so `L*` is empty.
                None => u_end,
            };
            if let Some(n) = contraction_len(&w, e, true).filter(|_| contractions) {
                e += n;
            }
            e
        };
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        let mut pos = ini;
        while pos < end {
            let cpt = cpts[pos];
            let f = flags[pos];
            // The optional prefix, then letters.
            if f.is_letter() {
                pos = letters(pos);
                cuts.cut(pos);
                continue;
            }
            if !(cpt == '\r' || cpt == '\n' || f.is_number()) && w.is_letter(pos + 1) {
                pos = letters(pos + 1);
                cuts.cut(pos);
                continue;
            }
            // `\p{N}{1,3}` (Tekken: `\p{N}`)
            if f.is_number() {
                let mut n = 0;
                while n < digits && w.is_number(pos) {
                    pos += 1;
                    n += 1;
                }
                cuts.cut(pos);
                continue;
            }
            pos = punct_or_space_end(&w, pos, &['\r', '\n', '/']);
            cuts.cut(pos);
        }
    }
    out
}

/// The first regex of llama.cpp's default chain, `[\p{P}\$\+<=>\^~\|]+`, as evaluated over its
/// collapsed text: ASCII punctuation and symbols except the backtick, plus non-ASCII
/// punctuation that is not whitespace.
fn is_default_punct(c: char, f: Flags) -> bool {
    if c.is_ascii() {
        c.is_ascii_punctuation() && c != '`'
    } else {
        !f.whitespace && f.class == Class::Punctuation
    }
}

/// Split each chunk into maximal runs of code points satisfying `pred` and the gaps between.
fn split_runs(
    cpts: &[char],
    flags: &[Flags],
    chunks: &[usize],
    pred: impl Fn(char, Flags) -> bool,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        let mut pos = ini;
        while pos < end {
            if pred(cpts[pos], flags[pos]) {
                cuts.cut(pos);
                while pos < end && pred(cpts[pos], flags[pos]) {
                    pos += 1;
                }
                cuts.cut(pos);
            } else {
                pos += 1;
            }
        }
        cuts.cut(end);
    }
    out
}

/// A one-code-point regex such as `\p{N}`: every code point satisfying `pred` is its own
/// word; the gaps between stay whole.
fn split_each(flags: &[Flags], chunks: &[usize], pred: impl Fn(Flags) -> bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        for (pos, &f) in flags.iter().enumerate().take(end).skip(ini) {
            if pred(f) {
                cuts.cut(pos);
                cuts.cut(pos + 1);
            }
        }
        cuts.cut(end);
    }
    out
}

/// `[0-9][0-9][0-9]`: leftmost non-overlapping triples of ASCII digits, and the gaps.
fn split_ascii_digit_triples(cpts: &[char], chunks: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(chunks.len());
    for (ini, end) in ranges(chunks) {
        let mut cuts = Cuts {
            out: &mut out,
            prev_end: ini,
        };
        let mut pos = ini;
        while pos < end {
            if pos + 3 <= end && cpts[pos..pos + 3].iter().all(char::is_ascii_digit) {
                cuts.cut(pos);
                pos += 3;
                cuts.cut(pos);
            } else {
                pos += 1;
            }
        }
        cuts.cut(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreTokenizer, s: &str) -> Vec<String> {
        let w = split(pre, s);
        assert_eq!(w.concat(), s, "words must cover the text exactly");
        w
    }

    #[test]
    fn llama3_splits_contractions_digits_and_spaces() {
        assert_eq!(
            words(PreTokenizer::Llama3, "Hello world's 12345"),
            ["Hello", " world", "'s", " ", "123", "45"]
        );
        assert_eq!(
            words(PreTokenizer::Llama3, "I'M HERE"),
            ["I", "'M", " HERE"]
        );
        assert_eq!(words(PreTokenizer::Llama3, "a   b"), ["a", "  ", " b"]);
        assert_eq!(
            words(PreTokenizer::Llama3, "a  \n\n  b"),
            ["a", "  \n\n", " ", " b"]
        );
        assert_eq!(words(PreTokenizer::Llama3, "x   "), ["x", "   "]);
        assert_eq!(
            words(PreTokenizer::Llama3, "(hi)!\n\nok"),
            ["(hi", ")!\n\n", "ok"]
        );
        assert_eq!(words(PreTokenizer::Llama3, " ?? x"), [" ??", " x"]);
        assert_eq!(words(PreTokenizer::Llama3, "\tword"), ["\tword"]);
        assert_eq!(words(PreTokenizer::Llama3, "1234567"), ["123", "456", "7"]);
        assert_eq!(words(PreTokenizer::Llama3, "中文 text"), ["中文", " text"]);
        assert_eq!(words(PreTokenizer::Llama3, "end "), ["end", " "]);
    }

    #[test]
    fn qwen2_splits_every_digit() {
        assert_eq!(
            words(PreTokenizer::Qwen2, "x 2024!"),
            ["x", " ", "2", "0", "2", "4", "!"]
        );
    }

    #[test]
    fn gpt2_keeps_digit_runs_and_lowercase_contractions_only() {
        assert_eq!(
            words(PreTokenizer::Gpt2, "Hello world's 12345"),
            ["Hello", " world", "'s", " 12345"]
        );
        assert_eq!(words(PreTokenizer::Gpt2, "I'M"), ["I", "'", "M"]);
        assert_eq!(
            words(PreTokenizer::Gpt2, "a   b\n"),
            ["a", "  ", " b", "\n"]
        );
    }

    #[test]
    fn default_chain_isolates_punctuation_and_digit_triples() {
        assert_eq!(
            words(PreTokenizer::Default, "Hi, you!! 1234567 `x`"),
            ["Hi", ",", " you", "!!", " ", "123", "456", "7", " `", "x", "`"]
        );
    }

    /// o200k as llama.cpp states its regex, against that very regex run by Python's `regex`
    /// package (which has `\p{..}` classes and lookahead) on the same texts.
    #[test]
    fn gpt4o_matches_the_regex() {
        let cases: [(&str, &[&str]); 19] = [
            ("https://x.org/a", &["https", "://", "x", ".org", "/a"][..]),
            (
                "x = 1;\n// c\n",
                &["x", " =", " ", "1", ";\n//", " c", "\n"][..],
            ),
            (
                "Hello world's 12345",
                &["Hello", " world's", " ", "123", "45"][..],
            ),
            (
                "HTMLParser helloWorld ABC",
                &["HTMLParser", " hello", "World", " ABC"][..],
            ),
            (
                "I'M HERE, you're THERE's",
                &["I'M", " HERE", ",", " you're", " THERE's"][..],
            ),
            ("a   b", &["a", "  ", " b"][..]),
            ("a  \n\n  b", &["a", "  \n\n", " ", " b"][..]),
            ("x   ", &["x", "   "][..]),
            ("(hi)!\n\nok", &["(hi", ")!\n\n", "ok"][..]),
            (" ?? x", &[" ??", " x"][..]),
            ("\tword", &["\tword"][..]),
            (
                "path/to/file.rs\n",
                &["path", "/to", "/file", ".rs", "\n"][..],
            ),
            (
                "ÉCOLE école Straße ΑΘΗΝΑ",
                &["É", "COLE", " école", " Straße", " ΑΘΗΝΑ"][..],
            ),
            ("中文字符 and 日本語", &["中文字符", " and", " 日本語"][..]),
            ("emoji 😀👍 ok", &["emoji", " 😀👍", " ok"][..]),
            (
                "def f(x):\n    return x**2  # sq\n",
                &[
                    "def", " f", "(x", "):\n", "   ", " return", " x", "**", "2", " ", " #", " sq",
                    "\n",
                ][..],
            ),
            (
                "1234567 3.14159",
                &["123", "456", "7", " ", "3", ".", "141", "59"][..],
            ),
            ("don'T can'T", &["don'T", " can'T"][..]),
            ("  \r\n\r\n  x", &["  \r\n\r\n", " ", " x"][..]),
        ];
        for (text, want) in cases {
            assert_eq!(words(PreTokenizer::Gpt4o, text), want, "{text:?}");
        }
    }
}
