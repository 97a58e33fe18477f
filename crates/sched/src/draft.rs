//! Drafting tokens from a row's own history: prompt-lookup (n-gram) speculation.
//!
//! Text that a model writes often repeats text it has seen: a file returned with a few lines
//! changed, a quoted passage, JSON re-emitted with one field renamed, an answer that restates
//! its reasoning. When the last few tokens of a row occurred earlier in its prompt or output,
//! the tokens that followed them then are a good guess for what follows now, and checking a
//! guess of `k` tokens costs one step of `k + 1` positions instead of `k + 1` steps
//! (`crate::speculate` decides how long a guess is worth checking).
//!
//! [`NgramDrafter`] keeps, for every n-gram of `N_MIN..=N_MAX` tokens in the row, where its
//! latest occurrence ended, and proposes the continuation of the longest n-gram that ends the
//! row. It is the row's own: it never reads another request's tokens, so what a request is
//! drafted, and therefore its timing, depends on nothing but its own text.

use std::collections::HashMap;

/// The longest suffix looked up: longer matches are rarer and barely more reliable.
const N_MAX: usize = 4;
/// The shortest: a single repeated token predicts its successor too poorly to pay.
const N_MIN: usize = 2;

/// Where each n-gram of a row's tokens last ended, built as the row grows.
#[derive(Debug, Default)]
pub(crate) struct NgramDrafter {
    /// `key(n-gram)` → the position just past its latest occurrence (indexed so far).
    last_end: HashMap<u64, u32>,
    /// Every occurrence ending at or before this position is indexed.
    indexed: usize,
}

/// A 64-bit name of `tokens` (its length included), well mixed.
fn key(tokens: &[u32]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64 ^ tokens.len() as u64;
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 29;
    }
    h
}

impl NgramDrafter {
    /// Appends to `out` (cleared first) up to `max` tokens guessed to follow `tokens`: what
    /// followed the latest earlier occurrence of the longest n-gram that ends `tokens`.
    /// Nothing when no such n-gram occurred before.
    pub(crate) fn propose(&mut self, tokens: &[u32], max: usize, out: &mut Vec<u32>) {
        out.clear();
        let len = tokens.len();
        // Index every occurrence that ends before the current end: the current suffix must
        // find an earlier one, never itself.
        for end in self.indexed.max(N_MIN)..len {
            for n in N_MIN..=N_MAX.min(end) {
                self.last_end.insert(key(&tokens[end - n..end]), end as u32);
            }
        }
        self.indexed = self.indexed.max(len);
        if max == 0 {
            return;
        }
        for n in (N_MIN..=N_MAX.min(len)).rev() {
            let Some(&end) = self.last_end.get(&key(&tokens[len - n..])) else {
                continue;
            };
            let end = end as usize;
            // A hash collision is possible; a false match is only a bad guess, but check.
            if end < n || tokens[end - n..end] != tokens[len - n..] {
                continue;
            }
            out.extend_from_slice(&tokens[end..len.min(end + max)]);
            return;
        }
    }

    /// How many of the row's tokens are indexed.
    #[cfg(test)]
    fn indexed(&self) -> usize {
        self.indexed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(d: &mut NgramDrafter, tokens: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        d.propose(tokens, max, &mut out);
        out
    }

    #[test]
    fn proposes_what_followed_the_longest_earlier_match() {
        let mut d = NgramDrafter::default();
        // "1 2 3 4 5 6 ... 9 2 3" → the 2-gram "2 3" was followed by "4 5 6".
        let t = [1, 2, 3, 4, 5, 6, 7, 9, 2, 3];
        assert_eq!(draft(&mut d, &t, 3), vec![4, 5, 6]);
        assert_eq!(d.indexed(), t.len());
        // The longer match wins: "8 2 3" occurred later, followed by 7; "1 2 3" earlier.
        let mut d = NgramDrafter::default();
        let t = [1, 2, 3, 4, 8, 2, 3, 7, 0, 1, 2, 3];
        assert_eq!(draft(&mut d, &t, 2), vec![4, 8]);
    }

    #[test]
    fn the_latest_occurrence_wins_and_growth_is_indexed() {
        let mut d = NgramDrafter::default();
        let mut t = vec![5, 6, 1, 5, 6, 2];
        assert_eq!(draft(&mut d, &t, 4), Vec::<u32>::new(), "`6 2` is new");
        t.extend([5, 6]);
        // `5 6` ended at 2 (then 1) and at 5 (then 2): the latest wins.
        assert_eq!(draft(&mut d, &t, 4), vec![2, 5, 6]);
        // A draft stops at the row's end; none is longer than asked.
        assert_eq!(draft(&mut d, &t, 1), vec![2]);
        assert_eq!(draft(&mut d, &t, 0), Vec::<u32>::new());
    }

    #[test]
    fn no_match_no_draft() {
        let mut d = NgramDrafter::default();
        assert!(draft(&mut d, &[], 4).is_empty());
        assert!(draft(&mut d, &[1], 4).is_empty());
        assert!(draft(&mut d, &[1, 2, 3, 4, 5], 4).is_empty());
        // A single repeated token is not enough (N_MIN = 2).
        assert!(draft(&mut NgramDrafter::default(), &[7, 1, 2, 7], 4).is_empty());
    }
}
