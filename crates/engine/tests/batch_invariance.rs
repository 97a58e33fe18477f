//! A sequence's logits are bit-identical whether it runs alone or batched with others, and
//! whatever its prefill chunk size — on random-weight models of every architecture and on the
//! real default model. The scheduler's guarantees rest on this.

use ferrox_engine::synthetic::{self, SyntheticSpec};
use ferrox_engine::{Arch, KvCache, KvShape, KvType, Model, SeqChunk};
use ferrox_gguf::GgmlType;

/// Blocks of 4 positions; sequence `s` owns blocks [s*64, s*64+64).
const BS: usize = 4;
const PER_SEQ: u32 = 64;

fn table(seq: usize) -> Vec<u32> {
    (seq as u32 * PER_SEQ..(seq as u32 + 1) * PER_SEQ).collect()
}

/// KL(softmax(a) || softmax(b)) in nats.
fn kl(a: &[f32], b: &[f32]) -> f64 {
    let lse = |x: &[f32]| {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
    };
    let (la, lb) = (lse(a), lse(b));
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let p = (x as f64 - la).exp();
            p * ((x as f64 - la) - (y as f64 - lb))
        })
        .sum()
}

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b }) as u32
}

/// Runs `prompts` with prefill chunks of `chunk` tokens, then `n_decode` greedy steps, all
/// sequences sharing every step (`together`) or each alone. Returns every logits row seen
/// per sequence (last prompt position, then each decode step).
///
/// Together, the logits go into one buffer reused across steps (as the scheduler's worker
/// does), first filled with NaN and larger than a step needs; alone, each step gets a fresh
/// one. The comparison thus also pins that a reused buffer leaves nothing stale behind.
fn run(
    m: &Model,
    prompts: &[Vec<u32>],
    chunk: usize,
    n_decode: usize,
    together: bool,
) -> Vec<Vec<Vec<f32>>> {
    run_kv(m, m.kv_shape(), prompts, chunk, n_decode, together)
}

/// [`run`] on a KV cache of `shape` (its storage types).
fn run_kv(
    m: &Model,
    shape: KvShape,
    prompts: &[Vec<u32>],
    chunk: usize,
    n_decode: usize,
    together: bool,
) -> Vec<Vec<Vec<f32>>> {
    let vocab = m.vocab_size();
    let mut kv: KvCache = m.new_kv_cache_of(shape, BS, prompts.len() * PER_SEQ as usize);
    let tables: Vec<Vec<u32>> = (0..prompts.len()).map(table).collect();
    let mut out = vec![Vec::new(); prompts.len()];
    let mut reused = vec![f32::NAN; (prompts.len() + 3) * vocab];
    let mut step_logits = |kv: &mut KvCache, chunks: &[SeqChunk]| -> Vec<f32> {
        if together {
            m.forward_multi_seq_into(kv, chunks, &mut reused).unwrap();
            reused.clone()
        } else {
            m.forward_multi_seq(kv, chunks).unwrap()
        }
    };
    let groups: Vec<Vec<usize>> = if together {
        vec![(0..prompts.len()).collect()]
    } else {
        (0..prompts.len()).map(|i| vec![i]).collect()
    };
    for group in groups {
        // Prefill: each step carries one chunk of every sequence still prefilling.
        let mut done = vec![0usize; prompts.len()];
        while group.iter().any(|&s| done[s] < prompts[s].len()) {
            let mut chunks = Vec::new();
            let mut who = Vec::new();
            for &s in &group {
                let p = &prompts[s];
                if done[s] < p.len() {
                    let end = (done[s] + chunk).min(p.len());
                    chunks.push(SeqChunk {
                        tokens: &p[done[s]..end],
                        start_pos: done[s],
                        blocks: &tables[s],
                        logit_rows: usize::from(end == p.len()),
                        want_hidden: false,
                    });
                    if end == p.len() {
                        who.push(s);
                    }
                    done[s] = end;
                }
            }
            let logits = step_logits(&mut kv, &chunks);
            assert_eq!(logits.len(), who.len() * vocab);
            for (i, &s) in who.iter().enumerate() {
                out[s].push(logits[i * vocab..(i + 1) * vocab].to_vec());
            }
        }
        for step in 0..n_decode {
            let toks: Vec<[u32; 1]> = group
                .iter()
                .map(|&s| [argmax(out[s].last().unwrap())])
                .collect();
            let chunks: Vec<SeqChunk> = group
                .iter()
                .zip(&toks)
                .map(|(&s, t)| SeqChunk {
                    tokens: t,
                    start_pos: prompts[s].len() + step,
                    blocks: &tables[s],
                    logit_rows: 1,
                    want_hidden: false,
                })
                .collect();
            let logits = step_logits(&mut kv, &chunks);
            assert_eq!(logits.len(), group.len() * vocab);
            for (i, &s) in group.iter().enumerate() {
                out[s].push(logits[i * vocab..(i + 1) * vocab].to_vec());
            }
        }
    }
    out
}

fn prompts(lens: &[usize], vocab: u32) -> Vec<Vec<u32>> {
    lens.iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| 4 + ((i * 31 + s * 17) as u32 % (vocab - 4)))
                .collect()
        })
        .collect()
}

fn check(m: &Model, ps: &[Vec<u32>], n_decode: usize, chunk_sizes: &[usize]) {
    check_kv(m, m.kv_shape(), ps, n_decode, chunk_sizes);
}

fn check_kv(m: &Model, shape: KvShape, ps: &[Vec<u32>], n_decode: usize, chunk_sizes: &[usize]) {
    let alone = run_kv(m, shape, ps, usize::MAX, n_decode, false);
    let batched = run_kv(m, shape, ps, usize::MAX, n_decode, true);
    assert!(alone == batched, "batched logits differ from sequential");
    for &c in chunk_sizes {
        let chunked = run_kv(m, shape, ps, c, n_decode, true);
        assert!(alone == chunked, "chunk size {c} changes logits");
    }
}

#[test]
fn synthetic_models_are_batch_and_chunk_invariant() {
    let arches = [
        Arch::Gemma3,
        Arch::Gemma2,
        Arch::Phi3,
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Olmoe,
        Arch::GptOss,
        Arch::Granite,
        Arch::GraniteMoe,
        Arch::Olmo2,
        Arch::SmolLm3,
        Arch::Glm4,
        Arch::Mistral3,
    ];
    for arch in arches {
        for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K] {
            let m = synthetic::load(&SyntheticSpec::tiny(arch, 5).quantized(ty), 2).unwrap();
            // Lengths cross the synthetic Gemma window (8) and several KV blocks.
            check(&m, &prompts(&[13, 1, 22, 6], 320), 5, &[1, 7]);
        }
    }
}

/// An MoE step groups its rows by expert: a row's logits must not depend on which other
/// rows shared its experts, nor on how many rows an expert ran at once (the lane-major
/// kernels take eight or more).
#[test]
fn expert_grouping_does_not_change_logits() {
    let spec = SyntheticSpec::tiny(Arch::Llama, 21)
        .quantized(GgmlType::Q4_0)
        .with_experts(4, 2, 64);
    let m = synthetic::load(&spec, 2).unwrap();
    check(&m, &prompts(&[40, 3, 25, 9, 17], 320), 4, &[1, 5, 16]);
}

#[test]
fn thread_count_does_not_change_logits() {
    let spec = SyntheticSpec::tiny(Arch::Qwen3, 9).quantized(GgmlType::Q4_K);
    let one = synthetic::load(&spec, 1).unwrap();
    let two = synthetic::load(&spec, 2).unwrap();
    let ps = prompts(&[9, 14], 320);
    assert!(run(&one, &ps, 4, 3, true) == run(&two, &ps, 4, 3, true));
}

#[test]
fn default_model_is_batch_and_chunk_invariant() {
    let path = ferrox_engine::cache::default_model_path();
    assert!(
        path.exists(),
        "{} missing: run `cargo run -p ferrox -- pull`",
        path.display()
    );
    let m = Model::load(&path, 2).unwrap();
    let ps = prompts(&[23, 5, 40], 262_000);
    check(&m, &ps, 3, &[7]);
}

/// Splits steps at this many rows in the tests that cross the limit (the default,
/// `MAX_STEP_ROWS`, would make their prompts long; how a step splits is the same code).
const STEP_ROWS: usize = 128;

/// A step of more rows than the model's step limit runs as sub-steps, one prompt split across
/// two of them: the logits equal those of small chunks (which never split).
#[test]
fn steps_longer_than_the_row_limit_give_the_same_logits() {
    for arch in [Arch::Gemma3, Arch::Qwen2] {
        let mut m =
            synthetic::load(&SyntheticSpec::tiny(arch, 11).quantized(GgmlType::Q8_0), 2).unwrap();
        m.set_step_rows(STEP_ROWS);
        let lens = [m.step_rows() + 72, 90, 30];
        assert!(lens.iter().sum::<usize>() > 2 * m.step_rows());
        check(&m, &prompts(&lens, 320), 3, &[7]);
    }
}

/// Every position's logits, two ways: each sequence one token per step, alone; and every
/// sequence's whole prompt as ONE chunk per step, all sequences together, logits for every
/// token (`logit_rows = len`, how a decode row verifies drafted tokens).
fn every_position(m: &Model, ps: &[Vec<u32>], whole: bool) -> Vec<Vec<f32>> {
    let mut kv: KvCache = m.new_kv_cache(BS, ps.len() * PER_SEQ as usize);
    let tables: Vec<Vec<u32>> = (0..ps.len()).map(table).collect();
    if whole {
        let chunks: Vec<SeqChunk> = ps
            .iter()
            .zip(&tables)
            .map(|(p, t)| SeqChunk {
                tokens: p,
                start_pos: 0,
                blocks: t,
                logit_rows: p.len(),
                want_hidden: false,
            })
            .collect();
        return vec![m.forward_multi_seq(&mut kv, &chunks).unwrap()];
    }
    let mut out = vec![Vec::new(); ps.len()];
    for (s, p) in ps.iter().enumerate() {
        for (i, t) in p.iter().enumerate() {
            let chunk = SeqChunk {
                tokens: std::slice::from_ref(t),
                start_pos: i,
                blocks: &tables[s],
                logit_rows: 1,
                want_hidden: false,
            };
            out[s].extend(m.forward_multi_seq(&mut kv, &[chunk]).unwrap());
        }
    }
    vec![out.concat()]
}

/// What speculative decoding's exactness rests on: a chunk's logits at every position (the
/// lane-major kernels from eight rows on, a piece boundary past the step limit) are the bits
/// that decoding those tokens one at a time gives.
#[test]
fn logits_of_every_position_equal_one_token_steps() {
    for (arch, ty) in [
        (Arch::Gemma3, GgmlType::Q4_K),
        (Arch::Qwen3, GgmlType::Q8_0),
        (Arch::Llama, GgmlType::Q6_K),
        (Arch::Qwen3, GgmlType::IQ4_NL),
        (Arch::Llama, GgmlType::IQ4_XS),
        (Arch::Qwen2, GgmlType::MXFP4),
    ] {
        let mut m = synthetic::load(&SyntheticSpec::tiny(arch, 13).quantized(ty), 2).unwrap();
        m.set_step_rows(STEP_ROWS);
        let ps = prompts(&[9, 1, 17, m.step_rows() + 5], 320);
        assert!(
            every_position(&m, &ps, true) == every_position(&m, &ps, false),
            "{arch:?} {ty:?}: a position's logits depend on the chunk it is verified in"
        );
    }
}

/// A q8_0 or q4_0 KV cache (K, V, or both) keeps batch and chunk invariance, on random-weight models
/// whose heads are whole 32-value blocks and on the default model; and its logits stay close
/// to the f16 cache's (the same greedy tokens on most steps, every logit near).
#[test]
fn quantized_kv_is_batch_and_chunk_invariant_and_q8_0_close_to_f16() {
    let q8 = [
        (KvType::Q8_0, KvType::Q8_0),
        (KvType::Q8_0, KvType::F16),
        (KvType::F16, KvType::Q8_0),
        (KvType::Q4_0, KvType::Q4_0),
        (KvType::Q8_0, KvType::Q4_0),
    ];
    for arch in [Arch::Gemma3, Arch::Qwen3] {
        let spec = SyntheticSpec {
            head_dim: 32,
            ..SyntheticSpec::tiny(arch, 17)
        };
        let m = synthetic::load(&spec, 2).unwrap();
        let ps = prompts(&[13, 1, 22, 6], 320);
        for (k, v) in q8 {
            let shape = m.kv_shape_of(k, v).unwrap();
            check_kv(&m, shape, &ps, 5, &[1, 7]);
        }
        // Heads of 16 values cannot be q8_0 blocks: refused by name, not computed wrongly.
        let narrow = synthetic::load(&SyntheticSpec::tiny(arch, 17), 1).unwrap();
        let e = narrow.kv_shape_of(KvType::Q8_0, KvType::F16).unwrap_err();
        assert!(e.to_string().contains("q8_0"), "{e}");
    }
    let path = ferrox_engine::cache::default_model_path();
    let m = Model::load(&path, 2).unwrap();
    let ps = prompts(&[40, 9], 262_000);
    let shape = m.kv_shape_of(KvType::Q8_0, KvType::Q8_0).unwrap();
    check_kv(&m, shape, &ps, 3, &[7]);
    let f16 = run(&m, &ps, usize::MAX, 3, true);
    let q4 = m.kv_shape_of(KvType::Q4_0, KvType::Q4_0).unwrap();
    check_kv(&m, q4, &ps, 3, &[7]);
    let q8 = run_kv(&m, shape, &ps, usize::MAX, 3, true);
    assert!(
        f16 != q8,
        "a q8_0 cache gave the f16 cache's bits: is it used at all?"
    );
    // Closeness on arbitrary token ids (a real text's figures, beside llama.cpp's, are in
    // docs/PERFORMANCE.md): the last prompt position of each of eight prompts, where both
    // caches have read the same tokens (each decode step after it follows its own greedy
    // token, and on these near-uniform distributions a near-tie flips with any change of
    // the engine's rounding, after which the two runs read different text). Today a mean
    // KL of 0.1-0.2 nat (it moved from 0.12 to 0.21 when the matmuls' rounding changed: these
    // inputs amplify any change) and 7 of 8 top-1s kept; a scale misread or a block
    // misplaced costs whole nats.
    let ps = prompts(&[40, 9, 23, 17, 31, 12, 50, 27], 262_000);
    let f16 = run(&m, &ps, usize::MAX, 0, true);
    let q8 = run_kv(&m, shape, &ps, usize::MAX, 0, true);
    let (mut same, mut rows, mut kl_sum) = (0, 0, 0.0);
    for (a, b) in f16.iter().flatten().zip(q8.iter().flatten()) {
        rows += 1;
        same += usize::from(argmax(a) == argmax(b));
        kl_sum += kl(a, b);
    }
    let mean_kl = kl_sum / rows as f64;
    eprintln!("q8_0 vs f16 KV: mean KL {mean_kl}, top-1 kept {same} of {rows}");
    assert!(
        mean_kl < 0.5,
        "mean KL(f16 || q8_0) {mean_kl} over {rows} rows"
    );
    assert!(
        same * 10 >= rows * 7,
        "top-1 kept at only {same} of {rows} positions"
    );
}

/// A mapped file's dense matrices are read from a copy on huge pages
/// (`Weights::copy_to_huge_pages`): the logits equal those of the same file read into memory,
/// which is never copied. Tied and untied heads, the file layout's types and a K-quant.
#[test]
fn weights_copied_to_huge_pages_give_the_same_logits() {
    let dir = std::env::temp_dir().join(format!("ferrox-copy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (arch, untied) in [(Arch::Gemma3, false), (Arch::Llama, true)] {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K] {
            let mut spec = SyntheticSpec::tiny(arch, 13).quantized(ty);
            spec.untied_output = untied;
            let bytes = synthetic::build_gguf(&spec);
            let path = dir.join(format!("{arch:?}-{}.gguf", ty.name()));
            std::fs::write(&path, &bytes).unwrap();
            let mapped = Model::load(&path, 2).unwrap();
            let owned = synthetic::load(&spec, 2).unwrap();
            assert_eq!(owned.copied_bytes(), 0, "a file in memory is not copied");
            // On AVX-512 every Q4_K matrix is repacked instead (`KRows16`).
            let repacked = ty == GgmlType::Q4_K && ferrox_kernels::Isa::best().is_avx512();
            if ferrox_kernels::huge_pages_available() && !repacked {
                assert!(
                    mapped.copied_bytes() > 0,
                    "{arch:?} {ty:?}: nothing was copied"
                );
            }
            let ps = prompts(&[11, 4], 320);
            assert!(
                run(&mapped, &ps, 5, 3, true) == run(&owned, &ps, 5, 3, true),
                "{arch:?} {ty:?}: the copy changes the logits"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The last layer carries on only the rows whose outputs are read: a chunk's hidden states
/// (every row, `want_hidden`) and another's logits are the bits they are alone when they share
/// a step with a chunk that reads nothing (a prompt's middle), placed before, between and
/// after them.
#[test]
fn pruned_rows_leave_hidden_states_and_logits_unchanged() {
    let m = synthetic::load(
        &SyntheticSpec::tiny(Arch::Gemma3, 5).quantized(GgmlType::Q4_K),
        2,
    )
    .unwrap();
    let ps = prompts(&[11, 7, 9], 320);
    let tables: Vec<Vec<u32>> = (0..3).map(table).collect();
    let chunk = |s: usize, logit_rows: usize, want_hidden: bool| SeqChunk {
        tokens: &ps[s],
        start_pos: 0,
        blocks: &tables[s],
        logit_rows,
        want_hidden,
    };
    let step = |chunks: &[SeqChunk]| {
        let mut kv: KvCache = m.new_kv_cache(BS, 3 * PER_SEQ as usize);
        let (mut logits, mut hidden) = (Vec::new(), Vec::new());
        m.forward_multi_seq_hidden_into(&mut kv, chunks, &mut logits, &mut hidden)
            .unwrap();
        (logits, hidden)
    };
    let (_, hidden_alone) = step(&[chunk(0, 0, true)]);
    let (logits_alone, _) = step(&[chunk(1, 2, false)]);
    assert_eq!(hidden_alone.len(), ps[0].len() * m.config().n_embd);
    for order in [[2, 0, 1], [0, 2, 1], [0, 1, 2]] {
        let chunks: Vec<SeqChunk> = order
            .iter()
            .map(|&s| match s {
                0 => chunk(0, 0, true),
                1 => chunk(1, 2, false),
                _ => chunk(2, 0, false),
            })
            .collect();
        let (logits, hidden) = step(&chunks);
        assert!(hidden == hidden_alone, "{order:?}: hidden states changed");
        assert!(logits == logits_alone, "{order:?}: logits changed");
    }
}
