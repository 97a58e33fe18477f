//! [`KRows16`]: a Q4_K or Q6_K matrix repacked sixteen rows at a time, lane-major, still
//! 4 or 6 bits per value, for the matrices a decode step streams (every layer of a Q4_K_M
//! model and its head).
//!
//! Why: at one activation row the file's layout makes every super-block of every row a
//! separate dot product, reduced across a vector's lanes and scaled group by group: ~80
//! instructions per 256 values on AVX2, so a thread computes about as fast as memory
//! delivers and the two add up (decode read 25–30 GB/s where a plain read gives 35). Here a
//! super-block column of sixteen rows is stored so that one vector load holds four
//! consecutive values of each of the sixteen (or eight, on AVX2) rows in its own 32-bit lane:
//! one `vpdpbusd` (or `maddubs` + `madd`) against the four matching activation bytes,
//! broadcast, adds four products to every row at once, the group scale is one integer
//! multiply per lane, and there is no horizontal work at all. That is `kgemm`'s decoded order,
//! kept packed: Q4_K's nibbles two values to a byte, Q6_K's 6-bit codes four to three bytes,
//! the scales one byte each (Q4_K's 6-bit scales and mins unpacked: 2,368 bytes per sixteen
//! rows where the file has 2,304; Q6_K the file's 3,360, padded to 3,392 for alignment).
//!
//! At one activation row (decode) the kernel's cost is its unpacking, not its `vpdpbusd`s,
//! so where the sums are i32 the packs are laid out and read for the fewest operations a
//! value: Q4_K's high nibbles and Q6_K's fourth slice stay where they land (16 and 4 times
//! their value) and each sum is shifted back exactly once, and Q4_K's mins are stored as
//! the row pairs the mins' dot takes (one row at `avx512`, Zen 4: Q4_K 0.275 → 0.245 ns per
//! 32 values, Q6_K 0.44 → 0.41, and 0.774 → 0.678 on the AVX2 body; batches of eight and
//! more level).
//!
//! At several activation rows a pass over a group takes eight of them on AVX-512 (four on
//! AVX2, whose sixteen registers hold no more sums), and what each row costs beyond its
//! `vpdpbusd`s is kept small, because on AMD Zen 4 those and every other multiply share two
//! pipes: the mins (Q4_K) and the offset term (Q6_K) are i16-pair dots against the
//! activations' sums, one `vpdpwssd` per two sub-blocks (Q4_K, against the 32-value sums
//! [`BlockQ8K::sums32`]) or per two groups (Q6_K, the 16-value block sums), where a
//! broadcast, a multiply and an add per sub-block or group were (Q6_K at 128 rows: 0.26 →
//! 0.22 ns per 32 values; Q4_K's pairs of sub-blocks 0.192 → 0.180, `avx512`, Zen 4).
//!
//! Numbers are unchanged: per (row, super-block) the integers `sumi` and `summ` are exact
//! whatever order they are summed in, and each lane takes exactly
//! [`crate::kquants::k_accumulate`]'s float operations, super-block by super-block. So every
//! row's result is bit-identical to [`crate::matmul`] on the matrix this was repacked from,
//! at every batch size and on every instruction set (`tests/krows.rs`).
//!
//! The copy replaces the file's pages in RSS (the caller releases them as it repacks,
//! `repack`). It is made only where it runs: AVX2 or better, and rows a multiple of sixteen;
//! the engine makes it on the AVX-512 and plain AVX2 spellings, where it was measured to pay
//! (docs/PERFORMANCE.md), all of a model's matrices in one buffer on huge pages. The packs
//! stream from memory at decode, and each thread's packs are one contiguous run, which the
//! hardware prefetchers follow on their own: a software prefetch ahead of them at one
//! activation row (8 KB ahead, a line at a time, as this kernel had) made Zen 4 read Q6_K a
//! quarter slower and left Q4_K level, and touching the next pack's lines early halved the
//! stream (thirteenth session), so decode issues none. A prefill-sized call hints the next
//! sub-tile's packs into L2 instead, while it multiplies this one. At one row on AVX-512
//! each pack's integer work is `one_row`'s inline assembly, in program order: LLVM's schedule
//! of the same intrinsics streamed from memory a seventh slower (fifteenth session). On the
//! `amx` spelling a Q4_K call of 32 or more activation rows multiplies with AMX-INT8 tiles
//! instead (`amx`), with the same bits.

#[cfg(target_arch = "x86_64")]
mod amx;
mod gemm;
#[cfg(target_arch = "x86_64")]
mod one_row;
mod repack;

use repack::Line;
pub use repack::RepackPart;

use crate::block::Isa;
use crate::kquants::BlockQ8K;
use crate::pool::ThreadPool;
use crate::GgmlType;

/// Weight rows per group: one 32-bit lane each of a 512-bit vector.
const GROUP: usize = 16;

/// Super-block column `j` of a group of Q4_K rows. Byte `4i + k` of `q[8t + c]` is byte
/// `32t + 4c + k` of row `i`'s quants: its low nibble is value `64t + 4c + k` (sub-block
/// `2t`), its high nibble value `64t + 32 + 4c + k` (sub-block `2t + 1`), as in the file.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Pack4 {
    q: [[u8; 4 * GROUP]; 32],
    /// Sub-block `s`'s 6-bit scale, per row.
    sc: [[u8; GROUP]; 8],
    /// The mins of sub-blocks `2k` and `2k + 1` of row `i` at bytes `2i`, `2i + 1` of
    /// `mn[k]`: one zero-extending load gives each row's pair in its lane's i16 halves.
    mn: [[u8; 2 * GROUP]; 4],
    /// f16 bits, per row.
    d: [u16; GROUP],
    dmin: [u16; GROUP],
}

/// Super-block column `j` of a group of Q6_K rows, in the order the kernel reads it. Entry
/// `q[8h + c]` holds three vectors; byte `4i + k` of each holds row `i`'s 6-bit codes
/// (`q + 32`) of the four values `128h + 32b + 4c + k`, `b` = 0..4 (slices), as
/// `u_m | (u_3 >> 2m & 3) << 6` in vector `m`: slices 0–2 are one `and` each, and slice 3's
/// three 2-bit pieces land at bits 2–7 with two shifts (see `slices6`). The file's split into
/// nibbles and high bits would cost a shift or two for each slice.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Pack6 {
    /// 16-value group `g`'s scale, per row.
    sc: [[i8; GROUP]; 16],
    d: [u16; GROUP],
    _pad: [u8; 32],
    q: [[[u8; 4 * GROUP]; 3]; 16],
}

const _: () = assert!(size_of::<Pack4>() == 2368);
const _: () = assert!(size_of::<Pack6>() == 3392);

/// A matrix's packs, borrowed from the buffer they live in.
enum Packs<'a> {
    Q4(&'a [Pack4]),
    Q6(&'a [Pack6]),
}

/// A Q4_K or Q6_K matrix of `rows` (a multiple of sixteen) by `cols`, sixteen rows
/// interleaved. Entry `g * bpr + j` is super-block column `j` of rows `16g..16g + 16`.
pub struct KRows16 {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bpr: usize,
    /// The buffer holding this matrix's packs, lines `start..start + len` of it; the
    /// matrices repacked together ([`KRows16::repack_all`]) share one.
    buf: std::sync::Arc<Vec<Line>>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for KRows16 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KRows16({} {}x{})",
            self.ty().name(),
            self.rows,
            self.cols
        )
    }
}

impl KRows16 {
    /// Hints the packs of the sub-tile after rows `o0..o1` (the same number of rows) into
    /// L2: for a prefill-sized call, where each sub-tile is multiplied long enough for them
    /// to arrive. Past the matrix the hint is dropped (a prefetch never faults).
    fn prefetch_next(&self, o0: usize, o1: usize) {
        let per_group = self.len / (self.rows / GROUP);
        let next = self.buf[self.start..]
            .as_ptr()
            .wrapping_add(o1 / GROUP * per_group);
        crate::kgemm::prefetch_l2(next.cast(), (o1 - o0) / GROUP * per_group * 64);
    }

    /// The whole buffer this matrix's packs live in, shared with the matrices repacked
    /// with it: what a decode streams (`read_bandwidth_of` reads it to compare).
    pub fn buffer(&self) -> &[u8] {
        // SAFETY: a `Line` is 64 plain bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast(), self.buf.len() * 64) }
    }

    /// This matrix's packs.
    fn packs(&self) -> Packs<'_> {
        let lines = &self.buf[self.start..self.start + self.len];
        let ptr = lines.as_ptr();
        // SAFETY: these lines were written from whole packs of this matrix's type
        // (`repack_all`), a `Line` and a pack are both 64-aligned, and a pack's fields are
        // plain integers, valid for any bytes.
        unsafe {
            match self.ty {
                GgmlType::Q4_K => Packs::Q4(std::slice::from_raw_parts(
                    ptr.cast(),
                    self.len * 64 / size_of::<Pack4>(),
                )),
                _ => Packs::Q6(std::slice::from_raw_parts(
                    ptr.cast(),
                    self.len * 64 / size_of::<Pack6>(),
                )),
            }
        }
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `out[r * rows + o] = dot(W[o], x[r])`: the bits [`crate::matmul`] gives on the
    /// matrix this was repacked from.
    pub fn matmul(&self, pool: &ThreadPool, x: &[f32], n: usize, out: &mut [f32]) {
        self.matmul_isa(Isa::best(), pool, x, n, out)
    }

    /// [`KRows16::matmul`] on a chosen instruction set (AVX2 or better).
    pub fn matmul_isa(&self, isa: Isa, pool: &ThreadPool, x: &[f32], n: usize, out: &mut [f32]) {
        assert_eq!(x.len(), n * self.cols, "x must hold n rows of cols values");
        crate::acts::with_quantized(pool, self.ty(), x, n, self.cols, |acts| {
            self.matmul_acts_isa(isa, pool, acts, out)
        })
    }

    /// [`KRows16::matmul`] with activations already quantized (for Q4_K or Q6_K weights).
    pub fn matmul_acts(&self, pool: &ThreadPool, acts: &crate::Activations, out: &mut [f32]) {
        self.matmul_acts_isa(Isa::best(), pool, acts, out)
    }

    /// [`KRows16::matmul_acts`] on a chosen instruction set (AVX2 or better).
    pub fn matmul_acts_isa(
        &self,
        isa: Isa,
        pool: &ThreadPool,
        acts: &crate::Activations,
        out: &mut [f32],
    ) {
        KRows16::matmul_acts_many_isa(isa, pool, acts, &mut [(self, out)])
    }

    /// [`KRows16::matmul_acts`] for several matrices that read the same activations (Q/K/V,
    /// gate/up), in one parallel loop (`tiling::run_kernels`): the same bits as one call
    /// each, with one fork-join instead of one a matrix, and, for matrices repacked together
    /// in this order, one stream of packs per thread.
    pub fn matmul_acts_many(
        pool: &ThreadPool,
        acts: &crate::Activations,
        parts: &mut [(&KRows16, &mut [f32])],
    ) {
        KRows16::matmul_acts_many_isa(Isa::best(), pool, acts, parts)
    }

    /// [`KRows16::matmul_acts_many`] on a chosen instruction set (AVX2 or better).
    pub fn matmul_acts_many_isa(
        isa: Isa,
        pool: &ThreadPool,
        acts: &crate::Activations,
        parts: &mut [(&KRows16, &mut [f32])],
    ) {
        assert!(isa.is_avx2(), "KRows16 runs on AVX2 or better, not {isa:?}");
        let n = acts.n_rows();
        for (m, out) in parts.iter() {
            assert_eq!(acts.cols(), m.cols, "activations of another width");
            assert_eq!(out.len(), n * m.rows, "out must hold n rows of rows values");
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (units, upr) = acts.view::<BlockQ8K>();
            // On `amx`, the activations in the tile multiply's layout, once for the call.
            let tiles = parts
                .iter()
                .any(|(m, _)| amx::applies(m, isa, n))
                .then(|| amx::ActTiles::new(units, upr, n));
            let kernels: Vec<simd::Kernel> = parts
                .iter()
                .map(|(m, _)| simd::Kernel {
                    m,
                    isa,
                    tiles: tiles.as_ref(),
                })
                .collect();
            let mut jobs: Vec<(&simd::Kernel, &mut [f32])> = kernels
                .iter()
                .zip(parts.iter_mut())
                .map(|(k, (_, out))| (k, &mut **out))
                .collect();
            crate::tiling::run_kernels(pool, &mut jobs, units, upr, n);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = pool;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::one_row::OneRow;
    use super::{KRows16, Pack4, Pack6, Packs, GROUP};
    use crate::block::Isa;
    use crate::dot4::{Pairs, Vnni};
    use crate::kquants::{BlockQ8K, QK_K};
    use crate::lanes::{dot_pairs, k_accumulate_lanes, word, Lanes, Y256, Z512};
    use crate::tiling::{Job, RowKernel};
    use std::sync::atomic::{compiler_fence, Ordering};

    pub(super) struct Kernel<'a> {
        pub m: &'a KRows16,
        pub isa: Isa,
        /// The call's activations as tiles, where the `amx` path runs.
        pub tiles: Option<&'a super::amx::ActTiles>,
    }

    impl RowKernel for Kernel<'_> {
        type Act = BlockQ8K;

        fn rows(&self) -> usize {
            self.m.rows
        }

        fn row_bytes(&self) -> usize {
            match self.m.packs() {
                Packs::Q4(_) => size_of::<Pack4>() * self.m.bpr / GROUP,
                Packs::Q6(_) => size_of::<Pack6>() * self.m.bpr / GROUP,
            }
        }

        fn row_align(&self) -> usize {
            GROUP
        }

        /// On the `amx` path, three groups (`amx::GROUPS`: one column of their decoded packs
        /// fits L1). Otherwise twice the default for a prefill-sized call: its activation
        /// rows are read once per sub-tile (see `subtile`), so more groups per sub-tile read
        /// them fewer times
        /// (pp512, `avx512`, two interleaved pairs: 8B shape +2 %, +9 %; 4B +1 %, +5 %).
        /// Decode keeps the default, where the threads' ends balance on smaller sub-tiles
        /// (4B tg64 was 4 % slower with the larger ones).
        fn subtile_bytes(&self, n: usize) -> usize {
            // The decoded path (`gemm`) holds a sub-tile decoded, about 2.5 times its packs:
            // `kgemm`'s size, which it was tuned at.
            if super::gemm::applies(self.isa, n) {
                crate::tiling::SUBTILE_BYTES
            } else if super::amx::applies(self.m, self.isa, n) {
                super::amx::GROUPS * GROUP * self.row_bytes()
            } else if n > 16 {
                2 * crate::tiling::SUBTILE_BYTES
            } else {
                crate::tiling::SUBTILE_BYTES
            }
        }

        fn subtile(&self, job: &Job<BlockQ8K>, o0: usize, o1: usize) {
            assert!(self.isa.is_avx2(), "KRows16 needs AVX2");
            assert!(o0.is_multiple_of(GROUP) && o1.is_multiple_of(GROUP));
            if super::gemm::applies(self.isa, job.n()) {
                return super::gemm::subtile(self.m, self.isa, job, o0, o1);
            }
            let bpr = self.m.bpr;
            for r in 0..job.n() {
                assert!(job.row(r).len() >= bpr, "activation row too short");
            }
            // On `amx`, the tile multiply takes every whole tile of sixteen activation rows
            // (and hints the next sub-tile itself); the rows past them come below.
            let mut r = 0;
            if super::amx::applies(self.m, self.isa, job.n()) {
                let tiles = self.tiles.expect("the call made its activation tiles");
                // SAFETY: `applies` checked the `amx` spelling, whose `Isa` proves the CPU
                // and the OS's grant; the rows were checked above; this task owns o0..o1.
                r = unsafe { super::amx::subtile(self.m, job, tiles, o0, o1) };
            } else if job.n() > 16 {
                // A prefill-sized call multiplies each sub-tile long enough for the next
                // one's packs to arrive in L2 meanwhile (`prefetch_next`); decode hints
                // nothing.
                self.m.prefetch_next(o0, o1);
            }
            // Activation rows outer, groups inner: each row's blocks are read from memory (or
            // L3) once per sub-tile rather than once per group (a 512-row step's activations
            // outgrow L2), and the sub-tile's weights stay in L2. Rows per pass: eight where
            // 32 registers hold their sums (AVX-512), four in AVX2's sixteen.
            let packs = self.m.packs();
            let max_r = if self.isa.is_avx512() { 8 } else { 4 };
            while r < job.n() {
                let take = match (job.n() - r).min(max_r) {
                    4..=7 => 4,
                    t => t,
                };
                for g in o0 / GROUP..o1 / GROUP {
                    match take {
                        1 => self.group::<1>(&packs, job, r, g),
                        2 => self.group::<2>(&packs, job, r, g),
                        3 => self.group::<3>(&packs, job, r, g),
                        4 => self.group::<4>(&packs, job, r, g),
                        _ => self.group::<8>(&packs, job, r, g),
                    }
                }
                r += take;
            }
        }
    }

    impl Kernel<'_> {
        /// Activation rows `r..r + R` times rows `16g..16g + 16`.
        #[inline(always)]
        fn group<const R: usize>(&self, packs: &Packs, job: &Job<BlockQ8K>, r: usize, g: usize) {
            let xs: [&[BlockQ8K]; R] = std::array::from_fn(|i| job.row(r + i));
            let mut out = [[0.0f32; GROUP]; R];
            let bpr = self.m.bpr;
            let isa = self.isa;
            // SAFETY: the `Isa` proves the features of the entry chosen; every activation row
            // covers the group's `bpr` super-blocks (checked in `subtile`).
            unsafe {
                match packs {
                    Packs::Q4(v) => run(isa, &v[g * bpr..(g + 1) * bpr], &xs, &mut out),
                    Packs::Q6(v) => run(isa, &v[g * bpr..(g + 1) * bpr], &xs, &mut out),
                }
            }
            for (i, o) in out.iter().enumerate() {
                // SAFETY: rows `16g..16g + 16` lie in this task's sub-tile.
                unsafe { job.put_run(r + i, g * GROUP, o) };
            }
        }
    }

    /// The entry for `isa`'s spelling.
    ///
    /// # Safety
    /// `isa` is one this CPU runs, AVX2 or better.
    #[inline(always)]
    unsafe fn run<P: Step, const R: usize>(
        isa: Isa,
        p: &[P],
        xs: &[&[BlockQ8K]; R],
        out: &mut [[f32; GROUP]; R],
    ) {
        // SAFETY: the `Isa` proves the features of the entry chosen.
        unsafe {
            if isa.is_avx512() {
                body_avx512(p, xs, out)
            } else if isa.vnni256() {
                body_vnni(p, xs, out)
            } else {
                body_avx2(p, xs, out)
            }
        }
    }

    /// One super-block column of a group, for lanes `lane0..lane0 + L::N`: its integer sums
    /// and the float step into `acc` (one vector per activation row). At one row on AVX-512
    /// the pack's [`OneRow`] body runs instead.
    trait Step: OneRow {
        /// # Safety
        /// The features of `L`; `lane0 + L::N <= GROUP`; every row of `xs` covers `j`.
        unsafe fn step<L: Lanes, const R: usize>(
            &self,
            lane0: usize,
            xs: &[&[BlockQ8K]; R],
            j: usize,
            acc: &mut [L::F; R],
        );
    }

    impl Step for Pack4 {
        #[inline(always)]
        unsafe fn step<L: Lanes, const R: usize>(
            &self,
            lane0: usize,
            xs: &[&[BlockQ8K]; R],
            j: usize,
            acc: &mut [L::F; R],
        ) {
            let p = self;
            assert!(L::pair_chunks(15) >= 8, "a sub-block's sums fit");
            // SAFETY (every intrinsic below): the features of `L`, as the caller promised;
            // every pointer is into an array of GROUP lanes at `lane0 + L::N <= GROUP`.
            unsafe {
                let m4 = L::splat_i8(0x0F);
                let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][j]);
                let mut sumi = [L::zero_i(); R];
                for t in 0..4 {
                    // Sub-blocks 2t (low nibbles) and 2t + 1 (high) from one pass over their
                    // vectors; past four rows, one after the other (the vectors loaded twice,
                    // from L1), so that eight rows' sums fit in registers beside `sumi`, `acc`.
                    if R <= 4 {
                        sub_blocks4::<L, R, 0, 2>(p, lane0, &x, t, m4, &mut sumi);
                    } else {
                        sub_blocks4::<L, R, 0, 1>(p, lane0, &x, t, m4, &mut sumi);
                        sub_blocks4::<L, R, 1, 1>(p, lane0, &x, t, m4, &mut sumi);
                    }
                }
                // The mins against the activations' 32-value sums, two sub-blocks to a lane:
                // mins 2k and 2k + 1 as the i16 halves meet sums 2k and 2k + 1.
                let mut summ = [L::zero_i(); R];
                for k in 0..4 {
                    let mn2 = L::load_u8_pairs(p.mn[k].as_ptr().add(2 * lane0));
                    dot_pairs::<L, R>(&mut summ, mn2, xs, j, |x| x.sums32_pair(k));
                }
                let d = L::load_h(p.d.as_ptr().add(lane0));
                let dmin = L::load_h(p.dmin.as_ptr().add(lane0));
                k_accumulate_lanes::<L, R>(d, Some(dmin), xs, j, &sumi, &summ, acc);
            }
        }
    }

    /// Sub-blocks `2t + H0 .. 2t + H0 + NH` of a Q4_K pack (`2t`: the low nibbles, `2t + 1`:
    /// the high ones) times rows `x`, scaled into `sumi` in that order.
    ///
    /// # Safety
    /// The features of `L`; `lane0 + L::N <= GROUP`; `H0 + NH <= 2`.
    #[inline(always)]
    unsafe fn sub_blocks4<L: Lanes, const R: usize, const H0: usize, const NH: usize>(
        p: &Pack4,
        lane0: usize,
        x: &[&BlockQ8K; R],
        t: usize,
        m4: L::I,
        sumi: &mut [L::I; R],
    ) {
        // SAFETY: as the caller promised; the pointers are into arrays of GROUP lanes.
        unsafe {
            // Where the sums are i32 (`vpdpbusd`), the high nibbles stay where they are, as 16
            // times their value: one `and` a chunk instead of a shift and an `and`, and one
            // exact shift of the sub-block's sum at the end (every product is a multiple of
            // 16). `maddubs`' i16 pairs would overflow at 240.
            let in_place = L::pair_chunks(0xF0) >= 8;
            let m4h = L::splat_i8(0xF0u8 as i8);
            let mut dot = [[L::zero_i(); R]; NH];
            for c in 0..8 {
                let q = p.q[8 * t + c].as_ptr();
                let v = L::load_i(q.add(4 * lane0).cast());
                for (i, dot) in dot.iter_mut().enumerate() {
                    let high = H0 + i == 1;
                    let w = match (high, in_place) {
                        (false, _) => L::and(v, m4),
                        (true, true) => L::and(v, m4h),
                        (true, false) => L::and(L::srl16::<4>(v), m4),
                    };
                    let k = 16 * t + 8 * usize::from(high) + c;
                    for r in 0..R {
                        dot[r] = L::dot_s(dot[r], w, word(&x[r].qs, k));
                    }
                }
            }
            for (i, dot) in dot.iter().enumerate() {
                let high = H0 + i == 1;
                let sc = L::load_u8(p.sc[2 * t + H0 + i].as_ptr().add(lane0));
                for r in 0..R {
                    let d = if high && in_place {
                        L::sra32::<4>(dot[r])
                    } else {
                        dot[r]
                    };
                    sumi[r] = L::scale_s(sumi[r], d, sc);
                }
            }
        }
    }

    /// Q6_K. The stored quants are `u = q + 32`; the offset comes back out through the
    /// activations' block sums: `Σ_g sc_g Σ q x = Σ_g sc_g Σ u x − 32 Σ_g sc_g·bsum_g`.
    impl Step for Pack6 {
        #[inline(always)]
        unsafe fn step<L: Lanes, const R: usize>(
            &self,
            lane0: usize,
            xs: &[&[BlockQ8K]; R],
            j: usize,
            acc: &mut [L::F; R],
        ) {
            let p = self;
            // Chunks summed before each scale step: a group's four, or two where the sums
            // are i16 pairs.
            let run = L::pair_chunks(63).min(4);
            assert!(run == 2 || run == 4, "a run of {run} chunks");
            // SAFETY (every intrinsic below): the features of `L`, as the caller promised;
            // every pointer is into an array of GROUP lanes at `lane0 + L::N <= GROUP`.
            unsafe {
                let x: [&BlockQ8K; R] = std::array::from_fn(|r| &xs[r][j]);
                let mut sumi = [L::zero_i(); R];
                for h in 0..2 {
                    // All four value slices of each chunk from one load of its vectors; past
                    // four rows, two slices at a time (the vectors loaded again from L1), so
                    // that eight rows' sums fit in registers (one slice at a time spilled
                    // and was 4 % slower: 0.228 against 0.218 ns, `avx512`, Zen 4).
                    if R <= 4 {
                        slices6::<L, R, 0, 4>(p, lane0, &x, h, run, &mut sumi);
                    } else {
                        slices6::<L, R, 0, 2>(p, lane0, &x, h, run, &mut sumi);
                        slices6::<L, R, 2, 2>(p, lane0, &x, h, run, &mut sumi);
                    }
                }
                // The offset term, two groups to a lane: scales 2k and 2k + 1 as the i16
                // halves, against block sums 2k and 2k + 1; times 32 at the end.
                let lo16 = L::splat_i(0xFFFF);
                let mut offs = [L::zero_i(); R];
                for k in 0..8 {
                    let s0 = L::load_i8(p.sc[2 * k].as_ptr().add(lane0));
                    let s1 = L::load_i8(p.sc[2 * k + 1].as_ptr().add(lane0));
                    let sc2 = L::or(L::and(s0, lo16), L::sll32::<16>(s1));
                    dot_pairs::<L, R>(&mut offs, sc2, xs, j, |x| x.bsums_pair(k));
                }
                for r in 0..R {
                    offs[r] = L::sll32::<5>(offs[r]);
                    sumi[r] = L::sub_i(sumi[r], offs[r]);
                }
                let d = L::load_h(p.d.as_ptr().add(lane0));
                k_accumulate_lanes::<L, R>(d, None, xs, j, &sumi, &offs, acc);
            }
        }
    }

    /// Value slices `B0 .. B0 + NB` (slice b: values `128h + 32b ..` of each chunk) of half
    /// `h` of a Q6_K pack times rows `x`, a run of `run` chunks per scale step, scaled into
    /// `sumi`.
    ///
    /// # Safety
    /// The features of `L`; `lane0 + L::N <= GROUP`; `B0 + NB <= 4`.
    #[inline(always)]
    unsafe fn slices6<L: Lanes, const R: usize, const B0: usize, const NB: usize>(
        p: &Pack6,
        lane0: usize,
        x: &[&BlockQ8K; R],
        h: usize,
        run: usize,
        sumi: &mut [L::I; R],
    ) {
        // Where the sums are i32 (`vpdpbusd`), slice 3 stays as four times its codes (its
        // pieces at bits 2–7, as they land), and each run's sum is shifted back exactly
        // (every product is a multiple of 4); `maddubs`' i16 pairs would overflow at 252.
        let in_place = L::pair_chunks(252) >= run;
        // SAFETY: as the caller promised; the pointers are into arrays of GROUP lanes.
        unsafe {
            let m63 = L::splat_i8(0x3F);
            let (m0c, m30, mc0) = (
                L::splat_i8(0x0C),
                L::splat_i8(0x30),
                L::splat_i8(0xC0u8 as i8),
            );
            for c0 in (0..8).step_by(run) {
                // Values 128h + 32b + 4·c0 .. + 4·run: in group 8h + 2b + c0 / 4.
                let mut s = [[L::zero_i(); R]; NB];
                for c in c0..c0 + run {
                    let t = &p.q[8 * h + c];
                    let at = |m: usize| L::load_i(t[m].as_ptr().add(4 * lane0).cast());
                    for (i, s) in s.iter_mut().enumerate() {
                        let u = match B0 + i {
                            b @ 0..=2 => L::and(at(b), m63),
                            _ => {
                                let u4 = L::or(
                                    L::or(L::and(at(2), mc0), L::and(L::srl16::<2>(at(1)), m30)),
                                    L::and(L::srl16::<4>(at(0)), m0c),
                                );
                                if in_place {
                                    u4
                                } else {
                                    L::and(L::srl16::<2>(u4), m63)
                                }
                            }
                        };
                        for r in 0..R {
                            let k = 32 * h + 8 * (B0 + i) + c;
                            s[r] = L::dot_s(s[r], u, word(&x[r].qs, k));
                        }
                    }
                    // Each chunk's loads stay beside their use. Without this fence LLVM
                    // hoisted the next chunks' loads above this one's work and spilled two
                    // of them to the stack: as fast from L2, but one thread streamed a 140 MB
                    // matrix at 16 against 25 GB/s (`avx512`, Zen 4, fourteenth session;
                    // one row on AVX-512 now runs `one_row` instead). At one row on `avx2` it
                    // still pays: 23.9–24.9 against 22.3–23.0 GB/s (fifteenth session).
                    // Measured, not derived: it orders memory accesses in the compiler only,
                    // and costs no instruction.
                    compiler_fence(Ordering::SeqCst);
                }
                for (i, s) in s.iter().enumerate() {
                    let g = 8 * h + 2 * (B0 + i) + c0 / 4;
                    let sc = L::load_i8(p.sc[g].as_ptr().add(lane0));
                    for r in 0..R {
                        let s = if B0 + i == 3 && in_place {
                            L::sra32::<2>(s[r])
                        } else {
                            s[r]
                        };
                        sumi[r] = L::scale_s(sumi[r], s, sc);
                    }
                }
            }
        }
    }

    /// A group's packs times `R` activation rows, into `out`. Each pack is read once, all of
    /// its lanes while it is in L1: on AVX2 its two halves of eight rows one after the other
    /// (two passes over the group, one half each, read the group twice).
    #[inline(always)]
    unsafe fn body<L: Lanes, P: Step, const R: usize>(
        packs: &[P],
        xs: &[&[BlockQ8K]; R],
        out: &mut [[f32; GROUP]; R],
    ) {
        let halves = GROUP / L::N;
        // SAFETY: the features of `L`, as the caller promised; `half * L::N + L::N <= GROUP`.
        unsafe {
            let mut acc = [[L::zero_f(); R]; 2];
            for (j, p) in packs.iter().enumerate() {
                for (half, a) in acc.iter_mut().enumerate().take(halves) {
                    p.step::<L, R>(half * L::N, xs, j, a);
                }
            }
            for (half, a) in acc.iter().enumerate().take(halves) {
                for r in 0..R {
                    L::store_f(out[r].as_mut_ptr().add(half * L::N), a[r]);
                }
            }
        }
    }

    /// # Safety
    /// AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI must be available.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn body_avx512<P: Step, const R: usize>(
        p: &[P],
        xs: &[&[BlockQ8K]; R],
        out: &mut [[f32; GROUP]; R],
    ) {
        // One activation row (decode) takes its own body, whose schedule streams from memory
        // faster (`one_row`); the same bits.
        // SAFETY: as the caller promised.
        unsafe {
            if R == 1 {
                super::one_row::body(p, xs[0], &mut out[0])
            } else {
                body::<Z512, P, R>(p, xs, out)
            }
        }
    }

    /// # Safety
    /// AVX2, FMA, F16C and AVX-VNNI must be available.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    unsafe fn body_vnni<P: Step, const R: usize>(
        p: &[P],
        xs: &[&[BlockQ8K]; R],
        out: &mut [[f32; GROUP]; R],
    ) {
        // SAFETY: as the caller promised.
        unsafe { body::<Y256<Vnni>, P, R>(p, xs, out) }
    }

    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn body_avx2<P: Step, const R: usize>(
        p: &[P],
        xs: &[&[BlockQ8K]; R],
        out: &mut [[f32; GROUP]; R],
    ) {
        // SAFETY: as the caller promised.
        unsafe { body::<Y256<Pairs>, P, R>(p, xs, out) }
    }

    const _: () = assert!(QK_K == 256);
}
