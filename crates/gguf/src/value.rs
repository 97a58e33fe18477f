//! Metadata values: every GGUF value type, arrays nested.
//!
//! The accessors are lenient about integer width on purpose: converters write the same key as
//! u32 in one file and i32 or u64 in another (`*.context_length`, `general.alignment`), so
//! `as_u64` accepts any integer that is non-negative and `as_f64` any number. They are strict
//! about kind: a bool is not an integer and a string is never parsed.

/// One metadata value. GGUF arrays are homogeneous; the reader guarantees that, the writer
/// checks it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

/// GGUF's on-disk value type ids.
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The fewest bytes one value of type `id` takes on disk (a string's or array's header when it
/// is empty), or `None` for an unknown id. Counts are checked against this before any
/// allocation: a count larger than `remaining / min_encoded_bytes` cannot be honest.
pub(crate) fn min_encoded_bytes(id: u32) -> Option<u64> {
    use type_id::*;
    Some(match id {
        U8 | I8 | BOOL => 1,
        U16 | I16 => 2,
        U32 | I32 | F32 => 4,
        U64 | I64 | F64 => 8,
        STRING => 8,
        ARRAY => 12,
        _ => return None,
    })
}

/// The name of value type `id`, as [`Value::type_name`] spells it.
pub(crate) fn type_id_name(id: u32) -> &'static str {
    use type_id::*;
    match id {
        U8 => "u8",
        I8 => "i8",
        U16 => "u16",
        I16 => "i16",
        U32 => "u32",
        I32 => "i32",
        F32 => "f32",
        BOOL => "bool",
        STRING => "string",
        ARRAY => "array",
        U64 => "u64",
        I64 => "i64",
        F64 => "f64",
        _ => "unknown",
    }
}

impl Value {
    /// Any integer type whose value is >= 0.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type whose value fits in `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any integer or float, converted (64-bit integers may round).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => {
                if let Some(u) = self.as_u64() {
                    Some(u as f64)
                } else {
                    self.as_i64().map(|i| i as f64)
                }
            }
        }
    }

    /// Any integer or float, converted to `f32` (an `F32` comes back bit-exact).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            _ => self.as_f64().map(|v| v as f32),
        }
    }

    /// A `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A `String`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An `Array`'s elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of this value's type: "u8", "i32", "f32", "bool", "string", "array", ...
    pub fn type_name(&self) -> &'static str {
        type_id_name(self.gguf_type_id())
    }

    /// GGUF's on-disk type id for this value (0 = u8 ... 12 = f64).
    pub fn gguf_type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F32(_) => type_id::F32,
            Value::F64(_) => type_id::F64,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(v)
            }
        })*
    };
}

value_from!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String,
);

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_accessors_accept_any_width_in_range() {
        assert_eq!(Value::U8(7).as_u64(), Some(7));
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::I64(-1).as_u64(), None);
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::I8(-3).as_i64(), Some(-3));
        assert_eq!(Value::Bool(true).as_u64(), None);
        assert_eq!(Value::String("1".into()).as_u64(), None);
    }

    #[test]
    fn float_accessors_accept_numbers() {
        assert_eq!(Value::F32(1.5).as_f64(), Some(1.5));
        assert_eq!(Value::I16(-2).as_f64(), Some(-2.0));
        assert_eq!(Value::U32(10000).as_f32(), Some(10000.0));
        assert_eq!(Value::F32(0.1).as_f32(), Some(0.1f32));
        assert_eq!(Value::Bool(false).as_f32(), None);
    }

    #[test]
    fn type_names_and_ids_agree() {
        let all = [
            Value::U8(0),
            Value::I8(0),
            Value::U16(0),
            Value::I16(0),
            Value::U32(0),
            Value::I32(0),
            Value::F32(0.0),
            Value::Bool(false),
            Value::String(String::new()),
            Value::Array(vec![]),
            Value::U64(0),
            Value::I64(0),
            Value::F64(0.0),
        ];
        for (id, v) in all.iter().enumerate() {
            assert_eq!(v.gguf_type_id(), id as u32, "{v:?}");
            assert_eq!(v.type_name(), type_id_name(id as u32));
            assert!(min_encoded_bytes(id as u32).is_some());
        }
        assert_eq!(min_encoded_bytes(13), None);
        assert_eq!(
            Value::from(vec!["a", "b"]).as_array().map(<[Value]>::len),
            Some(2)
        );
    }
}
