//! GGUF: the file format llama.cpp models ship in.
//!
//! This crate owns reading (memory-mapped, every number checked against the file) and writing
//! (so tests can build small random-weight models of each architecture).
//!
//! API CONTRACT (other crates code against this; keep these names and signatures):
//! - [`GgmlType`]: tensor element/block types with their GGUF ids, block sizes and byte sizes.
//! - [`Value`]: a metadata value (every GGUF type, arrays nested).
//! - [`TensorInfo`]: name, dims (ggml order: dims[0] is the contiguous row length), type,
//!   byte offset (relative to the data section) and byte size.
//! - [`GgufFile::open`] / [`GgufFile::from_bytes`]; `metadata()`, `get(key)`, `tensors()`,
//!   `tensor(name)`, `tensor_data(&TensorInfo) -> &[u8]`.
//! - [`GgufWriter`]: add metadata and tensors (raw bytes already in the tensor's type), then
//!   `write_to(path)` / `to_bytes()`.

mod types;
pub use types::GgmlType;

// The rest of the crate (reader, writer, error) is filled in by the gguf work item.
