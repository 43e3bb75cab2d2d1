//! The byte-level GGUF parser: a bounds-checked cursor and the header, KV and
//! tensor-info readers.
//!
//! Every length or count read from the file is checked against the bytes
//! that remain *before* anything is allocated for it, so a hostile file can
//! make the parser allocate at most a small multiple of its own size. Errors
//! are [`Error::Malformed`] naming what was being read and the byte offset.

#![forbid(unsafe_code)]

use tessera::{Error, Result};

use crate::value::{Value, ValueType};

/// Deepest array nesting accepted (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// A read position over the file's bytes.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Malformed(format!(
                "truncated file: {what} needs {n} bytes at byte offset {}, only {} remain",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that must fit in the rest of the file at `min_each` bytes per
    /// item.
    pub(crate) fn count(&mut self, what: &str, min_each: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_each.max(1)))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(Error::Malformed(format!(
                "{what} {n} at byte offset {at} is larger than the {} remaining bytes could hold",
                self.remaining()
            )));
        }
        // `fits` proved the conversion.
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// A string: u64 length + UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.count(&format!("{what} length"), 1)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| Error::Malformed(format!("{what} at byte offset {at} is not UTF-8 ({e})")))
    }

    fn value_type(&mut self, what: &str) -> Result<ValueType> {
        let at = self.pos;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| {
            Error::Malformed(format!(
                "unknown value type id {id} for {what} at byte offset {at}"
            ))
        })
    }

    /// A value of type `t`; `depth` counts enclosing arrays.
    fn value(&mut self, t: ValueType, what: &str, depth: usize) -> Result<Value> {
        Ok(match t {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(what)? {
                    [0] => Value::Bool(false),
                    [1] => Value::Bool(true),
                    [b] => {
                        return Err(Error::Malformed(format!(
                            "{what} at byte offset {at}: bool byte {b} is neither 0 nor 1"
                        )));
                    }
                }
            }
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::Malformed(format!(
                        "{what} at byte offset {}: arrays nested deeper than {MAX_ARRAY_DEPTH}",
                        self.pos
                    )));
                }
                let elem = self.value_type(&format!("{what} element type"))?;
                let n = self.count(&format!("{what} element count"), elem.min_size())?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(elem, what, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    /// One KV: key string, value type, value.
    pub(crate) fn kv(&mut self, index: usize) -> Result<(String, Value)> {
        let key = self.string(&format!("key of metadata entry {index}"))?;
        let what = format!("value of '{key}'");
        let t = self.value_type(&format!("type of '{key}'"))?;
        let v = self.value(t, &what, 0)?;
        Ok((key, v))
    }
}

/// Smallest size of one KV on disk: key length, value type, one-byte value.
pub(crate) const MIN_KV_SIZE: usize = 8 + 4 + 1;
/// Smallest size of one tensor info: name length, n_dims, type, offset.
pub(crate) const MIN_TENSOR_INFO_SIZE: usize = 8 + 4 + 4 + 8;

/// A tensor info as stored, before its data is checked.
pub(crate) struct RawTensorInfo {
    pub name: String,
    pub ne: Vec<usize>,
    pub type_id: u32,
    pub offset: u64,
    /// Byte offset of the info itself, for messages.
    pub at: usize,
}

impl Cursor<'_> {
    pub(crate) fn tensor_info(&mut self, index: usize) -> Result<RawTensorInfo> {
        let at = self.pos;
        let name = self.string(&format!("name of tensor {index}"))?;
        let dims_at = self.pos;
        let n_dims = self.u32(&format!("dimension count of '{name}'"))?;
        if n_dims == 0 || n_dims as usize > tessera::MAX_DIMS {
            return Err(Error::Malformed(format!(
                "tensor '{name}' at byte offset {dims_at}: {n_dims} dimensions (1 to {} allowed)",
                tessera::MAX_DIMS
            )));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        let mut total: usize = 1;
        for d in 0..n_dims {
            let v = self.u64(&format!("dimension {d} of '{name}'"))?;
            let v = usize::try_from(v)
                .ok()
                .filter(|&v| v <= i64::MAX as usize)
                .ok_or_else(|| {
                    Error::Malformed(format!("tensor '{name}': dimension {d} = {v} is too large"))
                })?;
            total = total.checked_mul(v).ok_or_else(|| {
                Error::Malformed(format!(
                    "tensor '{name}': the element count of dimensions {ne:?} x {v} overflows"
                ))
            })?;
            ne.push(v);
        }
        let type_id = self.u32(&format!("type of '{name}'"))?;
        let offset = self.u64(&format!("data offset of '{name}'"))?;
        Ok(RawTensorInfo {
            name,
            ne,
            type_id,
            offset,
            at,
        })
    }
}
