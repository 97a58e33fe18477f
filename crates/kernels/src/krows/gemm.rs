//! A prefill-sized call of [`KRows16`] on plain AVX2 (more than 32 activation rows): each sub-tile's packs decoded into
//! `kgemm`'s [`Packed`] form, then `kgemm`'s multiply over them.
//!
//! Why: without `vpdpbusd`, `KRows16`'s own bodies take a group in two passes of eight
//! lanes, so each activation broadcast feeds one `maddubs`, and they split the 4- or 6-bit
//! codes again for every pass of activation rows. `kgemm`'s plain-AVX2 body takes all sixteen
//! lanes in one pass from bytes decoded once per sub-tile. One thread, `avx2`, 128 activation
//! rows from cache, ns per 32 values × row (Zen 4): Q4_K 0.29 here against `kgemm`'s 0.245
//! on the file's layout, Q6_K 0.40 against 0.29 (docs/PERFORMANCE.md, thirteenth session).
//! The packs are already lane-major, so decoding them is only splitting nibbles or codes
//! and widening the scales, less than `kgemm`'s decode from the file's layout. This is what
//! lets AVX2 hosts keep the repacked layout that decodes faster without a slower prefill.
//!
//! Numbers are unchanged: the integers and float steps per (row, super-block) are
//! `kgemm`'s, which are the scalar kernel's (`tests/krows.rs` compares every batch size).

use super::{KRows16, Pack4, Pack6, Packs, GROUP};
use crate::block::Isa;
use crate::kgemm::{multiply, plain_avx2, with_scratch, Packed, ROWS};
use crate::kquants::{BlockQ4K, BlockQ6K, BlockQ8K, KQuant};
use crate::tiling::Job;

const _: () = assert!(GROUP == ROWS);

/// Whether a call of `n` activation rows on `isa` takes this path: plain AVX2 and more than
/// twice the rows `kgemm` needs to pay for its decode. At fewer (batched decode) the decode
/// of each sub-tile is paid for few rows: a 16-sequence decode of the 4B shape ran 12 %
/// slower than the file's layout with this path at 16 rows (31.4, 29.0 against 36.5, 36.8
/// tok/s), and level without it (35.7, 37.2; Zen 4, `avx2`).
pub(super) fn applies(isa: Isa, n: usize) -> bool {
    isa.is_avx2() && plain_avx2(isa) && n > 2 * crate::kgemm::min_rows(isa)
}

/// Rows `o0..o1` of `m` times every activation row of `job` (see the module doc).
pub(super) fn subtile(m: &KRows16, isa: Isa, job: &Job<BlockQ8K>, o0: usize, o1: usize) {
    assert!(
        applies(isa, job.n()),
        "the decoded path is for plain AVX2 prefill"
    );
    assert!(o0.is_multiple_of(GROUP) && o1.is_multiple_of(GROUP));
    let bpr = m.bpr;
    let (g0, g1) = (o0 / GROUP, o1 / GROUP);
    // The next sub-tile's packs (this thread's next, as a rule) hinted into L2 while this one
    // is multiplied, as `kgemm` does with the file's rows: without it the decode below waits
    // on memory line by line (4B-shape pp512 6-11 % slower than `kgemm`, level with it).
    m.prefetch_next(o0, o1);
    with_scratch((g1 - g0) * bpr, |pk| {
        match m.packs() {
            Packs::Q4(v) => {
                for (p, src) in pk.iter_mut().zip(&v[g0 * bpr..g1 * bpr]) {
                    // SAFETY: `applies` checked AVX2.
                    unsafe { decode4(src, p) };
                }
                multiply::<BlockQ4K>(isa, pk, bpr, job, o0, o1);
            }
            Packs::Q6(v) => {
                for (p, src) in pk.iter_mut().zip(&v[g0 * bpr..g1 * bpr]) {
                    // SAFETY: as above.
                    unsafe { decode6(src, p) };
                }
                multiply::<BlockQ6K>(isa, pk, bpr, job, o0, o1);
            }
        }
    });
}

/// An i16 `a` in both halves of a lane (`madd`'s form of a scale).
fn both(a: i16) -> i32 {
    pair(a, a)
}

/// i16 `a` in the low half of a lane, `b` in the high.
fn pair(a: i16, b: i16) -> i32 {
    ((a as u16 as u32) | ((b as u16 as u32) << 16)) as i32
}

fn f16(bits: u16) -> f32 {
    crate::block::f16_to_f32(bits.to_le_bytes())
}

/// A Q4_K pack as `kgemm`'s plain-AVX2 body reads it: chunk `16t + c` the low nibbles of
/// `q[8t + c]`, chunk `16t + 8 + c` the high ones; the 32-value groups' scales in both i16
/// halves; the mins as the pairs of consecutive sub-blocks the pack stores.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
unsafe fn decode4(src: &Pack4, dst: &mut Packed) {
    const { assert!(BlockQ4K::HAS_MIN) };
    for t in 0..4 {
        for c in 0..8 {
            let q = &src.q[8 * t + c];
            for (k, &b) in q.iter().enumerate() {
                dst.q[16 * t + c][k] = b & 0x0F;
                dst.q[16 * t + 8 + c][k] = b >> 4;
            }
        }
    }
    for i in 0..GROUP {
        for s in 0..8 {
            dst.sc[s][i] = both(i16::from(src.sc[s][i]));
        }
        for k in 0..4 {
            let mn = &src.mn[k];
            dst.bias[k][i] = pair(i16::from(mn[2 * i]), i16::from(mn[2 * i + 1]));
        }
        dst.d[i] = f16(src.d[i]);
        dst.dmin[i] = f16(src.dmin[i]);
    }
}

/// A Q6_K pack as `kgemm`'s plain-AVX2 body reads it: chunk `32h + 8b + c` the codes of
/// slice `b` of `q[8h + c]` (slices 0–2 the low six bits of the three vectors, slice 3 their
/// top bits), unsigned (`q + 32`); each 16-value group's scale in both i16 halves; the
/// offset terms `32 · scale` as pairs of consecutive groups.
///
/// # Safety
/// AVX2 must be available.
#[target_feature(enable = "avx2")]
unsafe fn decode6(src: &Pack6, dst: &mut Packed) {
    const { assert!(BlockQ6K::Q_OFFSET == 32) };
    for h in 0..2 {
        for c in 0..8 {
            let [a, b, cc] = &src.q[8 * h + c];
            for k in 0..4 * GROUP {
                dst.q[32 * h + c][k] = a[k] & 0x3F;
                dst.q[32 * h + 8 + c][k] = b[k] & 0x3F;
                dst.q[32 * h + 16 + c][k] = cc[k] & 0x3F;
                dst.q[32 * h + 24 + c][k] = a[k] >> 6 | (b[k] >> 6) << 2 | (cc[k] >> 6) << 4;
            }
        }
    }
    for i in 0..GROUP {
        for g in 0..16 {
            dst.sc[g][i] = both(i16::from(src.sc[g][i]));
        }
        for k in 0..8 {
            let off = |g: usize| (BlockQ6K::Q_OFFSET * i32::from(src.sc[g][i])) as i16;
            dst.bias[k][i] = pair(off(2 * k), off(2 * k + 1));
        }
        dst.d[i] = f16(src.d[i]);
        dst.dmin[i] = 0.0;
    }
}
