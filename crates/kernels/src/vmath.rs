//! The scalar math every spelling of `attn`'s `exp` and feed-forward gates follows: the
//! constants and the scalar twins the SIMD lanes (`attn_avx2`, `attn_avx512`) match bit for
//! bit. A module of its own so that the spellings depend on it rather than on `attn`,
//! which dispatches to them (that way round there is no circle of imports).
//!
//! # exp
//! `exp(x) = 2^n · p(r)`, `n = round(x·log2 e)`, `r = x − n·ln 2` (Cody–Waite split in two
//! constants, exact for |n| ≤ 128), `p` the degree-6 Taylor polynomial of `e^r` on
//! |r| ≤ ln2/2 (truncation below 1.3e-7 relative). Inputs below −87.3 give 0, inputs above
//! 88.3 are clamped (softmax never sees them: its arguments are ≤ 0). Measured against
//! `f32::exp` in `exp_is_accurate`: within 3 ulp.

pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split: `LN2_HI` has 9 significant bits, so `n * LN2_HI` is exact for |n| ≤ 128.
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
pub(crate) const EXP_MIN: f32 = -87.3;
pub(crate) const EXP_MAX: f32 = 88.3;
/// 1/k! for k = 6 down to 0 (Horner order).
pub(crate) const TAYLOR: [f32; 7] = [
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];
pub(crate) const SQRT_2_OVER_PI: f32 = 0.797_884_6;
pub(crate) const GELU_CUBIC: f32 = 0.044_715;

/// `e^x` by the method in the module doc (bit-identical to the AVX2 lanes).
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let n = (xc * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, xc);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = TAYLOR[0];
    for &c in &TAYLOR[1..] {
        p = p.mul_add(r, c);
    }
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    // `!(x >= MIN)` also sends NaN to 0, as the AVX2 mask does.
    if x >= EXP_MIN {
        p * scale
    } else {
        0.0
    }
}

/// GELU (tanh form) of `x`: `0.5·x·(1 + tanh(y))`, `y = √(2/π)·(x + 0.044715 x³)`, with
/// `tanh` from one `exp`. The algebraically equal `x · sigmoid(2y)` is more accurate for
/// negative `x` (no `1 + tanh` cancellation) but was rejected: on Gemma 3 270M it moved the
/// golden "haiku" continuation's deciding logit gap from +0.20 to −0.11 (llama.cpp: +0.59,
/// f64 reference: +0.60), flipping the token; this form gives +0.30 (2026-11-30).
#[inline]
pub(crate) fn gelu_scalar(x: f32) -> f32 {
    let inner = (GELU_CUBIC * x * x).mul_add(x, x);
    let y = SQRT_2_OVER_PI * inner;
    // tanh(y) = 1 - 2 / (e^(2y) + 1), odd: computed on |y| and given y's sign.
    let t = 1.0 - 2.0 / (exp_f32(2.0 * y.abs()) + 1.0);
    let t = t.copysign(y);
    0.5 * x * (1.0 + t)
}

#[inline]
pub(crate) fn silu_scalar(x: f32) -> f32 {
    x / (1.0 + exp_f32(-x))
}
