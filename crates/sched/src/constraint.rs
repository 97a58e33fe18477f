//! Constrained decoding as the scheduler sees it: a row may carry a [`TokenConstraint`] —
//! a grammar, a JSON schema, a regex, compiled by the caller — which says, before each draw,
//! which tokens may come next, and advances past the token drawn.
//!
//! The scheduler knows no grammar engine: the server compiles one (llguidance) and hands in a
//! [`Constraint`], a factory that starts a fresh state per row, so the `n` choices of one
//! request each follow the grammar on their own. A row without one pays nothing.
//!
//! Where it runs, and why there: the mask is computed and applied inside the row's sampling
//! task, which the worker already runs for every row in parallel on the model's threads, so
//! the masks of different rows are computed in parallel; it touches only that row's logits,
//! after the forward pass, so the batch's numerics (and every other row's output) do not
//! change. Logprobs still report the model's own distribution, read before the mask.
//!
//! How a constrained row ends: when its grammar is complete (the state says so after a token)
//! the row stops, `finish_reason` Stop; when the state fails, or allows no token at all, the
//! row ends with a typed error instead of drawing garbage.

use std::fmt;
use std::sync::Arc;

/// One row's constraint state.
pub trait TokenConstraint: Send {
    /// Writes the tokens allowed next into `allowed`: bit `t % 32` of word `t / 32` set when
    /// token `t` may be drawn. `allowed` has one bit per token of the vocabulary and comes in
    /// zeroed. An error ends the row.
    fn allowed(&mut self, allowed: &mut [u32]) -> Result<(), String>;
    /// Moves past `token`, which `allowed` permitted. `Ok(true)`: the constraint is complete
    /// and the row stops here.
    fn advance(&mut self, token: u32) -> Result<bool, String>;
}

/// Starts a fresh [`TokenConstraint`] for each row.
pub trait ConstraintFactory: Send + Sync {
    fn start(&self) -> Box<dyn TokenConstraint>;
}

/// A compiled constraint, shared by the choices of a request (each starts its own state).
#[derive(Clone)]
pub struct Constraint(pub Arc<dyn ConstraintFactory>);

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Constraint")
    }
}

/// The same compiled constraint (one `Arc`), not the same grammar text.
impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A row's state and its mask buffer.
pub(crate) struct RowConstraint {
    state: Box<dyn TokenConstraint>,
    mask: Vec<u32>,
}

impl fmt::Debug for RowConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RowConstraint")
    }
}

impl RowConstraint {
    pub(crate) fn start(c: &Constraint, vocab_size: usize) -> Self {
        RowConstraint {
            state: c.0.start(),
            mask: vec![0; vocab_size.div_ceil(32)],
        }
    }

    /// Sets every token the constraint rules out to -inf in `logits`. An error when the
    /// state fails or allows no token of the vocabulary.
    pub(crate) fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.mask.fill(0);
        self.state.allowed(&mut self.mask)?;
        let mut any = false;
        for (w, chunk) in self.mask.iter().zip(logits.chunks_mut(32)) {
            match *w {
                u32::MAX => any = true,
                0 => chunk.fill(f32::NEG_INFINITY),
                bits => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if bits & (1 << b) == 0 {
                            *l = f32::NEG_INFINITY;
                        } else {
                            any = true;
                        }
                    }
                }
            }
        }
        if any {
            Ok(())
        } else {
            Err("the constraint allows no token here".into())
        }
    }

    /// Whether the last mask allowed `token`.
    pub(crate) fn permits(&self, token: u32) -> bool {
        let t = token as usize;
        self.mask
            .get(t / 32)
            .is_some_and(|w| w & (1 << (t % 32)) != 0)
    }

    pub(crate) fn advance(&mut self, token: u32) -> Result<bool, String> {
        self.state.advance(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Only(Vec<u32>);
    impl TokenConstraint for Only {
        fn allowed(&mut self, allowed: &mut [u32]) -> Result<(), String> {
            for &t in &self.0 {
                allowed[t as usize / 32] |= 1 << (t % 32);
            }
            Ok(())
        }
        fn advance(&mut self, _: u32) -> Result<bool, String> {
            Ok(false)
        }
    }
    struct Factory(Vec<u32>);
    impl ConstraintFactory for Factory {
        fn start(&self) -> Box<dyn TokenConstraint> {
            Box::new(Only(self.0.clone()))
        }
    }

    #[test]
    fn the_mask_keeps_exactly_the_allowed_tokens() {
        let c = Constraint(Arc::new(Factory(vec![0, 31, 32, 69])));
        let mut row = RowConstraint::start(&c, 70);
        let mut logits = vec![1.0; 70];
        row.mask(&mut logits).unwrap();
        let kept: Vec<usize> = (0..70).filter(|&t| logits[t].is_finite()).collect();
        assert_eq!(kept, [0, 31, 32, 69]);
        assert!(row.permits(69) && !row.permits(68));
        let none = Constraint(Arc::new(Factory(vec![])));
        assert!(RowConstraint::start(&none, 70).mask(&mut logits).is_err());
    }
}
