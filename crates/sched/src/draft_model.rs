//! Drafting with a second model: a smaller model of the same vocabulary guesses each decoding
//! row's next tokens greedily, and the target verifies them as extra positions of the row
//! (`crate::row`), exactly as it verifies prompt lookup's guesses.
//!
//! The draft model keeps its own KV cache, with a block table per row of its own: the
//! target's blocks are shared through the prefix cache and preempted under pressure, and
//! none of that has to hold for a guess. What the draft has computed for a row is recorded as
//! the tokens it wrote; at the next step the part that still agrees with the row's tokens is
//! kept and the rest recomputed. So a rejected guess rolls back by itself (its positions no
//! longer agree), a new row's prompt is computed on its first draft, and a preempted or
//! retired row simply drops its table ([`DraftModel::forget`]).
//!
//! Each step drafts every drafting row together: one forward catches every row up to its
//! newest token and proposes its first guess, and each further forward proposes one more
//! token for every row still drafting. The forwards are timed, so that `crate::speculate`
//! can weigh what a draft costs against what it is expected to save.
//!
//! The draft's blocks are a fixed pool the size of the target's; a row that finds no room in
//! it does not draft that step. A failed draft forward costs only its guesses: the rows in it
//! drop their tables and decode without a draft.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ferrox_engine::kv::{BlockId, SeqChunk};

use crate::model::StepModel;
use crate::request::RequestId;
use crate::speculate::{Acceptance, StepCosts};

/// One row's table in the draft's KV.
#[derive(Debug, Default)]
struct DraftSeq {
    blocks: Vec<BlockId>,
    /// The token written at each computed position (`0..written.len()`).
    written: Vec<u32>,
    /// Positions `0..confirmed` of `written` are known to be the row's own tokens.
    confirmed: usize,
}

/// What one row asks of [`DraftModel::propose`].
#[derive(Clone, Copy)]
pub(crate) struct DraftAsk<'a> {
    pub(crate) id: RequestId,
    /// The row's tokens (prompt and output).
    pub(crate) tokens: &'a [u32],
    /// Most tokens to guess.
    pub(crate) max: usize,
}

pub(crate) struct DraftModel<M: StepModel> {
    model: Arc<M>,
    kv: M::Kv,
    block_size: usize,
    free: Vec<BlockId>,
    seqs: HashMap<RequestId, DraftSeq>,
    /// Measured wall time of draft forwards, by the positions they carried.
    costs: StepCosts,
    /// How often the draft's guesses were accepted lately, over every row: where a new row's
    /// estimate starts.
    acceptance: Acceptance,
    /// Seconds a forward's positions beyond one a row add (a catch-up's), running average.
    catch_up_per_position: Option<f64>,
    logits: Vec<f32>,
    hidden: Vec<f32>,
}

impl<M: StepModel> DraftModel<M> {
    /// A draft KV of `n_blocks` blocks of `block_size` positions, in the draft's own f16
    /// shape.
    pub(crate) fn new(model: Arc<M>, block_size: usize, n_blocks: usize) -> Self {
        let kv = model.new_kv(model.kv_shape(), block_size, n_blocks);
        let mut draft = Self {
            model,
            kv,
            block_size,
            free: (0..n_blocks as BlockId).rev().collect(),
            seqs: HashMap::new(),
            costs: StepCosts::default(),
            acceptance: Acceptance::default(),
            catch_up_per_position: None,
            logits: Vec::new(),
            hidden: Vec::new(),
        };
        draft.warm_up();
        draft
    }

    /// One untimed forward of one token into a free block, before any is timed: the first
    /// forward of a freshly mapped model faults its weights in and costs many times a normal
    /// one, and a draft timed at that cost would never be tried again. What it writes is
    /// never read (no row's table holds the block yet).
    fn warm_up(&mut self) {
        let Some(&block) = self.free.last() else {
            return;
        };
        let chunk = SeqChunk {
            tokens: &[0],
            start_pos: 0,
            blocks: &[block],
            logit_rows: 1,
            want_hidden: false,
        };
        let _ = (self.model).forward(&mut self.kv, &[chunk], &mut self.logits, &mut self.hidden);
    }

    /// The draft's acceptance record over every row.
    pub(crate) fn acceptance(&self) -> &Acceptance {
        &self.acceptance
    }

    /// After a verify step: `compared` of a row's guesses were compared, `matched` accepted.
    pub(crate) fn record(&mut self, compared: usize, matched: usize) {
        self.acceptance.record(compared, matched);
    }

    /// The longest sequence the draft model takes.
    pub(crate) fn max_context(&self) -> usize {
        self.model.max_context()
    }

    /// Positions of `tokens` the draft must compute before its first guess: those past the
    /// longest prefix it wrote that agrees with them.
    pub(crate) fn behind(&self, id: RequestId, tokens: &[u32]) -> usize {
        tokens.len() - self.seqs.get(&id).map_or(0, |s| valid_prefix(s, tokens))
    }

    /// The estimated seconds of catching up `positions` more positions than one a row in a
    /// forward. Until a catch-up was timed, a position is taken to cost a tenth of a
    /// one-row forward (the step costs' prior): assuming it free let a model drafting for
    /// itself pay a 2,000-token prompt's catch-up on its first request (0.90× plain).
    pub(crate) fn catch_up_cost(&self, positions: usize) -> f64 {
        let per = self.catch_up_per_position.or_else(|| {
            self.costs
                .cost(1)
                .map(|one| crate::speculate::PRIOR_POSITION_COST * one)
        });
        per.unwrap_or(0.0) * positions as f64
    }

    /// Drops row `id`'s table (retired, preempted, or its KV is suspect).
    pub(crate) fn forget(&mut self, id: RequestId) {
        if let Some(seq) = self.seqs.remove(&id) {
            self.free.extend(seq.blocks);
        }
    }

    /// The estimated seconds of drafting `per_row[r]` tokens for each row: a forward per
    /// guessed position, each carrying a position for every row still drafting. `None` until
    /// a forward was timed.
    ///
    /// The first forward also catches each row up on the tokens it has not seen (the prompt,
    /// the last step's own token, whatever came while the row stood down): that is charged
    /// apart, [`Self::catch_up_cost`].
    pub(crate) fn cost(&self, per_row: &[usize]) -> Option<f64> {
        let longest = per_row.iter().copied().max().unwrap_or(0);
        if longest == 0 {
            return Some(0.0);
        }
        let mut secs = 0.0;
        for j in 1..=longest {
            let rows = per_row.iter().filter(|&&k| k >= j).count();
            secs += self.costs.cost(rows)?;
        }
        Some(secs)
    }

    /// Guesses up to `ask.max` tokens for each row, greedily, and returns them in `asks`
    /// order (empty for a row that found no room in the draft's pool, or on a failed
    /// forward).
    pub(crate) fn propose(&mut self, asks: &[DraftAsk<'_>]) -> Vec<Vec<u32>> {
        let mut out: Vec<Vec<u32>> = asks.iter().map(|_| Vec::new()).collect();
        // Each row's table trimmed to what agrees with its tokens, and grown to hold every
        // position this step writes: the catch-up, then a guess fed back for all but the last.
        let mut live: Vec<usize> = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            if ask.max == 0 || ask.tokens.is_empty() {
                continue;
            }
            let seq = self.seqs.entry(ask.id).or_default();
            let keep = valid_prefix(seq, ask.tokens).min(ask.tokens.len() - 1);
            seq.written.truncate(keep);
            seq.confirmed = keep;
            let needed = (ask.tokens.len() + ask.max - 1).div_ceil(self.block_size);
            while seq.blocks.len() < needed {
                match self.free.pop() {
                    Some(b) => seq.blocks.push(b),
                    None => break,
                }
            }
            if seq.blocks.len() >= needed {
                live.push(i);
            }
        }
        // Round 0 feeds each row's uncomputed tokens; round j > 0 feeds its j-th guess.
        let mut round = 0;
        while !live.is_empty() {
            let mut feeds: Vec<(usize, usize, Vec<u32>)> = Vec::with_capacity(live.len());
            for &i in &live {
                let ask = &asks[i];
                let seq = &self.seqs[&ask.id];
                let start = seq.written.len();
                let tokens = if round == 0 {
                    ask.tokens[start..].to_vec()
                } else {
                    vec![*out[i].last().expect("a row past round 0 has a guess")]
                };
                feeds.push((i, start, tokens));
            }
            let chunks: Vec<SeqChunk<'_>> = feeds
                .iter()
                .map(|(i, start, tokens)| SeqChunk {
                    tokens,
                    start_pos: *start,
                    blocks: &self.seqs[&asks[*i].id].blocks,
                    logit_rows: 1,
                    want_hidden: false,
                })
                .collect();
            let positions = feeds.iter().map(|(_, _, t)| t.len()).sum();
            let started = Instant::now();
            let result =
                self.model
                    .forward(&mut self.kv, &chunks, &mut self.logits, &mut self.hidden);
            drop(chunks);
            let vocab = self.model.vocab_size();
            if let Err(e) = result.map_err(|e| e.to_string()).and_then(|()| {
                (self.logits.len() == feeds.len() * vocab)
                    .then_some(())
                    .ok_or_else(|| format!("{} logits for {} rows", self.logits.len(), feeds.len()))
            }) {
                tracing::warn!("the draft model's forward failed, decoding without drafts: {e}");
                for &i in &live {
                    self.forget(asks[i].id);
                    out[i].clear();
                }
                return out;
            }
            let secs = started.elapsed().as_secs_f64();
            let rows = feeds.len();
            if let Some(single) = (positions > 2 * rows)
                .then(|| self.costs.cost(rows))
                .flatten()
            {
                let per = (secs - single).max(0.0) / (positions - rows) as f64;
                let avg = self.catch_up_per_position.get_or_insert(per);
                *avg += 0.25 * (per - *avg);
            }
            self.costs.record(positions, secs);
            let mut next = Vec::with_capacity(live.len());
            for ((i, _, fed), row) in feeds.into_iter().zip(self.logits.chunks_exact(vocab)) {
                let seq = self
                    .seqs
                    .get_mut(&asks[i].id)
                    .expect("a live row has a table");
                seq.written.extend_from_slice(&fed);
                if round == 0 {
                    seq.confirmed = seq.written.len();
                }
                out[i].push(argmax(row));
                if out[i].len() < asks[i].max {
                    next.push(i);
                }
            }
            live = next;
            round += 1;
        }
        out
    }
}

/// How many leading positions of `seq` hold `tokens`' own tokens.
fn valid_prefix(seq: &DraftSeq, tokens: &[u32]) -> usize {
    let from = seq.confirmed.min(tokens.len());
    let agree = seq.written[from..]
        .iter()
        .zip(&tokens[from..])
        .take_while(|(a, b)| a == b)
        .count();
    from + agree
}

/// The first index of the largest logit (ties to the lower id, as greedy sampling does).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Why a draft model cannot draft for a target: the first difference in their vocabularies.
pub(crate) fn vocab_mismatch<M: StepModel>(target: &M, draft: &M) -> Option<String> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    if n != m {
        return Some(format!("the target has {n} tokens, the draft {m}"));
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for id in 0..n as u32 {
        a.clear();
        b.clear();
        target.token_bytes(id, &mut a);
        draft.token_bytes(id, &mut b);
        if a != b || target.is_eog(id) != draft.is_eog(id) {
            return Some(format!(
                "token {id} is {:?} in the target and {:?} in the draft",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testkit::FakeModel;

    /// A warm draft model — tables kept across steps, trimmed after rejected guesses, dropped
    /// on preemption, sharing one small pool between rows — guesses exactly what a cold one
    /// guesses from the same tokens. So whatever a step's verification did to a row, the
    /// draft's KV for it holds the row's own tokens.
    #[test]
    fn a_warm_draft_guesses_what_a_cold_one_does() {
        let model = Arc::new(FakeModel::hash());
        let mut rng = StdRng::seed_from_u64(5);
        let mut warm = DraftModel::new(Arc::clone(&model), 4, 40);
        let mut rows: Vec<Vec<u32>> = (0..4)
            .map(|_| {
                (0..rng.gen_range(1..12))
                    .map(|_| rng.gen_range(1..60))
                    .collect()
            })
            .collect();
        let (mut compared, mut starved) = (0, 0);
        for _ in 0..300 {
            let maxes: Vec<usize> = rows.iter().map(|_| rng.gen_range(0..6)).collect();
            let asks: Vec<DraftAsk<'_>> = (rows.iter().zip(&maxes).enumerate())
                .map(|(i, (t, &max))| DraftAsk {
                    id: i as RequestId,
                    tokens: t,
                    max,
                })
                .collect();
            let guesses = warm.propose(&asks);
            for (ask, guess) in asks.iter().zip(&guesses) {
                let mut cold = DraftModel::new(Arc::clone(&model), 4, 64);
                let want = cold.propose(&[DraftAsk { ..*ask }]).remove(0);
                if guess.is_empty() && ask.max > 0 {
                    starved += 1; // no room in the warm pool this step
                    continue;
                }
                assert_eq!(
                    guess,
                    &want,
                    "row {} at {} tokens",
                    ask.id,
                    ask.tokens.len()
                );
                compared += 1;
            }
            // Verification: some guesses accepted, then the target's own token (often not
            // the next guess); now and then a row is preempted or replaced.
            for (i, (row, guess)) in rows.iter_mut().zip(&guesses).enumerate() {
                let m = rng.gen_range(0..=guess.len());
                row.extend_from_slice(&guess[..m]);
                row.push(rng.gen_range(1..60));
                if row.len() > 60 || rng.gen_bool(0.05) {
                    warm.forget(i as RequestId);
                    if row.len() > 60 {
                        row.truncate(rng.gen_range(1..8));
                    }
                }
            }
        }
        assert!(compared > 500, "too few guesses compared: {compared}");
        assert!(starved > 0, "the pool never ran short");
        assert_eq!(
            warm.free.len() + warm.seqs.values().map(|s| s.blocks.len()).sum::<usize>(),
            40
        );
    }
}
