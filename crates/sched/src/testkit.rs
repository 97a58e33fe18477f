//! Test support, public so that the crate's integration tests and the server's tests can use
//! it: a deterministic fake model, and a probe that records or paces a model's forward calls.
//!
//! [`FakeModel`] is cheap but has the property that matters: its logits for a position are a
//! function of *every* token of that sequence so far, read back from the KV blocks of the
//! sequence's block table, and it refuses to read a position that was never written. A
//! scheduler that hands two rows the same block, forgets a chunk, feeds a token at the wrong
//! position or reads another sequence's leftovers gets different logits from a sequence run
//! alone — which is exactly what the batched == sequential tests compare.

use std::sync::{Condvar, Mutex};

use ferrox_engine::kv::{BlockId, KvShape, SeqChunk};

use crate::model::StepModel;

/// How a [`FakeModel`] turns a sequence into logits.
#[derive(Debug, Clone)]
pub enum FakeLogits {
    /// Pseudo-random logits in `[-4, 4)` from a hash of every (token, position) of the
    /// sequence.
    Hash,
    /// The token after position `p` is `script[(p + 1) % script.len()]` (logit 10, every other
    /// token 0): a prompt `script[..n]` continues with `script[n..]`. For stop-string tests.
    Script(Vec<u32>),
    /// [`FakeLogits::Hash`], plus `bonus` on the token `period` positions back: a model that
    /// mostly repeats itself (greedy, when that token's hash is within `bonus` of the best),
    /// whose drafts from prompt lookup are often right and sometimes wrong. For speculative
    /// decoding's tests.
    Repeating { period: usize, bonus: f32 },
}

/// A deterministic model with a small vocabulary whose tokens exercise the text paths.
///
/// Vocabulary ([`FakeModel::VOCAB`] = 64): 0 `<eos>` (end of generation); 1–26 `a`–`z`;
/// 27 space; 28 newline; 29 `ab`; 30–32 the three bytes of `€` one per token; 33–36 the four
/// bytes of `😀` one per token; 37 `é`; 38 `STOP`; 39–61 `w39`…`w61`; 62 [`FakeModel::ERROR`]
/// (a forward containing it fails); 63 [`FakeModel::POISON`] (a forward containing it
/// panics). The last two never win sampling (their logit is -inf).
#[derive(Debug, Clone)]
pub struct FakeModel {
    pub logits: FakeLogits,
    pub max_context: usize,
    pub kv_shape: KvShape,
}

/// The fake's KV cache: per position slot, the token and the position written there.
#[derive(Debug)]
pub struct FakeKv {
    block_size: usize,
    slots: Vec<Option<(u32, usize)>>,
}

impl FakeModel {
    pub const VOCAB: usize = 64;
    pub const EOS: u32 = 0;
    pub const ERROR: u32 = 62;
    pub const POISON: u32 = 63;
    /// Values in a token's fake hidden state.
    pub const HIDDEN: usize = 8;

    pub fn hash() -> Self {
        Self {
            logits: FakeLogits::Hash,
            max_context: 4096,
            // 2 layers × 1 head × 8 dims × 2 × 2 bytes = 64 bytes a position.
            kv_shape: KvShape::f16(2, 1, 8),
        }
    }

    /// [`FakeLogits::Repeating`] with period 7 and bonus 7: greedy repeats about 90 % of the
    /// time, sampling at temperature 1 about 70 %.
    pub fn repeating() -> Self {
        Self {
            logits: FakeLogits::Repeating {
                period: 7,
                bonus: 7.0,
            },
            ..Self::hash()
        }
    }

    pub fn script(script: Vec<u32>) -> Self {
        Self {
            logits: FakeLogits::Script(script),
            ..Self::hash()
        }
    }

    /// Token ids spelling `text` in the fake vocabulary (lower-case letters, space, newline).
    pub fn encode(text: &str) -> Vec<u32> {
        text.bytes()
            .map(|b| match b {
                b'a'..=b'z' => u32::from(b - b'a') + 1,
                b' ' => 27,
                b'\n' => 28,
                _ => panic!("the fake vocabulary has no {b:?}"),
            })
            .collect()
    }

    /// Positions `0..=last` of a sequence as its KV blocks hold them (each slot must hold
    /// the token written for that very position).
    fn read_back(
        kv: &FakeKv,
        blocks: &[BlockId],
        last: usize,
    ) -> Result<Vec<(u32, usize)>, String> {
        let mut seq = Vec::with_capacity(last + 1);
        for pos in 0..=last {
            let slot = Self::slot(kv, blocks, pos)
                .ok_or_else(|| format!("position {pos} is beyond the block table"))?;
            match kv.slots[slot] {
                Some((t, p)) if p == pos => seq.push((t, p)),
                other => return Err(format!("position {pos} holds {other:?}")),
            }
        }
        Ok(seq)
    }

    /// The fake hidden state of the last of `tokens` (a sequence from position 0): what a
    /// test computes its expected embeddings from.
    pub fn hidden_state(tokens: &[u32]) -> Vec<f32> {
        let seq: Vec<(u32, usize)> = tokens.iter().enumerate().map(|(p, &t)| (t, p)).collect();
        let mut out = Vec::new();
        Self::hidden_row(&seq, &mut out);
        out
    }

    /// A token's "hidden state": [`Self::HIDDEN`] values hashed from its whole sequence.
    fn hidden_row(seq: &[(u32, usize)], out: &mut Vec<f32>) {
        let h = seq.iter().fold(0x9abc_def0u64, |h, &(t, p)| {
            mix(h ^ mix(u64::from(t) << 32 | p as u64))
        });
        out.extend((0..Self::HIDDEN as u64).map(|v| {
            let bits = mix(h ^ v.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 40;
            bits as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }));
    }

    fn slot(kv: &FakeKv, blocks: &[BlockId], pos: usize) -> Option<usize> {
        let block = *blocks.get(pos / kv.block_size)? as usize;
        Some(block * kv.block_size + pos % kv.block_size)
    }

    fn row(&self, seq: &[(u32, usize)], out: &mut Vec<f32>) {
        let last_pos = seq.len() - 1;
        let start = out.len();
        let hash = |out: &mut Vec<f32>| {
            let h = seq.iter().fold(0x1234_5678u64, |h, &(t, p)| {
                mix(h ^ mix(u64::from(t) << 32 | p as u64))
            });
            out.extend((0..Self::VOCAB as u64).map(|v| {
                let bits = mix(h ^ v.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 40;
                bits as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
            }));
        };
        match &self.logits {
            FakeLogits::Hash => hash(out),
            &FakeLogits::Repeating { period, bonus } => {
                hash(out);
                if let Some(&(t, _)) = (last_pos + 1).checked_sub(period).and_then(|p| seq.get(p)) {
                    out[start + t as usize] += bonus;
                }
            }
            FakeLogits::Script(script) => {
                out.resize(start + Self::VOCAB, 0.0);
                out[start + script[(last_pos + 1) % script.len()] as usize] = 10.0;
            }
        }
        out[start + Self::ERROR as usize] = f32::NEG_INFINITY;
        out[start + Self::POISON as usize] = f32::NEG_INFINITY;
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl StepModel for FakeModel {
    /// On two threads, as the engine's pool runs it, so the scheduler's tests exercise the
    /// parallel sampling path (each task on whichever thread takes it).
    fn run_parallel(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                return;
            }
            f(i);
        };
        std::thread::scope(|s| {
            s.spawn(work);
            work();
        });
    }

    type Kv = FakeKv;
    type Error = String;

    fn kv_shape(&self) -> KvShape {
        self.kv_shape
    }

    fn vocab_size(&self) -> usize {
        Self::VOCAB
    }

    fn max_context(&self) -> usize {
        self.max_context
    }

    fn new_kv(&self, _: KvShape, block_size_tokens: usize, n_blocks: usize) -> FakeKv {
        FakeKv {
            block_size: block_size_tokens,
            slots: vec![None; block_size_tokens * n_blocks],
        }
    }

    fn copy_kv(&self, kv: &mut FakeKv, from: BlockId, to: BlockId, positions: usize) {
        let (from, to) = (from as usize * kv.block_size, to as usize * kv.block_size);
        kv.slots.copy_within(from..from + positions, to);
    }

    fn hidden_size(&self) -> usize {
        Self::HIDDEN
    }

    fn forward(
        &self,
        kv: &mut FakeKv,
        chunks: &[SeqChunk<'_>],
        out: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), String> {
        out.clear();
        hidden.clear();
        for c in chunks {
            if c.tokens.contains(&Self::POISON) {
                panic!("fake model: poison token");
            }
            if c.tokens.contains(&Self::ERROR) {
                return Err("fake model: error token".into());
            }
            for (i, &t) in c.tokens.iter().enumerate() {
                let pos = c.start_pos + i;
                let slot = Self::slot(kv, c.blocks, pos)
                    .ok_or_else(|| format!("position {pos} is beyond the block table"))?;
                kv.slots[slot] = Some((t, pos));
            }
            if c.want_hidden {
                for i in 0..c.tokens.len() {
                    let seq = Self::read_back(kv, c.blocks, c.start_pos + i)?;
                    Self::hidden_row(&seq, hidden);
                }
            }
            for i in c.tokens.len() - c.logit_rows..c.tokens.len() {
                let seq = Self::read_back(kv, c.blocks, c.start_pos + i)?;
                self.row(&seq, out);
            }
        }
        Ok(())
    }

    fn is_eog(&self, id: u32) -> bool {
        id == Self::EOS
    }

    fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        const EURO: [u8; 3] = [0xE2, 0x82, 0xAC];
        const GRIN: [u8; 4] = [0xF0, 0x9F, 0x98, 0x80];
        match id {
            0 => out.extend_from_slice(b"<eos>"),
            1..=26 => out.push(b'a' + (id - 1) as u8),
            27 => out.push(b' '),
            28 => out.push(b'\n'),
            29 => out.extend_from_slice(b"ab"),
            30..=32 => out.push(EURO[(id - 30) as usize]),
            33..=36 => out.push(GRIN[(id - 33) as usize]),
            37 => out.extend_from_slice("é".as_bytes()),
            38 => out.extend_from_slice(b"STOP"),
            _ => out.extend_from_slice(format!("w{id}").as_bytes()),
        }
    }
}

/// What one chunk of a recorded forward call looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    pub tokens: Vec<u32>,
    pub start_pos: usize,
    /// The sequence's first block: identifies the sequence for as long as it lives.
    pub first_block: BlockId,
    /// Logits rows returned: the chunk's last this many tokens.
    pub logit_rows: usize,
}

/// Wraps a model: records every forward call's chunks, and optionally makes each call wait
/// for a permit from the test ([`Probe::allow`]), so a test can hold the worker between ticks
/// and count steps instead of time.
#[derive(Debug)]
pub struct Probe<M> {
    pub inner: M,
    calls: Mutex<Vec<Vec<ChunkRecord>>>,
    gate: Option<(Mutex<Gate>, Condvar)>,
}

#[derive(Debug, Default)]
struct Gate {
    permits: u64,
    open: bool,
    /// The worker is inside `forward`, waiting for a permit.
    waiting: bool,
}

impl<M> Probe<M> {
    /// Records, never blocks.
    pub fn recording(inner: M) -> Self {
        Self {
            inner,
            calls: Mutex::new(Vec::new()),
            gate: None,
        }
    }

    /// Records, and every forward waits for a permit.
    pub fn gated(inner: M) -> Self {
        Self {
            gate: Some((Mutex::new(Gate::default()), Condvar::new())),
            ..Self::recording(inner)
        }
    }

    /// Lets `n` more forward calls through.
    pub fn allow(&self, n: u64) {
        let (m, cv) = self.gate.as_ref().expect("allow on an ungated probe");
        m.lock().unwrap().permits += n;
        cv.notify_all();
    }

    /// Lets every forward call through from now on.
    pub fn open(&self) {
        if let Some((m, cv)) = &self.gate {
            m.lock().unwrap().open = true;
            cv.notify_all();
        }
    }

    /// Blocks until the worker is waiting at the gate with no permit left: every allowed
    /// step has run, and the next one has been planned.
    pub fn wait_until_blocked(&self) {
        let (m, cv) = self.gate.as_ref().expect("wait on an ungated probe");
        let mut g = m.lock().unwrap();
        while !(g.waiting && g.permits == 0) {
            g = cv.wait(g).unwrap();
        }
    }

    /// Every forward call so far.
    pub fn calls(&self) -> Vec<Vec<ChunkRecord>> {
        self.calls.lock().unwrap().clone()
    }
}

impl<M: StepModel> StepModel for Probe<M> {
    fn run_parallel(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        self.inner.run_parallel(n, f)
    }

    type Kv = M::Kv;
    type Error = M::Error;

    fn kv_shape(&self) -> KvShape {
        self.inner.kv_shape()
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn max_context(&self) -> usize {
        self.inner.max_context()
    }

    fn new_kv(&self, shape: KvShape, block_size_tokens: usize, n_blocks: usize) -> M::Kv {
        self.inner.new_kv(shape, block_size_tokens, n_blocks)
    }

    fn copy_kv(&self, kv: &mut M::Kv, from: BlockId, to: BlockId, positions: usize) {
        self.inner.copy_kv(kv, from, to, positions)
    }

    fn hidden_size(&self) -> usize {
        self.inner.hidden_size()
    }

    fn forward(
        &self,
        kv: &mut M::Kv,
        chunks: &[SeqChunk<'_>],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), M::Error> {
        if let Some((m, cv)) = &self.gate {
            let mut g = m.lock().unwrap();
            while !g.open && g.permits == 0 {
                g.waiting = true;
                cv.notify_all();
                g = cv.wait(g).unwrap();
            }
            g.waiting = false;
            if !g.open {
                g.permits -= 1;
            }
        }
        self.calls.lock().unwrap().push(
            chunks
                .iter()
                .map(|c| ChunkRecord {
                    tokens: c.tokens.to_vec(),
                    start_pos: c.start_pos,
                    first_block: c.blocks[0],
                    logit_rows: c.logit_rows,
                })
                .collect(),
        );
        self.inner.forward(kv, chunks, logits, hidden)
    }

    fn is_eog(&self, id: u32) -> bool {
        self.inner.is_eog(id)
    }

    fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        self.inner.token_bytes(id, out)
    }
}
