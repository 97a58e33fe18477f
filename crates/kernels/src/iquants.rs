//! The lattice ("IQ") and ternary formats of 256 values: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S, IQ1_S, IQ1_M, TQ1_0 and TQ2_0.
//!
//! Layouts are ggml's (`ggml-common.h`). Each stores groups of 8 (or 4) values as an index
//! into a fixed table of small integers (`iq_grids.rs`, generated from the `gguf` package),
//! signs as bits (or a 7-bit index whose eighth sign is the parity), and a scale per 16 or 32
//! values derived from an f16 super-scale; the ternary types store -1/0/1 in base 4 or base
//! 3. Their dequantized values are all exact in f32.
//!
//! Why one shape for all of them: each block decodes ([`Lattice::decode`]) to 256 small
//! integers `q` and 16 scales, one per 16 values, with value = `scale[i / 16] * q[i]`
//! exactly. IQ1_S/IQ1_M's `grid ± 1/8` becomes `q = 8·grid ± 1` with the scale divided by 8;
//! formats with one scale per 32 repeat it. The dot product is then the 32-value formats'
//! lane scheme (`legacy.rs`) with the scale per lane half: lane `j` of 32-value block `k`
//! adds `(scale[2k + j/4] · dx_k) · Σ_{i=4j}^{4j+3} q_i x_i`. The scalar and AVX2 kernels run
//! this order and give the same bits. A block is decoded once per call and used for every
//! activation row; the decode is plain code, so these formats are correct first and fast
//! second (IQ4_XS, IQ4_NL and MXFP4, the popular ones, have table-lookup kernels in
//! `codebook.rs`).
//!
//! The quantizers exist to write test models: a scale per group from its largest magnitude,
//! each 8-value group to the nearest table entry under the signs the data has (for the
//! 7-bit sign indices, the smallest value's sign flipped when the parity would not allow
//! it). They make valid blocks near the input, not ggml's importance-weighted choices.

use crate::block::{amax, f16_to_f32, f32_to_f16, Block, WeightBlock};
use crate::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::legacy::{BlockQ8x4, QK};
use crate::GgmlType;

/// What every format here decodes to: `value[i] = scales[i / 16] * q[i]`, exactly.
pub trait Lattice: Block {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]);
    /// The block that decodes nearest to `x` (256 values), as this module's doc says.
    fn encode(x: &[f32]) -> Self;
}

/// `ksigns[i]`: the 7 sign bits `i` and an eighth that makes the count of negatives even.
const fn ksign(i: usize) -> u8 {
    (i as u8) | (((i.count_ones() & 1) as u8) << 7)
}

/// The `k`-th byte of table entry `e` (as stored by `iq_grids.rs`).
#[inline(always)]
fn byte(e: u64, k: usize) -> u8 {
    (e >> (8 * k)) as u8
}

/// Writes 8 grid values with signs (`bit k` set: negative) and a magnitude multiplier.
#[inline(always)]
fn put8(q: &mut [i8], entry: u64, signs: u8) {
    for (k, q) in q.iter_mut().take(8).enumerate() {
        let v = byte(entry, k) as i8;
        *q = if signs >> k & 1 != 0 { -v } else { v };
    }
}

/// Writes 4 grid values of a 32-bit entry with signs.
#[inline(always)]
fn put4(q: &mut [i8], entry: u32, signs: u8) {
    for (k, q) in q.iter_mut().take(4).enumerate() {
        let v = (entry >> (8 * k)) as u8 as i8;
        *q = if signs >> k & 1 != 0 { -v } else { v };
    }
}

/// The nearest entry of `grid` (entries of `n` values) to the magnitudes `m`, by squared
/// error; `values(e, k)` reads value `k` of entry `e`.
fn nearest<T: Copy>(grid: &[T], n: usize, m: &[f32], values: impl Fn(T, usize) -> f32) -> usize {
    let mut best = (f32::INFINITY, 0);
    for (i, &e) in grid.iter().enumerate() {
        let err: f32 = (0..n).map(|k| (values(e, k) - m[k]).powi(2)).sum();
        if err < best.0 {
            best = (err, i);
        }
    }
    best.1
}

/// Signs of 8 values as bits (bit k: negative) and the magnitudes to aim for, in units of
/// `db`. With `parity` (the 7-bit sign indices) an odd count of negatives cannot be stored:
/// the smallest value's sign is flipped, and its magnitude aimed at zero, since a value of
/// the wrong sign is best as small as the lattice allows.
fn targets(x: &[f32], db: f32, parity: bool) -> (u8, Vec<f32>) {
    let mut s = 0u8;
    for (k, &v) in x.iter().enumerate().take(8) {
        if v < 0.0 {
            s |= 1 << k;
        }
    }
    let inv = 1.0 / db.max(f32::MIN_POSITIVE);
    let mut m: Vec<f32> = x.iter().map(|v| v.abs() * inv).collect();
    if parity && s.count_ones() % 2 == 1 {
        let k = (0..8)
            .min_by(|&a, &b| x[a].abs().total_cmp(&x[b].abs()))
            .expect("eight values");
        s ^= 1 << k;
        m[k] = 0.0;
    }
    (s, m)
}

/// The 4-bit scale index `ls` for a group of largest magnitude `m` under super-scale `d`,
/// where the group's scale is `d * (0.5 + ls) * mult` and its largest grid value `top`.
fn scale_index(m: f32, d: f32, mult: f32, top: f32) -> u8 {
    if d == 0.0 {
        return 0;
    }
    ((m / top / (d * mult) - 0.5).round()).clamp(0.0, 15.0) as u8
}

macro_rules! lattice_block {
    ($B:ident, $ty:expr, $bytes:expr, { $($field:ident : $fty:ty),* }) => {
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $B {
            $(pub $field: $fty),*
        }
        const _: () = assert!(std::mem::size_of::<$B>() == $bytes);
        // SAFETY: repr(C), only byte arrays: alignment 1, no padding, every bit pattern valid.
        unsafe impl Block for $B {
            const TYPE: GgmlType = $ty;
            const ELEMS: usize = 256;
        }
        impl WeightBlock for $B {
            type Act = BlockQ8x4;
            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                dequantize_lattice(blocks, out)
            }
            fn quantize(src: &[f32], out: &mut [Self]) {
                assert_eq!(src.len(), out.len() * 256);
                for (x, b) in src.chunks_exact(256).zip(out.iter_mut()) {
                    *b = <$B as Lattice>::encode(x);
                }
            }
            fn dot_scalar<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
                dot_lattice(w, xs, |acc, s, p| {
                    for j in 0..8 {
                        acc[j] = s[j / 4].mul_add(p[j] as f32, acc[j]);
                    }
                })
            }
            unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
                #[cfg(target_arch = "x86_64")]
                {
                    // SAFETY: the caller guarantees AVX2, FMA and F16C.
                    unsafe { avx2::dot(w, xs) }
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    Self::dot_scalar(w, xs)
                }
            }
        }
    };
}

lattice_block!(BlockIq2Xxs, GgmlType::IQ2_XXS, 66, { d: [u8; 2], qs: [u8; 64] });
lattice_block!(BlockIq2Xs, GgmlType::IQ2_XS, 74, { d: [u8; 2], qs: [u8; 64], scales: [u8; 8] });
lattice_block!(BlockIq2S, GgmlType::IQ2_S, 82,
    { d: [u8; 2], qs: [u8; 32], signs: [u8; 32], qh: [u8; 8], scales: [u8; 8] });
lattice_block!(BlockIq3Xxs, GgmlType::IQ3_XXS, 98, { d: [u8; 2], qs: [u8; 96] });
lattice_block!(BlockIq3S, GgmlType::IQ3_S, 110,
    { d: [u8; 2], qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4] });
lattice_block!(BlockIq1S, GgmlType::IQ1_S, 50, { d: [u8; 2], qs: [u8; 32], qh: [u8; 16] });
lattice_block!(BlockIq1M, GgmlType::IQ1_M, 56, { qs: [u8; 32], qh: [u8; 16], scales: [u8; 8] });
lattice_block!(BlockTq1_0, GgmlType::TQ1_0, 54, { qs: [u8; 48], qh: [u8; 4], d: [u8; 2] });
lattice_block!(BlockTq2_0, GgmlType::TQ2_0, 66, { qs: [u8; 64], d: [u8; 2] });

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes"))
}

/// The largest value of a table of 8-value entries.
fn top8(grid: &[u64]) -> f32 {
    grid.iter()
        .flat_map(|&e| (0..8).map(move |k| byte(e, k) as i8 as f32))
        .fold(0.0, f32::max)
}

impl Lattice for BlockIq2Xxs {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for ib in 0..8 {
            let (grid, meta) = (u32_at(&self.qs, 2 * ib), u32_at(&self.qs, 2 * ib + 1));
            let db = d * (0.5 + (meta >> 28) as f32) * 0.25;
            scales[2 * ib] = db;
            scales[2 * ib + 1] = db;
            for l in 0..4 {
                let entry = IQ2XXS_GRID[(grid >> (8 * l)) as u8 as usize];
                let s = ksign(((meta >> (7 * l)) & 127) as usize);
                put8(&mut q[32 * ib + 8 * l..], entry, s);
            }
        }
    }
    fn encode(x: &[f32]) -> Self {
        let top = top8(&IQ2XXS_GRID);
        let d = amax(x) / top / (15.5 * 0.25);
        let dh = f16_to_f32(f32_to_f16(d));
        let mut qs = [0u8; 64];
        for ib in 0..8 {
            let xb = &x[32 * ib..32 * ib + 32];
            let ls = scale_index(amax(xb), dh, 0.25, top);
            let db = dh * (0.5 + ls as f32) * 0.25;
            let (mut grid, mut meta) = (0u32, (ls as u32) << 28);
            for l in 0..4 {
                let (s, m) = targets(&xb[8 * l..8 * l + 8], db, true);
                let e = nearest(&IQ2XXS_GRID, 8, &m, |e, k| byte(e, k) as f32);
                grid |= (e as u32) << (8 * l);
                meta |= ((s & 127) as u32) << (7 * l);
            }
            qs[8 * ib..8 * ib + 4].copy_from_slice(&grid.to_le_bytes());
            qs[8 * ib + 4..8 * ib + 8].copy_from_slice(&meta.to_le_bytes());
        }
        BlockIq2Xxs {
            d: f32_to_f16(d),
            qs,
        }
    }
}

impl Lattice for BlockIq2Xs {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for (i, s) in scales.iter_mut().enumerate() {
            *s = d * (0.5 + ((self.scales[i / 2] >> (4 * (i % 2))) & 15) as f32) * 0.25;
        }
        for g in 0..32 {
            let v = u16_at(&self.qs, g);
            put8(
                &mut q[8 * g..],
                IQ2XS_GRID[(v & 511) as usize],
                ksign((v >> 9) as usize),
            );
        }
    }
    fn encode(x: &[f32]) -> Self {
        let top = top8(&IQ2XS_GRID);
        let d = amax(x) / top / (15.5 * 0.25);
        let dh = f16_to_f32(f32_to_f16(d));
        let mut b = BlockIq2Xs {
            d: f32_to_f16(d),
            qs: [0; 64],
            scales: [0; 8],
        };
        for h in 0..16 {
            let xh = &x[16 * h..16 * h + 16];
            let ls = scale_index(amax(xh), dh, 0.25, top);
            b.scales[h / 2] |= ls << (4 * (h % 2));
            let db = dh * (0.5 + ls as f32) * 0.25;
            for l in 0..2 {
                let (s, m) = targets(&xh[8 * l..8 * l + 8], db, true);
                let e = nearest(&IQ2XS_GRID, 8, &m, |e, k| byte(e, k) as f32);
                let v = (e as u16) | (((s & 127) as u16) << 9);
                b.qs[2 * (2 * h + l)..2 * (2 * h + l) + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        b
    }
}

impl Lattice for BlockIq2S {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for (i, s) in scales.iter_mut().enumerate() {
            *s = d * (0.5 + ((self.scales[i / 2] >> (4 * (i % 2))) & 15) as f32) * 0.25;
        }
        for g in 0..32 {
            let hi = ((self.qh[g / 4] >> (2 * (g % 4))) & 3) as usize;
            let e = IQ2S_GRID[self.qs[g] as usize | (hi << 8)];
            put8(&mut q[8 * g..], e, self.signs[g]);
        }
    }
    fn encode(x: &[f32]) -> Self {
        let top = top8(&IQ2S_GRID);
        let d = amax(x) / top / (15.5 * 0.25);
        let dh = f16_to_f32(f32_to_f16(d));
        let mut b = BlockIq2S {
            d: f32_to_f16(d),
            qs: [0; 32],
            signs: [0; 32],
            qh: [0; 8],
            scales: [0; 8],
        };
        for h in 0..16 {
            let xh = &x[16 * h..16 * h + 16];
            let ls = scale_index(amax(xh), dh, 0.25, top);
            b.scales[h / 2] |= ls << (4 * (h % 2));
            let db = dh * (0.5 + ls as f32) * 0.25;
            for l in 0..2 {
                let g = 2 * h + l;
                let (s, m) = targets(&xh[8 * l..8 * l + 8], db, false);
                let e = nearest(&IQ2S_GRID, 8, &m, |e, k| byte(e, k) as f32);
                b.qs[g] = e as u8;
                b.qh[g / 4] |= ((e >> 8) as u8 & 3) << (2 * (g % 4));
                b.signs[g] = s;
            }
        }
        b
    }
}

impl Lattice for BlockIq3Xxs {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for ib in 0..8 {
            let meta = u32_at(&self.qs[64..], ib);
            let db = d * (0.5 + (meta >> 28) as f32) * 0.5;
            scales[2 * ib] = db;
            scales[2 * ib + 1] = db;
            for l in 0..4 {
                let s = ksign(((meta >> (7 * l)) & 127) as usize);
                let at = 32 * ib + 8 * l;
                put4(
                    &mut q[at..],
                    IQ3XXS_GRID[self.qs[8 * ib + 2 * l] as usize],
                    s,
                );
                put4(
                    &mut q[at + 4..],
                    IQ3XXS_GRID[self.qs[8 * ib + 2 * l + 1] as usize],
                    s >> 4,
                );
            }
        }
    }
    fn encode(x: &[f32]) -> Self {
        let top = 62.0;
        let d = amax(x) / top / (15.5 * 0.5);
        let dh = f16_to_f32(f32_to_f16(d));
        let mut qs = [0u8; 96];
        for ib in 0..8 {
            let xb = &x[32 * ib..32 * ib + 32];
            let ls = scale_index(amax(xb), dh, 0.5, top);
            let db = dh * (0.5 + ls as f32) * 0.5;
            let mut meta = (ls as u32) << 28;
            for l in 0..4 {
                let (s, m) = targets(&xb[8 * l..8 * l + 8], db, true);
                meta |= ((s & 127) as u32) << (7 * l);
                for half in 0..2 {
                    let m = &m[4 * half..4 * half + 4];
                    let e = nearest(&IQ3XXS_GRID, 4, m, |e, k| (e >> (8 * k)) as u8 as f32);
                    qs[8 * ib + 2 * l + half] = e as u8;
                }
            }
            qs[64 + 4 * ib..64 + 4 * ib + 4].copy_from_slice(&meta.to_le_bytes());
        }
        BlockIq3Xxs {
            d: f32_to_f16(d),
            qs,
        }
    }
}

impl Lattice for BlockIq3S {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for ib in 0..8 {
            let db = d * (1 + 2 * ((self.scales[ib / 2] >> (4 * (ib % 2))) & 15) as u32) as f32;
            scales[2 * ib] = db;
            scales[2 * ib + 1] = db;
        }
        for g in 0..64 {
            let hi = ((self.qh[g / 8] >> (g % 8)) & 1) as usize;
            let e = IQ3S_GRID[self.qs[g] as usize | (hi << 8)];
            let s = self.signs[g / 2] >> (4 * (g % 2));
            put4(&mut q[4 * g..], e, s);
        }
    }
    fn encode(x: &[f32]) -> Self {
        let top = 15.0;
        let d = amax(x) / top / 31.0;
        let dh = f16_to_f32(f32_to_f16(d));
        let mut b = BlockIq3S {
            d: f32_to_f16(d),
            qs: [0; 64],
            qh: [0; 8],
            signs: [0; 32],
            scales: [0; 4],
        };
        for ib in 0..8 {
            let xb = &x[32 * ib..32 * ib + 32];
            let s = if dh == 0.0 {
                0
            } else {
                ((amax(xb) / top / dh - 1.0) / 2.0).round().clamp(0.0, 15.0) as u8
            };
            b.scales[ib / 2] |= s << (4 * (ib % 2));
            let db = dh * (1 + 2 * s as u32) as f32;
            for l in 0..8 {
                let g = 8 * ib + l;
                let (s, m) = targets(&xb[4 * l..4 * l + 4], db, false);
                let e = nearest(&IQ3S_GRID, 4, &m, |e, k| (e >> (8 * k)) as u8 as f32);
                b.qs[g] = e as u8;
                b.qh[g / 8] |= ((e >> 8) as u8 & 1) << (g % 8);
                b.signs[g / 2] |= (s & 15) << (4 * (g % 2));
            }
        }
        b
    }
}

/// IQ1's `grid ± 1/8` as `8·grid ± 1` (the scale carries the 1/8).
fn put8_delta(q: &mut [i8], entry: u64, negative_delta: bool) {
    for (k, q) in q.iter_mut().take(8).enumerate() {
        let v = 8 * (byte(entry, k) as i8);
        *q = if negative_delta { v - 1 } else { v + 1 };
    }
}

/// The IQ1_S grid entry nearest to `x / dl - delta`.
fn iq1_entry(x: &[f32], dl: f32, delta: f32) -> usize {
    let m: Vec<f32> = x
        .iter()
        .map(|v| v / dl.max(f32::MIN_POSITIVE) - delta)
        .collect();
    nearest(&IQ1S_GRID, 8, &m, |e, k| byte(e, k) as i8 as f32)
}

impl Lattice for BlockIq1S {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = f16_to_f32(self.d);
        for ib in 0..8 {
            let h = u16_at(&self.qh, ib);
            let dl = d * (2 * ((h >> 12) & 7) + 1) as f32 / 8.0;
            scales[2 * ib] = dl;
            scales[2 * ib + 1] = dl;
            for l in 0..4 {
                let idx = self.qs[4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
                put8_delta(&mut q[32 * ib + 8 * l..], IQ1S_GRID[idx], h & 0x8000 != 0);
            }
        }
    }
    fn encode(x: &[f32]) -> Self {
        let d = amax(x) / 1.125 / 15.0;
        let dh = f16_to_f32(f32_to_f16(d));
        let mut b = BlockIq1S {
            d: f32_to_f16(d),
            qs: [0; 32],
            qh: [0; 16],
        };
        for ib in 0..8 {
            let xb = &x[32 * ib..32 * ib + 32];
            let s = if dh == 0.0 {
                0
            } else {
                ((amax(xb) / 1.125 / dh - 1.0) / 2.0)
                    .round()
                    .clamp(0.0, 7.0) as u16
            };
            let dl = dh * (2 * s + 1) as f32;
            let mean: f32 = xb.iter().sum::<f32>() / 32.0;
            let neg = mean < 0.0;
            let delta = if neg { -0.125 } else { 0.125 };
            let mut h = (s << 12) | if neg { 0x8000 } else { 0 };
            for l in 0..4 {
                let e = iq1_entry(&xb[8 * l..8 * l + 8], dl, delta);
                b.qs[4 * ib + l] = e as u8;
                h |= ((e >> 8) as u16 & 7) << (3 * l);
            }
            b.qh[2 * ib..2 * ib + 2].copy_from_slice(&h.to_le_bytes());
        }
        b
    }
}

impl BlockIq1M {
    /// The f16 super-scale, stored in the top nibbles of the four scale words.
    fn d(&self) -> f32 {
        let w = |i| u16_at(&self.scales, i);
        let bits = (w(0) >> 12) | ((w(1) >> 8) & 0x00F0) | ((w(2) >> 4) & 0x0F00) | (w(3) & 0xF000);
        f16_to_f32(bits.to_le_bytes())
    }
}

impl Lattice for BlockIq1M {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        let d = self.d();
        for (i, s) in scales.iter_mut().enumerate() {
            let w = u16_at(&self.scales, i / 4);
            *s = d * (2 * ((w >> (3 * (i % 4))) & 7) + 1) as f32 / 8.0;
        }
        for g in 0..32 {
            let nib = (self.qh[g / 2] >> (4 * (g % 2))) & 15;
            let idx = self.qs[g] as usize | (((nib & 7) as usize) << 8);
            put8_delta(&mut q[8 * g..], IQ1S_GRID[idx], nib & 8 != 0);
        }
    }
    fn encode(x: &[f32]) -> Self {
        let d = amax(x) / 1.125 / 15.0;
        let db = f32_to_f16(d);
        let dh = f16_to_f32(db);
        let dbits = u16::from_le_bytes(db);
        let mut b = BlockIq1M {
            qs: [0; 32],
            qh: [0; 16],
            scales: [0; 8],
        };
        let mut words = [0u16; 4];
        for h in 0..16 {
            let xh = &x[16 * h..16 * h + 16];
            let s = if dh == 0.0 {
                0
            } else {
                ((amax(xh) / 1.125 / dh - 1.0) / 2.0)
                    .round()
                    .clamp(0.0, 7.0) as u16
            };
            words[h / 4] |= s << (3 * (h % 4));
            let dl = dh * (2 * s + 1) as f32;
            for l in 0..2 {
                let g = 2 * h + l;
                let xg = &xh[8 * l..8 * l + 8];
                let neg = xg.iter().sum::<f32>() < 0.0;
                let e = iq1_entry(xg, dl, if neg { -0.125 } else { 0.125 });
                b.qs[g] = e as u8;
                let nib = ((e >> 8) as u8 & 7) | if neg { 8 } else { 0 };
                b.qh[g / 2] |= nib << (4 * (g % 2));
            }
        }
        for (i, w) in words.iter_mut().enumerate() {
            *w |= ((dbits >> (4 * i)) & 15) << 12;
            b.scales[2 * i..2 * i + 2].copy_from_slice(&w.to_le_bytes());
        }
        b
    }
}

/// A ternary value stored as a base-3 digit of a byte that holds `digit`-th of up to 5:
/// ggml's `((b · 3^digit) mod 256 · 3) >> 8`, minus one.
#[inline(always)]
fn trit(b: u8, digit: u32) -> i8 {
    let v = b.wrapping_mul(3u8.pow(digit));
    ((v as u16 * 3) >> 8) as i8 - 1
}

/// The byte holding `t` (five ternary digits in 0..3, most significant first) in TQ1_0's
/// fixed-point form: `ceil(value · 256 / 243)`.
fn pack_trits(t: &[u8]) -> u8 {
    let v = t.iter().fold(0u16, |a, &d| a * 3 + d as u16);
    let v = v * 3u16.pow(5 - t.len() as u32);
    ((v * 256).div_ceil(243)) as u8
}

impl Lattice for BlockTq1_0 {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        scales.fill(f16_to_f32(self.d));
        for n in 0..5 {
            for m in 0..32 {
                q[32 * n + m] = trit(self.qs[m], n as u32);
            }
            for m in 0..16 {
                q[160 + 16 * n + m] = trit(self.qs[32 + m], n as u32);
            }
        }
        for n in 0..4 {
            for m in 0..4 {
                q[240 + 4 * n + m] = trit(self.qh[m], n as u32);
            }
        }
    }
    fn encode(x: &[f32]) -> Self {
        let d = amax(x);
        let dh = f16_to_f32(f32_to_f16(d));
        let t: Vec<u8> = x
            .iter()
            .map(|v| {
                if dh == 0.0 {
                    1
                } else {
                    ((v / dh).round().clamp(-1.0, 1.0) + 1.0) as u8
                }
            })
            .collect();
        let mut b = BlockTq1_0 {
            qs: [0; 48],
            qh: [0; 4],
            d: f32_to_f16(d),
        };
        for m in 0..32 {
            let digits: Vec<u8> = (0..5).map(|n| t[32 * n + m]).collect();
            b.qs[m] = pack_trits(&digits);
        }
        for m in 0..16 {
            let digits: Vec<u8> = (0..5).map(|n| t[160 + 16 * n + m]).collect();
            b.qs[32 + m] = pack_trits(&digits);
        }
        for m in 0..4 {
            let digits: Vec<u8> = (0..4).map(|n| t[240 + 4 * n + m]).collect();
            b.qh[m] = pack_trits(&digits);
        }
        b
    }
}

impl Lattice for BlockTq2_0 {
    fn decode(&self, q: &mut [i8; 256], scales: &mut [f32; 16]) {
        scales.fill(f16_to_f32(self.d));
        for j in 0..2 {
            for l in 0..4 {
                for m in 0..32 {
                    q[128 * j + 32 * l + m] = ((self.qs[32 * j + m] >> (2 * l)) & 3) as i8 - 1;
                }
            }
        }
    }
    fn encode(x: &[f32]) -> Self {
        let d = amax(x);
        let dh = f16_to_f32(f32_to_f16(d));
        let mut b = BlockTq2_0 {
            qs: [0; 64],
            d: f32_to_f16(d),
        };
        for (i, v) in x.iter().enumerate() {
            let t = if dh == 0.0 {
                1
            } else {
                ((v / dh).round().clamp(-1.0, 1.0) + 1.0) as u8
            };
            let (j, l, m) = (i / 128, (i % 128) / 32, i % 32);
            b.qs[32 * j + m] |= t << (2 * l);
        }
        b
    }
}

fn dequantize_lattice<B: Lattice>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * 256);
    let (mut q, mut s) = ([0i8; 256], [0f32; 16]);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(256)) {
        b.decode(&mut q, &mut s);
        for (i, y) in y.iter_mut().enumerate() {
            *y = s[i / 16] * q[i] as f32;
        }
    }
}

/// The lane scheme of the module doc, with the lane update `step(acc, [s_lo·dx, s_hi·dx],
/// p)` given by the caller (scalar: eight `mul_add`s; the AVX2 kernel has its own loop).
fn dot_lattice<B: Lattice, const R: usize>(
    w: &[B],
    xs: [&[BlockQ8x4]; R],
    step: impl Fn(&mut [f32; 8], [f32; 2], [i32; 8]),
) -> [f32; R] {
    for x in &xs {
        assert!(x.len() >= 2 * w.len(), "activation row too short");
    }
    let mut acc = [[0f32; 8]; R];
    let (mut q, mut s) = ([0i8; 256], [0f32; 16]);
    for (b, wb) in w.iter().enumerate() {
        wb.decode(&mut q, &mut s);
        for ib in 0..8 {
            let k32 = 8 * b + ib;
            let qb = &q[QK * ib..QK * ib + QK];
            for (r, x) in xs.iter().enumerate() {
                let (u, k) = (&x[k32 / 4], k32 % 4);
                let p: [i32; 8] = std::array::from_fn(|j| {
                    (4 * j..4 * j + 4)
                        .map(|i| qb[i] as i32 * u.qs[k][i] as i32)
                        .sum()
                });
                step(&mut acc[r], [s[2 * ib] * u.d[k], s[2 * ib + 1] * u.d[k]], p);
            }
        }
    }
    acc.map(crate::legacy::fold_lanes)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`dot_lattice`] with the integer lanes from `maddubs` (sign trick) and one FMA per
    /// 32 values; the same operations in the same order as the scalar kernel.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot<B: Lattice, const R: usize>(w: &[B], xs: [&[BlockQ8x4]; R]) -> [f32; R] {
        for x in &xs {
            assert!(x.len() >= 2 * w.len(), "activation row too short");
        }
        let mut acc = [_mm256_setzero_ps(); R];
        let (mut q, mut s) = ([0i8; 256], [0f32; 16]);
        for (b, wb) in w.iter().enumerate() {
            wb.decode(&mut q, &mut s);
            for ib in 0..8 {
                let k32 = 8 * b + ib;
                // SAFETY: 32 readable bytes.
                let qv = unsafe { _mm256_loadu_si256(q[QK * ib..].as_ptr().cast()) };
                let a = _mm256_abs_epi8(qv);
                for r in 0..R {
                    let (u, k) = (&xs[r][k32 / 4], k32 % 4);
                    let p = crate::legacy_avx2::lanes_signed(qv, a, &u.qs[k]);
                    let lo = _mm_set1_ps(s[2 * ib] * u.d[k]);
                    let hi = _mm_set1_ps(s[2 * ib + 1] * u.d[k]);
                    let sc = _mm256_set_m128(hi, lo);
                    acc[r] = _mm256_fmadd_ps(sc, p, acc[r]);
                }
            }
        }
        acc.map(|v| {
            let mut lane = [0f32; 8];
            // SAFETY: 8 floats.
            unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), v) };
            crate::legacy::fold_lanes(lane)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_ggml() {
        for (size, ty) in [
            (std::mem::size_of::<BlockIq2Xxs>(), GgmlType::IQ2_XXS),
            (std::mem::size_of::<BlockIq2Xs>(), GgmlType::IQ2_XS),
            (std::mem::size_of::<BlockIq2S>(), GgmlType::IQ2_S),
            (std::mem::size_of::<BlockIq3Xxs>(), GgmlType::IQ3_XXS),
            (std::mem::size_of::<BlockIq3S>(), GgmlType::IQ3_S),
            (std::mem::size_of::<BlockIq1S>(), GgmlType::IQ1_S),
            (std::mem::size_of::<BlockIq1M>(), GgmlType::IQ1_M),
            (std::mem::size_of::<BlockTq1_0>(), GgmlType::TQ1_0),
            (std::mem::size_of::<BlockTq2_0>(), GgmlType::TQ2_0),
        ] {
            assert_eq!(size, ty.block_bytes(), "{}", ty.name());
        }
    }

    #[test]
    fn ksigns_have_even_parity() {
        for i in 0..128 {
            assert_eq!(ksign(i).count_ones() % 2, 0);
            assert_eq!(ksign(i) & 127, i as u8);
        }
    }

    #[test]
    fn ternary_packing_round_trips() {
        for digits in 0..243u16 {
            let t: Vec<u8> = (0..5)
                .rev()
                .map(|p| (digits / 3u16.pow(p) % 3) as u8)
                .collect();
            let b = pack_trits(&t);
            for (n, &want) in t.iter().enumerate() {
                assert_eq!(trit(b, n as u32), want as i8 - 1, "{t:?} digit {n}");
            }
        }
    }
}
