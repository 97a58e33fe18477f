//! [`GgufWriter`]: builds GGUF v3 files, so tests can make small models of any architecture
//! (random weights, real layouts) without shipping fixture files.
//!
//! The writer checks its input against the same rules the reader enforces (shape, block size,
//! homogeneous arrays, caps from [`crate::limits`]), so anything it writes reads back; the
//! round-trip tests at the bottom pin that. The `add_*` methods panic on bad input because a
//! wrong fixture is a bug in the test that builds it; `try_add_*` return the typed error instead.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::limits::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_STRING_BYTES, MAX_TENSOR_NAME_BYTES,
};
use crate::reader::{align_up, check_alignment, shape_bytes};
use crate::value::{type_id, type_id_name};
use crate::{GgmlType, GgufError, Value};

const ALIGNMENT_KEY: &str = "general.alignment";

/// A tensor waiting to be written.
#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes a GGUF v3 file.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty file with the default alignment (32).
    pub fn new() -> GgufWriter {
        GgufWriter {
            metadata: Vec::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }

    /// Sets the data alignment and records it as `general.alignment` (u32).
    ///
    /// # Panics
    /// If `alignment` is not a power of two up to [`crate::limits::MAX_ALIGNMENT`].
    pub fn alignment(&mut self, alignment: u64) -> &mut Self {
        let value = u32::try_from(alignment).unwrap_or(0);
        self.add_metadata(ALIGNMENT_KEY, Value::U32(value))
    }

    /// Adds metadata `key` (replacing its value, in place, if the key was already added).
    ///
    /// # Panics
    /// Where [`try_add_metadata`](Self::try_add_metadata) would return an error.
    pub fn add_metadata(&mut self, key: &str, value: Value) -> &mut Self {
        match self.try_add_metadata(key, value) {
            Ok(w) => w,
            Err(e) => panic!("GgufWriter::add_metadata: {e}"),
        }
    }

    /// Adds metadata `key`, or says why the value cannot be written: an array mixing element
    /// types, nesting past [`MAX_ARRAY_DEPTH`], an over-long string, or a `general.alignment`
    /// that is not a u32 power of two.
    pub fn try_add_metadata(&mut self, key: &str, value: Value) -> Result<&mut Self, GgufError> {
        check_string(key.len(), "metadata key")?;
        check_value(key, &value, 0)?;
        if key == ALIGNMENT_KEY {
            let Value::U32(a) = value else {
                return Err(GgufError::WrongType {
                    key: key.to_owned(),
                    expected: "u32",
                    found: value.type_name(),
                });
            };
            check_alignment(a.into())?;
            self.alignment = a.into();
        }
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        Ok(self)
    }

    /// Adds a tensor whose `data` is already in `ty`'s block layout, `dims` in ggml order.
    ///
    /// # Panics
    /// Where [`try_add_tensor`](Self::try_add_tensor) would return an error.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> &mut Self {
        match self.try_add_tensor(name, dims, ty, data) {
            Ok(w) => w,
            Err(e) => panic!("GgufWriter::add_tensor: {e}"),
        }
    }

    /// Adds a tensor, or says why not: a duplicate or over-long name, more than [`MAX_DIMS`]
    /// dims, rows that are not whole blocks, or `data.len() != ty.bytes_for(product of dims)`.
    pub fn try_add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        if name.len() as u64 > MAX_TENSOR_NAME_BYTES {
            let len = name.len() as u64;
            return Err(GgufError::StringTooLong {
                field: "tensor name",
                offset: 0,
                len,
                max: MAX_TENSOR_NAME_BYTES,
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor(name.to_owned()));
        }
        if dims.len() > MAX_DIMS as usize {
            let n_dims = u32::try_from(dims.len()).unwrap_or(u32::MAX);
            return Err(GgufError::TooManyDims {
                tensor: name.to_owned(),
                n_dims,
                max: MAX_DIMS,
            });
        }
        let size_mismatch = |expected| GgufError::DataSizeMismatch {
            tensor: name.to_owned(),
            ty,
            expected,
            actual: data.len() as u64,
        };
        let n_bytes = match shape_bytes(name, dims, ty) {
            Ok(n) => n,
            Err(GgufError::ShapeOverflow { .. }) => return Err(size_mismatch(None)),
            Err(e) => return Err(e),
        };
        if n_bytes != data.len() as u64 {
            return Err(size_mismatch(Some(n_bytes)));
        }
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    /// The whole file in memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out).expect("writing to a Vec cannot fail");
        out
    }

    /// Writes the file to `path`, streaming tensor data rather than building it in memory.
    pub fn write_to(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mut w = BufWriter::new(File::create(path)?);
        self.write(&mut w)?;
        w.flush()
    }

    fn write(&self, w: &mut impl Write) -> io::Result<()> {
        let tensors: Vec<TensorOut<'_>> = self
            .tensors
            .iter()
            .map(|t| TensorOut {
                name: &t.name,
                dims: &t.dims,
                ty: t.ty,
                data: &t.data,
            })
            .collect();
        write_gguf(w, &self.metadata, self.alignment, &tensors)
    }
}

/// A tensor to write: its info and its bytes, already in its type's block layout.
pub(crate) struct TensorOut<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub ty: GgmlType,
    pub data: &'a [u8],
}

/// Writes a GGUF v3 file: the header (`metadata`, then each tensor's info with its offset,
/// packed in order with each start aligned), padding, then the data, streamed from
/// `tensors`' bytes (which may be memory-mapped from other files, as when joining shards).
pub(crate) fn write_gguf(
    w: &mut impl Write,
    metadata: &[(String, Value)],
    alignment: u64,
    tensors: &[TensorOut<'_>],
) -> io::Result<()> {
    let mut next = 0u64;
    let offsets: Vec<u64> = tensors
        .iter()
        .map(|t| {
            let offset = align_up(next, alignment);
            next = offset + t.data.len() as u64;
            offset
        })
        .collect();
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_string(&mut head, key);
        head.extend_from_slice(&value.gguf_type_id().to_le_bytes());
        put_payload(&mut head, value);
    }
    for (t, offset) in tensors.iter().zip(&offsets) {
        put_string(&mut head, t.name);
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&(t.ty as u32).to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
    }
    let data_offset = align_up(head.len() as u64, alignment);
    head.resize(data_offset as usize, 0);
    w.write_all(&head)?;

    let mut written = 0u64;
    for (t, &offset) in tensors.iter().zip(&offsets) {
        w.write_all(&vec![0; (offset - written) as usize])?;
        w.write_all(t.data)?;
        written = offset + t.data.len() as u64;
    }
    let end = align_up(written, alignment);
    w.write_all(&vec![0; (end - written) as usize])
}

fn check_string(len: usize, field: &'static str) -> Result<(), GgufError> {
    if len as u64 > MAX_STRING_BYTES {
        return Err(GgufError::StringTooLong {
            field,
            offset: 0,
            len: len as u64,
            max: MAX_STRING_BYTES,
        });
    }
    Ok(())
}

/// Checks that `value` (enclosed in `depth` arrays) is writable and will read back.
fn check_value(key: &str, value: &Value, depth: usize) -> Result<(), GgufError> {
    match value {
        Value::String(s) => check_string(s.len(), "metadata string"),
        Value::Array(elems) => {
            if depth + 1 > MAX_ARRAY_DEPTH {
                return Err(GgufError::TooDeep {
                    key: key.to_owned(),
                    max: MAX_ARRAY_DEPTH,
                });
            }
            let first = elems.first().map(Value::gguf_type_id);
            for e in elems {
                let id = e.gguf_type_id();
                if Some(id) != first {
                    let first = type_id_name(first.unwrap_or(id));
                    return Err(GgufError::MixedArray {
                        key: key.to_owned(),
                        first,
                        found: e.type_name(),
                    });
                }
                check_value(key, e, depth + 1)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value without its type id (arrays carry their element type in their own header).
fn put_payload(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_string(out, s),
        Value::Array(elems) => {
            // An empty array has no element to take a type from; u8 is as good as any.
            let elem_type = elems.first().map_or(type_id::U8, Value::gguf_type_id);
            out.extend_from_slice(&elem_type.to_le_bytes());
            out.extend_from_slice(&(elems.len() as u64).to_le_bytes());
            for e in elems {
                put_payload(out, e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgufFile;

    fn every_scalar() -> Vec<(String, Value)> {
        [
            ("u8", Value::U8(200)),
            ("i8", Value::I8(-100)),
            ("u16", Value::U16(60000)),
            ("i16", Value::I16(-30000)),
            ("u32", Value::U32(4_000_000_000)),
            ("i32", Value::I32(-2_000_000_000)),
            ("u64", Value::U64(u64::MAX)),
            ("i64", Value::I64(i64::MIN)),
            ("f32", Value::F32(-1.25e-7)),
            ("f64", Value::F64(std::f64::consts::PI)),
            ("bool_t", Value::Bool(true)),
            ("bool_f", Value::Bool(false)),
            ("str", Value::from("héllo, ✓")),
            ("empty_str", Value::from("")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn nested_arrays() -> Vec<(String, Value)> {
        let strings = Value::from(vec!["<pad>", "<eos>", "▁the"]);
        let nested = Value::Array(vec![
            Value::from(vec![1i16, -2]),
            Value::Array(vec![]),
            Value::Array(vec![Value::from(vec![1.5f64])]),
        ]);
        let mut out = vec![
            ("tokens".to_owned(), strings),
            ("nested".to_owned(), nested),
            ("empty".to_owned(), Value::Array(vec![])),
        ];
        // One array of every scalar type.
        for (k, v) in every_scalar() {
            out.push((format!("arr_{k}"), Value::Array(vec![v.clone(), v])));
        }
        out
    }

    #[test]
    fn round_trip_metadata_and_tensors() {
        let mut w = GgufWriter::new();
        let mut expected = every_scalar();
        expected.extend(nested_arrays());
        for (k, v) in &expected {
            w.add_metadata(k, v.clone());
        }
        let q8: Vec<u8> = (0..34 * 4).map(|i| i as u8).collect();
        let f32s: Vec<u8> = (0..3 * 4).map(|i| (i * 7) as u8).collect();
        w.add_tensor("blk.0.attn_q.weight", &[64, 2], GgmlType::Q8_0, q8.clone())
            .add_tensor("output_norm.weight", &[3], GgmlType::F32, f32s.clone())
            .add_tensor("scalar", &[], GgmlType::F16, vec![0x00, 0x3c]);

        let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.metadata(), &expected[..]);
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.tensors().len(), 3);
        let q = f.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!(
            (&q.dims[..], q.ty, q.n_bytes, q.rows(), q.cols()),
            (&[64, 2][..], GgmlType::Q8_0, 136, 2, 64)
        );
        assert_eq!(f.tensor_data(q), &q8[..]);
        assert_eq!(
            f.tensor_data(f.tensor("output_norm.weight").unwrap()),
            &f32s[..]
        );
        assert_eq!(f.tensor_data(f.tensor("scalar").unwrap()), &[0x00, 0x3c]);
        for t in f.tensors() {
            assert_eq!(t.offset % 32, 0, "{}", t.name);
        }
    }

    #[test]
    fn custom_alignment_round_trips() {
        let mut w = GgufWriter::new();
        w.alignment(256)
            .add_tensor("a", &[3], GgmlType::F32, vec![1; 12])
            .add_tensor("b", &[1], GgmlType::F32, vec![2; 4]);
        let bytes = w.to_bytes();
        assert_eq!(bytes.len() % 256, 0);
        let f = GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(f.alignment(), 256);
        assert_eq!(f.get("general.alignment"), Some(&Value::U32(256)));
        assert_eq!(
            (f.data_offset() % 256, f.tensor("b").unwrap().offset),
            (0, 256)
        );
        assert_eq!(f.tensor_data(f.tensor("b").unwrap()), &[2; 4]);
    }

    #[test]
    fn same_key_twice_replaces_in_place() {
        let mut w = GgufWriter::new();
        w.add_metadata("a", Value::U8(1))
            .add_metadata("b", Value::U8(2))
            .add_metadata("a", Value::U8(3));
        let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(
            f.metadata(),
            &[
                ("a".to_owned(), Value::U8(3)),
                ("b".to_owned(), Value::U8(2))
            ]
        );
    }

    #[test]
    fn write_to_matches_to_bytes() {
        let mut w = GgufWriter::new();
        w.add_metadata("x", Value::from("y"))
            .add_tensor("t", &[32], GgmlType::Q4_0, vec![9; 18]);
        let path =
            std::env::temp_dir().join(format!("ferrox-gguf-writer-{}.gguf", std::process::id()));
        w.write_to(&path).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(on_disk, w.to_bytes());
    }

    #[test]
    fn refuses_what_the_reader_would_refuse() {
        let mut w = GgufWriter::new();
        let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
        assert!(matches!(
            w.try_add_metadata("m", mixed),
            Err(GgufError::MixedArray {
                first: "u8",
                found: "i8",
                ..
            })
        ));
        let mut deep = Value::U8(0);
        for _ in 0..=MAX_ARRAY_DEPTH {
            deep = Value::Array(vec![deep]);
        }
        assert!(matches!(
            w.try_add_metadata("d", deep),
            Err(GgufError::TooDeep { .. })
        ));
        assert!(matches!(
            w.try_add_metadata(ALIGNMENT_KEY, Value::U32(48)),
            Err(GgufError::BadAlignment { value: 48, .. })
        ));
        assert!(matches!(
            w.try_add_metadata(ALIGNMENT_KEY, Value::U64(64)),
            Err(GgufError::WrongType { .. })
        ));
        let size = w.try_add_tensor("t", &[32], GgmlType::Q8_0, vec![0; 33]);
        assert!(matches!(
            size,
            Err(GgufError::DataSizeMismatch {
                expected: Some(34),
                actual: 33,
                ..
            })
        ));
        assert!(matches!(
            w.try_add_tensor("t", &[16], GgmlType::Q8_0, vec![]),
            Err(GgufError::PartialBlock { .. })
        ));
        assert!(matches!(
            w.try_add_tensor("t", &[1; 5], GgmlType::F32, vec![0; 4]),
            Err(GgufError::TooManyDims { n_dims: 5, .. })
        ));
        let overflow = w.try_add_tensor("t", &[u64::MAX, 2], GgmlType::F32, vec![]);
        assert!(matches!(
            overflow,
            Err(GgufError::DataSizeMismatch { expected: None, .. })
        ));
        let long = "x".repeat(64);
        assert!(matches!(
            w.try_add_tensor(&long, &[1], GgmlType::F32, vec![0; 4]),
            Err(GgufError::StringTooLong { .. })
        ));
        w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]);
        assert!(matches!(
            w.try_add_tensor("t", &[1], GgmlType::F32, vec![0; 4]),
            Err(GgufError::DuplicateTensor(_))
        ));
    }

    #[test]
    #[should_panic(expected = "add_tensor")]
    fn add_tensor_panics_on_bad_size() {
        GgufWriter::new().add_tensor("t", &[2], GgmlType::F32, vec![0; 4]);
    }
}
