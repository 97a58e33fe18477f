//! Q4_K and Q6_K packs times ONE activation row on AVX-512 (decode): each pack's integer
//! sums in inline assembly, in program order.
//!
//! Why: at one row the body streams its packs from memory, and how fast it streams depends
//! on its instruction schedule more than on its work (docs/PERFORMANCE.md, fifteenth
//! session). The generic body (`simd::body`), as LLVM schedules it, streamed a 151 MB Q4_K
//! matrix at 24 GB/s on one Zen 4 thread against a plain read of 33–36; small changes to the
//! code around its loads moved that between 12 and 30. The same instructions in program
//! order (each vector loaded, masked and multiplied, then the next), as gcc emits them from
//! C or as written here, streamed at 27–30 in the same process on the same buffer (two
//! threads: 51–56 against 44–49, the plain read 59–63). LLVM keeps an `asm!` block's order,
//! so each pack's integer work is one block; the float step stays in intrinsics.
//!
//! The numbers are the generic body's: the same integer sums (exact in any order) and
//! [`k_accumulate_lanes`]'s float step, so every row's bits are unchanged (`tests/krows.rs`
//! compares one row on every spelling, this body on AVX-512, with scalar `matmul`).

use super::{Pack4, Pack6, GROUP};
use crate::kquants::BlockQ8K;
use crate::lanes::{k_accumulate_lanes, Lanes, Z512};
use std::arch::asm;
use std::arch::x86_64::{__m512, __m512i};

/// A pack type with a one-row body here.
pub(super) trait OneRow: Sized {
    /// The pack's integer sums against activation block `x`: `sumi` (every group's dot
    /// times its scale) and the second sum [`k_accumulate_lanes`] takes (Q4_K's mins term,
    /// Q6_K's offset term).
    ///
    /// # Safety
    /// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
    unsafe fn sums(&self, x: &BlockQ8K) -> (__m512i, __m512i);

    /// `d`, and `dmin` where the type has mins.
    ///
    /// # Safety
    /// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
    unsafe fn scales(&self) -> (__m512, Option<__m512>);
}

/// `packs` (a group's super-block columns) times the activation row `x`, into `out`.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn body<P: OneRow>(packs: &[P], x: &[BlockQ8K], out: &mut [f32; GROUP]) {
    assert!(x.len() >= packs.len(), "activation row too short");
    // SAFETY: the features, as the caller promised.
    unsafe {
        let mut acc = [Z512::zero_f()];
        for (j, p) in packs.iter().enumerate() {
            let (sumi, second) = p.sums(&x[j]);
            let (d, dmin) = p.scales();
            k_accumulate_lanes::<Z512, 1>(d, dmin, &[x], j, &[sumi], &[second], &mut acc);
        }
        Z512::store_f(out.as_mut_ptr(), acc[0]);
    }
}

/// Q4_K: sub-blocks `2t` (low nibbles) and `2t + 1` (high nibbles, summed in place as 16
/// times their value and shifted back once, as in `sub_blocks4`) from each vector of
/// `q[8t..8t + 8]`, then the mins against the 32-value sums (`mn` pairs, `vpdpwssd`).
impl OneRow for Pack4 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums(&self, x: &BlockQ8K) -> (__m512i, __m512i) {
        let sumi: __m512i;
        let summ: __m512i;
        // SAFETY: reads this pack and `x` only; the features, as the caller promised. Byte
        // offsets: `q` 0, `sc` 2048, `mn` 2176 in the pack (asserted below); `qs` 4,
        // `sums32` 292 in the block.
        unsafe {
            asm!(
                "vpxord {sumi}, {sumi}, {sumi}",
                ".irp t, 0, 1, 2, 3",
                "vpxord zmm26, zmm26, zmm26",
                "vpxord zmm27, zmm27, zmm27",
                ".irp c, 0, 1, 2, 3, 4, 5, 6, 7",
                "vmovdqu64 zmm16, zmmword ptr [{p} + 512*\\t + 64*\\c]",
                "vpandq zmm24, zmm16, {m4}",
                "vpdpbusd zmm26, zmm24, dword ptr [{x} + 4 + 64*\\t + 4*\\c]{{1to16}}",
                "vpandq zmm16, zmm16, {mh}",
                "vpdpbusd zmm27, zmm16, dword ptr [{x} + 36 + 64*\\t + 4*\\c]{{1to16}}",
                ".endr",
                "vpsrad zmm27, zmm27, 4",
                "vpmovzxbd zmm24, xmmword ptr [{p} + 2048 + 32*\\t]",
                "vpmovzxbd zmm25, xmmword ptr [{p} + 2064 + 32*\\t]",
                "vpmulld zmm26, zmm26, zmm24",
                "vpmulld zmm27, zmm27, zmm25",
                "vpaddd {sumi}, {sumi}, zmm26",
                "vpaddd {sumi}, {sumi}, zmm27",
                ".endr",
                "vpxord {summ}, {summ}, {summ}",
                ".irp k, 0, 1, 2, 3",
                "vpmovzxbw zmm24, ymmword ptr [{p} + 2176 + 32*\\k]",
                "vpbroadcastd zmm25, dword ptr [{x} + 292 + 4*\\k]",
                "vpdpwssd {summ}, zmm24, zmm25",
                ".endr",
                p = in(reg) self as *const Pack4,
                x = in(reg) x as *const BlockQ8K,
                m4 = in(zmm_reg) Z512::splat_i8(0x0F),
                mh = in(zmm_reg) Z512::splat_i8(0xF0u8 as i8),
                sumi = out(zmm_reg) sumi,
                summ = out(zmm_reg) summ,
                out("zmm16") _, out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        (sumi, summ)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn scales(&self) -> (__m512, Option<__m512>) {
        // SAFETY: the features, as the caller promised.
        unsafe {
            (
                Z512::load_h(self.d.as_ptr()),
                Some(Z512::load_h(self.dmin.as_ptr())),
            )
        }
    }
}

/// Q6_K: for each run of four chunks, slices 0–2 (one `and` each) and slice 3 (its three
/// 2-bit pieces, left as four times its codes and shifted back once), as in `slices6`;
/// then the offset term, two groups' scales to a lane against the block sums, times 32.
impl OneRow for Pack6 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sums(&self, x: &BlockQ8K) -> (__m512i, __m512i) {
        let sumi: __m512i;
        let offs: __m512i;
        // SAFETY: reads this pack and `x` only; the features, as the caller promised. Byte
        // offsets: `sc` 0, `d` 256, `q` 320 in the pack (asserted below), chunk `8h + c` at
        // 320 + 192 (8h + c); `qs` 4, `bsums` 260 in the block.
        unsafe {
            asm!(
                // The pack's first five lines (the scales and `d`) are read first, in order:
                // the sums read them only after the first run of codes, further on, and that
                // backward step cost a tenth of one thread's stream (26 against 29.5 GB/s,
                // Zen 4, in one process).
                ".irp l, 0, 1, 2, 3, 4",
                "vmovdqu64 zmm25, zmmword ptr [{p} + 64*\\l]",
                ".endr",
                "vpxord {sumi}, {sumi}, {sumi}",
                ".irp h, 0, 1",
                ".irp c0, 0, 4",
                "vpxord zmm20, zmm20, zmm20",
                "vpxord zmm21, zmm21, zmm21",
                "vpxord zmm22, zmm22, zmm22",
                "vpxord zmm23, zmm23, zmm23",
                ".irp c, 0, 1, 2, 3",
                "vmovdqu64 zmm16, zmmword ptr [{p} + 320 + 192*(8*\\h + \\c0 + \\c)]",
                "vmovdqu64 zmm17, zmmword ptr [{p} + 384 + 192*(8*\\h + \\c0 + \\c)]",
                "vmovdqu64 zmm18, zmmword ptr [{p} + 448 + 192*(8*\\h + \\c0 + \\c)]",
                "vpandq zmm24, zmm16, {m63}",
                "vpdpbusd zmm20, zmm24, dword ptr [{x} + 4 + 4*(32*\\h + \\c0 + \\c)]{{1to16}}",
                "vpandq zmm24, zmm17, {m63}",
                "vpdpbusd zmm21, zmm24, dword ptr [{x} + 36 + 4*(32*\\h + \\c0 + \\c)]{{1to16}}",
                "vpandq zmm24, zmm18, {m63}",
                "vpdpbusd zmm22, zmm24, dword ptr [{x} + 68 + 4*(32*\\h + \\c0 + \\c)]{{1to16}}",
                "vpandq zmm18, zmm18, {mc0}",
                "vpsrlw zmm17, zmm17, 2",
                "vpandq zmm17, zmm17, {m30}",
                "vpsrlw zmm16, zmm16, 4",
                "vpandq zmm16, zmm16, {m0c}",
                "vporq zmm18, zmm18, zmm17",
                "vporq zmm18, zmm18, zmm16",
                "vpdpbusd zmm23, zmm18, dword ptr [{x} + 100 + 4*(32*\\h + \\c0 + \\c)]{{1to16}}",
                ".endr",
                "vpsrad zmm23, zmm23, 2",
                ".irp b, 0, 1, 2, 3",
                "vpmovsxbd zmm24, xmmword ptr [{p} + 16*(8*\\h + 2*\\b + (\\c0 >> 2))]",
                "vpmulld zmm2\\b, zmm2\\b, zmm24",
                "vpaddd {sumi}, {sumi}, zmm2\\b",
                ".endr",
                ".endr",
                ".endr",
                "vpxord {offs}, {offs}, {offs}",
                ".irp k, 0, 1, 2, 3, 4, 5, 6, 7",
                "vpmovsxbd zmm24, xmmword ptr [{p} + 32*\\k]",
                "vpmovsxbd zmm25, xmmword ptr [{p} + 32*\\k + 16]",
                "vpandd zmm24, zmm24, {lo16}",
                "vpslld zmm25, zmm25, 16",
                "vpord zmm24, zmm24, zmm25",
                "vpbroadcastd zmm25, dword ptr [{x} + 260 + 4*\\k]",
                "vpdpwssd {offs}, zmm24, zmm25",
                ".endr",
                "vpslld {offs}, {offs}, 5",
                "vpsubd {sumi}, {sumi}, {offs}",
                p = in(reg) self as *const Pack6,
                x = in(reg) x as *const BlockQ8K,
                m63 = in(zmm_reg) Z512::splat_i8(0x3F),
                m0c = in(zmm_reg) Z512::splat_i8(0x0C),
                m30 = in(zmm_reg) Z512::splat_i8(0x30),
                mc0 = in(zmm_reg) Z512::splat_i8(0xC0u8 as i8),
                lo16 = in(zmm_reg) Z512::splat_i(0xFFFF),
                sumi = out(zmm_reg) sumi,
                offs = out(zmm_reg) offs,
                out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm20") _, out("zmm21") _,
                out("zmm22") _, out("zmm23") _, out("zmm24") _, out("zmm25") _,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        (sumi, offs)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn scales(&self) -> (__m512, Option<__m512>) {
        // SAFETY: the features, as the caller promised.
        unsafe { (Z512::load_h(self.d.as_ptr()), None) }
    }
}

// The byte offsets the assembly above reads at.
const _: () = {
    assert!(std::mem::offset_of!(Pack4, q) == 0);
    assert!(std::mem::offset_of!(Pack4, sc) == 2048);
    assert!(std::mem::offset_of!(Pack4, mn) == 2176);
    assert!(std::mem::offset_of!(Pack6, sc) == 0);
    assert!(std::mem::offset_of!(Pack6, d) == 256);
    assert!(std::mem::offset_of!(Pack6, q) == 320);
    assert!(std::mem::offset_of!(BlockQ8K, qs) == 4);
    assert!(std::mem::offset_of!(BlockQ8K, bsums) == 260);
    assert!(std::mem::offset_of!(BlockQ8K, sums32) == 292);
};
