//! A prefill-sized call of a Q4_K [`KRows16`] on the `amx` spelling: AMX-INT8's tile
//! multiply (`tdpbsud`) for the integer sums, the AVX-512 body's float step for the rest.
//!
//! Why: past a few activation rows the AVX-512 body is bound by its `vpdpbusd`s (64
//! products each) and the work around them. One `tdpbsud` takes 16 activation rows × 64
//! values against 16 weight rows, 16,384 products, in the time of a few dozen `vpdpbusd`s
//! (one core of a Xeon with AMX, 2026-12-05: ~7–10 ns each from L1 with its loads; the
//! same time at K = 32 as at 64, so only K = 64 pays).
//!
//! The tile multiply adds a 64-value run of products with no scale inside it, but Q4_K
//! scales every 32 values, by 6-bit scales of the weight row. So the scale goes into the
//! weights, split in two 3-bit halves that keep each product a byte: `sc = 8·hi + lo`, and
//! the decoded weight bytes are `q·hi` and `q·lo` (at most 15 · 7 = 105). Two tiles of sums
//! per super-block, `C_hi` and `C_lo`, each over all 256 values; then
//! `sumi = 8·C_hi + C_lo = Σ_s sc_s Σ q·x`, exactly the integer the other spellings sum
//! (at most 256 · 127 · 105 in a lane, far inside i32). Each sub-tile's packs are decoded to
//! those bytes once (8 KB a pack, in the tiles' own layout: a tile row is a pack line's
//! nibbles, four values of each of the sixteen weight rows); the call's activations are
//! copied once into tiles ([`ActTiles`]).
//!
//! What made it pay, each measured on one 10240 × 2560 matrix at 512 rows, one thread,
//! against the AVX-512 body in the same process (fastest of 40 alternations, since this
//! host's speed wanders): tiles loaded straight from the quantized rows, 0.9–1.3 times its
//! speed; the activations copied into contiguous tiles, 1.52; the tile multiply of each
//! step issued before the float step of the one before (below, [`subtile`]), 1.55 (two
//! threads 1.57; a 2560 × 10240 matrix 1.33). Without the float step the tile work alone
//! took about as long as the float step alone, so the two now overlap.
//!
//! Numbers are unchanged: `sumi` is the same integer, the mins' sums `summ` are the AVX-512
//! body's, and each lane takes [`k_accumulate_lanes`]'s float step super-block by super-block
//! in the same order. So every row's result has the bits of the other spellings, at every
//! batch size (`tests/krows.rs` runs every spelling the machine has against scalar `matmul`).
//! Rows past the last whole tile of sixteen are left to the caller's AVX-512 body.
//! Q6_K stays on the AVX-512 body: its signed 8-bit scales every 16 values do not split into
//! byte-sized products as cheaply (four pieces, twice Q4_K's tile work).

use super::{KRows16, Pack4, Packs, GROUP};
use crate::kquants::BlockQ8K;
use crate::lanes::{dot_pairs, k_accumulate_lanes, Lanes, Z512};
use crate::tiling::Job;
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;

/// Activation rows per tile.
pub(super) const TILE_ROWS: usize = 16;

/// Whether a call of `n` activation rows of `m` takes this path: the `amx` spelling, a Q4_K
/// matrix, at least one pair of tiles (32 rows). At one tile (a 16-sequence decode) the
/// decode of the weights is paid for sixteen rows and the AVX-512 body was faster (one
/// 10240 × 2560 matrix, two threads: 0.81 times its speed at n = 16, 1.18 at 32, 1.48 at
/// 64, 1.57 at 512).
pub(super) fn applies(m: &KRows16, isa: crate::block::Isa, n: usize) -> bool {
    isa.has_amx() && matches!(m.packs(), Packs::Q4(_)) && n >= 2 * TILE_ROWS
}

/// The tile configuration every call loads (`ldtilecfg`): palette 1, all eight tiles 16
/// rows of 64 bytes. `multiply` keeps the sums in tiles 0–3 (`C_hi`, `C_lo` of the first
/// activation tile, then of the second: 16 activation rows × 16 weight rows of i32 each),
/// the two activation tiles of a 64-value step in 4–5 (16 rows × 64 values, i8) and the
/// step's two weight tiles in 6–7 (`q·hi`, `q·lo`: 16 rows of four values × 16 weight rows,
/// u8), reloaded at every step. A `static`, so that the bytes the instruction reads are
/// certainly in memory.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    _reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    _reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

const _: () = assert!(size_of::<TileConfig>() == 64);

/// One pack decoded for the tile multiply: `b[t][0]` the 64 values `64t..64t + 64` as
/// `q·hi`, `b[t][1]` as `q·lo`; row `k` of a tile holds values `64t + 4k..64t + 4k + 4` of
/// each weight row `i` at bytes `4i..4i + 4` (rows 0–7: sub-block `2t`, the pack's low
/// nibbles; rows 8–15: sub-block `2t + 1`, its high nibbles).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Tiles4 {
    b: [[[[u8; 64]; 16]; 2]; 4],
}

const _: () = assert!(size_of::<Tiles4>() == 8192);

thread_local! {
    /// A thread's decoded sub-tile and its float sums (rewritten whole by each call).
    static SCRATCH: RefCell<(Vec<Tiles4>, Vec<[f32; GROUP]>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Groups a sub-tile holds on this path (see [`subtile`]): three groups' decoded packs of
/// one column (24 KB) and a pair of activation tiles (8 KB) fit in a 48 KB L1 beside the
/// sums. The whole sub-tile decoded is `3 · bpr · 8 KB` (240 KB at 2,560 columns, 960 KB at
/// 10,240; in L2), kept per thread between calls.
pub(super) const GROUPS: usize = 3;

/// Activation rows `0..n / 16 · 16` of `job` times rows `o0..o1` of `m` (a Q4_K matrix),
/// the activations as `acts`; returns how many activation rows it did, for the caller's
/// AVX-512 body to do the rest.
///
/// The loops are ordered so that both operands of the tile loads come from L1, where the
/// tile multiply runs at its pace: super-block column `j` outermost, then each pair of
/// activation tiles, then the sub-tile's groups (at most [`GROUPS`], 8 KB of decoded weights
/// each). A pair's activations for `j` (8 KB) are used by every group; the groups' decoded
/// packs for `j` stay in L1 for every pair. The float sums of every (group, activation row)
/// wait in a buffer, 64 bytes each, between columns.
///
/// # Safety
/// The CPU runs the `amx` spelling (AVX-512 F/BW/VL/VNNI and granted AMX-INT8 tiles);
/// every activation row covers `m`'s super-blocks; `acts` holds `job`'s activations; this
/// task owns rows `o0..o1` of the output.
pub(super) unsafe fn subtile(
    m: &KRows16,
    job: &Job<BlockQ8K>,
    acts: &ActTiles,
    o0: usize,
    o1: usize,
) -> usize {
    let Packs::Q4(v) = m.packs() else {
        panic!("the tile path is for Q4_K");
    };
    assert!(o0.is_multiple_of(GROUP) && o1.is_multiple_of(GROUP));
    let bpr = m.bpr;
    let (g0, g1) = (o0 / GROUP, o1 / GROUP);
    let packs = &v[g0 * bpr..g1 * bpr];
    let tiles = job.n() / TILE_ROWS * TILE_ROWS;
    assert_eq!(
        acts.tiles.len(),
        tiles / TILE_ROWS * bpr * 4,
        "the call's tiles"
    );
    m.prefetch_next(o0, o1);
    SCRATCH.with_borrow_mut(|(dec, acc)| {
        if dec.len() < packs.len() {
            dec.resize(
                packs.len(),
                Tiles4 {
                    b: [[[[0; 64]; 16]; 2]; 4],
                },
            );
        }
        let dec = &mut dec[..packs.len()];
        acc.clear();
        acc.resize((g1 - g0) * tiles, [0.0; GROUP]);
        // SAFETY: the caller promised the features and the ownership of rows `o0..o1`.
        unsafe {
            for (p, d) in packs.iter().zip(dec.iter_mut()) {
                decode4(p, d);
            }
            asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, preserves_flags));
            // Software-pipelined: each step's tile multiply is issued before the float step
            // of the one before it, so that the tile unit and the vector units work at once
            // (one after the other, each took about half the time; in-order code leaves the
            // tile unit idle while the float step runs, as the out-of-order window does not
            // reach the next multiply). Two buffers of sums alternate.
            let mut sums = [Sums([[0; GROUP]; 4 * TILE_ROWS]); 2];
            // The step whose sums wait: (group, column, first row, rows).
            let mut pending: Option<(usize, usize, usize, usize)> = None;
            let mut slot = 0;
            let finish = |(g, j, r, rows): (usize, usize, usize, usize),
                          sums: &Sums,
                          acc: &mut [[f32; GROUP]]| {
                let acc = &mut acc[g * tiles + r..g * tiles + r + rows];
                combine(&packs[g * bpr + j], job, j, r, sums, acc);
            };
            for j in 0..bpr {
                let mut r = 0;
                while r < tiles {
                    let take = if tiles - r >= 2 * TILE_ROWS {
                        2 * TILE_ROWS
                    } else {
                        TILE_ROWS
                    };
                    for g in 0..g1 - g0 {
                        let (now, before) = sums_pair(&mut sums, slot);
                        multiply(&dec[g * bpr + j], acts, j, r, take, now);
                        if let Some(step) = pending {
                            finish(step, before, acc);
                        }
                        pending = Some((g, j, r, take));
                        slot ^= 1;
                    }
                    r += take;
                }
            }
            if let Some(step) = pending {
                finish(step, &sums[slot ^ 1], acc);
            }
            // The tiles' 8 KB of state would otherwise be saved and restored at every
            // context switch of this thread until its next tile call.
            asm!("tilerelease", options(nostack, preserves_flags));
            for (g, sums) in acc.chunks_exact(tiles).enumerate() {
                for (r, o) in sums.iter().enumerate() {
                    job.put_run(r, (g0 + g) * GROUP, o);
                }
            }
        }
    });
    tiles
}

/// One activation tile: 16 rows × 64 values (signed bytes), a row's 64 bytes contiguous.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct ATile([[u8; 64]; TILE_ROWS]);

/// A call's activations copied once into the tile multiply's layout: for each tile of
/// sixteen rows `t` and super-block column `j`, the four 64-value tiles of that column, one
/// after another (`tiles[(t · bpr + j) · 4 + k]` holds values `64k..64k + 64` of rows
/// `16t..16t + 16`).
///
/// Why a copy: straight from the quantized rows, a tile's sixteen rows lie a row's blocks
/// apart (3 KB on the 4B shape) and 4 bytes past a cache line, and `tileloadd` from there
/// was two to three times slower than from contiguous, aligned rows (C probe, this Xeon:
/// 15–28 against 7–10 ns per `tdpbsud` with its loads). The copy is the activations' size
/// once per call, shared by every thread and every matrix of the call.
pub(crate) struct ActTiles {
    tiles: Vec<ATile>,
    bpr: usize,
}

impl ActTiles {
    /// The whole tiles of sixteen rows of `acts` (`upr` blocks a row, `n` rows).
    pub(crate) fn new(acts: &[BlockQ8K], upr: usize, n: usize) -> ActTiles {
        let nt = n / TILE_ROWS;
        let mut tiles = Vec::with_capacity(nt * upr * 4);
        for t in 0..nt {
            for j in 0..upr {
                for k in 0..4 {
                    tiles.push(ATile(std::array::from_fn(|m| {
                        let q = &acts[(TILE_ROWS * t + m) * upr + j].qs[64 * k..64 * k + 64];
                        std::array::from_fn(|i| q[i] as u8)
                    })));
                }
            }
        }
        ActTiles { tiles, bpr: upr }
    }

    /// The first of column `j`'s four tiles of activation rows `r..r + 16`.
    fn at(&self, r: usize, j: usize) -> *const u8 {
        self.tiles[(r / TILE_ROWS * self.bpr + j) * 4..][..4]
            .as_ptr()
            .cast()
    }
}

/// Decodes a pack into the tile multiply's bytes (see [`Tiles4`]): each line's nibbles times
/// the two halves of their sub-block's scale. `vpmullw` multiplies a 16-bit word holding two
/// nibbles by a halfscale (≤ 7) in both bytes' stead: the low product stays below 256, so
/// the word's two bytes are the two products.
///
/// # Safety
/// AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn decode4(p: &Pack4, out: &mut Tiles4) {
    let m4 = _mm512_set1_epi8(0x0F);
    let seven = _mm512_set1_epi16(7);
    for t in 0..4 {
        for h in 0..2 {
            let s = 2 * t + h;
            // SAFETY: 16 bytes of the pack's scales.
            let sc = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p.sc[s].as_ptr().cast()) });
            let sc = _mm512_or_si512(sc, _mm512_slli_epi32::<16>(sc));
            let hi = _mm512_srli_epi16::<3>(sc);
            let lo = _mm512_and_si512(sc, seven);
            for c in 0..8 {
                // SAFETY: a pack line is 64 aligned bytes; so is a tile row.
                unsafe {
                    let v = _mm512_load_si512(p.q[8 * t + c].as_ptr().cast());
                    let q = if h == 0 {
                        _mm512_and_si512(v, m4)
                    } else {
                        _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4)
                    };
                    let row = 8 * h + c;
                    let dst = out.b[t][0][row].as_mut_ptr().cast();
                    _mm512_store_si512(dst, _mm512_mullo_epi16(q, hi));
                    let dst = out.b[t][1][row].as_mut_ptr().cast();
                    _mm512_store_si512(dst, _mm512_mullo_epi16(q, lo));
                }
            }
        }
    }
}

/// Sums of one step: rows `32t..32t + 16` tile `t`'s `C_hi`, the next sixteen its `C_lo`
/// (16 activation rows × 16 weight rows of i32 each).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Sums([[i32; GROUP]; 4 * TILE_ROWS]);

/// Buffer `slot`, to write now, and the other (the step before's), to read.
fn sums_pair(sums: &mut [Sums; 2], slot: usize) -> (&mut Sums, &Sums) {
    let [a, b] = sums;
    if slot == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// The integer sums of activation rows `r..r + take` (one or two tiles) against a pack
/// decoded as `dec`, super-block column `j`, into `out`.
///
/// # Safety
/// As [`subtile`], with the tile configuration loaded.
#[inline(always)]
unsafe fn multiply(dec: &Tiles4, acts: &ActTiles, j: usize, r: usize, take: usize, out: &mut Sums) {
    let a = acts.at(r, j);
    // SAFETY: `a` (and `a1`) are four activation tiles (4 KB), `dec` one pack's 8 KB of
    // weight tiles and `out` 4 KB of sums; every tile row is 64 bytes at a stride of 64.
    // Only tile registers and the named ones are touched.
    unsafe {
        if take == 2 * TILE_ROWS {
            let a1 = acts.at(r + TILE_ROWS, j);
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                ".irp k, 0, 1, 2, 3",
                "tileloadd tmm4, [{a} + {s}*1 + 1024*\\k]",
                "tileloadd tmm6, [{b} + {s}*1 + 2048*\\k]",
                "tileloadd tmm7, [{b} + {s}*1 + 2048*\\k + 1024]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tileloadd tmm5, [{a1} + {s}*1 + 1024*\\k]",
                "tdpbsud tmm1, tmm4, tmm7",
                "tdpbsud tmm2, tmm5, tmm6",
                "tdpbsud tmm3, tmm5, tmm7",
                ".endr",
                "tilestored [{c} + {s}*1], tmm0",
                "tilestored [{c} + {s}*1 + 1024], tmm1",
                "tilestored [{c} + {s}*1 + 2048], tmm2",
                "tilestored [{c} + {s}*1 + 3072], tmm3",
                a = in(reg) a,
                a1 = in(reg) a1,
                b = in(reg) dec.b.as_ptr(),
                s = in(reg) 64usize,
                c = in(reg) out.0.as_mut_ptr(),
                options(nostack, preserves_flags),
            );
        } else {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                ".irp k, 0, 1, 2, 3",
                "tileloadd tmm4, [{a} + {s}*1 + 1024*\\k]",
                "tileloadd tmm6, [{b} + {s}*1 + 2048*\\k]",
                "tileloadd tmm7, [{b} + {s}*1 + 2048*\\k + 1024]",
                "tdpbsud tmm0, tmm4, tmm6",
                "tdpbsud tmm1, tmm4, tmm7",
                ".endr",
                "tilestored [{c} + {s}*1], tmm0",
                "tilestored [{c} + {s}*1 + 1024], tmm1",
                a = in(reg) a,
                b = in(reg) dec.b.as_ptr(),
                s = in(reg) 64usize,
                c = in(reg) out.0.as_mut_ptr(),
                options(nostack, preserves_flags),
            );
        }
    }
}

/// The float step of activation rows `r..r + acc.len()` against pack `pk` (super-block
/// column `j`) from their integer sums `c`, added into `acc`: `sumi = 8·C_hi + C_lo`, the
/// mins against the activations' 32-value sums as the AVX-512 body takes them, then
/// [`k_accumulate_lanes`].
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; every activation row covers `j`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn combine(
    pk: &Pack4,
    job: &Job<BlockQ8K>,
    j: usize,
    r: usize,
    c: &Sums,
    acc: &mut [[f32; GROUP]],
) {
    type L = Z512;
    assert!(acc.len() == TILE_ROWS || acc.len() == 2 * TILE_ROWS);
    let c = &c.0;
    // SAFETY: the features enabled above; `c` holds 64 rows of 16 i32, `acc` its rows.
    unsafe {
        let dd = L::load_h(pk.d.as_ptr());
        let dmin = L::load_h(pk.dmin.as_ptr());
        let mn2: [__m512i; 4] = std::array::from_fn(|k| L::load_u8_pairs(pk.mn[k].as_ptr()));
        for h in 0..acc.len() / 8 {
            // Eight activation rows `8h..8h + 8`: tile `h / 2`, its rows from `8(h % 2)`.
            let xs: [&[BlockQ8K]; 8] = std::array::from_fn(|i| job.row(r + 8 * h + i));
            let base = 32 * (h / 2) + 8 * (h % 2);
            let sumi: [__m512i; 8] = std::array::from_fn(|i| {
                let hi = L::load_i(c[base + i].as_ptr());
                let lo = L::load_i(c[base + TILE_ROWS + i].as_ptr());
                _mm512_add_epi32(_mm512_slli_epi32::<3>(hi), lo)
            });
            let mut summ = [L::zero_i(); 8];
            for (k, &mn2) in mn2.iter().enumerate() {
                dot_pairs::<L, 8>(&mut summ, mn2, &xs, j, |x| x.sums32_pair(k));
            }
            let a8 = &mut acc[8 * h..8 * h + 8];
            let mut f: [__m512; 8] = std::array::from_fn(|i| L::load_f(a8[i].as_ptr()));
            k_accumulate_lanes::<L, 8>(dd, Some(dmin), &xs, j, &sumi, &summ, &mut f);
            for (o, v) in a8.iter_mut().zip(f) {
                L::store_f(o.as_mut_ptr(), v);
            }
        }
    }
}
