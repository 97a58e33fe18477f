//! The float weight formats (F32, F16, BF16, multiplied with f32 activations) and the f32
//! helpers attention uses (`dot_f32`, `dot_f16_f32`, `axpy_f16_f32`, `f32_to_f16_slice`).
//!
//! Unlike the integer formats, the AVX2 and scalar paths here are NOT bit-identical: the AVX2
//! kernel keeps two 8-lane FMA accumulators (values `16c..16c+8` in one, `16c+8..16c+16` in
//! the other), folds them at the end and adds the tail in order; the scalar reference sums in
//! order with separate multiply and add. They agree within float reassociation (the tests
//! bound the difference by `1e-5 * Σ|w x|`). Within one ISA each row's operation sequence is
//! fixed, so `matmul` stays batch invariant.

use crate::block::{Block, Isa, WeightBlock};
use crate::GgmlType;
use half::{bf16, f16};

/// An F32 weight as stored (little endian, alignment 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct F32Le(pub [u8; 4]);

/// An F16 weight as stored.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct F16Le(pub [u8; 2]);

/// A BF16 weight as stored (the top half of an f32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bf16Le(pub [u8; 2]);

/// A float element the kernels here can read: scalar value and 8-lane load.
pub trait FloatElem: Copy + Send + Sync + 'static {
    fn get(self) -> f32;
    fn put(v: f32) -> Self;
    /// Eight values starting at `p[0]` as f32 lanes.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available; `p.len() >= 8` is checked.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: &[Self]) -> std::arch::x86_64::__m256;
}

#[cfg(target_arch = "x86_64")]
mod load {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn f32x8(p: *const u8) -> __m256 {
        // SAFETY: callers pass a pointer to 32 readable bytes.
        unsafe { _mm256_loadu_ps(p.cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub fn f16x8(p: *const u8) -> __m256 {
        // SAFETY: callers pass a pointer to 16 readable bytes.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn bf16x8(p: *const u8) -> __m256 {
        // SAFETY: callers pass a pointer to 16 readable bytes.
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}

macro_rules! float_elem {
    ($T:ty, $get:expr, $put:expr, $load:ident, $size:expr) => {
        impl FloatElem for $T {
            #[inline(always)]
            fn get(self) -> f32 {
                ($get)(self)
            }
            #[inline(always)]
            fn put(v: f32) -> Self {
                ($put)(v)
            }
            #[cfg(target_arch = "x86_64")]
            #[inline]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn load8(p: &[Self]) -> std::arch::x86_64::__m256 {
                assert!(p.len() >= 8);
                const { assert!(std::mem::size_of::<$T>() == $size) };
                load::$load(p.as_ptr().cast())
            }
        }
    };
}

float_elem!(f32, |v: f32| v, |v: f32| v, f32x8, 4);
float_elem!(f16, |v: f16| v.to_f32(), f16::from_f32, f16x8, 2);
float_elem!(
    F32Le,
    |v: F32Le| f32::from_le_bytes(v.0),
    |v: f32| F32Le(v.to_le_bytes()),
    f32x8,
    4
);
float_elem!(
    F16Le,
    |v: F16Le| f16::from_bits(u16::from_le_bytes(v.0)).to_f32(),
    |v: f32| F16Le(f16::from_f32(v).to_bits().to_le_bytes()),
    f16x8,
    2
);
float_elem!(
    Bf16Le,
    |v: Bf16Le| bf16::from_bits(u16::from_le_bytes(v.0)).to_f32(),
    |v: f32| Bf16Le(bf16::from_f32(v).to_bits().to_le_bytes()),
    bf16x8,
    2
);

/// In-order reference dot.
fn dot_scalar<T: FloatElem>(a: &[T], b: &[f32]) -> f32 {
    assert!(b.len() >= a.len());
    let mut s = 0.0f32;
    for (x, &y) in a.iter().zip(b) {
        s += x.get() * y;
    }
    s
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::FloatElem;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn hsum_ps(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// `R` dots for each consecutive weight row of `cols` values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot_rows<T: FloatElem, const R: usize>(
        a: &[T],
        cols: usize,
        bs: [&[f32]; R],
        out: &mut [[f32; R]],
    ) {
        for (i, row) in a.chunks_exact(cols).enumerate() {
            out[i] = dot(row, bs);
        }
    }

    /// `R` dots of `a` with `bs[r]` (see the module doc for the order).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn dot<T: FloatElem, const R: usize>(a: &[T], bs: [&[f32]; R]) -> [f32; R] {
        for b in &bs {
            assert!(b.len() >= a.len(), "activation row too short");
        }
        let n16 = a.len() / 16 * 16;
        let mut acc0 = [_mm256_setzero_ps(); R];
        let mut acc1 = [_mm256_setzero_ps(); R];
        let mut i = 0;
        while i < n16 {
            // SAFETY: i + 16 <= a.len() <= b.len(); AVX2 is enabled here.
            let (w0, w1) = unsafe { (T::load8(&a[i..]), T::load8(&a[i + 8..])) };
            for r in 0..R {
                // SAFETY: as above.
                let (x0, x1) = unsafe {
                    (
                        _mm256_loadu_ps(bs[r].as_ptr().add(i)),
                        _mm256_loadu_ps(bs[r].as_ptr().add(i + 8)),
                    )
                };
                acc0[r] = _mm256_fmadd_ps(w0, x0, acc0[r]);
                acc1[r] = _mm256_fmadd_ps(w1, x1, acc1[r]);
            }
            i += 16;
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            let mut s = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));
            for j in n16..a.len() {
                s += a[j].get() * bs[r][j];
            }
            out[r] = s;
        }
        out
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn axpy_f16(acc: &mut [f32], alpha: f32, x: &[half::f16]) {
        assert_eq!(acc.len(), x.len());
        let n8 = x.len() / 8 * 8;
        let va = _mm256_set1_ps(alpha);
        let mut i = 0;
        while i < n8 {
            // SAFETY: i + 8 <= len for both slices.
            unsafe {
                let xv = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i).cast()));
                let p = acc.as_mut_ptr().add(i);
                _mm256_storeu_ps(p, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(p)));
            }
            i += 8;
        }
        for j in n8..x.len() {
            acc[j] += alpha * x[j].to_f32();
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn to_f16(src: &[f32], dst: &mut [half::f16]) {
        assert_eq!(src.len(), dst.len());
        let n8 = src.len() / 8 * 8;
        let mut i = 0;
        while i < n8 {
            // SAFETY: i + 8 <= len for both slices.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
            }
            i += 8;
        }
        for j in n8..src.len() {
            dst[j] = half::f16::from_f32(src[j]);
        }
    }
}

/// `R` dots of float weights `a` with f32 rows, on `isa`.
#[inline]
fn dot_rows_float<T: FloatElem, const R: usize>(isa: Isa, a: &[T], bs: [&[f32]; R]) -> [f32; R] {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::dot(a, bs) };
    }
    let _ = isa;
    bs.map(|b| dot_scalar(a, b))
}

macro_rules! float_weight_block {
    ($B:ty, $ty:expr) => {
        // SAFETY: repr(C) over a byte array: alignment 1, every bit pattern valid.
        unsafe impl Block for $B {
            const TYPE: GgmlType = $ty;
            const ELEMS: usize = 1;
        }
        impl WeightBlock for $B {
            type Act = f32;
            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                assert_eq!(blocks.len(), out.len());
                for (y, b) in out.iter_mut().zip(blocks) {
                    *y = b.get();
                }
            }
            fn quantize(src: &[f32], out: &mut [Self]) {
                assert_eq!(src.len(), out.len());
                for (b, &v) in out.iter_mut().zip(src) {
                    *b = <$B>::put(v);
                }
            }
            fn dot_scalar<const R: usize>(w: &[Self], xs: [&[f32]; R]) -> [f32; R] {
                xs.map(|x| dot_scalar(w, x))
            }
            unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[f32]; R]) -> [f32; R] {
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
            #[cfg(target_arch = "x86_64")]
            unsafe fn dot_avx2_rows<const R: usize>(
                w: &[Self],
                bpr: usize,
                xs: [&[f32]; R],
                out: &mut [[f32; R]],
            ) {
                // SAFETY: the caller guarantees AVX2, FMA and F16C.
                unsafe { avx2::dot_rows(w, bpr, xs, out) }
            }
        }
    };
}

float_weight_block!(F32Le, GgmlType::F32);
float_weight_block!(F16Le, GgmlType::F16);
float_weight_block!(Bf16Le, GgmlType::BF16);

/// `Σ a[i] * b[i]` (same length required) on `isa`.
pub fn dot_f32_isa(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    dot_rows_float::<f32, 1>(isa, a, [b])[0]
}

/// `Σ a[i] * b[i]` with f16 `a` (keys) on `isa`.
pub fn dot_f16_f32_isa(isa: Isa, a: &[f16], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    dot_rows_float::<f16, 1>(isa, a, [b])[0]
}

/// `acc[i] += alpha * x[i]` on `isa` (AVX2 fuses the multiply-add).
pub fn axpy_f16_f32_isa(isa: Isa, acc: &mut [f32], alpha: f32, x: &[f16]) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::axpy_f16(acc, alpha, x) };
    }
    let _ = isa;
    assert_eq!(acc.len(), x.len());
    for (a, v) in acc.iter_mut().zip(x) {
        *a += alpha * v.to_f32();
    }
}

/// f32 → f16, round to nearest even, on `isa` (bit-identical across ISAs for non-NaN input).
pub fn f32_to_f16_slice_isa(isa: Isa, src: &[f32], dst: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    if isa.is_avx2() {
        // SAFETY: an AVX2 `Isa` proves the CPU features.
        return unsafe { avx2::to_f16(src, dst) };
    }
    let _ = isa;
    assert_eq!(src.len(), dst.len());
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

/// `Σ a[i] * b[i]`.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_isa(Isa::best(), a, b)
}

/// `Σ a[i] * b[i]` with `a` stored f16 (attention keys).
pub fn dot_f16_f32(a: &[f16], b: &[f32]) -> f32 {
    dot_f16_f32_isa(Isa::best(), a, b)
}

/// `acc += alpha * x` with `x` stored f16 (attention values).
pub fn axpy_f16_f32(acc: &mut [f32], alpha: f32, x: &[f16]) {
    axpy_f16_f32_isa(Isa::best(), acc, alpha, x)
}

/// Converts `src` to f16 into `dst` (same length).
pub fn f32_to_f16_slice(src: &[f32], dst: &mut [f16]) {
    f32_to_f16_slice_isa(Isa::best(), src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 2001) as f32
                    / 1000.0
                    - 1.0
            })
            .collect()
    }

    fn close(a: f32, b: f32, scale: f32) -> bool {
        (a - b).abs() <= 1e-5 * scale + 1e-6
    }

    #[test]
    fn float_blocks_round_trip() {
        let x = [1.5f32, -2.25, 0.0, 65504.0, 1e-3];
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let mut y = [0.0f32; 5];
            match ty {
                GgmlType::F32 => {
                    let mut b = [F32Le::default(); 5];
                    F32Le::quantize(&x, &mut b);
                    assert_eq!(b[0].0, 1.5f32.to_le_bytes());
                    F32Le::dequantize(&b, &mut y);
                    assert_eq!(y, x);
                }
                GgmlType::F16 => {
                    let mut b = [F16Le::default(); 5];
                    F16Le::quantize(&x, &mut b);
                    assert_eq!(b[0].0, [0x00, 0x3E]); // 1.5 = 0x3E00
                    F16Le::dequantize(&b, &mut y);
                    assert_eq!(y[..4], x[..4]);
                }
                _ => {
                    let mut b = [Bf16Le::default(); 5];
                    Bf16Le::quantize(&x, &mut b);
                    assert_eq!(b[0].0, [0xC0, 0x3F]); // 1.5 = 0x3FC0
                    Bf16Le::dequantize(&b, &mut y);
                    assert_eq!(y[..3], x[..3]);
                }
            }
        }
    }

    #[test]
    fn helpers_match_scalar() {
        let Some(isa) = Isa::avx2() else { return };
        for n in [0, 1, 7, 8, 15, 16, 17, 64, 256, 259] {
            let a = data(n, 1);
            let b = data(n, 2);
            let scale: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            let s = dot_f32_isa(Isa::scalar(), &a, &b);
            assert!(close(dot_f32_isa(isa, &a, &b), s, scale), "dot_f32 n={n}");
            let ah: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
            let s = dot_f16_f32_isa(Isa::scalar(), &ah, &b);
            assert!(
                close(dot_f16_f32_isa(isa, &ah, &b), s, scale),
                "dot_f16 n={n}"
            );
            let mut h1 = vec![f16::ZERO; n];
            let mut h2 = vec![f16::ZERO; n];
            f32_to_f16_slice_isa(isa, &a, &mut h1);
            f32_to_f16_slice_isa(Isa::scalar(), &a, &mut h2);
            assert_eq!(h1, h2);
            let mut acc1 = b.clone();
            let mut acc2 = b.clone();
            axpy_f16_f32_isa(isa, &mut acc1, 0.75, &ah);
            axpy_f16_f32_isa(Isa::scalar(), &mut acc2, 0.75, &ah);
            for (x, y) in acc1.iter().zip(&acc2) {
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()));
            }
        }
    }

    #[test]
    fn dot_f32_known_value() {
        let a: Vec<f32> = (1..=20).map(|i| i as f32).collect();
        let b = vec![0.5f32; 20];
        assert_eq!(dot_f32(&a, &b), 105.0);
        assert_eq!(dot_f32_isa(Isa::scalar(), &a, &b), 105.0);
    }
}
