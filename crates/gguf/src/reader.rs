//! Parsing: bytes in, checked header, metadata and tensor table out.
//!
//! This module never trusts a number from the file. Reads go through [`Cursor`], whose every
//! method names the field it reads so that running out of bytes becomes
//! [`GgufError::Truncated`] with that name. Counts are checked against the bytes left before
//! anything is reserved (see [`crate::limits`]), and all offset arithmetic is checked. The
//! tensor table is validated completely here (type, shape, alignment, bounds), which is what
//! lets [`crate::GgufFile::tensor_data`] slice without returning a `Result`.
//!
//! Pinned by `tests/hostile.rs` (every prefix of a valid file, absurd counts, a nesting bomb)
//! and the `gguf_parse` fuzz target.

use std::collections::HashSet;

use crate::limits::*;
use crate::value::{min_encoded_bytes, type_id, Value};
use crate::{GgmlType, GgufError, TensorInfo};

type Result<T> = std::result::Result<T, GgufError>;

/// What a successful parse yields; `GgufFile` adds the bytes it was parsed from.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// A read position over the file's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// The next `n` bytes, or `Truncated` naming `field`.
    fn take(&mut self, n: u64, field: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(GgufError::Truncated {
                field,
                offset: self.offset(),
                needed: n,
                available,
            });
        }
        let start = self.pos;
        self.pos += n as usize; // n <= remaining, so this fits in usize
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let b = self.take(N as u64, field)?;
        Ok(b.try_into().expect("take returned exactly N bytes"))
    }

    fn u8(&mut self, field: &'static str) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A u64 length prefix plus UTF-8 bytes, at most `max` long.
    fn string(&mut self, field: &'static str, max: u64) -> Result<String> {
        let offset = self.offset();
        let len = self.u64(field)?;
        if len > max {
            return Err(GgufError::StringTooLong {
                field,
                offset,
                len,
                max,
            });
        }
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { field, offset }),
        }
    }

    /// Reads a count and checks it against `cap` and against how many items of at least
    /// `min_item_bytes` the rest of the file could hold.
    fn count(&mut self, field: &'static str, min_item_bytes: u64, cap: u64) -> Result<u64> {
        let offset = self.offset();
        let count = self.u64(field)?;
        let max = (self.remaining() / min_item_bytes).min(cap);
        if count > max {
            return Err(GgufError::CountTooLarge {
                field,
                offset,
                count,
                max,
            });
        }
        Ok(count)
    }
}

/// A `Vec` with room for `count` items, but never more than [`PREALLOC_MAX_ITEMS`] up front.
fn vec_for<T>(count: u64) -> Vec<T> {
    Vec::with_capacity(count.min(PREALLOC_MAX_ITEMS) as usize)
}

/// Parses a whole GGUF file held in `bytes`.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed> {
    let mut cur = Cursor { bytes, pos: 0 };
    let version = read_preamble(&mut cur)?;
    let tensor_count = cur.count("tensor_count", MIN_TENSOR_INFO_BYTES, MAX_TENSORS)?;
    let kv_count = cur.count(
        "metadata_kv_count",
        MIN_METADATA_KV_BYTES,
        MAX_METADATA_KEYS,
    )?;

    let metadata = read_metadata(&mut cur, kv_count)?;
    let alignment = alignment_of(&metadata)?;
    let mut tensors = read_tensor_infos(&mut cur, tensor_count)?;

    let data_offset = align_up(cur.offset(), alignment);
    // A file with tensors must reach the data section, even if every tensor is empty: slicing
    // an empty tensor at `data_offset` must stay inside the bytes (fuzz regression
    // `empty-tensor-data-section-past-eof.bin`). A tensor-less file may stop before padding.
    let file_len = bytes.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(GgufError::Truncated {
            field: "data section padding",
            offset: cur.offset(),
            needed: data_offset - cur.offset(),
            available: cur.remaining(),
        });
    }
    let data_bytes = file_len.saturating_sub(data_offset);
    for t in &mut tensors {
        check_placement(t, alignment, data_bytes)?;
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Magic and version; returns the version.
fn read_preamble(cur: &mut Cursor) -> Result<u32> {
    let magic: [u8; 4] = cur.array("magic")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = cur.u32("version")?;
    match version {
        2 | 3 => Ok(version),
        v if matches!(v.swap_bytes(), 2 | 3) => Err(GgufError::BigEndian {
            version: v.swap_bytes(),
        }),
        v => Err(GgufError::UnsupportedVersion(v)),
    }
}

fn read_metadata(cur: &mut Cursor, kv_count: u64) -> Result<Vec<(String, Value)>> {
    let mut metadata = vec_for(kv_count);
    let mut seen = HashSet::with_capacity(kv_count.min(PREALLOC_MAX_ITEMS) as usize);
    let mut budget = MAX_METADATA_VALUES;
    for _ in 0..kv_count {
        let key = cur.string("metadata key", MAX_STRING_BYTES)?;
        let type_id = cur.u32("metadata value type")?;
        let value = read_value(cur, type_id, &key, 0, &mut budget)?;
        if !seen.insert(key.clone()) {
            return Err(GgufError::DuplicateKey(key));
        }
        metadata.push((key, value));
    }
    Ok(metadata)
}

/// One value of type `type_id`; `depth` is how many arrays enclose it and `budget` how many
/// more values the file may still declare ([`MAX_METADATA_VALUES`]).
fn read_value(
    cur: &mut Cursor,
    type_id: u32,
    key: &str,
    depth: usize,
    budget: &mut u64,
) -> Result<Value> {
    if *budget == 0 {
        return Err(GgufError::TooManyValues {
            key: key.to_owned(),
            max: MAX_METADATA_VALUES,
        });
    }
    *budget -= 1;
    const F: &str = "metadata value";
    Ok(match type_id {
        type_id::U8 => Value::U8(cur.u8(F)?),
        type_id::I8 => Value::I8(i8::from_le_bytes(cur.array(F)?)),
        type_id::U16 => Value::U16(u16::from_le_bytes(cur.array(F)?)),
        type_id::I16 => Value::I16(i16::from_le_bytes(cur.array(F)?)),
        type_id::U32 => Value::U32(cur.u32(F)?),
        type_id::I32 => Value::I32(i32::from_le_bytes(cur.array(F)?)),
        type_id::U64 => Value::U64(cur.u64(F)?),
        type_id::I64 => Value::I64(i64::from_le_bytes(cur.array(F)?)),
        type_id::F32 => Value::F32(f32::from_le_bytes(cur.array(F)?)),
        type_id::F64 => Value::F64(f64::from_le_bytes(cur.array(F)?)),
        type_id::BOOL => {
            let offset = cur.offset();
            match cur.u8(F)? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                byte => {
                    return Err(GgufError::BadBool {
                        key: key.to_owned(),
                        offset,
                        byte,
                    })
                }
            }
        }
        type_id::STRING => Value::String(cur.string("metadata string", MAX_STRING_BYTES)?),
        type_id::ARRAY => read_array(cur, key, depth + 1, budget)?,
        other => {
            return Err(GgufError::BadValueType {
                key: key.to_owned(),
                type_id: other,
            })
        }
    })
}

fn read_array(cur: &mut Cursor, key: &str, depth: usize, budget: &mut u64) -> Result<Value> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::TooDeep {
            key: key.to_owned(),
            max: MAX_ARRAY_DEPTH,
        });
    }
    let elem_type = cur.u32("array element type")?;
    let Some(min_bytes) = min_encoded_bytes(elem_type) else {
        return Err(GgufError::BadValueType {
            key: key.to_owned(),
            type_id: elem_type,
        });
    };
    let count = cur.count("array length", min_bytes, u64::MAX)?;
    if count > *budget {
        return Err(GgufError::TooManyValues {
            key: key.to_owned(),
            max: MAX_METADATA_VALUES,
        });
    }
    let mut elems = vec_for(count);
    for _ in 0..count {
        elems.push(read_value(cur, elem_type, key, depth, budget)?);
    }
    Ok(Value::Array(elems))
}

/// `general.alignment`, or the default. Any non-negative integer type is accepted (the spec
/// says u32; some writers use other widths), but it must be a power of two.
fn alignment_of(metadata: &[(String, Value)]) -> Result<u64> {
    const KEY: &str = "general.alignment";
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = v.as_u64().ok_or_else(|| GgufError::WrongType {
        key: KEY.to_owned(),
        expected: "unsigned integer",
        found: v.type_name(),
    })?;
    check_alignment(value)?;
    Ok(value)
}

pub(crate) fn check_alignment(value: u64) -> Result<()> {
    if value.is_power_of_two() && value <= MAX_ALIGNMENT {
        Ok(())
    } else {
        Err(GgufError::BadAlignment {
            value,
            max: MAX_ALIGNMENT,
        })
    }
}

/// `offset` rounded up to a multiple of `alignment` (a power of two <= [`MAX_ALIGNMENT`]; the
/// offset is below the file length, so this cannot overflow).
pub(crate) fn align_up(offset: u64, alignment: u64) -> u64 {
    offset.div_ceil(alignment) * alignment
}

fn read_tensor_infos(cur: &mut Cursor, tensor_count: u64) -> Result<Vec<TensorInfo>> {
    let mut tensors = vec_for(tensor_count);
    let mut seen = HashSet::with_capacity(tensor_count.min(PREALLOC_MAX_ITEMS) as usize);
    for _ in 0..tensor_count {
        let t = read_tensor_info(cur)?;
        if !seen.insert(t.name.clone()) {
            return Err(GgufError::DuplicateTensor(t.name));
        }
        tensors.push(t);
    }
    Ok(tensors)
}

/// One tensor info: name, dims, type, offset. Checks the shape and computes `n_bytes`;
/// placement is checked later, once the data section's start is known.
fn read_tensor_info(cur: &mut Cursor) -> Result<TensorInfo> {
    let name = cur.string("tensor name", MAX_TENSOR_NAME_BYTES)?;
    let n_dims = cur.u32("tensor n_dims")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
            max: MAX_DIMS,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(cur.u64("tensor dims")?);
    }
    let type_id = cur.u32("tensor type")?;
    let offset = cur.u64("tensor offset")?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnsupportedTensorType {
            tensor: name,
            type_id,
        });
    };
    let n_bytes = shape_bytes(&name, &dims, ty)?;
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
        n_bytes,
    })
}

/// Bytes a tensor of `dims` and `ty` occupies, checking that the element count fits ggml's
/// `int64_t` and that rows are whole blocks. Shared with the writer.
pub(crate) fn shape_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
    let overflow = || GgufError::ShapeOverflow {
        tensor: name.to_owned(),
        dims: dims.to_vec(),
    };
    let n_elems = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    if n_elems > i64::MAX as u64 {
        return Err(overflow());
    }
    let cols = dims.first().copied().unwrap_or(1);
    let block_elems = ty.block_elems() as u64;
    if cols % block_elems != 0 {
        return Err(GgufError::PartialBlock {
            tensor: name.to_owned(),
            ty,
            cols,
            block_elems,
        });
    }
    ty.bytes_for(n_elems).ok_or_else(overflow)
}

/// Checks that `t`'s offset is aligned and its bytes lie inside a data section of `data_bytes`.
fn check_placement(t: &TensorInfo, alignment: u64, data_bytes: u64) -> Result<()> {
    if !t.offset.is_multiple_of(alignment) {
        return Err(GgufError::MisalignedTensor {
            tensor: t.name.clone(),
            offset: t.offset,
            alignment,
        });
    }
    match t.offset.checked_add(t.n_bytes) {
        Some(end) if end <= data_bytes => Ok(()),
        _ => Err(GgufError::TensorOutOfBounds {
            tensor: t.name.clone(),
            offset: t.offset,
            n_bytes: t.n_bytes,
            data_bytes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names_the_field_it_ran_out_in() {
        let mut cur = Cursor {
            bytes: &[1, 2, 3],
            pos: 1,
        };
        match cur.u32("tensor n_dims") {
            Err(GgufError::Truncated {
                field,
                offset,
                needed,
                available,
            }) => {
                assert_eq!(
                    (field, offset, needed, available),
                    ("tensor n_dims", 1, 4, 2)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn count_is_bounded_by_remaining_bytes() {
        let mut bytes = 5u64.to_le_bytes().to_vec();
        bytes.extend([0u8; 39]); // room for 39 one-byte items, or 3 thirteen-byte ones
        let mut cur = Cursor {
            bytes: &bytes,
            pos: 0,
        };
        assert_eq!(cur.count("n", 1, u64::MAX).unwrap(), 5);
        let mut cur = Cursor {
            bytes: &bytes,
            pos: 0,
        };
        match cur.count("n", 13, u64::MAX) {
            Err(GgufError::CountTooLarge {
                count: 5, max: 3, ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn shape_checks() {
        assert_eq!(shape_bytes("t", &[32, 2], GgmlType::Q8_0).unwrap(), 68);
        assert_eq!(shape_bytes("t", &[], GgmlType::F32).unwrap(), 4);
        assert_eq!(shape_bytes("t", &[0, 5], GgmlType::F16).unwrap(), 0);
        assert!(matches!(
            shape_bytes("t", &[16], GgmlType::Q4_K),
            Err(GgufError::PartialBlock { cols: 16, .. })
        ));
        assert!(matches!(
            shape_bytes("t", &[1 << 32, 1 << 32], GgmlType::F32),
            Err(GgufError::ShapeOverflow { .. })
        ));
        assert!(matches!(
            shape_bytes("t", &[1 << 62, 4], GgmlType::F32),
            Err(GgufError::ShapeOverflow { .. })
        ));
    }

    #[test]
    fn alignment_rules() {
        assert_eq!(align_up(0, 32), 0);
        assert_eq!(align_up(33, 32), 64);
        assert!(check_alignment(0).is_err());
        assert!(check_alignment(48).is_err());
        assert!(check_alignment(MAX_ALIGNMENT * 2).is_err());
        assert!(check_alignment(1).is_ok());
        let md = vec![("general.alignment".to_owned(), Value::String("32".into()))];
        assert!(matches!(
            alignment_of(&md),
            Err(GgufError::WrongType {
                found: "string",
                ..
            })
        ));
    }
}
