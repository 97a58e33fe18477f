//! The plain read bandwidth: the ceiling a one-sequence decode is judged against.
//!
//! Why: a decode step of one sequence reads every weight once and does little else, so on a
//! real-size model its speed is set by how fast memory delivers bytes. "Decode runs at N % of
//! what this machine can read" is the fair measure of a decode kernel, and issue 23 states
//! its target that way. The probe reads a buffer far bigger than any cache, on huge pages
//! like the weights (`hugepages`), split across the same thread pool the forward uses, with
//! the least work per byte that still reads every byte (an XOR of 64-byte lines, which LLVM
//! turns into one vector load and XOR per line).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::pool::ThreadPool;

/// What one pass over the buffer found: the XOR of every `u64` in it (so no read can be
/// skipped) and how long it took.
fn read_pass(pool: &ThreadPool, buf: &[u64]) -> (u64, f64) {
    const LINE: usize = 8;
    let tiles = pool.n_threads() * 16;
    let per = buf.len().div_ceil(tiles).next_multiple_of(LINE);
    let sink = AtomicU64::new(0);
    let t = Instant::now();
    pool.for_each(tiles, &|i| {
        let part = &buf[(i * per).min(buf.len())..((i + 1) * per).min(buf.len())];
        let mut acc = [0u64; LINE];
        let lines = part.chunks_exact(LINE);
        let tail = lines.remainder().iter().fold(0, |a, &v| a ^ v);
        for line in lines {
            for (a, v) in acc.iter_mut().zip(line) {
                *a ^= v;
            }
        }
        sink.fetch_xor(acc.iter().fold(tail, |a, &v| a ^ v), Ordering::Relaxed);
    });
    (sink.load(Ordering::Relaxed), t.elapsed().as_secs_f64())
}

/// A buffer of `bytes` (rounded down to whole `u64`s) on huge pages, every word written.
fn probe_buffer(bytes: usize) -> Vec<u64> {
    let n = bytes / 8;
    let mut buf = Vec::with_capacity(n);
    crate::hugepages::advise(&buf);
    buf.extend((0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    buf
}

/// GB/s (10⁹ bytes) of the fastest of `reps` parallel passes over `bytes` of memory on
/// `pool`: the plain read a decode kernel could at best match. Pass `bytes` well above the
/// last-level cache (512 MB is); the buffer is freed on return.
pub fn read_bandwidth(pool: &ThreadPool, bytes: usize, reps: usize) -> f64 {
    let buf = probe_buffer(bytes);
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let (x, secs) = read_pass(pool, &buf);
        std::hint::black_box(x);
        best = best.min(secs);
    }
    (buf.len() * 8) as f64 / 1e9 / best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_reads_every_word_on_any_thread_count() {
        // An odd length: tiles end mid-line and the last tile is short or empty.
        let buf = probe_buffer(8 * 100_003);
        let want = buf.iter().fold(0, |a, &v| a ^ v);
        for threads in [1, 2, 3] {
            let (got, secs) = read_pass(&ThreadPool::new(threads), &buf);
            assert_eq!(got, want, "{threads} threads: some words were not read");
            assert!(secs > 0.0);
        }
        let gbps = read_bandwidth(&ThreadPool::new(2), 1 << 20, 2);
        assert!(gbps.is_finite() && gbps > 0.0, "{gbps}");
    }
}
