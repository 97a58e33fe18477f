//! The 256-value "K" formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and [`BlockQ8K`], the activation
//! format they are multiplied with.
//!
//! Layouts are ggml's (`ggml-common.h`, `QK_K = 256`). Every format here decodes to the same
//! shape, [`Decoded`]: 256 small integers `q`, one integer scale per 16 values (formats with
//! one scale per 32 repeat it), for the formats with mins one integer min per 16 values, and
//! the f16 super-scales `d`/`dmin`. Then value = `(d*sc)*q - dmin*mn`.
//!
//! Summation order (shared by scalar and AVX2, which are therefore bit-identical): per
//! super-block the integer sums `sumi = Σ_g sc_g Σ_{i∈g} q_i x_i` and `summ = Σ_g mn_g bsum_g`
//! are exact; the row accumulator then takes one float step per super-block,
//! [`k_accumulate`]. The AVX2 kernels keep the integer part in vectors and reduce it to a
//! scalar once per super-block, which costs little next to 256 multiply-adds.

use crate::block::{
    amax, f16_to_f32, f32_to_f16, inv_or_zero, round_clamp, signed_max, WeightBlock,
};

/// Values per super-block.
pub const QK_K: usize = 256;

/// Q2_K: 16 groups of 16; 4-bit scale and min per group (low/high nibble of `scales`),
/// 2-bit quants. Value = d*sc*q - dmin*mn.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; 16],
    pub qs: [u8; 64],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// Q3_K: 16 groups of 16; signed 6-bit scales (stored +32, packed in 12 bytes), 3-bit
/// quants (2 low bits in `qs`, the third in `hmask`), value = d*sc*(q - 4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// Q4_K: 8 groups of 32; 6-bit scale and min per group packed in 12 bytes, 4-bit quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Q5_K: Q4_K plus a fifth bit per value in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

/// Q6_K: 16 groups of 16; i8 scales, 6-bit quants (4 low bits in `ql`, 2 high in `qh`),
/// value = d*sc*(q - 32).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: [u8; 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// Q8_K, ggml's activation format for the K-quants: f32 scale, 256 i8 quants, and the sum
/// of each 16 quants (which the formats with mins, and the offset formats, multiply by).
/// Quantization is symmetric in -127..=127.
///
/// In memory it also carries the sum of each 32 quants (`sums32`, beyond ggml's 292 bytes;
/// [`BlockQ8K::to_bytes`] writes ggml's layout): the formats with one min per 32 values
/// (Q4_K, Q5_K) dot their mins with these, two sub-blocks to an i16 pair, half the multiplies
/// of pairing them with `bsums` (`krows`, `kgemm`). Each is at most 32 · 127, exact in i16.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
    /// `bsums[2k] + bsums[2k + 1]`; as i32 words, the pairs `(sums32[2k], sums32[2k + 1])`.
    pub sums32: [i16; 8],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 308);
const _: () = assert!(std::mem::offset_of!(BlockQ8K, sums32).is_multiple_of(4));

/// `lo` and `hi` as the low and high halves of one i32 (its little-endian bytes are theirs).
#[inline(always)]
fn i16_pair(lo: i16, hi: i16) -> i32 {
    ((lo as u16 as u32) | ((hi as u16 as u32) << 16)) as i32
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; 256],
            bsums: [0; 16],
            sums32: [0; 8],
        }
    }
}

impl BlockQ8K {
    /// Quantizes up to 256 values (the rest is zero padding); the reference the AVX2
    /// quantizer matches bit for bit.
    pub fn from_f32(x: &[f32]) -> BlockQ8K {
        let mut b = BlockQ8K::default();
        let d = amax(x) / 127.0;
        let id = inv_or_zero(d);
        b.d = d;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = round_clamp(v * id, -127, 127) as i8;
        }
        for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = g.iter().map(|&q| q as i16).sum();
        }
        b.fill_sums32();
        b
    }

    /// `sums32` from `bsums` (both quantizers end with this).
    pub(crate) fn fill_sums32(&mut self) {
        for (s, pair) in self.sums32.iter_mut().zip(self.bsums.chunks_exact(2)) {
            *s = pair[0] + pair[1];
        }
    }

    /// Block sums `2k` and `2k + 1` as one i32 of two i16 halves (the `x` of an i16-pair
    /// dot: `madd`, `vpdpwssd`).
    #[inline(always)]
    pub(crate) fn bsums_pair(&self, k: usize) -> i32 {
        i16_pair(self.bsums[2 * k], self.bsums[2 * k + 1])
    }

    /// [`BlockQ8K::bsums_pair`] of the 32-value sums.
    #[inline(always)]
    pub(crate) fn sums32_pair(&self, k: usize) -> i32 {
        i16_pair(self.sums32[2 * k], self.sums32[2 * k + 1])
    }

    /// Q8_K as stored bytes (GGUF allows the type): decode one block.
    pub fn dequantize_bytes(bytes: &[u8], out: &mut [f32]) {
        assert_eq!(bytes.len(), 292);
        assert_eq!(out.len(), QK_K);
        let d = f32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        for (y, &q) in out.iter_mut().zip(&bytes[4..260]) {
            *y = d * (q as i8) as f32;
        }
    }

    /// The block's little-endian bytes (ggml layout).
    pub fn to_bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d.to_le_bytes());
        out.extend(self.qs.iter().map(|&q| q as u8));
        for s in self.bsums {
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
}

/// A K-quant super-block decoded to integers (see the module doc).
pub struct Decoded {
    pub q: [i8; QK_K],
    pub sc: [i32; 16],
    pub mn: [i32; 16],
    pub d: f32,
    pub dmin: f32,
}

/// What every K format provides; the scalar kernel and dequantizer are written once over it.
pub trait KQuant: WeightBlock<Act = BlockQ8K> {
    const HAS_MIN: bool;
    /// What [`Decoded::q`] is shifted by from the stored unsigned quant (Q3_K 4, Q6_K 32,
    /// the formats with mins 0): `q + Q_OFFSET` is never negative.
    const Q_OFFSET: i32;
    fn decode(&self) -> Decoded;
}

/// The one float step per super-block and row (both ISAs).
#[inline(always)]
pub fn k_accumulate<B: KQuant>(acc: f32, d: f32, dmin: f32, dx: f32, sumi: i32, summ: i32) -> f32 {
    if B::HAS_MIN {
        acc + ((d * dx) * sumi as f32 - (dmin * dx) * summ as f32)
    } else {
        acc + (d * dx) * sumi as f32
    }
}

pub(crate) fn dequant_k<B: KQuant>(blocks: &[B], out: &mut [f32]) {
    assert_eq!(out.len(), blocks.len() * QK_K);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let dec = b.decode();
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = dec.d * dec.sc[g] as f32;
            let ml = dec.dmin * dec.mn[g] as f32;
            for (v, &q) in yg.iter_mut().zip(&dec.q[16 * g..16 * g + 16]) {
                *v = if B::HAS_MIN {
                    dl * q as f32 - ml
                } else {
                    dl * q as f32
                };
            }
        }
    }
}

pub(crate) fn dot_k_scalar<B: KQuant, const R: usize>(w: &[B], xs: [&[BlockQ8K]; R]) -> [f32; R] {
    for x in &xs {
        assert!(x.len() >= w.len(), "activation row too short");
    }
    let mut acc = [0.0f32; R];
    for (i, wb) in w.iter().enumerate() {
        let dec = wb.decode();
        for r in 0..R {
            let x = &xs[r][i];
            let mut sumi = 0i32;
            let mut summ = 0i32;
            for g in 0..16 {
                let s: i32 = (16 * g..16 * g + 16)
                    .map(|j| dec.q[j] as i32 * x.qs[j] as i32)
                    .sum();
                sumi += dec.sc[g] * s;
                summ += dec.mn[g] * x.bsums[g] as i32;
            }
            acc[r] = k_accumulate::<B>(acc[r], dec.d, dec.dmin, x.d, sumi, summ);
        }
    }
    acc
}

/// ggml's 6-bit scale/min unpacking for Q4_K/Q5_K: 8 scales and 8 mins from 12 bytes.
#[inline]
pub fn unpack_scale_min_k4(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

pub(crate) fn pack_scale_min_k4(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    s
}

/// Q3_K's 16 scales (6 bits each, stored +32) from 12 bytes: byte k<8 holds the low nibbles
/// of scales k and k+8; byte 8+k holds the top two bits of scales k, k+4, k+8, k+12.
#[inline]
pub fn unpack_scales_q3k(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 { s[i] & 0x0F } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

fn pack_scales_q3k(l: &[u8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for i in 0..16 {
        if i < 8 {
            s[i] |= l[i] & 0x0F;
        } else {
            s[i - 8] |= (l[i] & 0x0F) << 4;
        }
        s[8 + i % 4] |= (l[i] >> 4) << (2 * (i / 4));
    }
    s
}

/// An asymmetric super-block fit: value ≈ (d*sc[g])*q - dmin*mn[g].
struct ScaleMinFit {
    d: [u8; 2],
    dmin: [u8; 2],
    sc: Vec<u8>,
    mn: Vec<u8>,
    q: [u8; QK_K],
}

/// Asymmetric fit with quantized scales and mins: groups of `group` values, quants in
/// 0..=qmax, scales and mins in 0..=lmax; `d`/`dmin` are rounded through f16 before the
/// quants are chosen.
fn fit_scale_min(x: &[f32], group: usize, qmax: i32, lmax: i32) -> ScaleMinFit {
    let ng = QK_K / group;
    let mut scale = vec![0.0f32; ng];
    let mut minv = vec![0.0f32; ng];
    for (g, xg) in x.chunks_exact(group).enumerate() {
        let lo = xg.iter().copied().fold(0.0f32, f32::min);
        let hi = xg.iter().copied().fold(0.0f32, f32::max);
        scale[g] = (hi - lo) / qmax as f32;
        minv[g] = -lo;
    }
    let smax = scale.iter().copied().fold(0.0f32, f32::max);
    let mmax = minv.iter().copied().fold(0.0f32, f32::max);
    let d = f32_to_f16(smax / lmax as f32);
    let dmin = f32_to_f16(mmax / lmax as f32);
    let (dr, dminr) = (f16_to_f32(d), f16_to_f32(dmin));
    let sc: Vec<u8> = scale
        .iter()
        .map(|&s| round_clamp(s * inv_or_zero(dr), 0, lmax) as u8)
        .collect();
    let mn: Vec<u8> = minv
        .iter()
        .map(|&m| round_clamp(m * inv_or_zero(dminr), 0, lmax) as u8)
        .collect();
    let mut q = [0u8; QK_K];
    for (g, (xg, qg)) in x
        .chunks_exact(group)
        .zip(q.chunks_exact_mut(group))
        .enumerate()
    {
        let eff_d = dr * sc[g] as f32;
        let eff_m = dminr * mn[g] as f32;
        let id = inv_or_zero(eff_d);
        for (q, &v) in qg.iter_mut().zip(xg) {
            *q = round_clamp((v + eff_m) * id, 0, qmax) as u8;
        }
    }
    ScaleMinFit { d, dmin, sc, mn, q }
}

/// Symmetric fit with signed quantized scales: groups of 16, quants in -qhalf..qhalf, scales
/// in -shalf..shalf. Returns (d, scale per group, quants).
fn fit_symmetric(x: &[f32], qhalf: i32, shalf: i32) -> ([u8; 2], [i8; 16], [i8; QK_K]) {
    let mut s = [0.0f32; 16];
    for (g, xg) in x.chunks_exact(16).enumerate() {
        s[g] = signed_max(xg) / -(qhalf as f32);
    }
    let d = f32_to_f16(signed_max(&s) / -(shalf as f32));
    let dr = f16_to_f32(d);
    let mut sc = [0i8; 16];
    let mut q = [0i8; QK_K];
    for g in 0..16 {
        sc[g] = round_clamp(s[g] * inv_or_zero(dr), -shalf, shalf - 1) as i8;
        let id = inv_or_zero(dr * sc[g] as f32);
        for j in 16 * g..16 * g + 16 {
            q[j] = round_clamp(x[j] * id, -qhalf, qhalf - 1) as i8;
        }
    }
    (d, sc, q)
}

/// Element `128n + 32j + l` of the 2-bit formats sits in bits `2j` of `qs[32n + l]`.
#[inline(always)]
fn two_bit(qs: &[u8; 64], e: usize) -> u8 {
    let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
    (qs[32 * n + l] >> (2 * j)) & 3
}

impl BlockQ2K {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let ScaleMinFit { d, dmin, sc, mn, q } = fit_scale_min(x, 16, 3, 15);
        let mut b = BlockQ2K {
            scales: [0; 16],
            qs: [0; 64],
            d,
            dmin,
        };
        for g in 0..16 {
            b.scales[g] = sc[g] | (mn[g] << 4);
        }
        for (e, &v) in q.iter().enumerate() {
            let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
            b.qs[32 * n + l] |= v << (2 * j);
        }
        b
    }
}
impl KQuant for BlockQ2K {
    const HAS_MIN: bool = true;
    const Q_OFFSET: i32 = 0;
    fn decode(&self) -> Decoded {
        let mut dec = Decoded {
            q: [0; QK_K],
            sc: [0; 16],
            mn: [0; 16],
            d: f16_to_f32(self.d),
            dmin: f16_to_f32(self.dmin),
        };
        for (e, q) in dec.q.iter_mut().enumerate() {
            *q = two_bit(&self.qs, e) as i8;
        }
        for g in 0..16 {
            dec.sc[g] = (self.scales[g] & 0x0F) as i32;
            dec.mn[g] = (self.scales[g] >> 4) as i32;
        }
        dec
    }
}

impl BlockQ3K {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, sc, q) = fit_symmetric(x, 4, 32);
        let mut b = BlockQ3K {
            hmask: [0; 32],
            qs: [0; 64],
            scales: [0; 12],
            d,
        };
        b.scales = pack_scales_q3k(&sc.map(|s| (s as i32 + 32) as u8));
        for (e, &v) in q.iter().enumerate() {
            let u = (v + 4) as u8;
            let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
            b.qs[32 * n + l] |= (u & 3) << (2 * j);
            b.hmask[l] |= (u >> 2) << (4 * n + j);
        }
        b
    }
}
impl KQuant for BlockQ3K {
    const HAS_MIN: bool = false;
    const Q_OFFSET: i32 = 4;
    fn decode(&self) -> Decoded {
        let mut dec = Decoded {
            q: [0; QK_K],
            sc: unpack_scales_q3k(&self.scales).map(|s| s as i32),
            mn: [0; 16],
            d: f16_to_f32(self.d),
            dmin: 0.0,
        };
        for (e, q) in dec.q.iter_mut().enumerate() {
            let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
            let high = (self.hmask[l] >> (4 * n + j)) & 1;
            *q = (two_bit(&self.qs, e) | (high << 2)) as i8 - 4;
        }
        dec
    }
}

/// Element `64j + l` is the low nibble of `qs[32j + l]`, element `64j + 32 + l` the high one.
#[inline(always)]
fn nibble_k(qs: &[u8; 128], e: usize) -> u8 {
    let (j, h, l) = (e / 64, (e % 64) / 32, e % 32);
    (qs[32 * j + l] >> (4 * h)) & 0x0F
}

fn pack_nibbles_k(q: &[u8; QK_K]) -> [u8; 128] {
    let mut qs = [0u8; 128];
    for (e, &v) in q.iter().enumerate() {
        let (j, h, l) = (e / 64, (e % 64) / 32, e % 32);
        qs[32 * j + l] |= (v & 0x0F) << (4 * h);
    }
    qs
}

fn decode_scale_min_k4(scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2]) -> Decoded {
    let (sc, mn) = unpack_scale_min_k4(scales);
    Decoded {
        q: [0; QK_K],
        sc: std::array::from_fn(|g| sc[g / 2] as i32),
        mn: std::array::from_fn(|g| mn[g / 2] as i32),
        d: f16_to_f32(d),
        dmin: f16_to_f32(dmin),
    }
}

impl BlockQ4K {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let ScaleMinFit { d, dmin, sc, mn, q } = fit_scale_min(x, 32, 15, 63);
        let scales = pack_scale_min_k4(&sc.try_into().expect("8"), &mn.try_into().expect("8"));
        BlockQ4K {
            d,
            dmin,
            scales,
            qs: pack_nibbles_k(&q),
        }
    }
}
impl KQuant for BlockQ4K {
    const HAS_MIN: bool = true;
    const Q_OFFSET: i32 = 0;
    fn decode(&self) -> Decoded {
        let mut dec = decode_scale_min_k4(&self.scales, self.d, self.dmin);
        for (e, q) in dec.q.iter_mut().enumerate() {
            *q = nibble_k(&self.qs, e) as i8;
        }
        dec
    }
}

impl BlockQ5K {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let ScaleMinFit { d, dmin, sc, mn, q } = fit_scale_min(x, 32, 31, 63);
        let scales = pack_scale_min_k4(&sc.try_into().expect("8"), &mn.try_into().expect("8"));
        let mut qh = [0u8; 32];
        for (e, &v) in q.iter().enumerate() {
            qh[e % 32] |= (v >> 4) << (e / 32);
        }
        BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs: pack_nibbles_k(&q),
        }
    }
}
impl KQuant for BlockQ5K {
    const HAS_MIN: bool = true;
    const Q_OFFSET: i32 = 0;
    fn decode(&self) -> Decoded {
        let mut dec = decode_scale_min_k4(&self.scales, self.d, self.dmin);
        for (e, q) in dec.q.iter_mut().enumerate() {
            // The fifth bit of element e is bit e/32 of qh[e % 32].
            let high = (self.qh[e % 32] >> (e / 32)) & 1;
            *q = (nibble_k(&self.qs, e) | (high << 4)) as i8;
        }
        dec
    }
}

/// Q6_K positions: element `128n + 32k + l` takes its low nibble from
/// `ql[64n + 32(k%2) + l]` (low half for k<2, high half for k>=2) and its two high bits from
/// bits `2k` of `qh[32n + l]`.
#[inline(always)]
fn q6_pos(e: usize) -> (usize, u32, usize, u32) {
    let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
    (
        64 * n + 32 * (k % 2) + l,
        4 * (k / 2) as u32,
        32 * n + l,
        2 * k as u32,
    )
}

impl BlockQ6K {
    pub(crate) fn from_f32(x: &[f32]) -> Self {
        let (d, scales, q) = fit_symmetric(x, 32, 128);
        let mut b = BlockQ6K {
            ql: [0; 128],
            qh: [0; 64],
            scales,
            d,
        };
        for (e, &v) in q.iter().enumerate() {
            let u = (v + 32) as u8;
            let (li, ls, hi, hs) = q6_pos(e);
            b.ql[li] |= (u & 0x0F) << ls;
            b.qh[hi] |= (u >> 4) << hs;
        }
        b
    }
}
impl KQuant for BlockQ6K {
    const HAS_MIN: bool = false;
    const Q_OFFSET: i32 = 32;
    fn decode(&self) -> Decoded {
        let mut dec = Decoded {
            q: [0; QK_K],
            sc: self.scales.map(|s| s as i32),
            mn: [0; 16],
            d: f16_to_f32(self.d),
            dmin: 0.0,
        };
        for (e, q) in dec.q.iter_mut().enumerate() {
            let (li, ls, hi, hs) = q6_pos(e);
            let u = ((self.ql[li] >> ls) & 0x0F) | (((self.qh[hi] >> hs) & 3) << 4);
            *q = u as i8 - 32;
        }
        dec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{vec_dot, Isa};
    use crate::GgmlType;

    fn h(v: f32) -> [u8; 2] {
        f32_to_f16(v)
    }

    fn deq<B: KQuant>(b: B) -> Vec<f32> {
        let mut y = vec![0.0; QK_K];
        B::dequantize(&[b], &mut y);
        y
    }

    #[test]
    fn sizes_match_ggml() {
        assert_eq!(
            std::mem::size_of::<BlockQ2K>(),
            GgmlType::Q2_K.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ3K>(),
            GgmlType::Q3_K.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ4K>(),
            GgmlType::Q4_K.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ5K>(),
            GgmlType::Q5_K.block_bytes()
        );
        assert_eq!(
            std::mem::size_of::<BlockQ6K>(),
            GgmlType::Q6_K.block_bytes()
        );
        // ggml's bytes, then `sums32`.
        assert_eq!(
            std::mem::size_of::<BlockQ8K>(),
            GgmlType::Q8_K.block_bytes() + 16
        );
    }

    #[test]
    fn q2k_known_block() {
        // Group g: scale 1 + g%4, min g/4... all quants 2 except value 128n+32j+l gets j.
        let mut scales = [0u8; 16];
        for (g, s) in scales.iter_mut().enumerate() {
            *s = (1 + (g % 4) as u8) | (((g / 4) as u8) << 4);
        }
        let mut qs = [0u8; 64];
        for (i, q) in qs.iter_mut().enumerate() {
            *q = if i < 32 { 0b11_10_01_00 } else { 0b00_01_10_11 };
        }
        let y = deq(BlockQ2K {
            scales,
            qs,
            d: h(0.5),
            dmin: h(0.25),
        });
        for (e, &v) in y.iter().enumerate() {
            let (n, j) = (e / 128, (e % 128) / 32);
            let q = if n == 0 { j } else { 3 - j } as f32;
            let g = e / 16;
            let want = 0.5 * (1 + g % 4) as f32 * q - 0.25 * (g / 4) as f32;
            assert_eq!(v, want, "value {e}");
        }
    }

    #[test]
    fn q3k_known_block() {
        // Scales l_i = 32 + i - 8 (signed -8..8), all 2-bit quants 3, hmask all set except bit 0.
        let l: [u8; 16] = std::array::from_fn(|i| (24 + i) as u8);
        let scales = pack_scales_q3k(&l);
        assert_eq!(
            unpack_scales_q3k(&scales),
            std::array::from_fn(|i| i as i8 - 8)
        );
        let y = deq(BlockQ3K {
            hmask: [0xFE; 32],
            qs: [0xFF; 64],
            scales,
            d: h(2.0),
        });
        for (e, &v) in y.iter().enumerate() {
            let (n, j) = (e / 128, (e % 128) / 32);
            let q = if 4 * n + j == 0 { 3 - 4 } else { 3 };
            assert_eq!(v, 2.0 * ((e / 16) as f32 - 8.0) * q as f32, "value {e}");
        }
    }

    #[test]
    fn q4k_scales_pack_round_trip() {
        let sc: [u8; 8] = [0, 1, 17, 33, 63, 40, 5, 62];
        let mn: [u8; 8] = [63, 2, 0, 31, 32, 16, 48, 1];
        assert_eq!(unpack_scale_min_k4(&pack_scale_min_k4(&sc, &mn)), (sc, mn));
    }

    #[test]
    fn q4k_known_block() {
        let sc: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 63];
        let mn: [u8; 8] = [0, 1, 0, 1, 0, 1, 0, 40];
        let scales = pack_scale_min_k4(&sc, &mn);
        let mut qs = [0u8; 128];
        for (i, q) in qs.iter_mut().enumerate() {
            *q = (i % 16) as u8 | (15 - (i % 16) as u8) << 4;
        }
        let y = deq(BlockQ4K {
            d: h(0.5),
            dmin: h(1.0),
            scales,
            qs,
        });
        for (e, &v) in y.iter().enumerate() {
            let (j, hi, l) = (e / 64, (e % 64) / 32, e % 32);
            let byte = qs[32 * j + l];
            let q = if hi == 1 { byte >> 4 } else { byte & 15 };
            let s = e / 32;
            assert_eq!(v, 0.5 * sc[s] as f32 * q as f32 - mn[s] as f32, "value {e}");
        }
    }

    #[test]
    fn q5k_known_block() {
        let sc = [2u8; 8];
        let mn = [1u8; 8];
        let b = BlockQ5K {
            d: h(1.0),
            dmin: h(0.5),
            scales: pack_scale_min_k4(&sc, &mn),
            qh: [0b1010_1010; 32], // fifth bit set for odd sub-blocks (e/32 odd)
            qs: [0x21; 128],
        };
        let y = deq(b);
        for (e, &v) in y.iter().enumerate() {
            let nib = if (e % 64) < 32 { 1 } else { 2 };
            let high = if (e / 32) % 2 == 1 { 16 } else { 0 };
            assert_eq!(v, 2.0 * (nib + high) as f32 - 0.5, "value {e}");
        }
    }

    #[test]
    fn q6k_known_block() {
        // All low nibbles 5, high bits 2 → u = 37, q = 5; scales = g - 8.
        let scales: [i8; 16] = std::array::from_fn(|g| g as i8 - 8);
        let y = deq(BlockQ6K {
            ql: [0x55; 128],
            qh: [0xAA; 64],
            scales,
            d: h(0.25),
        });
        for (e, &v) in y.iter().enumerate() {
            assert_eq!(v, 0.25 * scales[e / 16] as f32 * 5.0, "value {e}");
        }
    }

    #[test]
    fn q8k_bsums_and_bytes() {
        let x: Vec<f32> = (0..256).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let b = BlockQ8K::from_f32(&x);
        for g in 0..16 {
            let s: i32 = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
            assert_eq!(b.bsums[g] as i32, s);
        }
        for k in 0..8 {
            let s: i32 = b.qs[32 * k..32 * k + 32].iter().map(|&q| q as i32).sum();
            assert_eq!(b.sums32[k] as i32, s);
        }
        let mut bytes = Vec::new();
        b.to_bytes(&mut bytes);
        assert_eq!(bytes.len(), 292);
        let mut y = vec![0.0; 256];
        BlockQ8K::dequantize_bytes(&bytes, &mut y);
        for (a, b) in y.iter().zip(&x) {
            assert!((a - b).abs() <= 50.0 / 127.0 * 0.5 + 1e-5);
        }
    }

    #[test]
    fn q6k_dot_of_known_block() {
        // Weights: d=1, scale 1, q = 1 everywhere (u = 33: low nibble 1, high bits 2).
        let w = [BlockQ6K {
            ql: [0x11; 128],
            qh: [0xAA; 64],
            scales: [1; 16],
            d: h(1.0),
        }];
        let x = [BlockQ8K::from_f32(&[127.0; 256])];
        assert_eq!(vec_dot(Isa::scalar(), &w, &x), 256.0 * 127.0);
        if let Some(isa) = Isa::avx2() {
            assert_eq!(vec_dot(isa, &w, &x), 256.0 * 127.0);
        }
    }
}
