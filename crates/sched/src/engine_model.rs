//! [`StepModel`] for the engine's [`Model`]: every method is a direct call, nothing is
//! adapted. End-of-generation and token text come from the model's tokenizer; the text of a
//! control token is empty (llama.cpp's `special = false` rendering), so a control token that
//! is not a stop token adds nothing to the output.

use ferrox_engine::kv::BlockId;
use ferrox_engine::{EngineError, KvCache, KvShape, Model, SeqChunk};

use crate::model::StepModel;

impl StepModel for Model {
    type Kv = KvCache;
    type Error = EngineError;

    fn kv_shape(&self) -> KvShape {
        Model::kv_shape(self)
    }

    fn vocab_size(&self) -> usize {
        Model::vocab_size(self)
    }

    fn max_context(&self) -> usize {
        Model::max_context(self)
    }

    fn new_kv(&self, shape: KvShape, block_size_tokens: usize, n_blocks: usize) -> KvCache {
        self.new_kv_cache_of(shape, block_size_tokens, n_blocks)
    }

    fn copy_kv(&self, kv: &mut KvCache, from: BlockId, to: BlockId, positions: usize) {
        kv.copy_positions(from, to, positions);
    }

    fn hidden_size(&self) -> usize {
        self.config().n_embd
    }

    fn causal(&self) -> bool {
        self.config().causal
    }

    fn forward(
        &self,
        kv: &mut KvCache,
        chunks: &[SeqChunk<'_>],
        logits: &mut Vec<f32>,
        hidden: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        self.forward_multi_seq_hidden_into(kv, chunks, logits, hidden)
    }

    fn run_parallel(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        self.pool().for_each(n, f);
    }

    fn is_eog(&self, id: u32) -> bool {
        self.tokenizer().is_eog(id)
    }

    fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(self.tokenizer().token_bytes(id));
    }
}
