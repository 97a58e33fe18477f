//! What every block format shares: the byte-view trait, the weight/activation kernel traits,
//! the instruction-set token, and small conversion helpers.
//!
//! Shape: one trait, [`WeightBlock`], covers every weight format (as candle's `k_quants.rs`
//! does). Each implementation keeps its portable `dot_scalar` next to `dot_avx2`, and both
//! take `R` activation rows at once so that a weight block is decoded once and used `R`
//! times. Row `r`'s result depends only on `w` and `xs[r]`: the per-row operation sequence is
//! the same for every `R`, which is what makes `matmul` batch invariant.

use crate::GgmlType;
use std::sync::atomic::{AtomicU8, Ordering};

/// A `#[repr(C)]` block whose bytes are exactly GGUF's on-disk layout.
///
/// # Safety
/// Implementors must have alignment 1, no padding, and accept every bit pattern (all fields
/// are byte arrays), so that any byte slice holding whole blocks can be viewed as `&[Self]`.
pub unsafe trait Block: Copy + Send + Sync + 'static {
    /// The GGUF type this block stores.
    const TYPE: GgmlType;
    /// Values per block.
    const ELEMS: usize;
}

/// Views `bytes` (a whole number of blocks) as blocks. Panics if the length is not a multiple
/// of the block size.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes is not a whole number of {} blocks ({size} bytes each)",
        bytes.len(),
        B::TYPE.name()
    );
    // SAFETY: `Block` guarantees alignment 1, no padding and validity of every bit pattern;
    // the length is a whole number of blocks.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / size) }
}

/// Mutable twin of [`as_blocks`].
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes is not a whole number of {} blocks",
        bytes.len(),
        B::TYPE.name()
    );
    // SAFETY: as in `as_blocks`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / size) }
}

/// A little-endian IEEE half stored as bytes (alignment 1, so blocks can sit at any offset).
#[inline(always)]
pub fn f16_to_f32(b: [u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

/// Rounds to the nearest f16 (ties to even) and returns its little-endian bytes.
#[inline(always)]
pub fn f32_to_f16(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Which instruction set a kernel call may use, and how it spells the int8 step.
///
/// Five spellings, each a superset of the one before: `scalar` (portable), `avx2` (AVX2 +
/// FMA + F16C; `maddubs` + `madd` for four u8 × i8 products), `avxvnni` (the same with one
/// 256-bit `vpdpbusd`), `avx512` (AVX-512 F/BW/VL/VNNI: 512-bit kernels where they exist,
/// 16 weight rows per vector), `amx` (`avx512` plus AMX-INT8's tile multiply for the
/// repacked Q4_K matrices from 32 activation rows on, where the OS grants the tile state).
/// Holding an `Isa` of a kind is proof that the CPU has its features, so the dispatchers need no further check. Every spelling gives the same bits for
/// the quantized types (integer steps are exact; the float steps are the same operations in
/// the same order), which the kernel tests check on every spelling the machine has
/// ([`Isa::available`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Isa(IsaKind);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum IsaKind {
    Scalar,
    Avx2,
    AvxVnni,
    Avx512,
    Amx,
}

const KINDS: [IsaKind; 5] = [
    IsaKind::Scalar,
    IsaKind::Avx2,
    IsaKind::AvxVnni,
    IsaKind::Avx512,
    IsaKind::Amx,
];

/// Bit `k` set: the CPU has kind `KINDS[k]` (probed once; bit 7 = probed).
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// The process's choice ([`Isa::best`]): 0 = not decided yet, else 1 + index in `KINDS`.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

fn detected() -> u8 {
    let mut v = DETECTED.load(Ordering::Relaxed);
    if v == 0 {
        v = 0x80 | 1;
        if cpu_has_avx2() {
            v |= 2;
            if cpu_has_avx_vnni() {
                v |= 4;
            }
            if cpu_has_avx512() {
                v |= 8;
                if amx_granted() {
                    v |= 16;
                }
            }
        }
        DETECTED.store(v, Ordering::Relaxed);
    }
    v
}

fn have(kind: IsaKind) -> Option<Isa> {
    let k = KINDS.iter().position(|&x| x == kind).expect("a kind");
    (detected() & (1 << k) != 0).then_some(Isa(kind))
}

impl Isa {
    /// The portable reference kernels.
    pub const fn scalar() -> Isa {
        Isa(IsaKind::Scalar)
    }

    /// The AVX2+FMA+F16C kernels (the int8 step as `maddubs` + `madd`), if this CPU has them.
    pub fn avx2() -> Option<Isa> {
        have(IsaKind::Avx2)
    }

    /// The AVX2 kernels with AVX-VNNI's 256-bit `vpdpbusd`, if this CPU has it.
    pub fn avx_vnni() -> Option<Isa> {
        have(IsaKind::AvxVnni)
    }

    /// The AVX-512 kernels (F, BW, VL and VNNI), if this CPU has them.
    pub fn avx512() -> Option<Isa> {
        have(IsaKind::Avx512)
    }

    /// `avx512` plus AMX-INT8 tiles, if this CPU has them and the OS lets this process use
    /// them.
    pub fn amx() -> Option<Isa> {
        have(IsaKind::Amx)
    }

    /// Every spelling this CPU runs, scalar first (tests compare them all).
    pub fn available() -> Vec<Isa> {
        KINDS.iter().filter_map(|&k| have(k)).collect()
    }

    /// The fastest spelling this CPU runs.
    pub fn fastest() -> Isa {
        *Isa::available().last().expect("scalar is always there")
    }

    /// The kernels this process runs: the fastest the CPU has, or the one `FERROX_ISA`
    /// forces (decided once, then cached; an invalid `FERROX_ISA` falls back to the fastest
    /// here, and [`Isa::configured`] is what refuses it, at start-up).
    pub fn best() -> Isa {
        match CHOSEN.load(Ordering::Relaxed) {
            0 => {
                let isa = Isa::configured().unwrap_or_else(|_| Isa::fastest());
                let k = KINDS.iter().position(|&x| x == isa.0).expect("a kind");
                CHOSEN.store(1 + k as u8, Ordering::Relaxed);
                isa
            }
            c => Isa(KINDS[c as usize - 1]),
        }
    }

    /// What `FERROX_ISA` asks for (`scalar`, `avx2`, `avxvnni`, `avx512`, `amx`; unset or empty:
    /// the fastest this CPU runs), or why it cannot be had: an instruction set this CPU lacks,
    /// or a name this build has no kernels for. Commands check it at start-up and refuse to
    /// run on an error.
    pub fn configured() -> Result<Isa, String> {
        let want = match std::env::var("FERROX_ISA").ok().as_deref() {
            None | Some("") => return Ok(Isa::fastest()),
            Some(name) => name.to_string(),
        };
        let Some(&kind) = KINDS.iter().find(|k| Isa(**k).name() == want) else {
            return Err(format!(
                "FERROX_ISA={want}: this build has kernels for `scalar`, `avx2`, `avxvnni`, \
                 `avx512` and `amx` only"
            ));
        };
        have(kind).ok_or_else(|| {
            let needs = match kind {
                IsaKind::Scalar => "nothing",
                IsaKind::Avx2 => "AVX2, FMA and F16C",
                IsaKind::AvxVnni => "AVX2, FMA, F16C and AVX-VNNI",
                IsaKind::Avx512 => "AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI",
                IsaKind::Amx => {
                    "AVX2, FMA, F16C, AVX-512 F, BW, VL and VNNI and AMX-INT8 (or the OS did \
                     not grant its tiles)"
                }
            };
            format!("FERROX_ISA={want}: this CPU lacks {needs}")
        })
    }

    /// The instruction set's name, as `FERROX_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self.0 {
            IsaKind::Scalar => "scalar",
            IsaKind::Avx2 => "avx2",
            IsaKind::AvxVnni => "avxvnni",
            IsaKind::Avx512 => "avx512",
            IsaKind::Amx => "amx",
        }
    }

    /// True where the AVX2 kernels may run (every spelling but scalar).
    pub fn is_avx2(self) -> bool {
        self.0 >= IsaKind::Avx2
    }

    /// True where the 256-bit int8 kernels may spell their step as AVX-VNNI's `vpdpbusd`:
    /// the `avxvnni` spelling, and `avx512` on a CPU that also has AVX-VNNI.
    pub fn vnni256(self) -> bool {
        match self.0 {
            IsaKind::AvxVnni => true,
            IsaKind::Avx512 | IsaKind::Amx => detected() & 4 != 0,
            _ => false,
        }
    }

    /// True where the AVX-512 kernels may run (`avx512` and `amx`).
    pub fn is_avx512(self) -> bool {
        self.0 >= IsaKind::Avx512
    }

    /// True where the AMX-INT8 tile multiply may run (the `amx` spelling).
    pub fn has_amx(self) -> bool {
        self.0 == IsaKind::Amx
    }
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx_vnni() -> bool {
    is_x86_feature_detected!("avxvnni")
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Whether this CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25) and Linux
/// grants this process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`; the grant is the whole process's, so the pool's threads may use
/// tiles once any thread asked). Without the grant the first tile instruction faults. It is
/// asked for at detection, whatever `FERROX_ISA` then chooses; after it, Linux wants larger
/// signal alternate stacks from code that sets its own (Rust's threads size theirs from
/// `AT_MINSIGSTKSZ` already).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_granted() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // CPUID leaf 7 exists on every CPU with AVX-512 (checked before this is called).
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    if edx & (1 << 24) == 0 || edx & (1 << 25) == 0 {
        return false;
    }
    // SAFETY: a plain system call with integer arguments; it only changes this process's
    // permitted extended state.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_granted() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx2() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx_vnni() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512() -> bool {
    false
}

/// One row's activations after quantization, in the unit a weight format multiplies with:
/// `f32` for the float weights, [`crate::BlockQ8x4`] for the 32-value blocks,
/// [`crate::BlockQ8K`] for the K-quants.
pub trait ActBlock: Copy + Default + Send + Sync + 'static {
    /// Values one unit covers.
    const ELEMS: usize;
    /// Units needed for a row of `cols` values (the last one zero-padded).
    fn units_for(cols: usize) -> usize {
        cols.div_ceil(Self::ELEMS)
    }
    /// Quantizes one row on `isa`. `out.len() == units_for(src.len())`. Every ISA produces
    /// the same bits: the same IEEE operations, rounding to nearest with ties to even, NaN
    /// quantized to 0 (pinned by `tests/formats.rs::activation_quantizers_match_across_isas`).
    fn quantize_row_isa(isa: Isa, src: &[f32], out: &mut [Self]);

    /// [`ActBlock::quantize_row_isa`] on the best ISA.
    fn quantize_row(src: &[f32], out: &mut [Self]) {
        Self::quantize_row_isa(Isa::best(), src, out)
    }
}

impl ActBlock for f32 {
    const ELEMS: usize = 1;
    fn quantize_row_isa(_isa: Isa, src: &[f32], out: &mut [f32]) {
        out.copy_from_slice(src);
    }
}

/// A weight format: how to decode it, how to make it, and how to dot it with activations.
pub trait WeightBlock: Block {
    /// The activation unit this format's dot product consumes.
    type Act: ActBlock;

    /// Decodes `blocks` into `out` (`out.len() == blocks.len() * ELEMS`).
    fn dequantize(blocks: &[Self], out: &mut [f32]);

    /// Encodes `src` (`src.len() == out.len() * ELEMS`). Valid blocks that decode close to the
    /// input; rounding choices need not match ggml's quantizer.
    fn quantize(src: &[f32], out: &mut [Self]);

    /// The multi-row kernels take eight activation rows per call (from eight on) instead of
    /// four: worth it where decoding the weights costs much and is shared by the rows
    /// (Q6_K at n = 16: ~0.79 -> ~0.64 ns per 32 values and row; Q4_K got slower, 0.69 ->
    /// 0.75, its decode is cheap and eight rows' sums spill registers).
    const WIDE: bool = false;

    /// Portable reference: `R` dot products of the weight row `w` with activation rows `xs`.
    fn dot_scalar<const R: usize>(w: &[Self], xs: [&[Self::Act]; R]) -> [f32; R];

    /// AVX2 twin of [`WeightBlock::dot_scalar`]; falls back to it where no SIMD path exists.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn dot_avx2<const R: usize>(w: &[Self], xs: [&[Self::Act]; R]) -> [f32; R] {
        Self::dot_scalar(w, xs)
    }

    /// [`WeightBlock::dot_avx2`] over consecutive weight rows of `bpr` blocks each:
    /// `out[i]` = the dots of row `i`. Formats override it to keep the loop inside one
    /// `target_feature` function (no call per row); each row's result is unchanged.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn dot_avx2_rows<const R: usize>(
        w: &[Self],
        bpr: usize,
        xs: [&[Self::Act]; R],
        out: &mut [[f32; R]],
    ) {
        for (i, row) in w.chunks_exact(bpr).enumerate() {
            // SAFETY: forwarded from the caller.
            out[i] = unsafe { Self::dot_avx2(row, xs) };
        }
    }

    /// The AVX-512 twin of [`WeightBlock::dot_avx2_rows`] (same bits); formats without a
    /// 512-bit kernel run the AVX2 one.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI.
    unsafe fn dot_avx512_rows<const R: usize>(
        w: &[Self],
        bpr: usize,
        xs: [&[Self::Act]; R],
        out: &mut [[f32; R]],
    ) {
        // SAFETY: forwarded from the caller (AVX-512 hosts have AVX2).
        unsafe { Self::dot_avx2_rows(w, bpr, xs, out) }
    }
}

/// `R` dot products of weight row `w` with activation rows `xs`, on `isa`.
#[inline]
pub fn dot_rows<W: WeightBlock, const R: usize>(isa: Isa, w: &[W], xs: [&[W::Act]; R]) -> [f32; R] {
    if isa.is_avx2() {
        // SAFETY: an `Isa` with kind Avx2 exists only if the CPU has AVX2, FMA and F16C.
        unsafe { W::dot_avx2(w, xs) }
    } else {
        W::dot_scalar(w, xs)
    }
}

/// `R` dot products for each of the consecutive weight rows in `w` (`bpr` blocks each):
/// `out[i]` = the dots of row `i`. Same results as [`dot_rows`] row by row.
#[inline]
pub fn dot_rows_multi<W: WeightBlock, const R: usize>(
    isa: Isa,
    w: &[W],
    bpr: usize,
    xs: [&[W::Act]; R],
    out: &mut [[f32; R]],
) {
    assert!(
        bpr > 0 && w.len().is_multiple_of(bpr),
        "weights must be whole rows of {bpr} blocks"
    );
    if isa.is_avx512() {
        // SAFETY: an `Isa` with kind Avx512 exists only if the CPU has those features.
        unsafe { W::dot_avx512_rows(w, bpr, xs, out) }
    } else if isa.is_avx2() {
        // SAFETY: an `Isa` with kind Avx2 exists only if the CPU has AVX2, FMA and F16C.
        unsafe { W::dot_avx2_rows(w, bpr, xs, out) }
    } else {
        for (i, row) in w.chunks_exact(bpr).enumerate() {
            out[i] = W::dot_scalar(row, xs);
        }
    }
}

/// One dot product of weight row `w` with one activation row `x`, on `isa`.
pub fn vec_dot<W: WeightBlock>(isa: Isa, w: &[W], x: &[W::Act]) -> f32 {
    dot_rows::<W, 1>(isa, w, [x])[0]
}

/// The fold every lane-blocked kernel ends with: lanes 0..4 summed as `(l0 + l1) + (l2 + l3)`.
#[inline(always)]
pub fn fold4(l: [f32; 4]) -> f32 {
    (l[0] + l[1]) + (l[2] + l[3])
}

/// Largest absolute value (NaNs are ignored). Eight running maxima so the loop vectorizes;
/// max is exact, so the result does not depend on the order.
#[inline(always)]
pub fn amax(xs: &[f32]) -> f32 {
    let mut m = [0.0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (m, v) in m.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    for v in chunks.remainder() {
        m[0] = m[0].max(v.abs());
    }
    m.iter().fold(0.0f32, |a, &b| a.max(b))
}

/// The value with the largest magnitude, with its sign.
#[inline]
pub fn signed_max(xs: &[f32]) -> f32 {
    let mut best = 0.0f32;
    for &v in xs {
        if v.abs() > best.abs() {
            best = v;
        }
    }
    best
}

/// Reciprocal that maps 0 to 0 (an all-zero block quantizes to zeros, not NaN).
#[inline(always)]
pub fn inv_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Round to nearest, ties to even, then clamp into `lo..=hi`.
#[inline(always)]
pub fn round_clamp(v: f32, lo: i32, hi: i32) -> i32 {
    (v.round_ties_even() as i32).clamp(lo, hi)
}

/// Bytes ahead of the weights being multiplied that the AVX2 kernels prefetch. A decode step
/// streams every weight from memory once; the hardware prefetcher alone left one core at
/// ~3.4 GB/s on the Q8_0 output head, with this hint it reads ~6 GB/s (measured with
/// `examples/bench_matmul head`: 26.5 ms -> 14.8 ms on two threads).
pub const PREFETCH_DISTANCE: usize = 4096;

/// Hints the cache lines of the `span` bytes that lie [`PREFETCH_DISTANCE`] bytes after `p`.
/// Prefetching never faults, so the address may lie past the end of the weights.
#[inline(always)]
pub fn prefetch_ahead(p: *const u8, span: usize) {
    prefetch_span(p.wrapping_add(PREFETCH_DISTANCE), span);
}

/// Hints the cache lines of the `span` bytes from `p` (a no-op off x86-64). Never faults.
#[inline(always)]
pub fn prefetch_span(p: *const u8, span: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Lines touched by `span` bytes starting anywhere: one more than span / 64.
        let mut off = 0;
        while off <= span {
            // SAFETY: a prefetch is a hint; it never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast()) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, span);
}
