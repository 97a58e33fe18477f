//! The crate's one error type.
//!
//! Every refusal of a file names the field that was wrong and carries the numbers that made it
//! wrong (the byte offset where it was read, the count or length found, the limit it broke), so
//! a report about a bad model file can be answered from the message alone, without the file.
//! Offsets are absolute byte offsets into the file unless a variant says otherwise.

use crate::GgmlType;

/// Why a GGUF file could not be read, a metadata lookup failed, or the writer refused input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Opening or memory-mapping the file (or writing one) failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),

    /// The first four bytes are not `GGUF`.
    #[error("bad magic {found:02x?}: not a GGUF file")]
    BadMagic { found: [u8; 4] },

    /// A version this reader does not speak. Version 1 used 32-bit counts and is obsolete.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),

    /// The version reads as 2 or 3 only when byte-swapped: a big-endian GGUF file.
    #[error("big-endian GGUF (version {version} byte-swapped) is not supported")]
    BigEndian { version: u32 },

    /// The file ends inside `field`.
    #[error("truncated {field} at offset {offset}: needs {needed} bytes, {available} left")]
    Truncated {
        field: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },

    /// A count (tensors, metadata entries, array elements) is larger than the rest of the file
    /// could hold even if every item had its smallest possible encoding, or larger than a cap.
    #[error("{field} at offset {offset} is {count}, but at most {max} fit")]
    CountTooLarge {
        field: &'static str,
        offset: u64,
        count: u64,
        max: u64,
    },

    /// A string is longer than [`crate::limits::MAX_STRING_BYTES`] (or another named cap).
    #[error("{field} at offset {offset} is {len} bytes long, limit {max}")]
    StringTooLong {
        field: &'static str,
        offset: u64,
        len: u64,
        max: u64,
    },

    /// A string is not valid UTF-8.
    #[error("{field} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str, offset: u64 },

    /// A metadata value type id outside 0..=12.
    #[error("metadata `{key}`: unknown value type {type_id}")]
    BadValueType { key: String, type_id: u32 },

    /// A bool byte other than 0 or 1.
    #[error("metadata `{key}`: bool byte {byte} at offset {offset} is neither 0 nor 1")]
    BadBool { key: String, offset: u64, byte: u8 },

    /// Arrays nested deeper than [`crate::limits::MAX_ARRAY_DEPTH`].
    #[error("metadata `{key}`: arrays nested deeper than {max}")]
    TooDeep { key: String, max: usize },

    /// The whole metadata section holds more values than [`crate::limits::MAX_METADATA_VALUES`].
    #[error("metadata `{key}`: more than {max} metadata values in the file")]
    TooManyValues { key: String, max: u64 },

    /// The same metadata key appears twice.
    #[error("duplicate metadata key `{0}`")]
    DuplicateKey(String),

    /// The same tensor name appears twice.
    #[error("duplicate tensor `{0}`")]
    DuplicateTensor(String),

    /// `general.alignment` is zero, not a power of two, or too large.
    #[error("alignment {value} is not a nonzero power of two up to {max}")]
    BadAlignment { value: u64, max: u64 },

    /// A tensor has more than ggml's `GGML_MAX_DIMS` dimensions.
    #[error("tensor `{tensor}` has {n_dims} dims, at most {max} allowed")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: u32,
    },

    /// A tensor's dims multiply past `i64::MAX` (ggml counts elements in `int64_t`).
    #[error("tensor `{tensor}`: dims {dims:?} overflow the element count")]
    ShapeOverflow { tensor: String, dims: Vec<u64> },

    /// A tensor type id this crate does not read (named when ggml has a name for it).
    #[error(
        "tensor `{tensor}`: unsupported tensor type {} (ggml type id {type_id})",
        crate::types::ggml_type_name(*type_id).unwrap_or("unknown")
    )]
    UnsupportedTensorType { tensor: String, type_id: u32 },

    /// A quantized tensor whose rows are not a whole number of blocks.
    #[error(
        "tensor `{tensor}`: row length {cols} is not a multiple of {ty:?}'s block of {block_elems}"
    )]
    PartialBlock {
        tensor: String,
        ty: GgmlType,
        cols: u64,
        block_elems: u64,
    },

    /// A tensor's offset is not a multiple of the file's alignment.
    #[error("tensor `{tensor}`: offset {offset} is not a multiple of alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    /// A tensor's bytes do not lie inside the data section. `offset` is relative to it.
    #[error(
        "tensor `{tensor}`: bytes {offset}..{offset}+{n_bytes} exceed the data section of {data_bytes} bytes"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        n_bytes: u64,
        data_bytes: u64,
    },

    /// Joining: the files are not the shards of one split, all of them, in order.
    #[error("not the shards of one split: {0}")]
    BadSplit(String),

    /// A metadata key the caller needed is absent.
    #[error("missing metadata key `{0}`")]
    MissingKey(String),

    /// A metadata key holds a value of another type (or out of the requested range).
    #[error("metadata `{key}`: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    /// Writer: tensor data does not match its type and shape.
    #[error(
        "tensor `{tensor}`: {actual} data bytes given, {ty:?} with these dims needs {expected:?}"
    )]
    DataSizeMismatch {
        tensor: String,
        ty: GgmlType,
        expected: Option<u64>,
        actual: u64,
    },

    /// Writer: an array whose elements are not all of one type (GGUF arrays are homogeneous).
    #[error("metadata `{key}`: array mixes {first} and {found}")]
    MixedArray {
        key: String,
        first: &'static str,
        found: &'static str,
    },
}
