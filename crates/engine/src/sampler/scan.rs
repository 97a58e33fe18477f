//! Passes over a whole row of logits: the max, the argmax, the f32 exp and chunked sums
//! behind the weights, the top-N scan, the nucleus selection and log-probabilities. Each is
//! written so that it vectorizes (independent lanes, no checked arithmetic, no branches in the
//! inner loop); the parent module's doc says why and what it measured.

use std::cmp::Ordering;

/// Vectorized passes work on chunks of this many logits; each chunk's sum is kept in f64.
pub(super) const CHUNK: usize = 256;

/// Lanes of the hand-unrolled reductions (two AVX registers, four SSE ones).
pub(super) const LANES: usize = 8;

/// The largest logit (NaN ignored; -inf if there is none), in `LANES` independent lanes so
/// it vectorizes.
pub(super) fn max_logit(xs: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            m[j] = if c[j] > m[j] { c[j] } else { m[j] };
        }
    }
    let tail = chunks.remainder().iter().copied();
    m.into_iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |a, x| if x > a { x } else { a })
}

/// e^x for x <= 0 — the weight of a logit below the maximum — in f32 to about 1 ulp; -inf,
/// NaN and anything below -87 (under f32's normal range) give exactly 0. Branch-free and free
/// of checked integer arithmetic (an overflow check in a debug-assertions build stops the
/// loop that calls it from vectorizing), so it runs 4-8 lanes at a time.
#[inline(always)]
pub(super) fn exp_nonpositive(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75; // ln 2 split in two, so n * LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 * 2^23: adding it rounds to an integer n, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const ROUND_BITS: u32 = 0x4B40_0000;
    let xc = if x > -87.0 { x } else { -87.0 };
    let t = xc * LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO; // |r| <= ln2 / 2
                                            // Taylor to r^6: error below r^7 / 7! = 1.2e-7 relative at |r| = ln2 / 2.
    let poly = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // 2^n for n in [-126, 0]: the exponent field n + 127, from t's bits.
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(127) << 23);
    if x >= -87.0 {
        poly * scale
    } else {
        0.0
    }
}

/// Sum of `xs`, in `LANES` lanes (so it vectorizes), then in f64.
pub(super) fn lane_sum(xs: &[f32]) -> f64 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            acc[j] += c[j];
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&x| f64::from(x)).sum();
    acc.iter().map(|&x| f64::from(x)).sum::<f64>() + tail
}

/// Fills `weights` with exp((l - max) * inv_t) per logit (0 where that is below `floor`) and
/// `chunk_sums` with each [`CHUNK`]'s sum; returns the total.
pub(super) fn weigh(
    logits: &[f32],
    max: f32,
    inv_t: f32,
    floor: f32,
    weights: &mut Vec<f32>,
    chunk_sums: &mut Vec<f64>,
) -> f64 {
    weights.resize(logits.len(), 0.0);
    chunk_sums.clear();
    for (src, dst) in logits.chunks(CHUNK).zip(weights.chunks_mut(CHUNK)) {
        for (w, &l) in dst.iter_mut().zip(src) {
            let e = exp_nonpositive((l - max) * inv_t);
            *w = if e >= floor { e } else { 0.0 };
        }
        chunk_sums.push(lane_sum(dst));
    }
    chunk_sums.iter().sum()
}

/// Index of the largest logit; NaN never wins, the lowest id wins ties (with no finite or
/// +inf logit: the first -inf, else 0).
///
/// One pass in `LANES` independent lanes, each keeping its largest value and the first chunk
/// where it saw it (a strict `>`, so it vectorizes as compare + blend); then the lowest index
/// among the lanes holding the overall maximum. A greedy step runs this over every row's
/// 262,144 logits on the scheduler's thread; a vectorized max followed by a scalar scan for
/// its first occurrence (the earlier version) took about three times as long.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let mut at = [0u32; LANES];
    let mut chunks = logits.chunks_exact(LANES);
    for (i, c) in (&mut chunks).enumerate() {
        for j in 0..LANES {
            let gt = c[j] > m[j];
            m[j] = if gt { c[j] } else { m[j] };
            at[j] = if gt { i as u32 } else { at[j] };
        }
    }
    let mut best: Option<(f32, usize)> = None;
    for j in 0..LANES {
        let i = at[j] as usize * LANES + j;
        if m[j] > f32::NEG_INFINITY && best.is_none_or(|(v, b)| m[j] > v || (m[j] == v && i < b)) {
            best = Some((m[j], i));
        }
    }
    let tail = logits.len() - chunks.remainder().len();
    for (k, &v) in chunks.remainder().iter().enumerate() {
        if best.is_none_or(|(b, _)| v > b) && v > f32::NEG_INFINITY {
            best = Some((v, tail + k));
        }
    }
    match best {
        Some((_, i)) => i as u32,
        None => logits
            .iter()
            .position(|&l| l == f32::NEG_INFINITY)
            .unwrap_or(0) as u32,
    }
}

/// Descending by value, then ascending by id: a total order, so selection is reproducible.
pub(super) fn by_value_desc(a: &(u32, f32), b: &(u32, f32)) -> Ordering {
    b.1.partial_cmp(&a.1)
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

/// Below this many, the best `n` are kept by insertion into a sorted run in one pass; above
/// it, `select_nth_unstable` over a copy of the row.
pub(super) const INSERTION_TOP_N_MAX: usize = 128;

/// Fills `out` with the `n` largest `(id, logit)` pairs, sorted best first (ties: lower id).
/// NaN logits are never chosen. `n` must be at least 1.
pub fn top_n_by_logit(logits: &[f32], n: usize, out: &mut Vec<(u32, f32)>) {
    out.clear();
    let n = n.min(logits.len());
    if n == 0 {
        return;
    }
    if n > INSERTION_TOP_N_MAX {
        out.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (i as u32, l)),
        );
        if out.len() > n {
            out.select_nth_unstable_by(n - 1, by_value_desc);
            out.truncate(n);
        }
        out.sort_unstable_by(by_value_desc);
        return;
    }
    // Once the run is full, blocks of LANES logits none of which beats its last entry are
    // skipped whole (one vector compare); the rest go one by one.
    for (b, block) in logits.chunks(LANES).enumerate() {
        if out.len() == n && block.len() == LANES {
            let floor = out[n - 1].1;
            let mut beats = false;
            for &l in block {
                beats |= l > floor;
            }
            if !beats {
                continue;
            }
        }
        for (j, &l) in block.iter().enumerate() {
            // Strictly greater: an equal logit at a higher id loses the tie.
            if l.is_nan() || (out.len() == n && l <= out[n - 1].1) {
                continue;
            }
            let at = out.partition_point(|c| c.1 >= l);
            if out.len() == n {
                out.pop();
            }
            out.insert(at, ((b * LANES + j) as u32, l));
        }
    }
}

/// Below this many weights, the nucleus search starts with a batch of this size.
pub(super) const NUCLEUS_FIRST_BATCH: usize = 64;

/// Cuts `cands` (`(id, weight)`, any order) to the smallest best-first prefix whose weight
/// reaches `top_p` of `total` (the weight of the whole distribution, which may include
/// tokens already left out of `cands` as too light to matter), leaving it sorted best first.
/// Selects in doubling batches.
pub(super) fn nucleus(cands: &mut Vec<(u32, f32)>, total: f64, top_p: f32) {
    let n = cands.len();
    let target = total * f64::from(top_p);
    let mut done = 0;
    let mut mass = 0.0f64;
    while done < n {
        let upto = n.min((2 * done).max(NUCLEUS_FIRST_BATCH));
        let rest = &mut cands[done..];
        if upto < n {
            rest.select_nth_unstable_by(upto - done - 1, by_value_desc);
        }
        rest[..upto - done].sort_unstable_by(by_value_desc);
        for i in done..upto {
            mass += f64::from(cands[i].1);
            if mass >= target {
                cands.truncate(i + 1);
                return;
            }
        }
        done = upto;
    }
}

/// The model's log-probabilities at one position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// log-softmax of the chosen token.
    pub chosen: f32,
    /// The `top_n` most likely tokens with their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

/// Log-softmax of `chosen` and the `top_n` best tokens of a raw logits row (before any
/// sampling transform). Two passes over the row plus the one-pass top-N.
pub fn logprobs(logits: &[f32], chosen: u32, top_n: usize) -> TokenLogprobs {
    let max = max_logit(logits);
    let mut buf = [0f32; CHUNK];
    let sum: f64 = logits
        .chunks(CHUNK)
        .map(|src| {
            let dst = &mut buf[..src.len()];
            for (w, &l) in dst.iter_mut().zip(src) {
                *w = exp_nonpositive(l - max);
            }
            lane_sum(dst)
        })
        .sum();
    let lse = f64::from(max) + sum.ln();
    let to_lp = |l: f32| (f64::from(l) - lse) as f32;
    let mut top = Vec::new();
    if top_n > 0 {
        top_n_by_logit(logits, top_n, &mut top);
        for t in top.iter_mut() {
            t.1 = to_lp(t.1);
        }
    }
    TokenLogprobs {
        chosen: to_lp(logits[chosen as usize]),
        top,
    }
}
