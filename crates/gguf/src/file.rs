//! [`GgufFile`]: a parsed GGUF file plus the bytes it was parsed from.
//!
//! The file owns its bytes: a read-only memory map for [`GgufFile::open`] (weights are paged in
//! by the kernels as they read them, never copied), or a `Vec` for [`GgufFile::from_bytes`]
//! (tests and the fuzzer). Parsing happens once, at construction, and validates every tensor's
//! placement, so [`GgufFile::tensor_data`] can return a plain slice. The type is immutable after
//! construction and therefore `Send + Sync`; the server shares one in an `Arc` across threads
//! (pinned by `tests::file_is_send_and_sync`).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::reader::{parse, Parsed};
use crate::{GgmlType, GgufError, Value};

/// One tensor's entry in the file's tensor table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous row length (columns), `dims[1]` the row count.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset of the tensor's data, relative to [`GgufFile::data_offset`].
    pub offset: u64,
    /// Byte size of the tensor's data (`ty.bytes_for(n_elems)`).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (1 for a tensor with no dims).
    pub fn n_elems(&self) -> u64 {
        // Checked against overflow at parse time.
        self.dims.iter().product()
    }

    /// Number of rows: the product of `dims[1..]`.
    pub fn rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Row length: `dims[0]` (1 for a tensor with no dims).
    pub fn cols(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }
}

/// Where a file's bytes live.
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file (v2 or v3) and its bytes.
pub struct GgufFile {
    bytes: Bytes,
    version: u32,
    metadata: Vec<(String, Value)>,
    /// Metadata key -> index into `metadata`.
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    /// Tensor name -> index into `tensors`.
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`. Weights are not read; only the header pages
    /// are touched.
    ///
    /// The map assumes the file is not modified while it is open (model files are written once
    /// and then only read); truncating it underneath a running server would fault on access.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let file = File::open(path.as_ref())?;
        if file.metadata()?.len() == 0 {
            // Mapping an empty file fails on some platforms; an empty file is simply truncated.
            return Self::from_backing(Bytes::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this value. Rust's aliasing rules would
        // be broken only if another process changed the file while mapped, which the doc above
        // rules out for model files.
        let map = unsafe { Mmap::map(&file)? };
        Self::from_backing(Bytes::Mapped(map))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(Bytes::Owned(bytes))
    }

    fn from_backing(bytes: Bytes) -> Result<GgufFile, GgufError> {
        let Parsed {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        } = parse(bytes.as_slice())?;
        let key_index = metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            bytes,
            version,
            metadata,
            key_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of metadata `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Removes `key` from the metadata and returns its value. For the big arrays a consumer
    /// has copied into its own form (a 262k-entry vocabulary takes ~30 MB as `Value`s), so
    /// they do not stay resident for the life of the file.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        let i = self.key_index.remove(key)?;
        let (_, v) = self.metadata.remove(i);
        for idx in self.key_index.values_mut() {
            if *idx > i {
                *idx -= 1;
            }
        }
        Some(v)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T, GgufError> {
        let v = self.require(key)?;
        convert(v).ok_or_else(|| GgufError::WrongType {
            key: key.to_owned(),
            expected,
            found: v.type_name(),
        })
    }

    /// Metadata `key` as a non-negative integer of any width.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, "non-negative integer", Value::as_u64)
    }

    /// Metadata `key` as an integer of any width that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.typed(key, "integer in u32 range", |v| {
            v.as_u64().and_then(|u| u32::try_from(u).ok())
        })
    }

    /// Metadata `key` as an integer of any width that fits in `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.typed(key, "integer", Value::as_i64)
    }

    /// Metadata `key` as a number (any integer or float), converted to `f32`.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.typed(key, "number", Value::as_f32)
    }

    /// Metadata `key` as a bool.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.typed(key, "bool", Value::as_bool)
    }

    /// Metadata `key` as a string.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.typed(key, "string", Value::as_str)
    }

    /// Metadata `key` as an array.
    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        self.typed(key, "array", Value::as_array)
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of tensor `t` (in `t.ty`'s block layout).
    ///
    /// # Panics
    /// If `t` did not come from this file's [`tensors`](Self::tensors) and its range lies
    /// outside the file: placement was validated at open for this file's tensors only.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|start| Some(start..start.checked_add(t.n_bytes)?))
            .and_then(|r| Some(usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?));
        range
            .and_then(|r| self.bytes.as_slice().get(r))
            .expect("TensorInfo from this file: its bounds were checked when the file was opened")
    }

    /// Lets the OS drop this process's resident pages of `data`, a slice of this file's bytes
    /// (say, a tensor the caller has copied into another layout), so that they no longer count
    /// in RSS. Reading them again stays correct: the mapping is read-only and shared, so the
    /// pages fault back in from the file. Only whole pages inside `data` are released; a
    /// no-op for files held in memory, for slices from elsewhere, and off Unix.
    pub fn release(&self, data: &[u8]) {
        #[cfg(unix)]
        if let Bytes::Mapped(m) = &self.bytes {
            let base = m.as_ptr() as usize;
            let start = data.as_ptr() as usize;
            if start < base || start + data.len() > base + m.len() {
                return;
            }
            const PAGE: usize = 4096;
            let first = (start - base).div_ceil(PAGE) * PAGE;
            let end = (start - base + data.len()) / PAGE * PAGE;
            if end > first {
                // SAFETY: DONTNEED on a read-only shared file mapping only drops resident pages;
                // every later read sees the same bytes (faulted back in from the file), so no
                // live reference can observe a change.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
                };
            }
        }
    }

    /// The data section's alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute byte offset where the data section starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Total size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes.as_slice().len() as u64
    }

    /// Whether the bytes are memory-mapped (as opposed to owned in memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, Bytes::Mapped(_))
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("mapped", &self.is_mapped())
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufWriter;

    #[test]
    fn file_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<GgufFile>();
    }

    fn sample() -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", Value::from("llama"))
            .add_metadata("llama.block_count", Value::U32(2))
            .add_metadata("llama.rope.freq_base", Value::F32(10000.0))
            .add_metadata("neg", Value::I32(-1))
            .add_metadata("flag", Value::Bool(true))
            .add_metadata("list", Value::from(vec![1u32, 2, 3]))
            .add_tensor("w", &[4, 2], GgmlType::F32, vec![7; 32]);
        GgufFile::from_bytes(w.to_bytes()).unwrap()
    }

    #[test]
    fn typed_getters_name_the_key() {
        let f = sample();
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(f.get_u64("llama.block_count").unwrap(), 2);
        assert_eq!(f.get_u32("llama.block_count").unwrap(), 2);
        assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
        assert_eq!(f.get_f32("llama.block_count").unwrap(), 2.0);
        assert_eq!(f.get_i64("neg").unwrap(), -1);
        assert!(f.get_bool("flag").unwrap());
        assert_eq!(f.get_array("list").unwrap().len(), 3);
        match f.get_u64("neg") {
            Err(GgufError::WrongType {
                key, found: "i32", ..
            }) => assert_eq!(key, "neg"),
            other => panic!("{other:?}"),
        }
        match f.get_str("nope") {
            Err(GgufError::MissingKey(k)) => assert_eq!(k, "nope"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            f.get_array("flag"),
            Err(GgufError::WrongType {
                expected: "array",
                ..
            })
        ));
    }

    #[test]
    fn tensor_accessors() {
        let f = sample();
        let t = f.tensor("w").unwrap();
        assert_eq!((t.cols(), t.rows(), t.n_elems(), t.n_bytes), (4, 2, 8, 32));
        assert_eq!(f.tensor_data(t), &[7; 32]);
        assert_eq!(f.data_offset() % f.alignment(), 0);
        assert!(f.tensor("x").is_none());
        assert!(!f.is_mapped());
        assert!(format!("{f:?}").contains("tensors: 1"));
    }

    #[test]
    #[should_panic(expected = "bounds were checked")]
    fn foreign_tensor_info_panics_with_reason() {
        let f = sample();
        let mut t = f.tensor("w").unwrap().clone();
        t.offset = 1 << 40;
        f.tensor_data(&t);
    }

    #[test]
    fn open_maps_the_file() {
        let dir = std::env::temp_dir().join(format!("ferrox-gguf-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        let mut w = GgufWriter::new();
        w.add_metadata("k", Value::U8(1))
            .add_tensor("w", &[2], GgmlType::F16, vec![1, 2, 3, 4]);
        w.write_to(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert!(f.is_mapped());
        assert_eq!(f.file_size(), std::fs::metadata(&path).unwrap().len());
        assert_eq!(f.tensor_data(&f.tensors()[0]), &[1, 2, 3, 4]);
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            GgufFile::open(&path),
            Err(GgufError::Truncated { field: "magic", .. })
        ));
        assert!(matches!(
            GgufFile::open(dir.join("absent.gguf")),
            Err(GgufError::Io(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
