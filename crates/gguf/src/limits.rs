//! Caps on what a GGUF file may declare, each with the reason it exists.
//!
//! Every count and length in a GGUF header is an untrusted number. Two rules keep a crafted file
//! from doing harm: a count is first checked against what the remaining bytes could possibly
//! hold (`remaining / smallest encoding`), and no buffer is ever reserved larger than
//! [`PREALLOC_MAX_ITEMS`] on the strength of a count alone. The caps below bound what is left:
//! memory that a *well-formed* but hostile file could make us spend, and stack depth.

/// ggml's `GGML_MAX_DIMS`: ggml tensors have at most 4 dimensions, so a file claiming more was
/// not written for ggml. Without the cap, `n_dims` (a u32) would size the dims vector.
pub const MAX_DIMS: u32 = 4;

/// ggml's `GGML_MAX_NAME` is 64 bytes including the terminating NUL, and llama.cpp refuses
/// longer tensor names; accepting them would let us load files no other GGUF reader loads.
pub const MAX_TENSOR_NAME_BYTES: u64 = 63;

/// Longest metadata string (key or value). The largest honest strings are chat templates and
/// embedded tokenizer JSON, a few MB; 64 MiB leaves room while keeping one string from claiming
/// most of a multi-GB mapped file as a heap copy.
pub const MAX_STRING_BYTES: u64 = 64 << 20;

/// Deepest array nesting. Real files use depth 1 (arrays of scalars or strings); the format
/// allows more. Each level costs a 12-byte header on disk and one recursive call here, so
/// without a cap a 1 MB file could nest ~80k deep and overflow the stack.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// Most metadata values (scalars plus array elements, all arrays together) in one file. A
/// parsed [`crate::Value`] takes 32 bytes of memory but a u8 takes 1 byte on disk, so an
/// uncapped file could cost 32x its size in RAM. The biggest vocabularies (~262k tokens, with
/// scores, types and merges) need ~1M values; 8M values caps the memory at 256 MiB.
pub const MAX_METADATA_VALUES: u64 = 8 << 20;

/// Most metadata key/value pairs. Real files carry 20-100; every key is a heap string plus a
/// hash-index entry, so the cap keeps millions of tiny empty-keyed entries out.
pub const MAX_METADATA_KEYS: u64 = 1 << 16;

/// Most tensors. The largest MoE models carry a few thousand; each [`crate::TensorInfo`] costs
/// ~100 bytes of memory for 24 bytes of file, so the cap bounds that amplification.
pub const MAX_TENSORS: u64 = 1 << 20;

/// Largest `general.alignment`. ggml writes 32; a larger power of two is legal, but alignment
/// beyond a huge page has no use and would let a tiny file claim a data section gigabytes away.
pub const MAX_ALIGNMENT: u64 = 1 << 21;

/// GGUF's default alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Most items reserved up front from a count in the file; vectors grow past this only as items
/// actually parse, so a lying count cannot make us reserve memory the file does not back.
pub const PREALLOC_MAX_ITEMS: u64 = 4096;

/// Smallest tensor info on disk: name length (8), n_dims (4), type (4), offset (8).
pub(crate) const MIN_TENSOR_INFO_BYTES: u64 = 24;

/// Smallest metadata entry on disk: key length (8), value type (4), a one-byte value.
pub(crate) const MIN_METADATA_KV_BYTES: u64 = 13;
