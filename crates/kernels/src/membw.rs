//! The plain read bandwidth: the ceiling a one-sequence decode is judged against.
//!
//! Why: a decode step of one sequence reads every weight once and does little else, so on a
//! real-size model its speed is set by how fast memory delivers bytes. "Decode runs at N % of
//! what this machine can read" is the fair measure of a decode kernel, and issue 23 states
//! its target that way. The probe reads a buffer far bigger than any cache, on huge pages
//! like the weights (`hugepages`), split across the same thread pool the forward uses, with
//! the least work per byte that still reads every byte (an XOR of 64-byte lines, which LLVM
//! turns into one vector load and XOR per line). [`read_bandwidth_of`] reads given memory
//! the same way: a model's own weights, where the decode reads them.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use crate::pool::ThreadPool;

/// Bytes of one task of a pass: big enough that a thread streams, small enough that two
/// threads share a region of a few megabytes.
const TILE: usize = 1 << 20;

/// The XOR of every byte of `part` (so no read can be skipped), a 64-byte line at a time
/// where it is aligned.
fn xor_bytes(part: &[u8]) -> u8 {
    // SAFETY: `[u64; 8]` is plain integers, valid for any bytes; `align_to` splits off the
    // unaligned ends.
    let (head, lines, tail) = unsafe { part.align_to::<[u64; 8]>() };
    let mut acc = [0u64; 8];
    for line in lines {
        for (a, v) in acc.iter_mut().zip(line) {
            *a ^= v;
        }
    }
    let word = acc.iter().fold(0, |a, &v| a ^ v);
    let edges = head.iter().chain(tail).fold(0, |a, &b| a ^ b);
    word.to_le_bytes().iter().fold(edges, |a, &b| a ^ b)
}

/// What one pass over `regions` found: the XOR of every byte in them and how long it took.
/// The regions are cut into tiles of [`TILE`] bytes, handed out in order across `pool`.
fn read_pass(pool: &ThreadPool, regions: &[&[u8]]) -> (u8, f64) {
    let tiles: Vec<&[u8]> = regions.iter().flat_map(|r| r.chunks(TILE)).collect();
    let sink = AtomicU8::new(0);
    let t = Instant::now();
    pool.for_each(tiles.len(), &|i| {
        sink.fetch_xor(xor_bytes(tiles[i]), Ordering::Relaxed);
    });
    (sink.load(Ordering::Relaxed), t.elapsed().as_secs_f64())
}

/// GB/s of the fastest of `reps` passes over `regions`.
fn best_of(pool: &ThreadPool, regions: &[&[u8]], reps: usize) -> f64 {
    let bytes: usize = regions.iter().map(|r| r.len()).sum();
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let (x, secs) = read_pass(pool, regions);
        std::hint::black_box(x);
        best = best.min(secs);
    }
    bytes as f64 / 1e9 / best
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
    // SAFETY: the words' bytes, read as bytes.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8) };
    best_of(pool, &[bytes], reps)
}

/// GB/s of the fastest of `reps` parallel passes over `regions`, where a model's weights
/// live: the plain read of the very memory a decode streams.
///
/// Why beside [`read_bandwidth`]: where memory is not uniform (the Zen 4 VM of
/// docs/PERFORMANCE.md reads one buffer at ~34 GB/s and another at ~55-68, by where each
/// lands), a fresh probe buffer may land on other memory than the weights did, and a decode
/// then reads "123 %" of it. Reading the weights themselves compares like with like.
/// A region listed more than once, or inside another (matrices that share one buffer), is
/// read once.
pub fn read_bandwidth_of(pool: &ThreadPool, regions: &[&[u8]], reps: usize) -> f64 {
    best_of(pool, &kept_regions(regions), reps)
}

/// `regions` by address, without the empty ones and those inside another.
fn kept_regions<'a>(regions: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut sorted: Vec<&[u8]> = regions.iter().copied().filter(|r| !r.is_empty()).collect();
    // By start, the longest first, so that a region inside another follows it.
    sorted.sort_unstable_by_key(|r| (r.as_ptr() as usize, usize::MAX - r.len()));
    let mut kept: Vec<&[u8]> = Vec::with_capacity(sorted.len());
    let mut end = 0;
    for r in sorted {
        let b = r.as_ptr() as usize + r.len();
        if b > end {
            kept.push(r);
            end = b;
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The XOR of every byte, the slow way.
    fn xor_all(regions: &[&[u8]]) -> u8 {
        regions.iter().flat_map(|r| r.iter()).fold(0, |a, &b| a ^ b)
    }

    #[test]
    fn a_pass_reads_every_byte_on_any_thread_count() {
        // Regions that start and end mid-line and span several tiles (the last one short).
        let buf: Vec<u8> = (0..3 * TILE + 1000)
            .map(|i| (i * 131 + i / 7) as u8)
            .collect();
        let regions = [
            &buf[3..TILE + 77],
            &buf[TILE + 100..3 * TILE + 999],
            &buf[5..6],
        ];
        let want = xor_all(&regions);
        for threads in [1, 2, 3] {
            let (got, secs) = read_pass(&ThreadPool::new(threads), &regions);
            assert_eq!(got, want, "{threads} threads: some bytes were not read");
            assert!(secs > 0.0);
        }
        let gbps = read_bandwidth(&ThreadPool::new(2), 1 << 20, 2);
        assert!(gbps.is_finite() && gbps > 0.0, "{gbps}");
    }

    #[test]
    fn regions_inside_others_are_read_once() {
        let buf: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let pool = ThreadPool::new(2);
        // The whole buffer twice and parts of it: only the buffer is read.
        let whole = &buf[..];
        let listed = [&buf[100..200], whole, whole, &buf[4000..]];
        let gbps = read_bandwidth_of(&pool, &listed, 1);
        assert!(gbps.is_finite() && gbps > 0.0, "{gbps}");
        assert_eq!(kept_regions(&listed), vec![whole]);
        let apart = [&buf[..10], &buf[20..30]];
        assert_eq!(kept_regions(&apart), apart.to_vec());
    }
}
