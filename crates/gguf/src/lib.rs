//! GGUF: the file format llama.cpp models ship in.
//!
//! This crate owns reading (memory-mapped, every number checked against the file) and writing
//! (so tests can build small random-weight models of each architecture).
//!
//! API CONTRACT (other crates code against this; keep these names and signatures):
//! - [`GgmlType`]: tensor element/block types with their GGUF ids, block sizes and byte sizes.
//! - [`Value`]: a metadata value (every GGUF type, arrays nested).
//! - [`TensorInfo`]: name, dims (ggml order: `dims[0]` is the contiguous row length), type,
//!   byte offset (relative to the data section) and byte size.
//! - [`GgufFile::open`] / [`GgufFile::from_bytes`]; `metadata()`, `get(key)`, `tensors()`,
//!   `tensor(name)`, `tensor_data(&TensorInfo) -> &[u8]`.
//! - [`GgufWriter`]: add metadata and tensors (raw bytes already in the tensor's type), then
//!   `write_to(path)` / `to_bytes()`.
//! - [`join_split`]: the shards of a split GGUF joined into one file.
//!
//! Layout: `reader` parses and validates (the only code that touches untrusted numbers, with
//! its caps in [`limits`]); `file` holds the result and the bytes; `writer` is the inverse of
//! `reader`; `join` joins a split model's shards; `error` is the one error enum. The file
//! format itself is little-endian: `"GGUF"`, version u32, tensor_count u64,
//! metadata_kv_count u64, the metadata entries, the tensor infos, padding to the alignment,
//! then the data section.

mod error;
mod file;
mod join;
pub mod limits;
mod reader;
mod types;
mod value;
mod writer;

pub use error::GgufError;
pub use file::{GgufFile, TensorInfo};
pub use join::join_split;
pub use types::GgmlType;
pub use value::Value;
pub use writer::GgufWriter;
