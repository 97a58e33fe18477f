//! The KV block pool and the lease a request holds on its blocks.
//!
//! Admission is integer arithmetic on blocks: a block is `kv_block_size` token positions of K
//! and V for every layer, and a request leases `ceil((prompt + max_tokens) / block_size)`
//! blocks when it is admitted, for its whole life. Reserving the worst case up front means a
//! running request can never run out of KV mid-generation, so nothing is ever preempted or
//! recomputed; the price is that a request that stops early held blocks it did not use. That
//! is the simple policy; a later one (grow on demand, preempt the youngest) can sit behind the
//! same lease type.
//!
//! A [`KvLease`] returns its blocks in `Drop`, so no exit path (finish, cancel, error, a panic
//! unwinding through the worker) can leak one; the scheduler tests check free == total after a
//! random storm, and the storm test below checks the pool on its own.

use std::sync::{Arc, Mutex, MutexGuard};

use ferrox_engine::kv::BlockId;

/// Hands out block ids `0..total` to leases, and takes them back when a lease drops.
#[derive(Debug, Clone)]
pub struct BlockPool {
    inner: Arc<Mutex<PoolState>>,
}

#[derive(Debug)]
struct PoolState {
    total_blocks: usize,
    /// Free ids, used as a stack (the most recently freed block is reused first).
    free: Vec<BlockId>,
    peak_used_blocks: usize,
}

/// Not enough free blocks for a lease right now (the caller waits; it is not an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{requested_blocks} KV blocks requested, {free_blocks} free")]
pub struct NotEnoughBlocks {
    pub requested_blocks: usize,
    pub free_blocks: usize,
}

/// Blocks held by one request; returned to the pool when dropped.
#[derive(Debug)]
pub struct KvLease {
    blocks: Vec<BlockId>,
    pool: Arc<Mutex<PoolState>>,
}

impl BlockPool {
    pub fn new(total_blocks: usize) -> Self {
        let free = (0..total_blocks as BlockId).rev().collect();
        Self {
            inner: Arc::new(Mutex::new(PoolState {
                total_blocks,
                free,
                peak_used_blocks: 0,
            })),
        }
    }

    /// Leases `n` blocks, or says how many are free.
    pub fn lease(&self, n: usize) -> Result<KvLease, NotEnoughBlocks> {
        let mut state = lock(&self.inner);
        let free_blocks = state.free.len();
        if n > free_blocks {
            return Err(NotEnoughBlocks {
                requested_blocks: n,
                free_blocks,
            });
        }
        let blocks = state.free.split_off(free_blocks - n);
        let used = state.total_blocks - state.free.len();
        state.peak_used_blocks = state.peak_used_blocks.max(used);
        Ok(KvLease {
            blocks,
            pool: Arc::clone(&self.inner),
        })
    }

    pub fn total_blocks(&self) -> usize {
        lock(&self.inner).total_blocks
    }

    pub fn free_blocks(&self) -> usize {
        lock(&self.inner).free.len()
    }

    /// The most blocks ever leased at once.
    pub fn peak_used_blocks(&self) -> usize {
        lock(&self.inner).peak_used_blocks
    }
}

impl KvLease {
    /// The request's block table: position `p` lives in `blocks()[p / block_size]`.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }
}

impl Drop for KvLease {
    fn drop(&mut self) {
        lock(&self.pool).free.append(&mut self.blocks);
    }
}

/// The pool's lock is never held across anything that can panic, so a poisoned lock still
/// guards consistent state: take it anyway rather than leak every future lease.
fn lock(m: &Mutex<PoolState>) -> MutexGuard<'_, PoolState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;

    #[test]
    fn refusal_says_how_many_are_free() {
        let pool = BlockPool::new(4);
        let a = pool.lease(3).unwrap();
        assert_eq!(
            pool.lease(2).unwrap_err(),
            NotEnoughBlocks {
                requested_blocks: 2,
                free_blocks: 1
            }
        );
        drop(a);
        assert_eq!(pool.lease(4).unwrap().blocks().len(), 4);
        assert_eq!(pool.free_blocks(), 4);
        assert_eq!(pool.peak_used_blocks(), 4);
    }

    /// 100k random lease / drop rounds: leases never share a block, and free + leased is
    /// always the total; at the end every block is back.
    #[test]
    fn random_storm_keeps_every_block_accounted_for() {
        let total = 64;
        let pool = BlockPool::new(total);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut held: Vec<KvLease> = Vec::new();
        for _ in 0..100_000 {
            if rng.gen_bool(0.5) && !held.is_empty() {
                let i = rng.gen_range(0..held.len());
                held.swap_remove(i);
            } else if let Ok(l) = pool.lease(rng.gen_range(0..12)) {
                held.push(l);
            }
            let leased: Vec<BlockId> = held.iter().flat_map(|l| l.blocks().to_vec()).collect();
            let distinct: HashSet<BlockId> = leased.iter().copied().collect();
            assert_eq!(distinct.len(), leased.len(), "a block in two leases");
            assert!(leased.iter().all(|&b| (b as usize) < total));
            assert_eq!(leased.len() + pool.free_blocks(), total);
        }
        held.clear();
        assert_eq!(pool.free_blocks(), total);
    }
}
