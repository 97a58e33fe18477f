//! Helpers shared by the integration tests: a valid sample file, a raw byte builder for files
//! the writer would refuse to produce, and a small seeded RNG (no dependency needed).

#![allow(dead_code)] // each test binary uses a different subset

use ferrox_gguf::{GgmlType, GgufWriter, Value};

/// A small valid file with every kind of section: scalars, strings, a nested array, an
/// alignment key and three tensors of different types.
pub fn sample_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::from("llama"))
        .add_metadata("general.alignment", Value::U32(64))
        .add_metadata("llama.block_count", Value::U32(1))
        .add_metadata("llama.rope.freq_base", Value::F32(10000.0))
        .add_metadata(
            "tokenizer.ggml.tokens",
            Value::from(vec!["<s>", "</s>", "a", "b"]),
        )
        .add_metadata(
            "tokenizer.ggml.scores",
            Value::from(vec![0.0f32, 0.0, -1.0, -2.0]),
        )
        .add_metadata("flag", Value::Bool(true))
        .add_metadata(
            "nested",
            Value::Array(vec![Value::from(vec![1u64, 2]), Value::from(vec![3u64])]),
        )
        .add_tensor(
            "token_embd.weight",
            &[32, 4],
            GgmlType::Q8_0,
            (0..136).map(|i| i as u8).collect(),
        )
        .add_tensor("output_norm.weight", &[32], GgmlType::F32, vec![1; 128])
        .add_tensor(
            "blk.0.ffn_up.weight",
            &[256, 1],
            GgmlType::Q4_K,
            vec![2; 144],
        );
    w.to_bytes()
}

/// Builds a GGUF byte stream field by field, with no checks at all.
pub struct Raw {
    pub bytes: Vec<u8>,
}

impl Raw {
    /// Magic, `version`, and the two counts.
    pub fn header(version: u32, tensor_count: u64, kv_count: u64) -> Raw {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.extend_from_slice(&tensor_count.to_le_bytes());
        bytes.extend_from_slice(&kv_count.to_le_bytes());
        Raw { bytes }
    }

    pub fn u32(mut self, v: u32) -> Raw {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(mut self, v: u64) -> Raw {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn raw(mut self, b: &[u8]) -> Raw {
        self.bytes.extend_from_slice(b);
        self
    }

    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).raw(s.as_bytes())
    }

    /// A metadata entry: key, type id, then `payload` verbatim.
    pub fn kv(self, key: &str, type_id: u32, payload: &[u8]) -> Raw {
        self.str(key).u32(type_id).raw(payload)
    }

    /// A tensor info.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }

    /// Pads to `alignment` and appends `data` as the data section.
    pub fn data(mut self, alignment: usize, data: &[u8]) -> Vec<u8> {
        let padded = self.bytes.len().div_ceil(alignment) * alignment;
        self.bytes.resize(padded, 0);
        self.bytes.extend_from_slice(data);
        self.bytes
    }
}

/// xorshift64*: a tiny seeded generator, so failures reproduce from the printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
