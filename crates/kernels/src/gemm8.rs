//! The 32-value formats (`legacy`) times many activation rows at once (prefill, batched
//! decode): eight weight rows at a time are decoded ONCE into L1 in lane-major order, then
//! every activation row of the call runs over them.
//!
//! Why: the row-major kernel (`legacy_avx2`) decodes each weight block again for every four
//! activation rows. Here a decoded "chunk" vector holds four consecutive quants of each of
//! the eight weight rows (bytes `4i..4i+4` = row `i`, values `4k..4k+4`), so one `maddubs` +
//! `madd` (or one `vpdpbusd`) against the matching four activation bytes broadcast adds, in
//! lane `i`, four of row `i`'s products; the eight chunks of a block column add up to each
//! row's exact block integer, and one `cvt` + `fma(d_w d_x, P, lane)` per block column takes
//! the float step for eight weight rows at once. The decode (nibbles, high bits, an 8x8
//! transpose of 32-bit words) is shared by all rows of the call.
//!
//! Numbers are unchanged: every (weight row, activation row) pair gets the same exact block
//! integers and the same float operations in the same order as `legacy::add_block_scalar`
//! and `legacy::finish`, so results are bit-identical to the row-major kernels (and batch
//! invariance is untouched). Pinned by `tests/matmul.rs`, which compares every batch size
//! against the scalar reference.

use std::cell::RefCell;

use crate::block::prefetch_ahead;
use crate::block::Isa;
use crate::dot4::{broadcast4, transpose8, Dot4, Pairs, Vnni};
use crate::legacy::{BlockQ8x4, MTerm};
use crate::legacy_avx2::LegacyAvx2;
use crate::rows8::{Chunks, GROUP};
use crate::tiling::{Job, RowKernel};
use std::arch::x86_64::*;

/// Activation rows from which the lane-major path beats the row-major kernel: one thread,
/// q5_0 256x640 from cache, ns per (block, activation row), row-major vs lane-major: n=4
/// 1.16 vs 1.21, n=8 1.42 vs 1.31, n=16 1.44 vs 0.90, n=64 1.14 vs 0.84 (the decode and the
/// per-group overheads need several rows to pay off).
pub(crate) const MIN_ROWS: usize = 8;

/// A group's decoded block columns, with their scales `d` and `m` terms per row.
#[derive(Default)]
struct Decoded {
    chunks: Vec<Chunks>,
    d: Vec<[f32; GROUP]>,
    m: Vec<[f32; GROUP]>,
}

thread_local! {
    static SCRATCH: RefCell<Decoded> = RefCell::new(Decoded::default());
}

/// A row-major matrix of a 32-value format, multiplied through the lane-major path.
pub(crate) struct Gemm8<'a, B> {
    /// An AVX2 spelling (checked by `matmul::run_legacy`).
    pub isa: Isa,
    pub blocks: &'a [B],
    pub bpr: usize,
    pub rows: usize,
    pub row_bytes: usize,
}

impl<B: LegacyAvx2 + Sync> RowKernel for Gemm8<'_, B> {
    type Act = BlockQ8x4;

    fn rows(&self) -> usize {
        self.rows
    }

    fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    fn row_align(&self) -> usize {
        GROUP
    }

    fn subtile(&self, job: &Job<BlockQ8x4>, o0: usize, o1: usize) {
        for x in (0..job.n()).map(|r| job.row(r)) {
            assert!(x.len() >= self.bpr.div_ceil(4), "activation row too short");
        }
        let vnni = self.isa.vnni256();
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let dec = &mut *scratch;
            let mut g0 = o0;
            while g0 < o1 {
                let h = GROUP.min(o1 - g0);
                let rows = &self.blocks[g0 * self.bpr..(g0 + h) * self.bpr];
                // SAFETY: this kernel is only built when the CPU has AVX2, FMA and F16C
                // (`matmul::dispatch` checks the `Isa`).
                unsafe { decode(rows, self.bpr, dec) };
                for r in 0..job.n() {
                    let (c, d, m, x) = (&dec.chunks, &dec.d, &dec.m, job.row(r));
                    // SAFETY: as above (and AVX-VNNI where it is used); the row covers `bpr`
                    // blocks (checked above).
                    let res = unsafe {
                        if vnni {
                            dot8_vnni::<B>(c, d, m, x)
                        } else {
                            dot8::<B>(c, d, m, x)
                        }
                    };
                    // SAFETY: rows `g0..g0 + h` lie in this task's sub-tile.
                    unsafe { job.put_run(r, g0, &res[..h]) };
                }
                g0 += h;
            }
        });
    }
}

/// Decodes up to eight rows (`rows.len() / bpr`; missing rows read as zero) into `dec`.
#[target_feature(enable = "avx2,fma,f16c")]
fn decode<B: LegacyAvx2>(rows: &[B], bpr: usize, dec: &mut Decoded) {
    let h = rows.len() / bpr;
    dec.chunks.resize(bpr, Chunks([[0; 32]; 8]));
    dec.d.resize(bpr, [0.0; GROUP]);
    dec.m.resize(bpr, [0.0; GROUP]);
    for j in 0..bpr {
        let mut v = [_mm256_setzero_si256(); GROUP];
        let (mut d_bits, mut m_bits) = ([0u16; GROUP], [0u16; GROUP]);
        let mut d_f32 = [0f32; GROUP];
        for i in 0..h {
            let b = &rows[i * bpr + j];
            // The group's rows are contiguous, and so are a thread's groups: 4 KB ahead of
            // each block is the next groups' weights, which the hardware prefetcher (eight
            // interleaved streams) fetches too late.
            prefetch_ahead((b as *const B).cast(), size_of::<B>());
            // SAFETY: AVX2 is enabled in this function.
            v[i] = unsafe { b.load_q() };
            if B::F16_SCALE {
                d_bits[i] = u16::from_le_bytes(b.d_bits());
            } else {
                d_f32[i] = b.d();
            }
            m_bits[i] = u16::from_le_bytes(b.m_bits());
        }
        let c = transpose8(v);
        for (k, ck) in c.iter().enumerate() {
            // SAFETY: 32 writable, 32-byte aligned bytes.
            unsafe { _mm256_store_si256(dec.chunks[j].0[k].as_mut_ptr().cast(), *ck) };
        }
        // The same conversions as `Legacy32::m` and the row-major kernel: exact f16 -> f32,
        // then `d * -offset` or the stored `m`.
        // SAFETY: 16 readable bytes each; 32 writable bytes each.
        unsafe {
            let d = if B::F16_SCALE {
                _mm256_cvtph_ps(_mm_loadu_si128(d_bits.as_ptr().cast()))
            } else {
                _mm256_loadu_ps(d_f32.as_ptr())
            };
            // Only the stored m terms are floats; offsets are taken in the block integers.
            let m = if B::M == MTerm::Stored {
                _mm256_cvtph_ps(_mm_loadu_si128(m_bits.as_ptr().cast()))
            } else {
                _mm256_setzero_ps()
            };
            _mm256_storeu_ps(dec.d[j].as_mut_ptr(), d);
            _mm256_storeu_ps(dec.m[j].as_mut_ptr(), m);
        }
    }
}

/// The eight dots of a group (`chunks` and `d` per block column; `m` too when `B` has an m
/// term) with activation row `x` (which covers every block column).
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot8<B: LegacyAvx2>(
    chunks: &[Chunks],
    d: &[[f32; GROUP]],
    m: &[[f32; GROUP]],
    x: &[BlockQ8x4],
) -> [f32; GROUP] {
    // SAFETY: as the caller promised.
    unsafe { dot8_with::<B, Pairs>(chunks, d, m, x) }
}

/// [`dot8`] with `vpdpbusd` for the integer step (the same bits).
///
/// # Safety
/// AVX2, FMA, F16C and AVX-VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn dot8_vnni<B: LegacyAvx2>(
    chunks: &[Chunks],
    d: &[[f32; GROUP]],
    m: &[[f32; GROUP]],
    x: &[BlockQ8x4],
) -> [f32; GROUP] {
    // SAFETY: as the caller promised.
    unsafe { dot8_with::<B, Vnni>(chunks, d, m, x) }
}

/// The body of [`dot8`] and [`dot8_vnni`], inlined into each.
#[inline(always)]
unsafe fn dot8_with<B: LegacyAvx2, D: Dot4>(
    chunks: &[Chunks],
    d: &[[f32; GROUP]],
    m: &[[f32; GROUP]],
    x: &[BlockQ8x4],
) -> [f32; GROUP] {
    let bpr = chunks.len();
    assert!(x.len() >= bpr.div_ceil(4), "activation row too short");
    assert_eq!(d.len(), bpr, "one scale row per block column");
    assert!(
        B::M != MTerm::Stored || m.len() == bpr,
        "one m row per block column"
    );
    // Lane b % 4 of every row: acc[b % 4] holds it for the eight rows. Four block columns
    // per step, so that the lane index is a constant and the sums stay in registers.
    let mut acc = [_mm256_setzero_ps(); 4];
    let groups = bpr / 4;
    for g in 0..groups {
        for (kk, a) in acc.iter_mut().enumerate() {
            // SAFETY: the caller's features; `4g + kk < bpr`.
            *a = unsafe { block_step::<B, D>(&chunks[4 * g + kk], &d[4 * g + kk], &x[g], kk, *a) };
        }
    }
    for j in 4 * groups..bpr {
        // SAFETY: as above.
        acc[j % 4] = unsafe { block_step::<B, D>(&chunks[j], &d[j], &x[j / 4], j % 4, acc[j % 4]) };
    }
    // The stored m terms: lane j % 4 of each row gains m_j * sx_j, in block order.
    let mut accm = [_mm256_setzero_ps(); 4];
    if B::M == MTerm::Stored {
        for (u, mg) in x.iter().zip(m.chunks(4)) {
            for (kk, mj) in mg.iter().enumerate() {
                // SAFETY: 8 readable floats.
                let mv = unsafe { _mm256_loadu_ps(mj.as_ptr()) };
                accm[kk] = _mm256_add_ps(accm[kk], _mm256_mul_ps(mv, _mm256_set1_ps(u.s[kk])));
            }
        }
    }
    // `legacy::finish`, eight rows at once: (a0+a1)+(a2+a3), plus (m0+m1)+(m2+m3) for the
    // formats with a stored m term.
    let mut r = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    if B::M == MTerm::Stored {
        let rm = _mm256_add_ps(
            _mm256_add_ps(accm[0], accm[1]),
            _mm256_add_ps(accm[2], accm[3]),
        );
        r = _mm256_add_ps(r, rm);
    }
    let mut out = [0.0f32; GROUP];
    // SAFETY: 8 writable floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), r) };
    out
}

/// One block column of eight rows (`c`, scales `d`) with block `kk` of activation unit `u`:
/// `fma(d · dx, P, lane)`, `P` the rows' exact block integers.
///
/// # Safety
/// AVX2, FMA and the features of `D`; the caller is compiled with them.
#[inline(always)]
unsafe fn block_step<B: LegacyAvx2, D: Dot4>(
    c: &Chunks,
    d: &[f32; GROUP],
    u: &BlockQ8x4,
    kk: usize,
    lane: __m256,
) -> __m256 {
    // SAFETY: as the caller promised; 8 readable floats; 32 readable, 32-byte aligned bytes
    // per chunk.
    unsafe {
        let s = _mm256_mul_ps(_mm256_loadu_ps(d.as_ptr()), _mm256_set1_ps(u.d[kk]));
        // Two integer chains (even and odd chunks), added: exact in any order.
        let init = match B::M {
            MTerm::Offset(o) => _mm256_set1_epi32(-o * u.isum[kk]),
            _ => _mm256_setzero_si256(),
        };
        let mut p = [init, _mm256_setzero_si256()];
        for k in 0..8 {
            let xb = broadcast4(&u.qs[kk], k);
            let w = _mm256_load_si256(c.0[k].as_ptr().cast());
            p[k % 2] = if B::SIGNED {
                D::dot4(p[k % 2], _mm256_abs_epi8(w), _mm256_sign_epi8(xb, w))
            } else {
                D::dot4(p[k % 2], w, xb)
            };
        }
        let p = _mm256_add_epi32(p[0], p[1]);
        _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(p), lane)
    }
}
