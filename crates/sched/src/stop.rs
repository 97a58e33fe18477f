//! The stop matcher: the one place that decides when a request's text ends and what text a
//! token may release.
//!
//! Every path goes through it (there is one decode path), so EOS, end-of-turn tokens, the
//! request's stop ids and its stop strings are honoured the same way everywhere.
//!
//! It keeps two things back from the client:
//! - **bytes of an unfinished UTF-8 character**: a token may end in the middle of a character
//!   (byte-fallback tokens, or a BPE piece cut inside an emoji); those bytes wait for the next
//!   token, so no character is ever broken into replacement characters. Truly invalid bytes
//!   become U+FFFD, one per maximal invalid run, as `String::from_utf8_lossy` would do;
//! - **a tail that could still become a stop string**: the longest suffix of the decoded text
//!   that is a prefix of some stop string. Everything before it can never be part of a match
//!   (a match starting earlier would either be complete already or be such a suffix), so it is
//!   released now; the tail waits until a later token completes the stop string (the tail and
//!   the stop string are dropped, the text before it released) or rules it out (released).
//!
//! Held text is bounded by the longest stop string plus three bytes, so each token costs a
//! search over a short buffer, not over the whole output. At the end of the request the held
//! text is flushed ([`StopMatcher::finish`]): it never became a stop string, so it is output.

use crate::request::{StopConfig, StopMatch};

/// Per-request stop state. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stop_strings: Vec<String>,
    stop_token_ids: Vec<u32>,
    ignore_eos: bool,
    /// Bytes of an incomplete UTF-8 character at the end of the output.
    undecoded: Vec<u8>,
    /// Decoded text not yet released: a possible stop-string prefix.
    held: String,
}

/// What one token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopStep {
    /// Text this token releases (possibly empty).
    pub released: String,
    /// Set when the token ended the request; no text after this is ever released.
    pub stopped_by: Option<StopMatch>,
}

impl StopMatcher {
    pub fn new(config: &StopConfig) -> Self {
        Self {
            stop_strings: config
                .stop_strings
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
            stop_token_ids: config.stop_token_ids.clone(),
            ignore_eos: config.ignore_eos,
            undecoded: Vec::new(),
            held: String::new(),
        }
    }

    /// Feeds one sampled token: its id, whether the model calls it end-of-generation, and the
    /// bytes it adds to the text. A stop token adds no text; what was held stays held for
    /// [`finish`](Self::finish).
    pub fn push(&mut self, id: u32, is_eog: bool, bytes: &[u8]) -> StopStep {
        if self.stop_token_ids.contains(&id) || (is_eog && !self.ignore_eos) {
            return StopStep {
                released: String::new(),
                stopped_by: Some(StopMatch::TokenId(id)),
            };
        }
        self.decode(bytes);
        if let Some((at, stop)) = self.earliest_stop() {
            let released = self.held[..at].to_owned();
            self.held.clear();
            self.undecoded.clear();
            return StopStep {
                released,
                stopped_by: Some(StopMatch::String(stop)),
            };
        }
        let keep_from = self.possible_stop_start();
        let released = self.held[..keep_from].to_owned();
        self.held.drain(..keep_from);
        StopStep {
            released,
            stopped_by: None,
        }
    }

    /// Releases everything held back (an unfinished character becomes U+FFFD). Called once,
    /// when the request ends for any reason other than a stop string.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&String::from_utf8_lossy(&self.undecoded));
        self.undecoded.clear();
        out
    }

    /// Moves every complete character (and U+FFFD for each invalid run) from `undecoded` to
    /// `held`, keeping an incomplete character at the end.
    fn decode(&mut self, bytes: &[u8]) {
        self.undecoded.extend_from_slice(bytes);
        let mut start = 0;
        while start < self.undecoded.len() {
            match std::str::from_utf8(&self.undecoded[start..]) {
                Ok(text) => {
                    self.held.push_str(text);
                    start = self.undecoded.len();
                }
                Err(e) => {
                    let valid = &self.undecoded[start..start + e.valid_up_to()];
                    self.held.push_str(
                        std::str::from_utf8(valid).expect("prefix up to valid_up_to is UTF-8"),
                    );
                    start += e.valid_up_to();
                    match e.error_len() {
                        Some(n) => {
                            self.held.push(char::REPLACEMENT_CHARACTER);
                            start += n;
                        }
                        None => break, // an unfinished character: wait for more bytes
                    }
                }
            }
        }
        self.undecoded.drain(..start);
    }

    /// The earliest complete stop string in `held` (ties: the one listed first).
    fn earliest_stop(&self) -> Option<(usize, String)> {
        self.stop_strings
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at)
            .map(|(at, s)| (at, s.clone()))
    }

    /// Where the longest suffix of `held` that is a proper prefix of a stop string begins
    /// (`held.len()` if there is none).
    fn possible_stop_start(&self) -> usize {
        let longest = self.stop_strings.iter().map(String::len).max().unwrap_or(0);
        let lowest = self.held.len().saturating_sub(longest.saturating_sub(1));
        self.held
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= lowest)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stop_strings.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&StopConfig {
            stop_strings: stops.iter().map(|s| s.to_string()).collect(),
            stop_token_ids: vec![99],
            ignore_eos: false,
        })
    }

    /// Feeds `tokens` (as byte strings); returns what each released and how it ended.
    fn run(m: &mut StopMatcher, tokens: &[&[u8]]) -> (Vec<String>, Option<StopMatch>, String) {
        let mut released = Vec::new();
        for t in tokens {
            let step = m.push(1, false, t);
            released.push(step.released);
            if step.stopped_by.is_some() {
                return (released, step.stopped_by, String::new());
            }
        }
        let flushed = m.finish();
        (released, None, flushed)
    }

    #[test]
    fn stop_string_across_token_boundaries_is_not_emitted() {
        let mut m = matcher(&["STOP"]);
        let (rel, by, _) = run(&mut m, &[b"hello S", b"T", b"OP and more"]);
        assert_eq!(rel, vec!["hello ", "", ""]);
        assert_eq!(by, Some(StopMatch::String("STOP".into())));
    }

    #[test]
    fn withheld_tail_is_released_when_ruled_out() {
        let mut m = matcher(&["STOP"]);
        let (rel, by, flushed) = run(&mut m, &[b"a ST", b"O", b"x", b"ST"]);
        assert_eq!(rel, vec!["a ", "", "STOx", ""]);
        assert_eq!((by, flushed.as_str()), (None, "ST"));
    }

    #[test]
    fn text_before_the_stop_in_the_same_token_is_released() {
        let mut m = matcher(&["\n\n", "END"]);
        let (rel, by, _) = run(&mut m, &[b"one\ntwo", b"ENDthree"]);
        assert_eq!(rel, vec!["one\ntwo", ""]);
        assert_eq!(by, Some(StopMatch::String("END".into())));
        // Two stop strings completed by the same token: the one starting first wins.
        let mut m = matcher(&["bc", "abcd"]);
        let (rel, by, _) = run(&mut m, &[b"xab", b"cd"]);
        assert_eq!(rel, vec!["x", ""]);
        assert_eq!(by, Some(StopMatch::String("abcd".into())));
        // A stop string completed by an earlier token wins over a longer one still forming.
        let mut m = matcher(&["bc", "abcd"]);
        let (rel, by, _) = run(&mut m, &[b"xab", b"c", b"d"]);
        assert_eq!(rel, vec!["x", "a"]);
        assert_eq!(by, Some(StopMatch::String("bc".into())));
    }

    #[test]
    fn utf8_split_across_tokens_is_never_broken() {
        let euro = "€".as_bytes(); // E2 82 AC
        let mut m = matcher(&[]);
        let (rel, _, flushed) = run(&mut m, &[b"1", &euro[..1], &euro[1..2], &euro[2..], b"!"]);
        assert_eq!(rel, vec!["1", "", "", "€", "!"]);
        assert_eq!(flushed, "");
        // A stop string made of a multi-byte character, split across tokens.
        let mut m = matcher(&["€"]);
        let (rel, by, _) = run(&mut m, &[b"a", &euro[..2], &euro[2..]]);
        assert_eq!(rel, vec!["a", "", ""]);
        assert_eq!(by, Some(StopMatch::String("€".into())));
        // Generation ending mid-character flushes a replacement character.
        let mut m = matcher(&[]);
        let (_, _, flushed) = run(&mut m, &[&euro[..2]]);
        assert_eq!(flushed, "\u{FFFD}");
        // An invalid byte becomes U+FFFD at once; the text around it is kept.
        let mut m = matcher(&[]);
        let (rel, _, _) = run(&mut m, &[b"a\xFFb"]);
        assert_eq!(rel, vec!["a\u{FFFD}b"]);
    }

    #[test]
    fn stop_tokens_eog_and_ignore_eos() {
        let mut m = matcher(&["zz"]);
        assert_eq!(m.push(1, false, b"xz").released, "x");
        let step = m.push(7, true, b"<eos>");
        assert_eq!(step.stopped_by, Some(StopMatch::TokenId(7)));
        assert_eq!(m.finish(), "z", "the held tail is output at the end");
        let mut m = StopMatcher::new(&StopConfig {
            stop_strings: vec![],
            stop_token_ids: vec![5],
            ignore_eos: true,
        });
        assert_eq!(m.push(7, true, b"e").stopped_by, None);
        assert_eq!(
            m.push(5, false, b"").stopped_by,
            Some(StopMatch::TokenId(5))
        );
    }

    /// Random token streams over an alphabet rich in partial stop strings and split
    /// characters: what is released, then flushed, always equals the whole text cut before
    /// its first stop string, and nothing released ever contains a stop string. (No stop set
    /// here lets one stop string complete inside another's span, where "first completed" and
    /// "first started" would differ; the unit test above pins that case.)
    #[test]
    fn random_streams_release_exactly_the_text_before_the_first_stop() {
        let pieces: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"ab".to_vec(),
            b"ba".to_vec(),
            b" ".to_vec(),
            vec![0xE2],
            vec![0x82, 0xAC],
            vec![0xAC],
            "é".as_bytes().to_vec(),
            vec![0xC3],
            vec![0xA9, b'a'],
            vec![0xFF],
        ];
        let stop_sets: Vec<Vec<&str>> = vec![
            vec!["abba"],
            vec!["aab", "€a"],
            vec!["é a", "bbb"],
            vec!["\u{FFFD}b"],
            vec![],
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for round in 0..3000 {
            let stops = &stop_sets[round % stop_sets.len()];
            let n = rng.gen_range(0..30);
            let tokens: Vec<&[u8]> = (0..n)
                .map(|_| pieces[rng.gen_range(0..pieces.len())].as_slice())
                .collect();
            let all: Vec<u8> = tokens.concat();
            let full = String::from_utf8_lossy(&all).into_owned();
            let first = stops.iter().filter_map(|s| full.find(s)).min();
            let expected = &full[..first.unwrap_or(full.len())];

            let mut m = matcher(stops);
            let (rel, by, flushed) = run(&mut m, &tokens);
            for r in &rel {
                assert!(stops.iter().all(|s| !r.contains(s)), "{tokens:?}");
            }
            let got = rel.concat() + &flushed;
            assert_eq!(got, expected, "tokens {tokens:?} stops {stops:?}");
            assert_eq!(by.is_some(), first.is_some());
        }
    }
}
