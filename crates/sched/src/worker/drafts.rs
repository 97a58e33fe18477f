//! The worker's choice of drafts: which decoding rows verify drafted tokens this step, and
//! how many (`crate::speculate` weighs them against the measured step costs), from prompt
//! lookup or from the draft model (`crate::draft_model`). Kept apart from the tick itself,
//! which only asks for the plan.

use std::collections::HashMap;

use crate::draft_model::DraftAsk;
use crate::model::StepModel;
use crate::request::RequestId;
use crate::speculate::{allocate, draft_lengths, REFRESH_STEPS};

use super::Worker;

impl<M: StepModel> Worker<M> {
    /// Every decoding row, in admission order, with the drafted tokens it verifies this step
    /// (`crate::speculate` decides how many from the measured step costs). A draft uses the
    /// row's blocks, and takes more only from free ones, and only while the pool keeps one for
    /// every row in the batch: a guess never costs another row its next block, nor the cache
    /// a prefix.
    pub(super) fn plan_drafts(&mut self) -> Vec<(RequestId, usize)> {
        let decoding: Vec<RequestId> = (self.order.iter())
            .copied()
            .filter(|id| self.rows[id].is_decoding())
            .collect();
        // Now and then a plain step, so that the cost drafting is weighed against stays
        // measured (`StepCosts::stale`).
        if self.spec.adaptive && self.step_costs.stale(decoding.len(), REFRESH_STEPS) {
            for id in &decoding {
                let row = self
                    .rows
                    .get_mut(id)
                    .expect("ordered rows are in the batch");
                row.set_draft(0);
            }
            return decoding.into_iter().map(|id| (id, 0)).collect();
        }
        let mut candidates = Vec::new();
        let mut drafting = Vec::new();
        // Blocks a draft may take: free ones only (a guess never evicts a cached prefix), and
        // never the one block per row that growing rows may need.
        let pool = self.pool.stats();
        let mut spare = pool
            .free
            .min(pool.available.saturating_sub(self.rows.len()));
        let block = self.limits.block_size_tokens;
        if self.draft.is_some() {
            self.draft_with_model(&decoding, spare * block);
        }
        for &id in &decoding {
            let row = self
                .rows
                .get_mut(&id)
                .expect("ordered rows are in the batch");
            if let Some(mut c) = row.draft_candidate() {
                // No more than the row's blocks and the spare ones could hold, so that the
                // allocation is made on positions that can run.
                c.available = c.available.min(row.draft_room() + spare * block);
                candidates.push(c);
                drafting.push(id);
            }
        }
        let take = match self.draft {
            // The model's guesses were sized with their cost counted: verify them whole.
            Some(_) => candidates.iter().map(|c| c.available).collect(),
            None => allocate(
                &self.step_costs,
                decoding.len(),
                &candidates,
                self.spec.adaptive,
            ),
        };
        let mut drafts: HashMap<RequestId, usize> = HashMap::new();
        for ((id, mut n), c) in drafting.into_iter().zip(take).zip(&candidates) {
            let row = self
                .rows
                .get_mut(&id)
                .expect("ordered rows are in the batch");
            while n > row.draft_room() && spare > 0 && row.grow().is_ok() {
                spare -= 1;
            }
            n = n.min(row.draft_room());
            if n < c.n_min {
                n = 0; // cut short by the blocks, below the row's minimum: none
            }
            row.set_draft(n);
            drafts.insert(id, n);
        }
        (decoding.into_iter())
            .map(|id| (id, drafts.get(&id).copied().unwrap_or(0)))
            .collect()
    }

    /// Has the draft model guess the next tokens of the `decoding` rows that speculate, as
    /// many as `crate::speculate::draft_lengths` finds worth their cost (none for a row
    /// whose blocks, with `spare_positions` more, or the draft's context cannot hold them),
    /// and offers each row its guess for [`Row::draft_candidate`].
    fn draft_with_model(&mut self, decoding: &[RequestId], spare_positions: usize) {
        let Some(draft) = self.draft.as_mut() else {
            return;
        };
        let mut asking = Vec::new();
        let mut terms = Vec::new();
        // Per asking row: positions to catch up beyond the one a row, and tokens left.
        let mut catch_up = Vec::new();
        for &id in decoding {
            let row = self
                .rows
                .get_mut(&id)
                .expect("ordered rows are in the batch");
            row.adopt_prior(draft.acceptance());
            let Some(limit) = row.draft_limit() else {
                continue;
            };
            let context_left = draft.max_context().saturating_sub(row.tokens().len());
            let limit = (limit.min(row.draft_room() + spare_positions)).min(context_left);
            if let Some(t) = row.draft_terms(limit).filter(|_| limit > 0) {
                asking.push(id);
                terms.push(t);
                let behind = draft.behind(id, row.tokens()).saturating_sub(1);
                catch_up.push((draft.catch_up_cost(behind), row.tokens_left().max(1)));
            }
        }
        let lengths = draft_lengths(
            &self.step_costs,
            // A catch-up is paid once and serves every later step: each step's share is the
            // catch-up over the row's tokens left, times the tokens the step may yield.
            |per_row| {
                let shares: f64 = (per_row.iter().zip(&catch_up))
                    .filter(|(&k, _)| k > 0)
                    .map(|(&k, &(secs, left))| secs * (1 + k) as f64 / left as f64)
                    .sum();
                draft.cost(per_row).map(|c| c + shares)
            },
            decoding.len(),
            &terms,
            self.spec.adaptive,
        );
        tracing::debug!(
            ?lengths,
            rate = terms.first().map(|t| t.rate),
            base = self.step_costs.cost(decoding.len()),
            two = self.step_costs.cost(decoding.len() + 1),
            draft_one = draft.cost(&[1]),
            draft_four = draft.cost(&[4]),
            "draft plan"
        );
        let asks: Vec<DraftAsk<'_>> = (asking.iter().zip(&lengths))
            .filter(|&(_, &k)| k > 0)
            .map(|(&id, &max)| DraftAsk {
                id,
                tokens: self.rows[&id].tokens(),
                max,
            })
            .collect();
        let guesses = if asks.is_empty() {
            Vec::new()
        } else {
            draft.propose(&asks)
        };
        let drafted: Vec<RequestId> = asks.iter().map(|a| a.id).collect();
        for id in decoding {
            let row = self
                .rows
                .get_mut(id)
                .expect("ordered rows are in the batch");
            row.offer_draft(&[]);
        }
        for (id, guess) in drafted.into_iter().zip(guesses) {
            let row = self
                .rows
                .get_mut(&id)
                .expect("ordered rows are in the batch");
            row.offer_draft(&guess);
        }
    }
}
