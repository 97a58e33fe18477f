//! The driver every matrix layout runs on: a [`RowKernel`] (a weight matrix in some layout
//! that multiplies a run of its rows with every activation row of a call) is spread over the
//! thread pool by [`run_kernel`], in sub-tiles of about [`SUBTILE_BYTES`] (or what the
//! kernel asks for, [`RowKernel::subtile_bytes`]) handed out as one
//! contiguous range per thread ([`Ranges`]), each task writing its results through the
//! shared [`Job`]; [`run_kernels`] runs several matrices that read the same activations in
//! one such loop. Tiling decides only which thread computes an output, never how, which is
//! the third leg of batch invariance (`matmul.rs`). Below every layout (`matmul.rs`'s
//! row-major blocks, `gemm8.rs`, `rows8.rs`), so none of them imports another to run.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::ActBlock;
use crate::pool::ThreadPool;

/// Target bytes of a weight sub-tile (kept in L1/L2 while the activation groups pass over it).
pub(crate) const SUBTILE_BYTES: usize = 32 * 1024;
/// Weight rows of a sub-tile, at most (the size of the kernel's output buffer on the stack).
pub(crate) const MAX_SUBTILE_ROWS: usize = 64;

/// A weight matrix in some layout that computes the dot products of a run of its rows with
/// every activation row of a call. [`run_kernel`] spreads the runs over the pool.
pub(crate) trait RowKernel: Sync {
    type Act: ActBlock + Sync;
    /// Output features.
    fn rows(&self) -> usize;
    /// Weight bytes per row (sizes the sub-tiles).
    fn row_bytes(&self) -> usize;
    /// Target weight bytes of a sub-tile for a call of `_n` activation rows.
    fn subtile_bytes(&self, _n: usize) -> usize {
        SUBTILE_BYTES
    }
    /// Sub-tiles start at multiples of this many rows.
    fn row_align(&self) -> usize {
        1
    }
    /// Every activation row of `job` times weight rows `o0..o1` (a sub-tile this task owns),
    /// written with [`Job::put`].
    fn subtile(&self, job: &Job<Self::Act>, o0: usize, o1: usize);
}

/// `out[r * rows + o] = dot(W[o], x[r])` for the `n` activation rows of `acts` (`upr` units
/// each), on the pool: rows split into [`Ranges`] of sub-tiles of about [`SUBTILE_BYTES`], each
/// sub-tile computed by the kernel for every activation row.
pub(crate) fn run_kernel<K: RowKernel>(
    pool: &ThreadPool,
    kernel: &K,
    acts: &[K::Act],
    upr: usize,
    n: usize,
    out: &mut [f32],
) {
    run_kernels(pool, &mut [(kernel, out)], acts, upr, n);
}

/// [`run_kernel`] for several matrices that multiply the same activations (Q/K/V, gate/up),
/// in ONE parallel loop: their sub-tiles, matrix after matrix, are one sequence split into
/// one contiguous range per thread.
///
/// Why: a loop per matrix is a fork-join per matrix, each a wait for the slower thread, and
/// a fresh stream for the prefetchers at every start. Matrices repacked into one buffer in
/// this order (`KRows16::repack_all`) are then one stream per thread.
pub(crate) fn run_kernels<K: RowKernel>(
    pool: &ThreadPool,
    parts: &mut [(&K, &mut [f32])],
    acts: &[K::Act],
    upr: usize,
    n: usize,
) {
    let mut jobs = Vec::with_capacity(parts.len());
    // Per matrix: its kernel, its rows per sub-tile, and its first sub-tile's global index.
    let mut tiles = Vec::with_capacity(parts.len());
    let mut n_sub = 0;
    for (kernel, out) in parts.iter_mut() {
        let rows = kernel.rows();
        assert_eq!(out.len(), n * rows, "out must hold n rows of w.rows values");
        if n == 0 || rows == 0 {
            out.fill(0.0);
            continue;
        }
        assert!(acts.len() >= n * upr, "activation buffer too short");
        let align = kernel.row_align();
        let sub_rows =
            (kernel.subtile_bytes(n) / kernel.row_bytes().max(1)).clamp(1, MAX_SUBTILE_ROWS);
        let sub_rows = sub_rows.div_ceil(align) * align;
        assert!(
            sub_rows <= MAX_SUBTILE_ROWS,
            "row alignment above the sub-tile size"
        );
        jobs.push(Job {
            acts,
            upr,
            n,
            rows,
            out: out.as_mut_ptr(),
        });
        tiles.push((*kernel, sub_rows, n_sub));
        n_sub += rows.div_ceil(sub_rows);
    }
    if n_sub == 0 {
        return;
    }
    let ranges = Ranges::new(n_sub, pool.n_threads());
    let (jobs, tiles, ranges) = (&jobs, &tiles, &ranges);
    pool.for_each(ranges.len(), &|home| {
        while let Some(subs) = ranges.claim(home) {
            for sub in subs {
                let i = tiles.partition_point(|t| t.2 <= sub) - 1;
                let (kernel, sub_rows, first) = tiles[i];
                let s0 = (sub - first) * sub_rows;
                kernel.subtile(&jobs[i], s0, (s0 + sub_rows).min(jobs[i].rows));
            }
        }
    });
}

/// The sub-tiles of one call split into one contiguous range per thread.
///
/// Why contiguous: at n = 1 a matmul streams its weights from memory, and each thread's
/// software prefetch runs [`crate::block::PREFETCH_DISTANCE`] bytes ahead of where it reads.
/// Handing out small tiles in global order made every thread jump to a fresh tile every few
/// KB, each start a cold miss; one range per thread keeps each stream going (the layers of
/// the default model: 8.3 -> 6.2 ms per decode step, median of interleaved runs). A thread that
/// finishes its own range takes sub-tiles from the END of the others (the machine is shared;
/// a preempted thread must not hold up the call), so owner and thief meet in the middle.
///
/// An owner claims a quarter of what is left of its range at a time (at least one sub-tile),
/// a thief one sub-tile: each claim is an atomic read-modify-write, a full barrier on x86
/// that waits for the thread's loads in flight, and at decode a sub-tile is ~32 KB rounded
/// up to whole groups (47 KB on a 2,560-wide Q4_K matrix), so a claim per sub-tile broke
/// each thread's stream every one or two microseconds. Shrinking claims keep the ends
/// balanced (4B decode 1.015× in one process, twelve pairs, `avx512`, Zen 4; prefill level).
/// The price: a claimed run cannot be stolen, so a preempted owner holds up at most a
/// quarter of what was left of its range, where it held one sub-tile.
struct Ranges {
    /// Per range, `front << 32 | back`: the sub-tiles `front..back` are still unclaimed.
    /// Padded to a cache line so that owners never contend.
    ranges: Vec<PaddedRange>,
}

#[repr(align(64))]
struct PaddedRange(AtomicU64);

impl Ranges {
    fn new(n_sub: usize, threads: usize) -> Ranges {
        let k = threads.clamp(1, n_sub.max(1));
        let ranges = (0..k)
            .map(|i| {
                let (front, back) = (n_sub * i / k, n_sub * (i + 1) / k);
                PaddedRange(AtomicU64::new(((front as u64) << 32) | back as u64))
            })
            .collect();
        Ranges { ranges }
    }

    fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The next sub-tiles for the thread working on range `home`: a quarter of what is left
    /// at the front of its own range, else one at the back of another's; `None` once every
    /// range is empty.
    fn claim(&self, home: usize) -> Option<std::ops::Range<usize>> {
        let k = self.ranges.len();
        (0..k).find_map(|j| {
            let i = (home + j) % k;
            self.take(i, j == 0)
        })
    }

    fn take(&self, i: usize, front: bool) -> Option<std::ops::Range<usize>> {
        let cell = &self.ranges[i].0;
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let (f, b) = (cur >> 32, cur & 0xFFFF_FFFF);
            if f >= b {
                return None;
            }
            let (next, got) = if front {
                let m = ((b - f) / 4).max(1);
                (((f + m) << 32) | b, f..f + m)
            } else {
                ((f << 32) | (b - 1), b - 1..b)
            };
            match cell.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(got.start as usize..got.end as usize),
                Err(now) => cur = now,
            }
        }
    }
}

/// What every task of one `run_kernel` shares.
pub(crate) struct Job<'a, A> {
    acts: &'a [A],
    /// Activation units per row.
    upr: usize,
    /// Activation rows.
    n: usize,
    /// Output features (the stride of `out`).
    rows: usize,
    out: *mut f32,
}

// SAFETY: `out` is written at disjoint elements by the tasks (each weight row `o` belongs to
// one task), and `for_each` returns only after all tasks finished.
unsafe impl<A: Sync> Sync for Job<'_, A> {}

impl<A> Job<'_, A> {
    /// Activation rows.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// Activation row `r`.
    pub(crate) fn row(&self, r: usize) -> &[A] {
        &self.acts[r * self.upr..(r + 1) * self.upr]
    }

    /// Stores the dot of weight row `o` with activation row `r`.
    ///
    /// # Safety
    /// Only the task that claimed the sub-tile holding weight row `o` may call this.
    #[inline(always)]
    pub(crate) unsafe fn put(&self, r: usize, o: usize, v: f32) {
        assert!(r < self.n && o < self.rows, "({r}, {o}) outside out");
        // SAFETY: inside `out` (n * rows, checked in `run_kernels`); the caller owns row `o`.
        unsafe { *self.out.add(r * self.rows + o) = v };
    }

    /// Stores the dots of weight rows `o..o + vs.len()` with activation row `r` (one bounds
    /// check and one copy for a group's results).
    ///
    /// # Safety
    /// Only the task that claimed the sub-tile holding those weight rows may call this.
    #[inline(always)]
    pub(crate) unsafe fn put_run(&self, r: usize, o: usize, vs: &[f32]) {
        assert!(
            r < self.n && o + vs.len() <= self.rows,
            "({r}, {o}..{}) outside out",
            o + vs.len()
        );
        // SAFETY: inside `out` (n * rows, checked in `run_kernels`); the caller owns the rows.
        unsafe {
            std::ptr::copy_nonoverlapping(vs.as_ptr(), self.out.add(r * self.rows + o), vs.len())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    /// Owners and thieves racing over the ranges claim every sub-tile exactly once, and an
    /// owner alone walks its range front to back in shrinking claims.
    #[test]
    fn ranges_hand_out_each_subtile_once() {
        for (n_sub, threads) in [(1000, 4), (7, 3), (3, 8), (1, 2), (0, 2)] {
            let ranges = Ranges::new(n_sub, threads);
            let mut got: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..ranges.len())
                    .map(|home| {
                        let ranges = &ranges;
                        s.spawn(move || {
                            std::iter::from_fn(|| ranges.claim(home))
                                .flatten()
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            });
            got.sort_unstable();
            assert_eq!(
                got,
                (0..n_sub).collect::<Vec<_>>(),
                "{n_sub} over {threads}"
            );
        }
        // An owner's claims shrink: a quarter of what is left, at least one.
        let ranges = Ranges::new(40, 2);
        let own: Vec<_> = (0..6).map(|_| ranges.claim(0).unwrap()).collect();
        assert_eq!(own, [0..5, 5..8, 8..11, 11..13, 13..14, 14..15]);
        let own: Vec<_> = (0..5).map(|_| ranges.claim(0).unwrap()).collect();
        assert_eq!(own, [15..16, 16..17, 17..18, 18..19, 19..20]);
        assert_eq!(
            ranges.claim(0),
            Some(39..40),
            "then steals one from the back of range 1"
        );
    }
}
