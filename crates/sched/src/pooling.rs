//! An embedding row's pooling: what a row that only prefills keeps of its tokens' final
//! hidden states, fed in position order as its chunks are computed, so that a long prompt
//! never holds every hidden state at once.

use crate::request::Pooling;

/// An embedding row's pooling, fed each computed token's hidden state in position order.
#[derive(Debug)]
pub(crate) struct Pooled {
    pub(crate) pooling: Pooling,
    /// The running sum (mean), the first row (cls) or the latest row (last).
    acc: Vec<f32>,
    rows: usize,
}

impl Pooled {
    pub(crate) fn new(pooling: Pooling) -> Self {
        Self {
            pooling,
            acc: Vec::new(),
            rows: 0,
        }
    }

    pub(crate) fn push(&mut self, row: &[f32]) {
        match self.pooling {
            Pooling::Mean if self.rows > 0 => {
                self.acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
            }
            Pooling::Cls if self.rows > 0 => {}
            _ => {
                self.acc.clear();
                self.acc.extend_from_slice(row);
            }
        }
        self.rows += 1;
    }

    pub(crate) fn result(&self) -> Vec<f32> {
        match self.pooling {
            Pooling::Mean => {
                let n = self.rows.max(1) as f32;
                self.acc.iter().map(|&a| a / n).collect()
            }
            Pooling::Cls | Pooling::Last => self.acc.clone(),
        }
    }
}
