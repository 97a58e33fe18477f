//! Matmul throughput: effective weight bandwidth (weight bytes / time) per type and batch.
//!
//! `cargo run -p ferrox-kernels --release --example bench_matmul [threads]`
//!
//! The headline case is Gemma 3 270M's output head: 262144 x 640 Q8_0 (178 MB), decode-bound
//! on memory bandwidth at n = 1. Not a timed assertion; numbers depend on the machine's load.

use ferrox_kernels::*;
use std::time::Instant;

/// Random valid blocks (random bytes, f16 scales pinned to small finite values).
fn random_weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut bytes: Vec<u8> = (0..rows * row_bytes(ty, cols))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    let offsets: &[usize] = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => &[0],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    };
    for block in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &o in offsets {
            block[o..o + 2].copy_from_slice(&scale);
        }
        // MXFP4's scale is a power of two, 2^(e - 128): a model's, not a random byte's
        // (which reaches subnormal and infinite products).
        if ty == GgmlType::MXFP4 {
            block[0] = 120;
        }
    }
    bytes
}

fn bench(pool: &ThreadPool, ty: GgmlType, rows: usize, cols: usize, n: usize, min_secs: f64) {
    let bytes = random_weights(ty, rows, cols);
    let w = QMatrix::new(ty, &bytes, rows, cols);
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let mut out = vec![0.0f32; n * rows];
    let krows = krows(ty, &bytes, rows, cols);
    let matmul = |pool: &ThreadPool, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]| match &krows
    {
        Some(k) => k.matmul(pool, x, n, out),
        None => matmul(pool, w, x, n, out),
    };
    matmul(pool, &w, &x, n, &mut out); // warm up (page faults, pool spin-up)
    let mut best = f64::INFINITY;
    let mut total = 0.0;
    let mut iters = 0;
    while total < min_secs || iters < 3 {
        let t = Instant::now();
        matmul(pool, &w, &x, n, &mut out);
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        total += dt;
        iters += 1;
    }
    let gb = bytes.len() as f64 / 1e9;
    println!(
        "{:>5} {:>6}x{:<5} n={:<3} {:>8.3} ms best, {:>8.3} ms mean  {:>6.2} GB/s best  {:>6.2} GB/s mean  ({} iters)",
        ty.name(),
        rows,
        cols,
        n,
        best * 1e3,
        total / iters as f64 * 1e3,
        gb / best,
        gb * iters as f64 / total,
        iters
    );
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    if std::env::args().nth(2).as_deref() == Some("pool") {
        pool_overhead(threads);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("quant") {
        quant_cost();
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("read") {
        read_bandwidth(&ThreadPool::new(threads), 178 << 20);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("head8") {
        head_repacked(threads);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("layers") {
        layers(threads);
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("short") {
        // Short rows from memory at n = 1 and 2: gpt-oss's 2,880-wide matrices (its MXFP4
        // experts and Q8_0 attention), 32,768 rows of each type (~50-100 MB).
        let pool = ThreadPool::new(threads);
        for ty in [
            GgmlType::MXFP4,
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::IQ4_NL,
        ] {
            for n in [1, 2] {
                bench(&pool, ty, 32_768, 2880, n, 1.0);
            }
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("big") {
        // Real-size K-quant matrices from memory at n = 1 (decode): the 4B/8B shapes'
        // FFN matrices and their Q6_K output head, against the plain read bandwidth.
        let pool = ThreadPool::new(threads);
        read_bandwidth(&pool, 512 << 20);
        for (ty, rows, cols) in [
            (GgmlType::Q4_K, 10_240, 2560),
            (GgmlType::Q4_K, 2560, 10_240),
            (GgmlType::Q6_K, 2560, 10_240),
            (GgmlType::Q4_K, 14_336, 4096),
            (GgmlType::Q6_K, 4096, 14_336),
            (GgmlType::Q6_K, 65_536, 2560),
            (GgmlType::Q4_K, 65_536, 4096),
        ] {
            bench(&pool, ty, rows, cols, 1, 1.0);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("head") {
        let pool = ThreadPool::new(threads);
        for n in [1, 16, 1, 16] {
            bench(&pool, GgmlType::Q8_0, 262_144, 640, n, 1.0);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("one") {
        // `one TYPE N [ROWS]`: repeat one compute-bound case (for perf).
        let ty = std::env::args().nth(3).unwrap_or_default();
        let ty = GgmlType::ALL
            .into_iter()
            .find(|t| t.name() == ty)
            .unwrap_or(GgmlType::Q8_0);
        let n: usize = std::env::args()
            .nth(4)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let (rows, cols) = if ty.block_elems() == 256 {
            (64, 2048)
        } else {
            (256, 640)
        };
        // An optional row count: more rows than the default spread the per-call cost.
        let rows: usize = std::env::args()
            .nth(5)
            .and_then(|s| s.parse().ok())
            .unwrap_or(rows);
        for _ in 0..20 {
            compute_bound(ty, rows, cols, n);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("prefill") {
        // A prefill step's K-quant matrices from cache, one thread, 128 activation rows:
        // the 4B shape's FFN and attention widths.
        for (ty, rows, cols) in [
            (GgmlType::Q4_K, 1024, 2560),
            (GgmlType::Q4_K, 256, 10_240),
            (GgmlType::Q6_K, 256, 10_240),
        ] {
            compute_bound(ty, rows, cols, 128);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("dram") {
        // A 512-row prefill step's Q4_K matrix from cache (256 rows) and from memory (32,768
        // rows, 38 MB, past L3), one thread: what the step costs when its weights come from
        // memory and its activations (1.5 MB) from beyond L2.
        for _ in 0..2 {
            timed(GgmlType::Q4_K, 256, 2560, 512, 40);
            timed(GgmlType::Q4_K, 32_768, 2560, 512, 3);
        }
        return;
    }
    if std::env::args().nth(2).as_deref() == Some("compute") {
        for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
            for n in [1, 4, 16, 64] {
                compute_bound(ty, 256, 640, n);
            }
        }
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            for n in [1, 4, 8, 16, 64] {
                compute_bound(ty, 64, 2048, n);
            }
        }
        return;
    }
    let pool = ThreadPool::new(threads);
    println!("threads={threads} isa avx2={}", Isa::best().is_avx2());
    read_bandwidth(&pool, 178 << 20);
    for n in [1, 16] {
        bench(&pool, GgmlType::Q8_0, 262_144, 640, n, 1.0);
    }
    for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
        for n in [1, 16] {
            bench(&pool, ty, 2048, 640, n, 0.3);
        }
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K] {
        for n in [1, 16] {
            bench(&pool, ty, 640, 2048, n, 0.3);
        }
    }
    for n in [1, 16] {
        bench(&pool, GgmlType::F16, 640, 2048, n, 0.3);
    }
}

/// Compute-bound view: a weight matrix that fits in L2, one thread, ns per (block, row).
/// With `KROWS=1` in the environment, Q4_K and Q6_K matrices are timed repacked
/// ([`KRows16`], the layout a loaded model uses on AVX2 hosts), else in the file's layout.
fn krows(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Option<KRows16> {
    std::env::var_os("KROWS")?;
    KRows16::repack(ty, bytes, rows, cols, |_| {})
}

pub fn compute_bound(ty: GgmlType, rows: usize, cols: usize, n: usize) {
    timed(ty, rows, cols, n, 200);
}

/// The best of `iters` calls, in ns per 32 values and activation row.
fn timed(ty: GgmlType, rows: usize, cols: usize, n: usize, iters: usize) {
    let pool = ThreadPool::new(1);
    let bytes = random_weights(ty, rows, cols);
    let w = QMatrix::new(ty, &bytes, rows, cols);
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let mut out = vec![0.0f32; n * rows];
    let mut acts = Activations::new();
    acts.quantize(&pool, ty, &x, n, cols);
    let krows = krows(ty, &bytes, rows, cols);
    let mut best = f64::INFINITY;
    for _ in 0..iters {
        let t = Instant::now();
        match &krows {
            Some(k) => k.matmul_acts(&pool, &acts, &mut out),
            None => matmul_acts(&pool, &w, &acts, &mut out),
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let blocks = rows * cols / 32 * n;
    println!(
        "{:>5} {rows}x{cols} n={n}: {:.3} ms, {:.3} ns per 32 values x row",
        ty.name(),
        best * 1e3,
        best * 1e9 / blocks as f64
    );
}

/// The machine's read bandwidth right now ([`ferrox_kernels::read_bandwidth`]).
fn read_bandwidth(pool: &ThreadPool, bytes: usize) {
    println!(
        "read bandwidth: {:.2} GB/s (XOR of 64-byte lines over {} MB, best of 10)",
        ferrox_kernels::read_bandwidth(pool, bytes, 10),
        bytes >> 20
    );
}

/// Activation quantization cost per value.
pub fn quant_cost() {
    let pool = ThreadPool::new(1);
    for (ty, cols) in [(GgmlType::Q8_0, 640), (GgmlType::Q4_K, 2048)] {
        let n = 64;
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let mut acts = Activations::new();
        let mut best = f64::INFINITY;
        for _ in 0..50 {
            let t = Instant::now();
            acts.quantize(&pool, ty, &x, n, cols);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "quantize for {}: {:.2} ns per value",
            ty.name(),
            best * 1e9 / (n * cols) as f64
        );
    }
}

/// Pool overhead: a loop of tiny `for_each` calls (what a decode step's small ops look like).
pub fn pool_overhead(threads: usize) {
    let pool = ThreadPool::new(threads);
    let hits = std::sync::atomic::AtomicUsize::new(0);
    let mut best = f64::INFINITY;
    for _ in 0..50 {
        let t = Instant::now();
        for _ in 0..1000 {
            pool.for_each(threads * 2, &|_| {
                hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        best = best.min(t.elapsed().as_secs_f64() / 1000.0);
    }
    println!(
        "pool threads={threads}: {:.2} µs per for_each of {} tiny tasks",
        best * 1e6,
        threads * 2
    );
}

/// The matmuls of Gemma 3 270M's 18 layers (types and shapes as in the default model's file),
/// back to back from memory as one decode step runs them: ms per pass at n = 1 and n = 16.
fn layers(threads: usize) {
    let pool = ThreadPool::new(threads);
    // (type, rows, cols) per layer, in the forward's order: q, k, v, o, gate, up, down.
    let shapes = |il: usize| {
        let v = if il.is_multiple_of(2) {
            GgmlType::Q8_0
        } else {
            GgmlType::Q5_0
        };
        let down = if il.is_multiple_of(2) {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        [
            (GgmlType::Q5_0, 1024, 640),
            (GgmlType::Q5_0, 256, 640),
            (v, 256, 640),
            (GgmlType::Q4_K, 640, 1024),
            (GgmlType::Q5_0, 2048, 640),
            (GgmlType::Q5_0, 2048, 640),
            (down, 640, 2048),
        ]
    };
    type Layer = Vec<(GgmlType, usize, usize, Vec<u8>)>;
    let mats: Vec<Layer> = (0..18)
        .map(|il| {
            shapes(il)
                .into_iter()
                .map(|(ty, r, c)| (ty, r, c, random_weights(ty, r, c)))
                .collect()
        })
        .collect();
    let total: usize = mats.iter().flatten().map(|m| m.3.len()).sum();
    for n in [1, 16, 1, 16] {
        let x = vec![0.25f32; n * 2048];
        let mut out = vec![0.0f32; n * 2048];
        let mut times = Vec::new();
        for _ in 0..if n == 1 { 200 } else { 20 } {
            let t = Instant::now();
            for layer in &mats {
                for (ty, r, c, bytes) in layer {
                    let w = QMatrix::new(*ty, bytes, *r, *c);
                    matmul(&pool, &w, &x[..n * c], n, &mut out[..n * r]);
                }
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        println!(
            "layers n={n:<3} {:.1} MB: median {med:.3} ms ({:.2} GB/s), best {:.3} ms",
            total as f64 / 1e6,
            total as f64 / 1e6 / med,
            times[0]
        );
    }
}

/// The output head in the file's layout and repacked eight rows at a time (`Q8Rows8`),
/// interleaved: median ms per call at n = 1 and n = 16.
fn head_repacked(threads: usize) {
    let pool = ThreadPool::new(threads);
    let rows: usize = std::env::args()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(262_144);
    let cols = 640;
    let bytes = random_weights(GgmlType::Q8_0, rows, cols);
    let w = QMatrix::new(GgmlType::Q8_0, &bytes, rows, cols);
    let m = Q8Rows8::repack(&bytes, rows, cols, |_| {}).expect("repackable");
    for n in [1, 2, 4, 16] {
        let x = vec![0.25f32; n * cols];
        let mut out = vec![0.0f32; n * rows];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let reps = (if n == 1 { 40 } else { 8 }) * (262_144 / rows).max(1);
        for _ in 0..reps {
            let t = Instant::now();
            matmul(&pool, &w, &x, n, &mut out);
            a.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            m.matmul(&pool, &x, n, &mut out);
            b.push(t.elapsed().as_secs_f64() * 1e3);
        }
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        let ns_per = |ms: f64| ms * 1e6 / (rows * cols / 32 * n) as f64 * threads as f64;
        println!(
            "{rows}x{cols} n={n:<3} file layout median {:.3} ms ({:.2} ns/block-row/thread) | repacked median {:.3} ms ({:.2})",
            a[a.len() / 2],
            ns_per(a[a.len() / 2]),
            b[b.len() / 2],
            ns_per(b[b.len() / 2])
        );
    }
}
