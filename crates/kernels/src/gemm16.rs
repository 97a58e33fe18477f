//! `gemm8` on AVX-512: the 32-value formats times many activation rows, sixteen weight rows
//! at a time, one 512-bit `vpdpbusd` per four values of all sixteen rows.
//!
//! Same plan as `gemm8` (a group of weight rows decoded once per call into lane-major chunks,
//! every activation row of the call run over them), twice as wide: chunk `k` of a block
//! column holds values `4k..4k+4` of each of sixteen rows (bytes `4i..4i+4` = row `i`).
//!
//! Numbers are unchanged: each lane computes exactly the integers and float operations
//! `gemm8` computes for that row (and so the row-major kernels and the scalar reference do):
//! per block the exact block integer, `fma(d_w·d_x, P, lane_{b%4})`, the stored `m` terms
//! four block columns per step, and `legacy::finish`'s fold. Pinned by `tests/matmul.rs` on
//! every ISA spelling the machine has.
//!
//! The signed formats (Q8_0, Q8_1): AVX-512 has no 512-bit `vpsignb`, which `gemm8` uses to
//! make the weights unsigned. Here the activations are made unsigned instead (`x + 128`,
//! once per activation row and group), the weights stay signed bytes, and each row's block
//! integer starts at `−128 · Σw` of its 32 weights (computed when the group is decoded):
//! `Σ (x + 128)·w − 128·Σw = Σ x·w`, exact.

use std::arch::x86_64::*;
use std::cell::RefCell;

use crate::block::prefetch_ahead;
use crate::dot4::transpose8;
use crate::legacy::{BlockQ8x4, MTerm};
use crate::legacy_avx2::LegacyAvx2;
use crate::tiling::{Job, RowKernel};

/// Weight rows per group: one 32-bit lane per row of a 512-bit vector.
const ROWS: usize = 16;

/// Activation rows per pass over a decoded group, so that each chunk load feeds three
/// `vpdpbusd`s: one row at a time, the loads were the limit. One thread, 256 × 640 from
/// cache, ns per 32 values × activation row at n = 64, passes of 1 / 2 / 3 / 4 rows: q5_0
/// 0.20 / 0.16 / 0.14 / 0.19, q8_0 0.26 / 0.19 / 0.18 / 0.27 (four rows' sums no longer fit
/// in the 32 registers).
const PASS: usize = 3;

/// Activation rows from which this path runs (as `gemm8`'s: the decode is shared by the
/// rows of the call).
pub(crate) const MIN_ROWS: usize = crate::gemm8::MIN_ROWS;

/// One block column of a group, lane-major.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Chunks16([[u8; 4 * ROWS]; 8]);

/// A group's decoded block columns: chunks, the signed formats' sum offsets, `d` and `m`.
#[derive(Default)]
struct Decoded {
    chunks: Vec<Chunks16>,
    /// Signed formats: `−128 · Σ` of the block's 32 weights, per row.
    corr: Vec<[i32; ROWS]>,
    d: Vec<[f32; ROWS]>,
    m: Vec<[f32; ROWS]>,
    /// Signed formats: the pass's activation rows' quants plus 128, per row and block (row
    /// `r`'s block `j` at `r * bpr + j`). Made again for each group (a 32-byte xor per block, ~3 %): flipping the sign bits of the broadcast word in
    /// the inner loop instead was measured slower (q8_0 n = 64: 0.28 -> 0.38 ns), since the
    /// broadcast then comes from a register, not from memory.
    shifted: Vec<[u8; 32]>,
}

thread_local! {
    static SCRATCH: RefCell<Decoded> = RefCell::new(Decoded::default());
}

/// A row-major matrix of a 32-value format, multiplied through the 512-bit lane-major path.
pub(crate) struct Gemm16<'a, B> {
    pub blocks: &'a [B],
    pub bpr: usize,
    pub rows: usize,
    pub row_bytes: usize,
}

impl<B: LegacyAvx2 + Sync> RowKernel for Gemm16<'_, B> {
    type Act = BlockQ8x4;

    fn rows(&self) -> usize {
        self.rows
    }

    fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    fn row_align(&self) -> usize {
        ROWS
    }

    fn subtile(&self, job: &Job<BlockQ8x4>, o0: usize, o1: usize) {
        for x in (0..job.n()).map(|r| job.row(r)) {
            assert!(x.len() >= self.bpr.div_ceil(4), "activation row too short");
        }
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let dec = &mut *scratch;
            let mut g0 = o0;
            while g0 < o1 {
                let h = ROWS.min(o1 - g0);
                let rows = &self.blocks[g0 * self.bpr..(g0 + h) * self.bpr];
                // SAFETY: this kernel is only built when the `Isa` is AVX-512, which includes
                // AVX2, FMA and F16C (`matmul::run_legacy` checks).
                unsafe { decode(rows, self.bpr, dec) };
                // Three activation rows per pass share each chunk load; the last one or two
                // rows as a pass of their own (each row's operations are the same either way).
                let mut r = 0;
                while r < job.n() {
                    let take = PASS.min(job.n() - r);
                    // SAFETY: as above, with AVX-512 F/BW/VL/VNNI; the rows cover `bpr`
                    // blocks (checked above).
                    let res: &[[f32; ROWS]] = match take {
                        3 => &unsafe {
                            dot16::<B, 3>(dec, [job.row(r), job.row(r + 1), job.row(r + 2)])
                        },
                        2 => &unsafe { dot16::<B, 2>(dec, [job.row(r), job.row(r + 1)]) },
                        _ => &unsafe { dot16::<B, 1>(dec, [job.row(r)]) },
                    };
                    for (i, res) in res.iter().enumerate() {
                        // SAFETY: rows `g0..g0 + h` lie in this task's sub-tile.
                        unsafe { job.put_run(r + i, g0, &res[..h]) };
                    }
                    r += take;
                }
                g0 += h;
            }
        });
    }
}

/// Decodes up to sixteen rows (`rows.len() / bpr`; missing rows read as zero) into `dec`.
#[target_feature(enable = "avx2,fma,f16c")]
fn decode<B: LegacyAvx2>(rows: &[B], bpr: usize, dec: &mut Decoded) {
    let h = rows.len() / bpr;
    dec.chunks.resize(bpr, Chunks16([[0; 4 * ROWS]; 8]));
    dec.d.resize(bpr, [0.0; ROWS]);
    dec.m.resize(bpr, [0.0; ROWS]);
    if B::SIGNED {
        dec.corr.resize(bpr, [0; ROWS]);
    }
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for j in 0..bpr {
        let (mut d_bits, mut m_bits) = ([0u16; ROWS], [0u16; ROWS]);
        let mut d_f32 = [0f32; ROWS];
        for half in 0..2 {
            let mut v = [_mm256_setzero_si256(); 8];
            for (i, vi) in v.iter_mut().enumerate() {
                let row = 8 * half + i;
                if row >= h {
                    break;
                }
                let b = &rows[row * bpr + j];
                prefetch_ahead((b as *const B).cast(), size_of::<B>());
                // SAFETY: AVX2 is enabled in this function.
                *vi = unsafe { b.load_q() };
                if B::F16_SCALE {
                    d_bits[row] = u16::from_le_bytes(b.d_bits());
                } else {
                    d_f32[row] = b.d();
                }
                m_bits[row] = u16::from_le_bytes(b.m_bits());
            }
            let mut sum = _mm256_setzero_si256();
            for (k, ck) in transpose8(v).into_iter().enumerate() {
                // SAFETY: 32 writable bytes.
                unsafe {
                    _mm256_storeu_si256(dec.chunks[j].0[k][32 * half..].as_mut_ptr().cast(), ck)
                };
                if B::SIGNED {
                    // Σ of each lane's four signed weights (1·w pairs, then pairs of pairs).
                    let s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ck), ones16);
                    sum = _mm256_add_epi32(sum, s4);
                }
            }
            if B::SIGNED {
                let corr = _mm256_mullo_epi32(sum, _mm256_set1_epi32(-128));
                // SAFETY: 32 writable bytes.
                unsafe { _mm256_storeu_si256(dec.corr[j][8 * half..].as_mut_ptr().cast(), corr) };
            }
        }
        // The same conversions as `gemm8::decode`: exact f16 -> f32, then `d * -offset` or the
        // stored `m`.
        for half in 0..2 {
            let at = 8 * half;
            // SAFETY: 16 readable bytes each; 32 writable bytes each.
            unsafe {
                let d = if B::F16_SCALE {
                    _mm256_cvtph_ps(_mm_loadu_si128(d_bits[at..].as_ptr().cast()))
                } else {
                    _mm256_loadu_ps(d_f32[at..].as_ptr())
                };
                // Only the stored m terms are floats; offsets are taken in the block integers.
                let m = if B::M == MTerm::Stored {
                    _mm256_cvtph_ps(_mm_loadu_si128(m_bits[at..].as_ptr().cast()))
                } else {
                    _mm256_setzero_ps()
                };
                _mm256_storeu_ps(dec.d[j][at..].as_mut_ptr(), d);
                _mm256_storeu_ps(dec.m[j][at..].as_mut_ptr(), m);
            }
        }
    }
}

/// Four bytes of `q` from `4k` as one little-endian i32.
#[inline(always)]
fn word(q: &[u8; 32], k: usize) -> i32 {
    let b: [u8; 4] = q[4 * k..4 * k + 4].try_into().expect("four bytes");
    i32::from_le_bytes(b)
}

/// Four signed bytes of `q` from `4k` as one little-endian i32.
#[inline(always)]
fn word_i8(q: &[i8; 32], k: usize) -> i32 {
    let b: [i8; 4] = q[4 * k..4 * k + 4].try_into().expect("four bytes");
    i32::from_le_bytes(b.map(|v| v as u8))
}

/// The sixteen dots of a decoded group with each of the `R` activation rows `xs` (which
/// cover every block column), lane by lane the operations of `gemm8::dot8_with`.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn dot16<B: LegacyAvx2, const R: usize>(
    dec: &mut Decoded,
    xs: [&[BlockQ8x4]; R],
) -> [[f32; ROWS]; R] {
    let bpr = dec.chunks.len();
    for x in &xs {
        assert!(x.len() >= bpr.div_ceil(4), "activation row too short");
    }
    assert!(
        dec.d.len() == bpr && dec.m.len() == bpr,
        "one scale row per block column"
    );
    if B::SIGNED {
        assert_eq!(dec.corr.len(), bpr, "one offset row per block column");
        dec.shifted.resize(R * bpr, [0; 32]);
        let flip = _mm256_set1_epi8(0x80u8 as i8);
        for (r, x) in xs.iter().enumerate() {
            for (j, s) in dec.shifted[r * bpr..(r + 1) * bpr].iter_mut().enumerate() {
                // SAFETY: 32 readable and 32 writable bytes.
                unsafe {
                    let q = _mm256_loadu_si256(x[j / 4].qs[j % 4].as_ptr().cast());
                    _mm256_storeu_si256(s.as_mut_ptr().cast(), _mm256_xor_si256(q, flip));
                }
            }
        }
    }
    let dec = &*dec;
    // SAFETY (every intrinsic below): the features this function enables; the loads read
    // 64 bytes from 64-byte rows of the decoded arrays.
    unsafe {
        // Lane b % 4 of every row; four block columns per step so the index is a constant.
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let groups = bpr / 4;
        // (Every lane index a literal: one dynamic index would keep `acc` in memory.)
        for g in 0..groups {
            block_step::<B, R>(dec, 4 * g, xs, 0, &mut acc);
            block_step::<B, R>(dec, 4 * g + 1, xs, 1, &mut acc);
            block_step::<B, R>(dec, 4 * g + 2, xs, 2, &mut acc);
            block_step::<B, R>(dec, 4 * g + 3, xs, 3, &mut acc);
        }
        for j in 4 * groups..bpr {
            match j % 4 {
                0 => block_step::<B, R>(dec, j, xs, 0, &mut acc),
                1 => block_step::<B, R>(dec, j, xs, 1, &mut acc),
                _ => block_step::<B, R>(dec, j, xs, 2, &mut acc),
            }
        }
        let mut out = [[0.0f32; ROWS]; R];
        for (r, (x, acc)) in xs.iter().zip(&acc).enumerate() {
            // The stored m terms: lane j % 4 of each row gains m_j * sx_j, in block order.
            let mut accm = [_mm512_setzero_ps(); 4];
            if B::M == MTerm::Stored {
                for (u, mg) in x.iter().zip(dec.m.chunks(4)) {
                    for (kk, mj) in mg.iter().enumerate() {
                        let mv = _mm512_loadu_ps(mj.as_ptr());
                        accm[kk] =
                            _mm512_add_ps(accm[kk], _mm512_mul_ps(mv, _mm512_set1_ps(u.s[kk])));
                    }
                }
            }
            // `legacy::finish`, sixteen rows at once, in `gemm8`'s order.
            let mut v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            if B::M == MTerm::Stored {
                let rm = _mm512_add_ps(
                    _mm512_add_ps(accm[0], accm[1]),
                    _mm512_add_ps(accm[2], accm[3]),
                );
                v = _mm512_add_ps(v, rm);
            }
            _mm512_storeu_ps(out[r].as_mut_ptr(), v);
        }
        out
    }
}

/// Block column `j` of the group with block `j` of each activation row (`kk = j % 4`, a
/// constant where the caller unrolls): `lane = fma(d · dx, P, lane)` into `acc[r][kk]`, `P`
/// the sixteen rows' exact block integers.
///
/// # Safety
/// As [`dot16`]; for the signed formats `dec.shifted` holds these activation rows.
#[inline(always)]
unsafe fn block_step<B: LegacyAvx2, const R: usize>(
    dec: &Decoded,
    j: usize,
    xs: [&[BlockQ8x4]; R],
    kk: usize,
    acc: &mut [[__m512; 4]; R],
) {
    let bpr = dec.chunks.len();
    // SAFETY: as the caller promised; 64 readable bytes per row of the decoded arrays.
    unsafe {
        let dw = _mm512_loadu_ps(dec.d[j].as_ptr());
        let mut p = [_mm512_setzero_si512(); R];
        if B::SIGNED {
            p = [_mm512_loadu_si512(dec.corr[j].as_ptr().cast()); R];
        } else if let MTerm::Offset(o) = B::M {
            for (p, x) in p.iter_mut().zip(&xs) {
                *p = _mm512_set1_epi32(-o * x[j / 4].isum[kk]);
            }
        }
        for k in 0..8 {
            let w = _mm512_load_si512(dec.chunks[j].0[k].as_ptr().cast());
            for (r, p) in p.iter_mut().enumerate() {
                *p = if B::SIGNED {
                    let x = word(&dec.shifted[r * bpr + j], k);
                    _mm512_dpbusd_epi32(*p, _mm512_set1_epi32(x), w)
                } else {
                    let x = word_i8(&xs[r][j / 4].qs[kk], k);
                    _mm512_dpbusd_epi32(*p, w, _mm512_set1_epi32(x))
                };
            }
        }
        for (r, p) in p.iter().enumerate() {
            let s = _mm512_mul_ps(dw, _mm512_set1_ps(xs[r][j / 4].d[kk]));
            acc[r][kk] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(*p), acc[r][kk]);
        }
    }
}
