//! How many drafted tokens each decoding row verifies this step, decided by measurement.
//!
//! Verifying `k` drafted tokens makes a row's chunk `k + 1` positions long; the step then
//! yields that row between 1 and `k + 1` tokens. Whether that pays depends on two things the
//! worker measures instead of assuming:
//! - **what a step costs** ([`StepCosts`]): the wall time of decode steps by the number of
//!   positions they carry. Decode on a CPU reads every weight once per step, so while the
//!   step is bound by memory bandwidth extra positions are nearly free; once many rows are
//!   decoding the step is bound by compute and every position costs its full share;
//! - **how often a row's drafts are right** ([`Acceptance`]): per row, decayed, so a row that
//!   has stopped repeating itself stops being drafted for.
//!
//! A row's `i`-th drafted token yields a token only if all before it were accepted, which
//! happens with probability `a^i` for acceptance rate `a`. [`allocate`] sorts every row's
//! candidate positions by that expected yield and takes the number `S` of them that
//! maximises the step's expected tokens per second, `(N + Σ yields) / cost(N + S)` for `N`
//! decoding rows — if that beats the plain step by a margin ([`MIN_GAIN`], against noise).
//! At one row and a bandwidth-bound step that takes long drafts; at sixteen rows and a
//! compute-bound step it takes none: the crossover is wherever the measured costs put it, on
//! this machine and this model.
//!
//! Before a step with `n` positions has been measured, its cost is interpolated between
//! measured ones; with only one measured, a position is assumed to cost a tenth of that
//! step's cost per row (an optimistic prior, so that speculation is tried at all; the first
//! verify step measures the real cost and every later decision uses it).

/// Acceptance rate a row starts with, and the weight (in drafted tokens) of that prior.
const PRIOR_RATE: f64 = 0.5;
const PRIOR_WEIGHT: f64 = 2.0;
/// How much of a row's history survives each drafted token compared: about the last ten
/// matter.
const DECAY: f64 = 0.9;
/// Share of a step's measured cost per row assumed for one more position, until measured.
pub(crate) const PRIOR_POSITION_COST: f64 = 0.1;
/// Weight of a new measurement in a step-cost average.
const COST_EWMA: f64 = 0.25;
/// Steps of more positions than this are not tabulated (a decode step never has that many).
const MAX_TABULATED: usize = 1024;
/// A draft is verified only if the step's expected tokens per second beat the plain step's
/// by this much: step times are noisy, and a choice made on the cheapest-looking estimate
/// leans optimistic. Measured: without it, 16 concurrent chats at 35 % acceptance verified a
/// few drafts a wave and ran 2–6 % slower than without speculation; with it, level.
const MIN_GAIN: f64 = 0.05;

/// How often a row's drafted tokens have been accepted lately.
#[derive(Debug, Clone)]
pub(crate) struct Acceptance {
    accepted: f64,
    tried: f64,
}

impl Default for Acceptance {
    fn default() -> Self {
        Self {
            accepted: PRIOR_RATE * PRIOR_WEIGHT,
            tried: PRIOR_WEIGHT,
        }
    }
}

impl Acceptance {
    /// The estimated probability that the next drafted token is accepted.
    pub(crate) fn rate(&self) -> f64 {
        self.accepted / self.tried
    }

    /// After a verify step: `tried` drafted tokens were compared with the model's draws
    /// (those after the first mismatch never are), `accepted` of them matched.
    pub(crate) fn record(&mut self, tried: usize, accepted: usize) {
        let keep = DECAY.powi(tried as i32);
        self.accepted = self.accepted * keep + accepted as f64;
        self.tried = self.tried * keep + tried as f64;
    }
}

/// Steps a size's measurement may age before a plain step re-measures it
/// ([`StepCosts::stale`]).
pub(crate) const REFRESH_STEPS: u64 = 32;

/// Measured wall time of decode-only steps, by the number of positions they carried.
#[derive(Debug, Default)]
pub(crate) struct StepCosts {
    /// `secs[n]`: the running average of steps of `n` positions, if any was measured.
    secs: Vec<Option<f64>>,
    /// `seen[n]`: the value of `records` when size `n` was last measured.
    seen: Vec<u64>,
    /// Measurements recorded so far.
    records: u64,
}

impl StepCosts {
    /// Records a step of `positions` positions (no prompt chunk in it) that took `secs`.
    pub(crate) fn record(&mut self, positions: usize, secs: f64) {
        if positions == 0 || positions > MAX_TABULATED || !secs.is_finite() {
            return;
        }
        if self.secs.len() <= positions {
            self.secs.resize(positions + 1, None);
            self.seen.resize(positions + 1, 0);
        }
        self.records += 1;
        self.seen[positions] = self.records;
        let slot = &mut self.secs[positions];
        *slot = Some(match *slot {
            Some(old) => old + COST_EWMA * (secs - old),
            None => secs,
        });
    }

    /// Whether steps of `n` positions were measured, but not within the last `max_age`
    /// measurements. A step that always drafts never measures the plain step it is weighed
    /// against: that estimate would stay whatever it was when drafting began (measured: one
    /// noisy early step left it 25 % high, and a model drafting for itself kept drafting at
    /// 0.76× the plain speed), so the worker runs a plain step now and then to refresh it.
    pub(crate) fn stale(&self, n: usize, max_age: u64) -> bool {
        match self.seen.get(n) {
            Some(&at) if at > 0 => self.records - at > max_age,
            _ => false,
        }
    }

    /// The estimated cost of a step of `n` positions: measured, interpolated between the
    /// nearest measured sizes, extrapolated along the last two, or from one measured size and
    /// the prior. `None` before any step was measured.
    pub(crate) fn cost(&self, n: usize) -> Option<f64> {
        let known: Vec<(usize, f64)> = self
            .secs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (i, s)))
            .collect();
        let (&first, &last) = (known.first()?, known.last()?);
        if let Some(&(_, s)) = known.iter().find(|&&(i, _)| i == n) {
            return Some(s);
        }
        if known.len() == 1 {
            let (m, s) = first;
            let per_position = PRIOR_POSITION_COST * s / m as f64;
            return Some((s + per_position * (n as f64 - m as f64)).max(s * 0.5));
        }
        // The two measured sizes around `n`, or the two nearest on its side.
        let pair = match known.iter().position(|&(i, _)| i > n) {
            Some(0) => (known[0], known[1]),
            Some(j) => (known[j - 1], known[j]),
            None => (known[known.len() - 2], last),
        };
        let ((a, ca), (b, cb)) = pair;
        let slope = ((cb - ca) / (b as f64 - a as f64)).max(0.0);
        Some((ca + slope * (n as f64 - a as f64)).max(first.1.min(ca) * 0.5))
    }
}

/// One decoding row's draft, as [`allocate`] sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// The row's acceptance rate.
    pub(crate) rate: f64,
    /// Drafted tokens available (already capped by the row's `n_max` and `max_tokens`).
    pub(crate) available: usize,
    /// Fewer than this many drafted tokens are not worth verifying (llama-server's
    /// `n_min`); 0 or 1 means any.
    pub(crate) n_min: usize,
    /// A drafted token whose estimated chance of yielding is below this is not verified
    /// (llama-server's `p_min`).
    pub(crate) p_min: f64,
}

/// How many drafted tokens each candidate verifies this step (module docs): the choice that
/// maximises expected tokens per second for a step with `decode_rows` decoding rows; or,
/// not `adaptive`, every drafted token that `p_min` and `n_min` allow.
pub(crate) fn allocate(
    costs: &StepCosts,
    decode_rows: usize,
    candidates: &[Candidate],
    adaptive: bool,
) -> Vec<usize> {
    let mut take = vec![0; candidates.len()];
    // Every candidate position: (expected yield, row), best first; a row's positions come in
    // its own order since a^i falls with i.
    let mut positions: Vec<(f64, usize)> = Vec::new();
    for (r, c) in candidates.iter().enumerate() {
        let mut y = 1.0;
        for _ in 0..c.available {
            y *= c.rate;
            if y < c.p_min || y <= 0.0 {
                break;
            }
            positions.push((y, r));
        }
    }
    if positions.is_empty() {
        return take;
    }
    positions.sort_by(|a, b| b.0.total_cmp(&a.0));
    let base = costs.cost(decode_rows);
    let best_s = match base {
        _ if !adaptive => positions.len(),
        None => 0, // nothing measured yet: this step measures the plain cost
        Some(base) => best_share(costs, decode_rows, base, &positions),
    };
    for &(_, r) in &positions[..best_s] {
        take[r] += 1;
    }
    for (t, c) in take.iter_mut().zip(candidates) {
        if *t < c.n_min {
            *t = 0;
        }
    }
    take
}

/// How many tokens a draft model guesses for each candidate this step, when guessing has a
/// cost: one length `k` for every row (each capped by its own `available` and `p_min`), the
/// one that maximises the step's expected tokens per second with the draft's forwards
/// counted, `(N + Σ yields) / (draft_cost(per_row) + cost(N + Σ per_row))`, if that beats the
/// plain step by [`MIN_GAIN`]. Until a draft forward is timed (`draft_cost` is `None`) the
/// guesses are assumed free, so that one is tried and timed. Not `adaptive`: every row
/// guesses all it may.
pub(crate) fn draft_lengths(
    costs: &StepCosts,
    draft_cost: impl Fn(&[usize]) -> Option<f64>,
    decode_rows: usize,
    candidates: &[Candidate],
    adaptive: bool,
) -> Vec<usize> {
    // What each row may guess: its cap, and no further than `p_min` allows.
    let caps: Vec<usize> = (candidates.iter())
        .map(|c| {
            let mut y = 1.0;
            let mut n = 0;
            while n < c.available {
                y *= c.rate;
                if y < c.p_min || y <= 0.0 {
                    break;
                }
                n += 1;
            }
            n
        })
        .collect();
    let at = |k: usize| -> Vec<usize> {
        (caps.iter().zip(candidates))
            .map(|(&cap, c)| match cap.min(k) {
                n if n < c.n_min => 0,
                n => n,
            })
            .collect()
    };
    let longest = caps.iter().copied().max().unwrap_or(0);
    if !adaptive {
        return at(longest);
    }
    let Some(base) = costs.cost(decode_rows) else {
        return at(0); // nothing measured yet: this step measures the plain cost
    };
    let plain = decode_rows as f64 / base;
    let (mut best, mut best_k) = (plain * (1.0 + MIN_GAIN), 0);
    for k in 1..=longest {
        let per_row = at(k);
        let tokens = decode_rows as f64
            + (per_row.iter().zip(candidates))
                .map(|(&n, c)| (1..=n as i32).map(|i| c.rate.powi(i)).sum::<f64>())
                .sum::<f64>();
        let positions = decode_rows + per_row.iter().sum::<usize>();
        let secs = costs.cost(positions).unwrap_or(base) + draft_cost(&per_row).unwrap_or(0.0);
        if tokens / secs > best {
            (best, best_k) = (tokens / secs, k);
        }
    }
    at(best_k)
}

/// How many of `positions` (expected yields, best first) maximise expected tokens per
/// second, for a step of `decode_rows` rows that costs `base` without them.
fn best_share(
    costs: &StepCosts,
    decode_rows: usize,
    base: f64,
    positions: &[(f64, usize)],
) -> usize {
    let plain = decode_rows as f64 / base;
    let (mut best, mut best_s) = (plain, 0);
    let mut tokens = decode_rows as f64;
    for (s, &(y, _)) in positions.iter().enumerate() {
        tokens += y;
        let cost = costs.cost(decode_rows + s + 1).unwrap_or(base);
        if tokens / cost > best {
            (best, best_s) = (tokens / cost, s + 1);
        }
    }
    if best < plain * (1.0 + MIN_GAIN) {
        return 0;
    }
    best_s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(rate: f64, available: usize) -> Candidate {
        Candidate {
            rate,
            available,
            n_min: 0,
            p_min: 0.0,
        }
    }

    fn linear(base: f64, per_position: f64, upto: usize) -> StepCosts {
        let mut c = StepCosts::default();
        for n in 1..=upto {
            c.record(n, base + per_position * n as f64);
        }
        c
    }

    #[test]
    fn a_bandwidth_bound_step_verifies_long_drafts_a_compute_bound_one_none() {
        // One row, a step of n positions costs 10 + 0.1 n: cheap positions.
        let cheap = linear(10.0, 0.1, 64);
        assert_eq!(allocate(&cheap, 1, &[cand(0.9, 16)], true), vec![16]);
        // Every position costs as much as the whole base: drafting never pays.
        let dear = linear(0.0, 1.0, 64);
        assert_eq!(allocate(&dear, 1, &[cand(0.9, 16)], true), vec![0]);
        // Sixteen rows on a step whose positions cost 1/4 of the base each: the step is
        // compute-bound enough that a 50 % or 70 % draft does not pay, a 99 % one still does.
        let mid = linear(4.0, 1.0, 64);
        let rows: Vec<Candidate> = (0..16).map(|_| cand(0.5, 8)).collect();
        assert!(allocate(&mid, 16, &rows, true).iter().all(|&t| t == 0));
        let sure: Vec<Candidate> = (0..16).map(|_| cand(0.99, 8)).collect();
        assert!(allocate(&mid, 16, &sure, true).iter().sum::<usize>() > 0);
        let likely: Vec<Candidate> = (0..16).map(|_| cand(0.7, 8)).collect();
        assert!(allocate(&mid, 16, &likely, true).iter().all(|&t| t == 0));
    }

    fn dear_costs() -> StepCosts {
        linear(0.0, 1.0, 64)
    }

    #[test]
    fn a_gain_under_the_margin_is_not_taken() {
        // One row, a step of n positions costs 9 + n: one drafted token of a 14 % row is
        // worth (1.14 / 11) / (1 / 10) = +3.6 %, under the 5 % margin; of a 20 % row +9 %.
        let c = linear(9.0, 1.0, 64);
        assert_eq!(allocate(&c, 1, &[cand(0.14, 8)], true), vec![0]);
        assert_eq!(allocate(&c, 1, &[cand(0.2, 8)], true), vec![1]);
    }

    #[test]
    fn better_rows_get_the_positions_and_limits_hold() {
        let cheap = linear(10.0, 1.0, 64);
        let take = allocate(&cheap, 2, &[cand(0.2, 8), cand(0.9, 8)], true);
        assert!(take[1] > take[0], "{take:?}");
        // p_min cuts where a^i falls below it; n_min drops a short draft entirely.
        let c = Candidate {
            p_min: 0.5,
            ..cand(0.8, 8)
        };
        assert_eq!(allocate(&linear(10.0, 0.01, 64), 1, &[c], true)[0], 3); // .8 .64 .51
        let c = Candidate { n_min: 4, ..c };
        assert_eq!(allocate(&linear(10.0, 0.01, 64), 1, &[c], true)[0], 0);
        assert_eq!(
            allocate(&StepCosts::default(), 1, &[cand(0.9, 8)], true),
            vec![0]
        );
        // Not adaptive: every drafted token, whatever the costs say, within p_min and n_min.
        assert_eq!(allocate(&dear_costs(), 1, &[cand(0.1, 8)], false), vec![8]);
        assert_eq!(allocate(&dear_costs(), 1, &[c], false), vec![0]);
    }

    #[test]
    fn a_draft_model_guesses_only_as_far_as_its_own_cost_allows() {
        // One row; a target step of n positions costs 10 + 0.1 n.
        let cheap = linear(10.0, 0.1, 64);
        let free = |_: &[usize]| Some(0.0);
        assert_eq!(
            draft_lengths(&cheap, free, 1, &[cand(0.9, 8)], true),
            vec![8]
        );
        // Each guessed token costs a fifth of a target step: a 90 % row still guesses, but
        // fewer than all 8 (the 8th yields 0.43 for a fifth of a step's time, the 1st 0.9); a
        // 20 % row does not.
        let fifth =
            |per_row: &[usize]| Some(2.0 * per_row.iter().copied().max().unwrap_or(0) as f64);
        let k = draft_lengths(&cheap, fifth, 1, &[cand(0.9, 8)], true)[0];
        assert!((1..8).contains(&k), "{k}");
        assert_eq!(
            draft_lengths(&cheap, fifth, 1, &[cand(0.2, 8)], true),
            vec![0]
        );
        // Unmeasured draft: assumed free, so that it is tried; unmeasured target: not yet.
        let unmeasured = |_: &[usize]| None;
        assert_eq!(
            draft_lengths(&cheap, unmeasured, 1, &[cand(0.9, 8)], true),
            vec![8]
        );
        assert_eq!(
            draft_lengths(&StepCosts::default(), free, 1, &[cand(0.9, 8)], true),
            vec![0]
        );
        // One length for every row, each capped by its own limits; not adaptive: all.
        let rows = [
            cand(0.9, 3),
            cand(0.9, 8),
            Candidate {
                n_min: 5,
                ..cand(0.9, 4)
            },
        ];
        assert_eq!(draft_lengths(&cheap, free, 3, &rows, true), vec![3, 8, 0]);
        let dear = |_: &[usize]| Some(1e9);
        assert_eq!(draft_lengths(&cheap, dear, 3, &rows, false), vec![3, 8, 0]);
    }

    #[test]
    fn costs_interpolate_extrapolate_and_average() {
        let mut c = StepCosts::default();
        assert_eq!(c.cost(3), None);
        c.record(1, 10.0);
        // One measurement: the prior, a tenth of the per-row cost per extra position.
        assert!((c.cost(11).unwrap() - 20.0).abs() < 1e-9);
        c.record(9, 18.0);
        assert!((c.cost(5).unwrap() - 14.0).abs() < 1e-9);
        assert!((c.cost(17).unwrap() - 26.0).abs() < 1e-9);
        c.record(9, 22.0); // averaged in, not replaced
        assert!((c.cost(9).unwrap() - 19.0).abs() < 1e-9);
    }

    #[test]
    fn a_size_not_measured_lately_is_stale() {
        let mut c = StepCosts::default();
        assert!(!c.stale(1, 4), "never measured: nothing to refresh");
        c.record(1, 1.0);
        for _ in 0..4 {
            c.record(3, 1.0);
        }
        assert!(!c.stale(1, 4));
        c.record(3, 1.0);
        assert!(c.stale(1, 4));
        assert!(!c.stale(3, 4));
        c.record(1, 1.0);
        assert!(!c.stale(1, 4));
    }

    #[test]
    fn acceptance_follows_recent_history() {
        let mut a = Acceptance::default();
        assert!((a.rate() - PRIOR_RATE).abs() < 1e-12);
        for _ in 0..30 {
            a.record(8, 8);
        }
        assert!(a.rate() > 0.95);
        for _ in 0..30 {
            a.record(1, 0);
        }
        assert!(a.rate() < 0.1);
    }
}
