//! [`GgufWriter`]: builds a GGUF file (v2 or v3) in memory or on disk, with
//! metadata of every type and tensors laid out at the file's alignment.

#![forbid(unsafe_code)]

use std::path::Path;

use tessera::{DType, Error, Result};

use crate::file::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ALIGNMENT};
use crate::value::Value;

/// A GGUF file being built.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: usize,
    kvs: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    type_id: u32,
    ne: Vec<u64>,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Write header version `v` (2 or 3; both have the same layout).
    pub fn version(mut self, v: u32) -> Self {
        self.version = v;
        self
    }

    /// Use `alignment` for the data section and its tensors; anything but
    /// the default also writes the `general.alignment` KV.
    pub fn alignment(mut self, alignment: usize) -> Result<Self> {
        if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
            return Err(Error::Malformed(format!(
                "alignment {alignment}: must be a power of two from 1 to {MAX_ALIGNMENT}"
            )));
        }
        self.alignment = alignment;
        self.kvs.retain(|(k, _)| k != ALIGNMENT_KEY);
        if alignment != DEFAULT_ALIGNMENT {
            self.kvs
                .push((ALIGNMENT_KEY.to_string(), Value::U32(alignment as u32)));
        }
        Ok(self)
    }

    /// Add a metadata entry (any [`Value`], or a Rust scalar / string).
    pub fn add(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.kvs.push((key.to_string(), value.into()));
        self
    }

    /// Set a metadata entry: replace the value of `key` if it is there,
    /// else add it.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        let value = value.into();
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.kvs.push((key.to_string(), value)),
        }
        self
    }

    /// Add a tensor of a type Tessera knows; `data` must hold exactly its
    /// bytes.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        ne: &[usize],
        data: &[u8],
    ) -> Result<()> {
        let layout = tessera::Layout::contiguous(dtype, ne)?;
        let n = layout.checked_nbytes()?;
        if n != data.len() {
            return Err(Error::InvalidLayout(format!(
                "tensor '{name}': {} {ne:?} needs {n} bytes, {} given",
                dtype.name(),
                data.len()
            )));
        }
        self.add_tensor_raw(name, dtype.ggml_id(), ne, data);
        Ok(())
    }

    /// Add a tensor with any type id and dimensions, unchecked (for tests of
    /// readers).
    pub fn add_tensor_raw(&mut self, name: &str, type_id: u32, ne: &[usize], data: &[u8]) {
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            type_id,
            ne: ne.iter().map(|&n| n as u64).collect(),
            data: data.to_vec(),
        });
    }

    /// Remove the tensor `name` (for tests of files that lack one); whether
    /// it was there.
    pub fn remove_tensor(&mut self, name: &str) -> bool {
        let n = self.tensors.len();
        self.tensors.retain(|t| t.name != name);
        self.tensors.len() != n
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut out, v, k)?;
        }
        let a = self.alignment;
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(offset);
            offset = (offset + t.data.len()).div_ceil(a) * a;
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for n in &t.ne {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&(*off as u64).to_le_bytes());
        }
        pad(&mut out, a);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad(&mut out, a);
        }
        Ok(out)
    }

    /// Write the file to `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        std::fs::write(path, self.to_bytes()?)?;
        Ok(())
    }
}

fn pad(out: &mut Vec<u8>, a: usize) {
    out.resize(out.len().div_ceil(a) * a, 0);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value, key: &str) -> Result<()> {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(elem, items) => {
            out.extend_from_slice(&elem.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                if item.value_type() != *elem {
                    return Err(Error::Malformed(format!(
                        "metadata '{key}': an array<{elem}> holds a {}",
                        item.type_description()
                    )));
                }
                put_value(out, item, key)?;
            }
        }
    }
    Ok(())
}
