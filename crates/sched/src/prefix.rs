//! Naming KV blocks by their content, so a block computed for one request can be found again
//! by the next one that starts with the same tokens.
//!
//! A full block (all `block_size` positions written) holds K and V that depend on exactly two
//! things: the model, and every token from position 0 to the end of the block. So a block is
//! named by a chain hash: `hash(parent's hash, this block's token ids)`, where the first
//! block's parent is a *root* made from the pool's key and the request's `cache_salt`. Two
//! blocks with the same name hold the same numbers, bit for bit (the engine's KV for a
//! position does not depend on the batch or the chunk size that computed it), so a request may
//! attach a named block instead of computing it, and its logits cannot change.
//!
//! Why the hash is safe to trust:
//! - it is 128 bits from two SipHash-1-3 functions with keys drawn at random when the
//!   scheduler starts: a client cannot aim for a collision with keys it never sees, and a
//!   chance one among a million cached blocks is around 2^-88;
//! - each worker (one model, one KV pool) draws its own keys, so the model is part of every
//!   name by construction: no name from one model's pool means anything in another's;
//! - the salt enters the root, so requests with different `cache_salt` values share no block
//!   and cannot even observe one another's prefixes by timing (a hit answers faster: without
//!   a salt, one tenant could probe whether another sent a given prompt).
//!
//! Partial blocks (the tail of a prompt, the block a decode is filling) have no name and are
//! never shared: only a block whose every position is computed can be attached.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// The content name of one full KV block (or of a chain's root).
pub type BlockHash = u128;

/// Computes block names with this pool's secret keys. Cheap to clone (four `u64`s).
#[derive(Debug, Clone)]
pub struct BlockHasher {
    keys: [RandomState; 2],
}

impl Default for BlockHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockHasher {
    /// A hasher with fresh random keys.
    pub fn new() -> Self {
        Self {
            keys: [RandomState::new(), RandomState::new()],
        }
    }

    fn hash(&self, write: impl Fn(&mut dyn Hasher)) -> BlockHash {
        let [lo, hi] = self.keys.each_ref().map(|k| {
            let mut h = k.build_hasher();
            write(&mut h);
            h.finish()
        });
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// The root every chain of `salt` hangs from (no salt is its own tenant).
    pub fn root(&self, salt: Option<&str>) -> BlockHash {
        self.hash(|h| match salt {
            None => h.write_u8(0),
            Some(s) => {
                h.write_u8(1);
                h.write_usize(s.len());
                h.write(s.as_bytes());
            }
        })
    }

    /// The name of a block holding `tokens` after the block named `parent`.
    pub fn block(&self, parent: BlockHash, tokens: &[u32]) -> BlockHash {
        self.hash(|h| {
            h.write_u8(2);
            h.write_u128(parent);
            h.write_usize(tokens.len());
            for &t in tokens {
                h.write_u32(t);
            }
        })
    }

    /// Appends to `chain` the names of the full blocks of `tokens` it does not hold yet:
    /// afterwards `chain[b]` names the block of positions `b * block_size..(b + 1) * block_size`
    /// for every full block of `tokens`.
    pub fn extend(
        &self,
        root: BlockHash,
        tokens: &[u32],
        block_size: usize,
        chain: &mut Vec<BlockHash>,
    ) {
        for b in chain.len()..tokens.len() / block_size {
            let parent = if b == 0 { root } else { chain[b - 1] };
            let name = self.block(parent, &tokens[b * block_size..(b + 1) * block_size]);
            chain.push(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_depend_on_every_earlier_token_and_the_salt() {
        let h = BlockHasher::new();
        let root = h.root(None);
        let mut a = Vec::new();
        h.extend(root, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 4, &mut a);
        assert_eq!(a.len(), 2, "only full blocks are named");
        // Same second block, different first block: different name for the second.
        let mut b = Vec::new();
        h.extend(root, &[1, 2, 3, 0, 5, 6, 7, 8], 4, &mut b);
        assert_ne!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // Extending is the same as hashing at once.
        let mut c = Vec::new();
        h.extend(root, &[1, 2, 3, 4], 4, &mut c);
        h.extend(root, &[1, 2, 3, 4, 5, 6, 7, 8], 4, &mut c);
        assert_eq!(c, a);
        // A salt separates tenants; an empty salt is not the same as none.
        let mut s = Vec::new();
        h.extend(h.root(Some("t1")), &[1, 2, 3, 4], 4, &mut s);
        assert_ne!(s[0], a[0]);
        assert_ne!(h.root(Some("")), root);
        // Another pool's keys give other names.
        let mut other = Vec::new();
        let h2 = BlockHasher::new();
        h2.extend(h2.root(None), &[1, 2, 3, 4], 4, &mut other);
        assert_ne!(other[0], a[0]);
    }
}
