//! Repacking: a Q4_K or Q6_K matrix's GGUF blocks into `KRows16`'s packs, a model's
//! matrices into one buffer.
//!
//! Why here: the layout's kernels (the parent module and `gemm`) only read packs; building
//! them (the order of every byte, the release of the file's pages as they are copied, the
//! shared buffer on huge pages) is a job of its own, done once at load.

use super::{KRows16, Pack4, Pack6, GROUP};
use crate::block::Isa;
use crate::kquants::{unpack_scale_min_k4, BlockQ4K, BlockQ6K, QK_K};
use crate::GgmlType;

/// 64 bytes on a 64-byte boundary: the unit of the buffer the packs live in (each pack is a
/// whole number of lines).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct Line([u8; 64]);

const _: () =
    assert!(size_of::<Pack4>().is_multiple_of(64) && size_of::<Pack6>().is_multiple_of(64));

/// One matrix for [`KRows16::repack_all`]: `rows` rows of `cols` values of `ty`, as in GGUF.
#[derive(Clone, Copy)]
pub struct RepackPart<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl RepackPart<'_> {
    /// Lines of packs this matrix repacks into, or `None` where the layout does not apply:
    /// another type, rows not a multiple of sixteen, a byte count that does not match, or a
    /// CPU without AVX2 (`Isa::best`).
    fn lines(&self) -> Option<usize> {
        if !cfg!(target_arch = "x86_64") || !Isa::best().is_avx2() {
            return None;
        }
        let (rows, cols) = (self.rows, self.cols);
        if rows == 0 || !rows.is_multiple_of(GROUP) || !cols.is_multiple_of(QK_K) {
            return None;
        }
        if self.data.len() != rows * crate::row_bytes(self.ty, cols) {
            return None;
        }
        let pack = match self.ty {
            GgmlType::Q4_K => size_of::<Pack4>(),
            GgmlType::Q6_K => size_of::<Pack6>(),
            _ => return None,
        };
        Some(rows / GROUP * (cols / QK_K) * pack / 64)
    }
}

/// `p`'s bytes as lines.
fn lines_of<P: Copy>(p: &P) -> &[Line] {
    assert!(size_of::<P>().is_multiple_of(64) && align_of::<P>() == 64);
    // SAFETY: `P` is 64-aligned and a whole number of 64-byte lines, and a `Line` is plain
    // bytes, so every line of it is a valid `Line`.
    unsafe { std::slice::from_raw_parts((p as *const P).cast(), size_of::<P>() / 64) }
}

impl KRows16 {
    /// Repacks `data` (`rows` rows of `cols` values of `ty`, as in GGUF) into a buffer of its
    /// own, or `None` where this layout does not apply (see [`KRows16::repack_all`]).
    pub fn repack(
        ty: GgmlType,
        data: &[u8],
        rows: usize,
        cols: usize,
        mut done: impl FnMut(std::ops::Range<usize>),
    ) -> Option<KRows16> {
        let part = RepackPart {
            ty,
            data,
            rows,
            cols,
        };
        Self::repack_all(&[part], |_, r| done(r)).pop().flatten()
    }

    /// Repacks every part that this layout applies to (Q4_K or Q6_K, rows a multiple of
    /// sixteen, a matching byte count, an AVX2 CPU) into ONE buffer on huge pages, which the
    /// matrices share; `None` for the others. `done(i, bytes)` is called after each range of
    /// part `i`'s data has been copied (about 4 MB at a time), so that a caller holding the
    /// data in a mapped file can release those pages at once.
    ///
    /// Why one buffer: huge pages form only in whole 2 MB runs of an allocation, so a matrix
    /// of its own below a few megabytes (a 4B model's attention matrices, 1.5–3 MB) stayed
    /// on 4 KB pages: with a buffer per matrix, 22 % of a 4B-shape model's packs were on
    /// them, a TLB miss every 4 KB of a decode step's stream (docs/PERFORMANCE.md,
    /// thirteenth session).
    pub fn repack_all(
        parts: &[RepackPart<'_>],
        mut done: impl FnMut(usize, std::ops::Range<usize>),
    ) -> Vec<Option<KRows16>> {
        let lines: Vec<Option<usize>> = parts.iter().map(RepackPart::lines).collect();
        let mut buf: Vec<Line> = Vec::with_capacity(lines.iter().flatten().sum());
        crate::hugepages::advise(&buf);
        let mut at = Vec::with_capacity(parts.len());
        for (i, (part, n)) in parts.iter().zip(&lines).enumerate() {
            let start = buf.len();
            if let Some(n) = n {
                fill(part, &mut buf, |r| done(i, r));
                assert_eq!(
                    buf.len() - start,
                    *n,
                    "part {i}: every line written, no more"
                );
            }
            at.push(start);
        }
        let buf = std::sync::Arc::new(buf);
        parts
            .iter()
            .zip(lines)
            .zip(at)
            .map(|((part, n), start)| {
                let len = n?;
                Some(KRows16 {
                    ty: part.ty,
                    rows: part.rows,
                    cols: part.cols,
                    bpr: part.cols / QK_K,
                    buf: buf.clone(),
                    start,
                    len,
                })
            })
            .collect()
    }
}

/// Appends `part`'s packs (a type and shape `RepackPart::lines` accepted) to `buf`, calling
/// `done` with each range of its data copied, about 4 MB at a time.
fn fill(part: &RepackPart<'_>, buf: &mut Vec<Line>, mut done: impl FnMut(std::ops::Range<usize>)) {
    let bpr = part.cols / QK_K;
    let group_bytes = GROUP * crate::row_bytes(part.ty, part.cols);
    // Released about 4 MB at a time: only whole pages inside a range are released, so a
    // range per group (~23 KB) would keep a third of the pages resident.
    let part_groups = ((4 << 20) / group_bytes).max(1);
    let mut start = 0;
    for (g, data) in part.data.chunks_exact(group_bytes).enumerate() {
        match part.ty {
            GgmlType::Q4_K => {
                let blocks: &[BlockQ4K] = crate::block::as_blocks(data);
                for j in 0..bpr {
                    buf.extend_from_slice(lines_of(&pack4(|i| &blocks[i * bpr + j])));
                }
            }
            _ => {
                let blocks: &[BlockQ6K] = crate::block::as_blocks(data);
                for j in 0..bpr {
                    buf.extend_from_slice(lines_of(&pack6(|i| &blocks[i * bpr + j])));
                }
            }
        }
        if (g + 1) % part_groups == 0 || (g + 1) * group_bytes == part.data.len() {
            done(start..(g + 1) * group_bytes);
            start = (g + 1) * group_bytes;
        }
    }
}

/// One Q4_K super-block column of sixteen rows (`block(i)`: row `i`'s).
fn pack4<'a>(block: impl Fn(usize) -> &'a BlockQ4K) -> Pack4 {
    let mut p = Pack4 {
        q: [[0; 4 * GROUP]; 32],
        sc: [[0; GROUP]; 8],
        mn: [[0; 2 * GROUP]; 4],
        d: [0; GROUP],
        dmin: [0; GROUP],
    };
    for i in 0..GROUP {
        let b = block(i);
        for (w, q) in b.qs.chunks_exact(4).enumerate() {
            // Bytes 4w.. = 32t + 4c + k → q[8t + c][4i + k].
            p.q[w][4 * i..4 * i + 4].copy_from_slice(q);
        }
        let (sc, mn) = unpack_scale_min_k4(&b.scales);
        for s in 0..8 {
            p.sc[s][i] = sc[s];
            p.mn[s / 2][2 * i + s % 2] = mn[s];
        }
        p.d[i] = u16::from_le_bytes(b.d);
        p.dmin[i] = u16::from_le_bytes(b.dmin);
    }
    p
}

/// One Q6_K super-block column of sixteen rows (`block(i)`: row `i`'s).
fn pack6<'a>(block: impl Fn(usize) -> &'a BlockQ6K) -> Pack6 {
    let mut p = Pack6 {
        sc: [[0; GROUP]; 16],
        d: [0; GROUP],
        _pad: [0; 32],
        q: [[[0; 4 * GROUP]; 3]; 16],
    };
    for i in 0..GROUP {
        let b = block(i);
        for (hc, t) in p.q.iter_mut().enumerate() {
            let (h, c) = (hc / 8, hc % 8);
            for k in 0..4 {
                // The file's code of value 128h + 32s + l: the low or high nibble of
                // ql[64h + 32(s % 2) + l], and bits 2s.. of qh[32h + l].
                let l = 4 * c + k;
                let code = |s: usize| {
                    let ql = b.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2)) & 0x0F;
                    ql | (b.qh[32 * h + l] >> (2 * s) & 3) << 4
                };
                let u3 = code(3);
                for (m, v) in t.iter_mut().enumerate() {
                    v[4 * i + k] = code(m) | (u3 >> (2 * m) & 3) << 6;
                }
            }
        }
        for g in 0..16 {
            p.sc[g][i] = b.scales[g];
        }
        p.d[i] = u16::from_le_bytes(b.d);
    }
    p
}
