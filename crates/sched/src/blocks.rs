//! The KV block pool: leases, reference counts, and the prefix cache's index of named blocks.
//!
//! Admission is integer arithmetic on blocks: a block is `kv_block_size` token positions of K
//! and V for every layer. A request's lease covers the tokens it holds when it is admitted
//! (its prompt) and grows a block at a time as it generates ([`KvLease::grow`]); when the pool
//! has none left, the worker preempts a row and its lease gives everything back
//! ([`KvLease::clear`]). Some of a lease's blocks may be *shared*: a full block whose content
//! name ([`crate::prefix`]) another request already computed is attached instead of computed.
//!
//! Every block is in exactly one of three states:
//! - **free**: held by no lease, holds nothing reusable;
//! - **cached, unreferenced**: held by no lease, but named in the index, so a later request
//!   with the same prefix can attach it. It still counts as available: leasing a fresh block
//!   when none is free evicts the least recently released one (its name leaves the index);
//! - **referenced**: held by one or more leases (`refs` counts them). A block held by two
//!   leases is always a named, full block, which nobody writes again: only a block that is
//!   referenced once and unnamed is ever written (the worker checks this in debug builds).
//!
//! A named block is either full (found by name: attached whole) or a *tail*, the partly
//! computed last block of a finished request (never attached: it cannot be shared, since its
//! next holder would write the rest of it). Every named block is also filed under its
//! parent's name with its tokens, so a prompt whose next block matches a cached one only in
//! part can copy the positions they share ([`BlockPool::best_prefix`]): the next turn of a
//! conversation resends the answer that ended mid-block, and the copy saves recomputing it.
//!
//! A lease releases its blocks last to first, so the tail of a chain becomes evictable before
//! its head: eviction eats a cached prefix from its end, and what is left is still a usable
//! prefix. A [`KvLease`] returns its blocks in `Drop`, so no exit path (finish, cancel,
//! error, a panic unwinding through the worker) can leak one; [`BlockPool::audit`] checks
//! every invariant above, and the storm tests (here and in the scheduler's tests) run it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use ferrox_engine::kv::BlockId;

use crate::prefix::BlockHash;

/// Hands out block ids `0..total` to leases, and takes them back when a lease drops.
#[derive(Debug, Clone)]
pub struct BlockPool {
    inner: Arc<Mutex<PoolState>>,
}

#[derive(Debug)]
struct PoolState {
    /// Leases holding each block.
    refs: Vec<u32>,
    /// Each block's content name, once it is full (or a kept tail) and indexed.
    name: Vec<Option<BlockHash>>,
    /// For named blocks: the name of the block before it (or the chain's root), and its
    /// tokens (`block_size` of them for a full block, fewer for a tail).
    parent: Vec<BlockHash>,
    tokens: Vec<Vec<u32>>,
    /// Named blocks filed by their parent's name.
    children: HashMap<BlockHash, Vec<BlockId>>,
    /// When each cached block was last released (its key in `evictable`).
    released_at: Vec<u64>,
    /// Free ids, used as a stack (the most recently freed block is reused first).
    free: Vec<BlockId>,
    /// Every named block, referenced or not.
    index: HashMap<BlockHash, BlockId>,
    /// Named blocks no lease holds, least recently released first.
    evictable: BTreeMap<u64, BlockId>,
    clock: u64,
    /// Whether full blocks are named at all (`--no-prefix-cache` turns it off).
    caching: bool,
    peak_used_blocks: usize,
    evictions: u64,
}

/// Not enough available blocks for a lease right now (the caller waits; it is not an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{requested_blocks} new KV blocks requested, {available_blocks} available")]
pub struct NotEnoughBlocks {
    pub requested_blocks: usize,
    pub available_blocks: usize,
}

/// A count of the pool's blocks by state; [`BlockPool::audit`] returns it after checking
/// that the states are consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    pub total: usize,
    pub free: usize,
    pub cached_unreferenced: usize,
    pub referenced: usize,
    /// Named blocks, referenced or not.
    pub cached: usize,
    /// Sum of every block's reference count.
    pub refs: usize,
}

/// What the status reports of the pool ([`BlockPool::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Blocks no lease holds: free ones plus cached ones that can be reclaimed.
    pub available: usize,
    /// Of those, the ones holding nothing (taking one evicts no cached prefix).
    pub free: usize,
    /// Named blocks (a reusable prefix), held or not.
    pub cached: usize,
    /// Cached blocks whose name was dropped to make room.
    pub evictions: u64,
    /// The most blocks ever referenced at once.
    pub peak_used: usize,
}

/// The blocks of one request's block table; returned to the pool when dropped.
#[derive(Debug)]
pub struct KvLease {
    blocks: Vec<BlockId>,
    pool: Arc<Mutex<PoolState>>,
}

impl BlockPool {
    /// A pool of `total_blocks`; with `caching` off no block is ever named or shared.
    pub fn new(total_blocks: usize, caching: bool) -> Self {
        Self {
            inner: Arc::new(Mutex::new(PoolState {
                refs: vec![0; total_blocks],
                name: vec![None; total_blocks],
                parent: vec![0; total_blocks],
                tokens: vec![Vec::new(); total_blocks],
                children: HashMap::new(),
                released_at: vec![0; total_blocks],
                free: (0..total_blocks as BlockId).rev().collect(),
                index: HashMap::new(),
                evictable: BTreeMap::new(),
                clock: 0,
                caching,
                peak_used_blocks: 0,
                evictions: 0,
            })),
        }
    }

    /// The blocks holding the longest leading run of `chain` (block names, first block
    /// first) that the pool has cached. Takes no reference: lease them with [`Self::lease`].
    pub fn lookup(&self, chain: &[BlockHash]) -> Vec<BlockId> {
        let state = lock(&self.inner);
        chain
            .iter()
            .map_while(|name| state.index.get(name).copied())
            .collect()
    }

    /// Leases a block table of `shared` (cached blocks from [`Self::lookup`], in order) then
    /// `fresh` new blocks, or says how many are available. Exact: the shared blocks cost
    /// nothing except that an unreferenced one stops being available to others.
    pub fn lease(&self, shared: &[BlockId], fresh: usize) -> Result<KvLease, NotEnoughBlocks> {
        self.lease_leaving(shared, fresh, 0)
    }

    /// [`Self::lease`], but only if `spare` blocks stay available afterwards (the worker
    /// keeps one for every running row, so admitting a request never forces a preemption on
    /// the very next step).
    pub fn lease_leaving(
        &self,
        shared: &[BlockId],
        fresh: usize,
        spare: usize,
    ) -> Result<KvLease, NotEnoughBlocks> {
        let mut state = lock(&self.inner);
        let idle_shared = shared
            .iter()
            .filter(|&&b| state.refs[b as usize] == 0)
            .count();
        let available_blocks = state.available() - idle_shared;
        if fresh + spare > available_blocks {
            return Err(NotEnoughBlocks {
                requested_blocks: fresh + spare,
                available_blocks,
            });
        }
        let mut blocks = Vec::with_capacity(shared.len() + fresh);
        for &b in shared {
            state.take_ref(b);
            blocks.push(b);
        }
        for _ in 0..fresh {
            let b = state.take_fresh();
            blocks.push(b);
        }
        let used = state.referenced();
        state.peak_used_blocks = state.peak_used_blocks.max(used);
        Ok(KvLease {
            blocks,
            pool: Arc::clone(&self.inner),
        })
    }

    /// The cached block filed under `parent` whose tokens start with the longest run of
    /// `want`, and that run's length (at least 1): its first positions can be copied
    /// ([`crate::StepModel::copy_kv`]) instead of computed. Takes no reference: copy before
    /// any forward writes to the pool.
    pub fn best_prefix(&self, parent: BlockHash, want: &[u32]) -> Option<(BlockId, usize)> {
        let state = lock(&self.inner);
        let common = |b: BlockId| {
            let t = &state.tokens[b as usize];
            t.iter().zip(want).take_while(|(a, b)| a == b).count()
        };
        state
            .children
            .get(&parent)?
            .iter()
            .map(|&b| (b, common(b)))
            .max_by_key(|&(_, n)| n)
            .filter(|&(_, n)| n > 0)
    }

    pub fn total_blocks(&self) -> usize {
        lock(&self.inner).refs.len()
    }

    /// The pool's figures for the status, under one lock.
    pub fn stats(&self) -> PoolStats {
        let state = lock(&self.inner);
        PoolStats {
            available: state.available(),
            free: state.free.len(),
            cached: state.index.len(),
            evictions: state.evictions,
            peak_used: state.peak_used_blocks,
        }
    }

    /// Checks every invariant of the module docs and counts the blocks by state; the error
    /// names the first broken one.
    pub fn audit(&self) -> Result<PoolCounts, String> {
        let state = lock(&self.inner);
        let total = state.refs.len();
        let mut seen = vec![0u8; total];
        for &b in &state.free {
            let b = b as usize;
            seen[b] += 1;
            if state.refs[b] != 0 || state.name[b].is_some() {
                return Err(format!("free block {b} has refs or a name"));
            }
        }
        for (&stamp, &b) in &state.evictable {
            let b = b as usize;
            seen[b] += 1;
            if state.refs[b] != 0 || state.name[b].is_none() || state.released_at[b] != stamp {
                return Err(format!("evictable block {b} is held, unnamed or misfiled"));
            }
        }
        for (b, &refs) in state.refs.iter().enumerate() {
            if refs > 0 {
                seen[b] += 1;
            }
            if refs > 1 && state.name[b].is_none() {
                return Err(format!("block {b} is shared by {refs} leases but unnamed"));
            }
        }
        if let Some(b) = seen.iter().position(|&n| n != 1) {
            return Err(format!("block {b} is in {} states", seen[b]));
        }
        for (name, &b) in &state.index {
            if state.name[b as usize] != Some(*name) {
                return Err(format!("the index names block {b} wrongly"));
            }
            let filed = state.children.get(&state.parent[b as usize]);
            if filed.map_or(0, |c| c.iter().filter(|&&c| c == b).count()) != 1 {
                return Err(format!("block {b} is not filed once under its parent"));
            }
        }
        let filed: usize = state.children.values().map(Vec::len).sum();
        if filed != state.index.len() {
            return Err(format!("{filed} blocks filed, {} named", state.index.len()));
        }
        let named = state.name.iter().filter(|n| n.is_some()).count();
        if named != state.index.len() {
            return Err(format!(
                "{named} named blocks, {} indexed",
                state.index.len()
            ));
        }
        Ok(PoolCounts {
            total,
            free: state.free.len(),
            cached_unreferenced: state.evictable.len(),
            referenced: state.referenced(),
            cached: state.index.len(),
            refs: state.refs.iter().map(|&r| r as usize).sum(),
        })
    }
}

impl PoolState {
    fn available(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    fn referenced(&self) -> usize {
        self.refs.len() - self.available()
    }

    /// One more lease holds `b` (a cached block leaves the evictable list).
    fn take_ref(&mut self, b: BlockId) {
        if self.refs[b as usize] == 0 {
            let stamp = self.released_at[b as usize];
            self.evictable.remove(&stamp);
        }
        self.refs[b as usize] += 1;
    }

    /// A block for a lease to write: a free one, else the least recently released cached
    /// one, whose name is forgotten. The caller has checked that one is available.
    fn take_fresh(&mut self) -> BlockId {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self
                    .evictable
                    .pop_first()
                    .expect("the caller checked availability");
                let name = self.name[b as usize].take().expect("evictable is named");
                self.index.remove(&name);
                self.unfile(b);
                self.evictions += 1;
                b
            }
        };
        self.refs[b as usize] = 1;
        b
    }

    /// Takes an evicted block out of its parent's file.
    fn unfile(&mut self, b: BlockId) {
        let parent = self.parent[b as usize];
        if let Some(siblings) = self.children.get_mut(&parent) {
            siblings.retain(|&s| s != b);
            if siblings.is_empty() {
                self.children.remove(&parent);
            }
        }
        self.tokens[b as usize].clear();
    }

    /// One lease lets go of `b`.
    fn release(&mut self, b: BlockId) {
        let i = b as usize;
        self.refs[i] -= 1;
        if self.refs[i] > 0 {
            return;
        }
        if self.name[i].is_some() {
            self.clock += 1;
            self.released_at[i] = self.clock;
            self.evictable.insert(self.clock, b);
        } else {
            self.free.push(b);
        }
    }
}

impl KvLease {
    /// The request's block table: position `p` lives in `blocks()[p / block_size]`.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Adds one fresh block at the end of the table (the row's next position starts a new
    /// block), or says that none is available: then the caller preempts someone.
    pub fn grow(&mut self) -> Result<(), NotEnoughBlocks> {
        let mut state = lock(&self.pool);
        if state.available() == 0 {
            return Err(NotEnoughBlocks {
                requested_blocks: 1,
                available_blocks: 0,
            });
        }
        let b = state.take_fresh();
        self.blocks.push(b);
        let used = state.referenced();
        state.peak_used_blocks = state.peak_used_blocks.max(used);
        Ok(())
    }

    /// Gives every block back (last to first, so a chain's tail becomes evictable before its
    /// head) and leaves an empty table: a preempted row keeps its lease object, not its KV.
    pub fn clear(&mut self) {
        let mut state = lock(&self.pool);
        for &b in self.blocks.iter().rev() {
            state.release(b);
        }
        self.blocks.clear();
    }

    /// Names table entry `i`, which the holder has just finished computing — all of it, or
    /// (a tail, as the holder ends) its first `tokens.len()` positions — and files it under
    /// `parent` with its tokens, so later requests can find it. If another block already
    /// carries the name (two requests computed the same block at once), this one stays
    /// private and unnamed. A no-op with caching off.
    pub fn publish(&mut self, i: usize, name: BlockHash, parent: BlockHash, tokens: &[u32]) {
        let mut state = lock(&self.pool);
        let b = self.blocks[i];
        if !state.caching || state.name[b as usize].is_some() || state.index.contains_key(&name) {
            return;
        }
        debug_assert_eq!(state.refs[b as usize], 1, "a private block has one holder");
        let at = b as usize;
        state.name[at] = Some(name);
        state.parent[at] = parent;
        state.tokens[at] = tokens.to_vec();
        state.index.insert(name, b);
        state.children.entry(parent).or_default().push(b);
    }

    /// Replaces table entry `i` (a private block not yet written) by the cached block named
    /// `name`, if the pool has one; the private block goes back to the pool. Whether it did.
    pub fn attach(&mut self, i: usize, name: BlockHash) -> bool {
        let mut state = lock(&self.pool);
        let Some(&cached) = state.index.get(&name) else {
            return false;
        };
        let own = self.blocks[i];
        if own == cached {
            return true;
        }
        debug_assert!(
            state.name[own as usize].is_none(),
            "replacing a named block"
        );
        state.take_ref(cached);
        state.release(own);
        self.blocks[i] = cached;
        true
    }

    /// Whether table entries `range` may be written: each held by this lease alone and not
    /// named (a named block is shared, or may be, and is never written again).
    pub fn writable(&self, range: std::ops::Range<usize>) -> bool {
        let state = lock(&self.pool);
        self.blocks[range]
            .iter()
            .all(|&b| state.refs[b as usize] == 1 && state.name[b as usize].is_none())
    }
}

impl Drop for KvLease {
    fn drop(&mut self) {
        self.clear();
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

    #[test]
    fn refusal_says_how_many_are_available() {
        let pool = BlockPool::new(4, true);
        let a = pool.lease(&[], 3).unwrap();
        assert_eq!(
            pool.lease(&[], 2).unwrap_err(),
            NotEnoughBlocks {
                requested_blocks: 2,
                available_blocks: 1
            }
        );
        drop(a);
        assert_eq!(pool.lease(&[], 4).unwrap().blocks().len(), 4);
        assert_eq!(pool.stats().available, 4);
        assert_eq!(pool.stats().peak_used, 4);
    }

    #[test]
    fn a_published_block_is_shared_then_cached_then_evicted_tail_first() {
        let pool = BlockPool::new(4, true);
        let mut a = pool.lease(&[], 3).unwrap();
        a.publish(0, 10, 0, &[1]);
        a.publish(1, 11, 10, &[2]);
        a.publish(2, 11, 11, &[3]); // the name is taken: block 2 stays private
        assert_eq!(pool.lookup(&[10, 11, 12]), a.blocks()[..2].to_vec());
        // Shared while a holds them: the two named blocks cost b nothing.
        let hits = pool.lookup(&[10, 11]);
        let b = pool.lease(&hits, 1).unwrap();
        assert_eq!(pool.audit().unwrap().refs, 3 + 3);
        assert!(!b.writable(0..1) && b.writable(2..3));
        drop(a);
        drop(b);
        let c = pool.audit().unwrap();
        assert_eq!((c.free, c.cached_unreferenced, c.referenced), (2, 2, 0));
        // Cached, unreferenced blocks are available: evicted only when a lease needs them,
        // the chain's tail (11) before its head (10).
        let d = pool.lease(&[], 3).unwrap();
        assert_eq!(pool.lookup(&[10, 11]).len(), 1);
        assert_eq!(pool.stats().evictions, 1);
        // Exact: the unreferenced head counts as available until it is attached itself.
        let hits = pool.lookup(&[10]);
        assert_eq!(
            pool.lease(&hits, 1).unwrap_err(),
            NotEnoughBlocks {
                requested_blocks: 1,
                available_blocks: 0
            }
        );
        let e = pool.lease(&hits, 0).unwrap();
        drop((d, e));
        pool.audit().unwrap();
    }

    #[test]
    fn attach_swaps_a_private_block_for_the_cached_one() {
        let pool = BlockPool::new(4, true);
        let mut a = pool.lease(&[], 1).unwrap();
        a.publish(0, 7, 0, &[1]);
        let mut b = pool.lease(&[], 2).unwrap();
        assert!(!b.attach(0, 8), "nothing is named 8");
        assert!(b.attach(0, 7));
        assert_eq!(b.blocks()[0], a.blocks()[0]);
        assert_eq!(pool.stats().available, 4 - 2);
        drop((a, b));
        assert_eq!(pool.audit().unwrap().cached_unreferenced, 1);
    }

    #[test]
    fn best_prefix_finds_the_longest_shared_start_under_a_parent() {
        let pool = BlockPool::new(4, true);
        let mut a = pool.lease(&[], 3).unwrap();
        a.publish(0, 10, 1, &[5, 6, 7, 8]);
        a.publish(1, 11, 1, &[5, 6, 9]); // a tail
        a.publish(2, 12, 2, &[5, 6, 7, 8]);
        assert_eq!(pool.best_prefix(1, &[5, 6, 7, 0]), Some((a.blocks()[0], 3)));
        assert_eq!(pool.best_prefix(1, &[5, 6, 9, 9]), Some((a.blocks()[1], 3)));
        assert_eq!(pool.best_prefix(1, &[4]), None);
        assert_eq!(pool.best_prefix(3, &[5]), None);
        drop(a);
        // Evicted blocks leave their parent's file.
        let _b = pool.lease(&[], 4).unwrap();
        assert_eq!(pool.best_prefix(1, &[5]), None);
        pool.audit().unwrap();
    }

    #[test]
    fn a_lease_grows_into_cached_blocks_and_clears_tail_first() {
        let pool = BlockPool::new(3, true);
        let mut a = pool.lease(&[], 2).unwrap();
        a.publish(0, 10, 0, &[1]);
        a.publish(1, 11, 10, &[2]);
        a.clear();
        assert!(a.blocks().is_empty());
        let mut b = pool.lease(&[], 1).unwrap(); // the free block
        b.grow().unwrap(); // reclaims the tail of the cleared chain, not its head
        assert_eq!(pool.lookup(&[10, 11]).len(), 1);
        b.grow().unwrap();
        assert_eq!(
            b.grow().unwrap_err(),
            NotEnoughBlocks {
                requested_blocks: 1,
                available_blocks: 0
            }
        );
        assert_eq!((b.blocks().len(), pool.stats().peak_used), (3, 3));
        drop(b);
        assert_eq!(pool.audit().unwrap().free, 3);
    }

    #[test]
    fn caching_off_names_nothing() {
        let pool = BlockPool::new(2, false);
        let mut a = pool.lease(&[], 1).unwrap();
        a.publish(0, 1, 0, &[1]);
        assert!(pool.lookup(&[1]).is_empty());
        drop(a);
        assert_eq!(pool.audit().unwrap().free, 2);
    }

    /// 100k random rounds of lease (with hits from random chains), grow, clear, publish,
    /// attach and drop:
    /// every invariant holds after each, no two leases write one block, and at the end every
    /// block is free or cached with no reference left.
    #[test]
    fn random_storm_keeps_every_block_accounted_for() {
        let total = 64;
        let pool = BlockPool::new(total, true);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        // Names of a chain: block j of chain c.
        let name = |c: u128, j: usize| c << 32 | j as u128;
        let mut held: Vec<(KvLease, u128)> = Vec::new();
        for _ in 0..100_000 {
            match rng.gen_range(0..6) {
                0 if !held.is_empty() => {
                    let i = rng.gen_range(0..held.len());
                    held.swap_remove(i);
                }
                4 if !held.is_empty() => {
                    let i = rng.gen_range(0..held.len());
                    let before = held[i].0.blocks().len();
                    let grown = held[i].0.grow().is_ok();
                    assert_eq!(held[i].0.blocks().len(), before + grown as usize);
                }
                5 if !held.is_empty() && rng.gen_bool(0.3) => {
                    let i = rng.gen_range(0..held.len());
                    held[i].0.clear();
                }
                1 if !held.is_empty() => {
                    let i = rng.gen_range(0..held.len());
                    let (lease, c) = &mut held[i];
                    let j = rng.gen_range(0..lease.blocks().len().max(1));
                    if j < lease.blocks().len() && lease.writable(j..j + 1) {
                        if rng.gen_bool(0.5) {
                            let parent = if j == 0 { 0 } else { name(*c, j - 1) };
                            lease.publish(j, name(*c, j), parent, &[j as u32; 2]);
                        } else {
                            lease.attach(j, name(*c, j));
                        }
                    }
                }
                _ => {
                    let c = rng.gen_range(0..6u128);
                    let chain: Vec<u128> = (0..rng.gen_range(0..8)).map(|j| name(c, j)).collect();
                    let hits = pool.lookup(&chain);
                    if let Ok(l) = pool.lease(&hits, rng.gen_range(0..6)) {
                        held.push((l, c));
                    }
                }
            }
            let counts = pool.audit().unwrap();
            let held_refs: usize = held.iter().map(|(l, _)| l.blocks().len()).sum();
            assert_eq!(counts.refs, held_refs);
            assert_eq!(
                counts.free + counts.cached_unreferenced + counts.referenced,
                total
            );
        }
        held.clear();
        let counts = pool.audit().unwrap();
        assert_eq!((counts.referenced, counts.refs), (0, 0));
        assert_eq!(pool.stats().available, total);
    }
}
