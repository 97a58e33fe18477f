//! Transparent huge pages for the large buffers the kernels stream at decode.
//!
//! Why: a decode step reads every weight once, gigabytes per token on a 4B–8B model. On
//! 4 KB pages that is a TLB miss every 4 KB of every stream, and the software prefetch a
//! kernel issues 8 KB ahead lands on a page whose translation is not cached yet. Linux hands
//! out 2 MB pages to anonymous memory that asks for them (`MADV_HUGEPAGE`) when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` (the common default) or
//! `always`. The advice must come before the first write, since the write is what faults the
//! pages in. Where the kernel says no (THP `never`, another OS), nothing changes but speed.

/// Asks for huge pages under `buf`'s whole allocation (its capacity); call before filling.
pub(crate) fn advise<T>(buf: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = buf.as_ptr() as usize;
        let end = start + buf.capacity() * size_of::<T>();
        // Only whole pages can be advised; huge pages form only in whole 2 MB runs inside.
        let (a, b) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
        if b > a + (2 << 20) {
            // SAFETY: the range lies inside this Vec's live allocation; MADV_HUGEPAGE changes
            // how its pages are backed, never their contents.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Whether the kernel hands out transparent huge pages to memory that asks for them (THP
/// mode `madvise` or `always`).
pub fn huge_pages_available() -> bool {
    thp_mode().is_some_and(|m| m != "never")
}

/// The kernel's THP mode, e.g. `madvise` (the bracketed word of the sysfs file); `None` off
/// Linux or without THP.
fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let (_, rest) = s.split_once('[')?;
    Some(rest.split_once(']')?.0.to_string())
}

/// `parts` copied one after another (each from a 64-byte boundary) into one buffer of
/// anonymous memory on huge pages, for weights the kernels read in the file's own layout: a
/// mapped file's pages are 4 KB page-cache pages, which THP does not reach, and one buffer
/// puts even a small matrix on huge pages. Returns the buffer and each part's range in it.
/// `done(i, r)` is told each range `r` of part `i` once it is copied (about 4 MB at a time),
/// so the caller can release the file's pages as it goes and the weights stay resident once.
pub fn copy_to_huge_pages(
    parts: &[&[u8]],
    mut done: impl FnMut(usize, std::ops::Range<usize>),
) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    const PIECE: usize = 4 << 20;
    let mut at = 0;
    let ranges: Vec<_> = parts
        .iter()
        .map(|p| {
            let start = at;
            at = (start + p.len()).next_multiple_of(64);
            start..start + p.len()
        })
        .collect();
    let mut v = Vec::with_capacity(at);
    advise(&v);
    for (i, (part, r)) in parts.iter().zip(&ranges).enumerate() {
        v.resize(r.start, 0);
        for (k, piece) in part.chunks(PIECE).enumerate() {
            v.extend_from_slice(piece);
            done(i, k * PIECE..k * PIECE + piece.len());
        }
    }
    (v, ranges)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::thp_mode;

    /// `AnonHugePages` (kB) of the mapping of this process that holds `addr`.
    fn huge_kb_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    return v.trim().trim_end_matches(" kB").trim().parse().ok();
                }
            }
        }
        None
    }

    #[test]
    fn advised_buffer_gets_huge_pages_where_the_kernel_offers_them() {
        let Some(mode) = thp_mode() else { return };
        if mode == "never" {
            return;
        }
        let mut v: Vec<u8> = Vec::with_capacity(64 << 20);
        super::advise(&v);
        v.resize(64 << 20, 1);
        let kb = huge_kb_at(v.as_ptr() as usize + (32 << 20)).expect("mapping found");
        assert!(
            kb >= 2048,
            "THP {mode}: no huge page under a 64 MB advised buffer"
        );
    }

    #[test]
    fn a_copy_equals_its_sources_reports_every_range_once_and_sits_on_huge_pages() {
        let data: Vec<u8> = (0..(24usize << 20) + 12_345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let parts = [&data[..1000], &data[1000..5_000_001], &data[5_000_001..]];
        let mut next = [0; 3];
        let (copy, ranges) = super::copy_to_huge_pages(&parts, |i, r| {
            assert_eq!(r.start, next[i], "ranges in order, none skipped");
            next[i] = r.end;
        });
        for (i, part) in parts.iter().enumerate() {
            assert_eq!(
                next[i],
                part.len(),
                "every byte of part {i} reported copied"
            );
            assert!(&copy[ranges[i].clone()] == *part, "part {i} copied whole");
            assert!(ranges[i].start.is_multiple_of(64));
        }
        if super::huge_pages_available() {
            let kb = huge_kb_at(copy.as_ptr() as usize + (12 << 20)).expect("mapping found");
            assert!(kb >= 2048, "no huge page under a 24 MB copy");
        }
    }
}
