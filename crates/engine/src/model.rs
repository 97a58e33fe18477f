//! A loaded model and its one forward pass.
//!
//! `forward_multi_seq` is the only way tokens become logits: a single request decoding alone
//! is a batch of one chunk of one token. The step runs top to bottom in the architecture's
//! order: embed; per layer: norm, Q/K/V projections (batched over every token of every
//! sequence), per-head QK-norm and RoPE, K/V written into the paged cache, attention per
//! query over its own sequence, output projection, residual, norm, gated FFN (batched; for a
//! mixture of experts, routed and grouped by expert in `moe.rs`), residual (one block:
//! `model/layer.rs`); then final norm and the output head for the rows that asked for logits.
//! The last layer writes every row's K/V but carries on only the rows whose outputs are read
//! (logit rows, hidden states), as llama.cpp does: a prompt chunk's other rows would pay that
//! layer's attention and feed-forward for nothing (~1/layers of a prefill).
//!
//! Batch invariance (a row's logits are bit-identical alone or in any batch, at any prefill
//! chunk size) holds because every operation here is per row with a fixed operation order,
//! `ferrox_kernels::matmul` guarantees the same for its rows, and attention reads K/V only
//! from the cache (see `attention.rs`). Pinned by `tests/batch_invariance.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use ferrox_gguf::GgmlType;
use ferrox_gguf::GgufFile;
use ferrox_kernels::{ActKind, Activations, Q8Rows8, ThreadPool};

use crate::attention::Query;
use crate::config::ModelConfig;
use crate::encoder::{Encoder, EncoderWeights};
use crate::error::EngineError;
use crate::kv::{KvCache, KvShape, KvType, SeqChunk};
use crate::ops::{rms_norm_rows, rope_freqs, rope_freqs_yarn, rope_table};
use crate::tokenizer::Tokenizer;
use crate::weights::{Matrix, Weights};

mod layer;
use layer::Scratch;

/// Most token rows one forward pass computes at once; larger steps are split (see
/// `forward_multi_seq`). Each step reads every weight from memory and the K-quant GEMM
/// repacks it (`kgemm`), so a real-size model's prefill gains from long steps (Gemma-3-4B
/// shape, `avx2`, pp512: +4 % at 512 over 128; the default model is level), while the
/// activations grow by ~34 KB per row on the default model, ~150 KB on the 4B shape.
pub const MAX_STEP_ROWS: usize = 512;

/// Vocabulary arrays dropped from the file's metadata once the tokenizer is built.
const TOKENIZER_ARRAYS: [&str; 4] = [
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
];

/// An immutable loaded model: file (memory-mapped), config, bound weights, tokenizer and the
/// thread pool its kernels run on. Shared as `Arc<Model>`; KV state lives outside, in a
/// [`KvCache`] owned by whoever schedules steps.
pub struct Model {
    file: Arc<GgufFile>,
    config: ModelConfig,
    body: Body,
    /// The output head repacked eight rows at a time when it is Q8_0 (it is 72% of the bytes
    /// a decode step of the default model reads, and the repacked kernel streams it ~1.5x
    /// faster; see `ferrox_kernels::Q8Rows8`). Its file pages are released as it is built.
    head_rows8: Option<Q8Rows8>,
    /// Bytes of weights copied out of the mapped file onto huge pages at load
    /// (`Weights::copy_to_huge_pages`).
    copied_bytes: usize,
    tokenizer: Tokenizer,
    /// Shared between models when a server holds several (`Model::load_in`): the pool runs
    /// one loop at a time, so two models stepping together take turns on the machine's
    /// threads instead of oversubscribing them.
    pool: Arc<ThreadPool>,
    /// RoPE frequencies for global layers and for sliding-window layers.
    freqs_global: Vec<f32>,
    freqs_swa: Vec<f32>,
    /// Activation buffers reused from step to step (a 512-token prefill needs ~20 MB; fresh
    /// zeroed pages cost page faults every step). Locked for a whole step by whichever
    /// thread runs it; a second concurrent caller gets fresh buffers instead of waiting.
    scratch: Mutex<Scratch>,
    /// Most rows per forward step, [`MAX_STEP_ROWS`] unless set smaller.
    step_rows: usize,
    /// Last, so that it drops after everything above: hands the freed heap back.
    _trim: TrimOnDrop,
}

/// Returns the process's free heap pages to the kernel when a model is dropped. The
/// scheduler's worker does the same when it ends, but the last handle on a model may be
/// dropped later, on another thread (a request that pinned it, the registry), and what it
/// frees then would stay resident: an unload or a hot swap left ~30 MB behind now and then
/// (`tests/models.rs::unload_and_hot_swap_give_the_memory_back`).
struct TrimOnDrop;

impl Drop for TrimOnDrop {
    fn drop(&mut self) {
        release_freed_memory();
    }
}

/// Hands memory the process has freed back to the operating system. An unloaded model's KV
/// cache and step buffers are large blocks freed by several threads; glibc keeps freed
/// blocks in each thread's arena (and, once a large block has been freed, serves blocks of
/// that size from the arenas rather than from their own mappings), so without this an
/// unload or a hot swap left tens of megabytes resident until the process ended.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it touches no memory
    // in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What the forward pass runs: a decoder's blocks and head, or an encoder (`encoder.rs`).
enum Body {
    Decoder(Weights),
    Encoder(EncoderWeights),
}

impl Model {
    /// Memory-maps and loads the GGUF at `path`, running kernels on `n_threads` threads.
    pub fn load(path: impl AsRef<Path>, n_threads: usize) -> Result<Model, EngineError> {
        Model::load_in(path, Arc::new(ThreadPool::new(n_threads.max(1))))
    }

    /// [`Model::load`] on a pool the caller shares with other models.
    pub fn load_in(path: impl AsRef<Path>, pool: Arc<ThreadPool>) -> Result<Model, EngineError> {
        Model::from_gguf_in(GgufFile::open(path)?, pool)
    }

    pub fn from_gguf(file: GgufFile, n_threads: usize) -> Result<Model, EngineError> {
        Model::from_gguf_in(file, Arc::new(ThreadPool::new(n_threads.max(1))))
    }

    /// [`Model::from_gguf`] on a shared pool.
    pub fn from_gguf_in(mut file: GgufFile, pool: Arc<ThreadPool>) -> Result<Model, EngineError> {
        let config = ModelConfig::from_gguf(&file)?;
        let mut body = if config.arch.is_encoder() {
            Body::Encoder(EncoderWeights::bind(&file, &config)?)
        } else {
            let mut weights = Weights::bind(&file, &config)?;
            weights.repack(&file);
            Body::Decoder(weights)
        };
        let tokenizer = Tokenizer::from_gguf(&file)?;
        // The tokenizer holds its own copy of the vocabulary; the parsed arrays would cost
        // ~30 MB of RSS for the life of the model (nothing reads them after this point).
        for key in TOKENIZER_ARRAYS {
            file.take(key);
        }
        if tokenizer.vocab_size() > config.n_vocab {
            return Err(EngineError::BadMetadata {
                key: "tokenizer.ggml.tokens".into(),
                reason: format!(
                    "{} tokens but the embedding has {} rows",
                    tokenizer.vocab_size(),
                    config.n_vocab
                ),
            });
        }
        let head_rows8 = match &body {
            Body::Decoder(weights) if weights.output.ty == GgmlType::Q8_0 => {
                let data = weights.output.view(&file).data;
                let (rows, cols) = (weights.output.rows, weights.output.cols);
                Q8Rows8::repack(data, rows, cols, |done| file.release(&data[done]))
            }
            _ => None,
        };
        let copied = match &mut body {
            Body::Decoder(weights) => weights.copy_to_huge_pages(&file, head_rows8.is_some()),
            Body::Encoder(_) => 0,
        };
        // Frequency factors (one per rotated pair, the same for every layer) divide each
        // pair's frequency, as llama.cpp's rope does: Llama 3.1's `rope_freqs.weight`, or
        // LongRoPE's (128k Phi-3, Phi-4-mini) long factors when the model is served past its
        // original context (llama.cpp's default context is the trained one, so: when the
        // file's context is longer than the original), else its short ones.
        let long = config
            .rope_orig_ctx
            .is_some_and(|orig| config.context_length > orig);
        let name = [
            "rope_freqs.weight",
            "rope_factors_long.weight",
            "rope_factors_short.weight",
        ]
        .into_iter()
        .filter(|&n| long || n != "rope_factors_long.weight")
        .find(|&n| file.tensor(n).is_some());
        let factors = match name {
            Some(name) => Some(crate::weights::vector(&file, name, config.rope_dim / 2)?),
            None => None,
        };
        let freqs = |base: f32, scale: f32| {
            let mut f = match &config.yarn {
                Some(y) => rope_freqs_yarn(config.rope_dim, base, scale, y),
                None => rope_freqs(config.rope_dim, base, scale),
            };
            if let Some(factors) = &factors {
                f.iter_mut().zip(factors).for_each(|(f, k)| *f /= k);
            }
            f
        };
        let freqs_global = freqs(config.rope_base, config.rope_freq_scale);
        let freqs_swa = freqs(config.rope_base_swa, config.rope_freq_scale_swa);
        Ok(Model {
            file: Arc::new(file),
            config,
            body,
            head_rows8,
            copied_bytes: copied,
            tokenizer,
            pool,
            freqs_global,
            freqs_swa,
            scratch: Mutex::new(Scratch::default()),
            step_rows: MAX_STEP_ROWS,
            _trim: TrimOnDrop,
        })
    }

    /// Splits steps at `rows` tokens (1..=[`MAX_STEP_ROWS`]) instead of [`MAX_STEP_ROWS`]:
    /// the same logits, since a sequence's do not depend on how its prompt is split (the
    /// tests split at small sizes with it).
    pub fn set_step_rows(&mut self, rows: usize) {
        assert!(
            (1..=MAX_STEP_ROWS).contains(&rows),
            "step rows {rows} outside 1..={MAX_STEP_ROWS}"
        );
        self.step_rows = rows;
    }

    /// Most rows one forward step computes; longer steps are split.
    pub fn step_rows(&self) -> usize {
        self.step_rows
    }

    /// Bytes of weights read from a copy on huge pages rather than from the mapped file.
    pub fn copied_bytes(&self) -> usize {
        self.copied_bytes
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The memory a one-sequence decode step streams (`Weights::decode_memory`, and the
    /// head's own layout where it has one); empty for an encoder. For comparing a decode
    /// with a plain read of the same memory (`ferrox bench --bandwidth`).
    pub fn decode_memory(&self) -> Vec<&[u8]> {
        let Body::Decoder(weights) = &self.body else {
            return Vec::new();
        };
        let mut regions = weights.decode_memory(&self.file, self.head_rows8.is_some());
        if let Some(head) = &self.head_rows8 {
            regions.extend(head.buffers());
        }
        regions
    }

    /// The threads the forward runs on (callers may run other per-step work on them).
    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    pub fn kv_shape(&self) -> KvShape {
        self.config.kv_shape()
    }

    pub fn vocab_size(&self) -> usize {
        self.config.n_vocab
    }

    /// The context length the model was trained for.
    pub fn max_context(&self) -> usize {
        self.config.context_length
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// An empty f16 KV cache of `n_blocks` blocks of `block_size_tokens` positions.
    pub fn new_kv_cache(&self, block_size_tokens: usize, n_blocks: usize) -> KvCache {
        KvCache::new(self.kv_shape(), block_size_tokens, n_blocks)
    }

    /// The KV geometry stored as `k` and `v`, or the reason this model's heads cannot be
    /// (q8_0 needs heads of whole 32-value blocks).
    pub fn kv_shape_of(&self, k: KvType, v: KvType) -> Result<KvShape, EngineError> {
        let shape = self.kv_shape().with_types(k, v);
        match shape.unfit_type() {
            Some(ty) => Err(EngineError::KvType {
                ty: ty.name(),
                head_dim: shape.head_dim,
            }),
            None => Ok(shape),
        }
    }

    /// An empty KV cache of `shape` ([`Self::kv_shape_of`]).
    pub fn new_kv_cache_of(
        &self,
        shape: KvShape,
        block_size_tokens: usize,
        n_blocks: usize,
    ) -> KvCache {
        KvCache::new(shape, block_size_tokens, n_blocks)
    }

    /// Runs one step over every chunk (each a sequence's next tokens at its next positions)
    /// and returns, flat, `vocab_size` logits for each of the last `logit_rows` tokens of
    /// every chunk, in chunk and token order. Chunks must belong to distinct sequences (distinct blocks).
    ///
    /// A step of more than [`Model::step_rows`] tokens runs as consecutive sub-steps (long
    /// chunks split at that many tokens, each piece returning the logit rows it holds): the same
    /// numbers, since a sequence's logits do not depend on how its prompt is chunked, and
    /// activation memory bounded by the sub-step instead of growing with the prompt.
    /// Whether the model has a classification head (a reranker).
    pub fn has_classifier(&self) -> bool {
        matches!(&self.body, Body::Encoder(w) if w.has_head())
    }

    /// A reranker's scores for one row pooled at its first token (llama.cpp's rank pooling:
    /// the classification head over the CLS row); `None` for a model without a head.
    pub fn classify(&self, pooled: &[f32]) -> Option<Vec<f32>> {
        match &self.body {
            Body::Encoder(weights) => Encoder {
                file: &self.file,
                pool: &self.pool,
                config: &self.config,
                weights,
            }
            .classify(pooled),
            Body::Decoder(_) => None,
        }
    }

    pub fn forward_multi_seq(
        &self,
        kv: &mut KvCache,
        chunks: &[SeqChunk],
    ) -> Result<Vec<f32>, EngineError> {
        let mut logits = Vec::new();
        self.forward_multi_seq_into(kv, chunks, &mut logits)?;
        Ok(logits)
    }

    /// [`Self::forward_multi_seq`] into a caller's buffer, resized to fit: a decoder that
    /// keeps one buffer across steps writes its logits (16 MB for 16 rows of Gemma 3's
    /// vocabulary) into memory that is already mapped, instead of faulting in fresh pages
    /// every step.
    pub fn forward_multi_seq_into(
        &self,
        kv: &mut KvCache,
        chunks: &[SeqChunk],
        logits: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        let mut hidden = Vec::new();
        self.forward_multi_seq_hidden_into(kv, chunks, logits, &mut hidden)
    }

    /// [`Self::forward_multi_seq_into`], and into `hidden` (cleared first), flat, the final
    /// hidden state (`n_embd` values, after the output norm) of every token of every chunk
    /// with `want_hidden`, in chunk and token order. A row's hidden state is computed like
    /// its logits: the same bits alone, batched or at any chunk size.
    pub fn forward_multi_seq_hidden_into(
        &self,
        kv: &mut KvCache,
        chunks: &[SeqChunk],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        self.validate(kv, chunks)?;
        hidden.clear();
        let weights = match &self.body {
            Body::Decoder(w) => w,
            Body::Encoder(weights) => {
                let encoder = Encoder {
                    file: &self.file,
                    pool: &self.pool,
                    config: &self.config,
                    weights,
                };
                encoder.validate(chunks)?;
                logits.clear();
                encoder.forward(chunks, hidden);
                return Ok(());
            }
        };
        let n_out: usize = chunks.iter().map(|c| c.logit_rows).sum();
        // Every element is overwritten below, so a reused buffer is not zeroed again (resize
        // only fills what it adds, or truncates).
        logits.resize(n_out * self.config.n_vocab, 0.0);
        let mut filled = 0;
        let mut piece: Vec<SeqChunk> = Vec::new();
        let mut rows = 0;
        for c in chunks {
            // At least one piece per chunk (an empty chunk stays one, as before the split).
            let mut done = 0;
            loop {
                let take = (c.tokens.len() - done).min(self.step_rows - rows);
                // The chunk's logit rows are its last tokens, so this piece's are its last.
                let first_logit = c.tokens.len() - c.logit_rows;
                let logit_rows = (done + take).saturating_sub(first_logit.max(done));
                piece.push(SeqChunk {
                    tokens: &c.tokens[done..done + take],
                    start_pos: c.start_pos + done,
                    blocks: c.blocks,
                    logit_rows,
                    want_hidden: c.want_hidden,
                });
                rows += take;
                done += take;
                if rows == self.step_rows {
                    filled += self.forward_rows(weights, kv, &piece, &mut logits[filled..], hidden);
                    piece.clear();
                    rows = 0;
                }
                if done == c.tokens.len() {
                    break;
                }
            }
        }
        if !piece.is_empty() {
            filled += self.forward_rows(weights, kv, &piece, &mut logits[filled..], hidden);
        }
        debug_assert_eq!(filled, logits.len());
        Ok(())
    }

    /// One forward over at most [`Model::step_rows`] validated rows; writes the logits rows at
    /// the front of `out` and returns how many values it wrote; appends the hidden rows of
    /// the chunks that want them to `hidden`.
    fn forward_rows(
        &self,
        weights: &Weights,
        kv: &mut KvCache,
        chunks: &[SeqChunk],
        out: &mut [f32],
        hidden: &mut Vec<f32>,
    ) -> usize {
        let cfg = &self.config;
        let mut queries = Vec::new();
        let mut tokens = Vec::new();
        for c in chunks {
            for (i, &t) in c.tokens.iter().enumerate() {
                queries.push(Query {
                    pos: c.start_pos + i,
                    blocks: c.blocks,
                });
                tokens.push(t);
            }
        }
        let n = tokens.len();
        if n == 0 {
            return 0;
        }
        let mut fresh = Scratch::default();
        let mut guard = self.scratch.try_lock().ok();
        let s = guard.as_deref_mut().unwrap_or(&mut fresh);
        s.resize(cfg, n);
        let positions: Vec<usize> = queries.iter().map(|q| q.pos).collect();
        let mscale = cfg.yarn.map_or(cfg.rope_attn_factor, |y| y.mscale);
        rope_table(&mut s.rope_global, &positions, &self.freqs_global, mscale);
        rope_table(&mut s.rope_swa, &positions, &self.freqs_swa, mscale);
        self.embed(weights, &tokens, &mut s.x);
        // The rows whose output is read: each chunk's last `logit_rows`, or all of a chunk
        // that wants hidden states. Where some row is not (a prompt chunk), the last layer
        // carries only these past its K/V; a decode step reads every row and builds nothing.
        let keep = chunks.iter().any(|c| skipped_rows(c) > 0).then(|| {
            let mut keep = Vec::with_capacity(n);
            let mut row = 0;
            for c in chunks {
                keep.extend(row + skipped_rows(c)..row + c.tokens.len());
                row += c.tokens.len();
            }
            keep
        });
        let last = weights.layers.len().saturating_sub(1);
        for (il, lw) in weights.layers.iter().enumerate() {
            let keep = keep.as_deref().filter(|_| il == last);
            self.layer(il, lw, kv, &queries, keep, s);
        }
        // `x` now holds the kept rows only, chunk by chunk. Every row of a chunk that wants
        // hidden states, normed as the head would see it; its last `logit_rows` for the head.
        let x = &s.x;
        let d = cfg.n_embd;
        let mut last = Vec::new();
        let mut row = 0;
        for c in chunks {
            let rows = row..row + c.tokens.len() - skipped_rows(c);
            row = rows.end;
            if c.want_hidden {
                let from = hidden.len();
                hidden.extend_from_slice(&x[rows.start * d..rows.end * d]);
                rms_norm_rows(&mut hidden[from..], &weights.output_norm, cfg.rms_eps);
            }
            last.extend_from_slice(&x[(rows.end - c.logit_rows) * d..rows.end * d]);
        }
        // Final norm and head, only for the rows that asked for logits.
        let n_out = last.len() / d;
        rms_norm_rows(&mut last, &weights.output_norm, cfg.rms_eps);
        let logits = &mut out[..n_out * cfg.n_vocab];
        match &self.head_rows8 {
            Some(head) => head.matmul(&self.pool, &last, n_out, logits),
            None => self.matmul(&weights.output, &last, n_out, logits),
        }
        if let Some(k) = cfg.logit_scale {
            let inv = 1.0 / k;
            logits.iter_mut().for_each(|l| *l *= inv);
        }
        if let Some(cap) = cfg.final_logit_softcap {
            for l in logits.iter_mut() {
                *l = (*l / cap).tanh() * cap;
            }
        }
        logits.len()
    }

    /// Checks every token id and block table before anything is computed or written.
    fn validate(&self, kv: &KvCache, chunks: &[SeqChunk]) -> Result<(), EngineError> {
        for c in chunks {
            for &t in c.tokens {
                if t as usize >= self.config.n_vocab {
                    return Err(EngineError::TokenOutOfRange {
                        id: t,
                        vocab_size: self.config.n_vocab,
                    });
                }
            }
            if c.logit_rows > c.tokens.len() {
                return Err(EngineError::TooManyLogitRows {
                    logit_rows: c.logit_rows,
                    tokens: c.tokens.len(),
                });
            }
            if c.tokens.is_empty() {
                continue;
            }
            let last = c.start_pos + c.tokens.len() - 1;
            let block_index = last / kv.block_size();
            if block_index >= c.blocks.len() {
                return Err(EngineError::BlockTableTooShort {
                    pos: last,
                    block_index,
                    n_blocks: c.blocks.len(),
                });
            }
            if let Some(&b) = c.blocks.iter().find(|&&b| b as usize >= kv.n_blocks()) {
                return Err(EngineError::BlockOutOfRange {
                    block: b,
                    n_blocks: kv.n_blocks(),
                });
            }
        }
        Ok(())
    }

    fn matmul(&self, w: &Matrix, x: &[f32], n: usize, out: &mut [f32]) {
        w.matmul(&self.pool, &self.file, x, n, out);
    }

    /// `out_i = W_i · x` for matrices that read the same input (Q/K/V, gate/up): where their
    /// types take the same activation format, `x` is quantized once for all of them (the
    /// same bits `matmul` would quantize each time) and, where all are repacked, they run in
    /// one parallel loop (`Matrix::matmul_acts_shared`); else each quantizes its own.
    fn matmul_shared<const K: usize>(
        &self,
        acts: &mut Activations,
        x: &[f32],
        n: usize,
        jobs: [(&Matrix, &mut [f32]); K],
    ) {
        let kind = ActKind::for_weights(jobs[0].0.ty);
        if jobs.iter().any(|(w, _)| ActKind::for_weights(w.ty) != kind) {
            for (w, out) in jobs {
                self.matmul(w, x, n, out);
            }
            return;
        }
        acts.quantize(&self.pool, jobs[0].0.ty, x, n, jobs[0].0.cols);
        let mut jobs = jobs;
        Matrix::matmul_acts_shared(&self.pool, &self.file, acts, &mut jobs);
    }

    /// Token embeddings into `x`, one row of n_embd per token (scaled by sqrt(n_embd) for
    /// Gemma).
    fn embed(&self, weights: &Weights, tokens: &[u32], x: &mut [f32]) {
        let d = self.config.n_embd;
        let e = &weights.token_embd;
        let table = e.view(&self.file);
        let rb = e.row_bytes();
        assert_eq!(x.len(), tokens.len() * d);
        let scale = if self.config.scale_embeddings {
            (d as f32).sqrt()
        } else {
            self.config.embedding_scale.unwrap_or(1.0)
        };
        // With a tied head, read the rows from its repacked copy: the file's pages of the table
        // were released after the repack, and faulting them back in for scattered token ids
        // maps ~64 KB of file around each (the kernel's fault-around): ~30 MB of RSS for a
        // 512-token prompt.
        let tied = self
            .head_rows8
            .as_ref()
            .filter(|_| weights.output.name == e.name);
        for (row, &t) in x.chunks_exact_mut(d).zip(tokens) {
            let t = t as usize;
            match tied {
                Some(head) => head.dequantize_row(t, row),
                None => {
                    ferrox_kernels::dequantize_row(e.ty, &table.data[t * rb..(t + 1) * rb], row)
                }
            }
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
    }
}

/// The rows of a chunk whose outputs nothing reads (its leading rows, before the last
/// `logit_rows`; none where it wants hidden states).
fn skipped_rows(c: &SeqChunk) -> usize {
    if c.want_hidden {
        0
    } else {
        c.tokens.len() - c.logit_rows
    }
}
