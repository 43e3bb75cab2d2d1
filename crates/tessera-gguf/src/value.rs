//! GGUF metadata values: the thirteen value types, a [`Value`] tree (arrays
//! may nest), and [`FromValue`], the typed conversion behind
//! [`GgufFile::get`](crate::GgufFile::get).
//!
//! Conversions are strict: a `u32` key is read as `u32` only, never widened
//! or narrowed, so a file whose producer wrote another type is reported
//! instead of silently reinterpreted.

#![forbid(unsafe_code)]

use std::fmt;

/// A GGUF value type, with its on-disk id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 0
    U8,
    /// 1
    I8,
    /// 2
    U16,
    /// 3
    I16,
    /// 4
    U32,
    /// 5
    I32,
    /// 6
    F32,
    /// 7 (one byte, 0 or 1)
    Bool,
    /// 8 (u64 length + UTF-8 bytes)
    String,
    /// 9 (u32 element type + u64 count + elements)
    Array,
    /// 10
    U64,
    /// 11
    I64,
    /// 12
    F64,
}

impl ValueType {
    /// The type with on-disk id `id`, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The smallest number of bytes one value of this type takes on disk
    /// (used to refuse counts the rest of the file cannot hold).
    pub fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// Lower-case name (`u32`, `string`, `array`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// f32
    F32(f32),
    /// bool
    Bool(bool),
    /// UTF-8 string
    String(String),
    /// An array: element type and elements (each of that type; arrays nest).
    Array(ValueType, Vec<Value>),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f64
    F64(f64),
}

impl Value {
    /// This value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A description of the type for messages: `u32`, `array<string>`,
    /// `array<array<i32>>` (the inner type of nested arrays from the first
    /// element, `array<array>` when empty).
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(t, items) => match (t, items.first()) {
                (ValueType::Array, Some(first)) => format!("array<{}>", first.type_description()),
                _ => format!("array<{t}>"),
            },
            v => v.value_type().name().to_string(),
        }
    }

    /// An array of `items` of element type `T`.
    pub fn array<T: Into<Value>>(elem: ValueType, items: impl IntoIterator<Item = T>) -> Value {
        Value::Array(elem, items.into_iter().map(Into::into).collect())
    }
}

macro_rules! scalar {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
        impl<'a> FromValue<'a> for $t {
            fn from_value(v: &'a Value) -> Option<Self> {
                match v {
                    Value::$v(x) => Some(*x),
                    _ => None,
                }
            }
            fn expected() -> String {
                ValueType::$v.name().to_string()
            }
        }
    )*};
}

/// Conversion from a [`Value`] to a Rust type, strict about the GGUF type.
pub trait FromValue<'a>: Sized {
    /// The converted value, or `None` when `v` has another type.
    fn from_value(v: &'a Value) -> Option<Self>;
    /// The GGUF type this conversion expects, for messages.
    fn expected() -> String;
}

scalar!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    f32 => F32, bool => Bool, u64 => U64, i64 => I64, f64 => F64,
);

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl<'a> FromValue<'a> for String {
    fn from_value(v: &'a Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(s.clone()),
            _ => None,
        }
    }
    fn expected() -> String {
        "string".into()
    }
}

impl<'a> FromValue<'a> for &'a str {
    fn from_value(v: &'a Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        }
    }
    fn expected() -> String {
        "string".into()
    }
}

impl<'a> FromValue<'a> for &'a Value {
    fn from_value(v: &'a Value) -> Option<Self> {
        Some(v)
    }
    fn expected() -> String {
        "any".into()
    }
}

impl<'a, T: FromValue<'a>> FromValue<'a> for Vec<T> {
    fn from_value(v: &'a Value) -> Option<Self> {
        match v {
            Value::Array(_, items) => items.iter().map(T::from_value).collect(),
            _ => None,
        }
    }
    fn expected() -> String {
        format!("array<{}>", T::expected())
    }
}
