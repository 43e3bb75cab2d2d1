//! Tensors with memory: a layout placed in a buffer at an offset.
//!
//! A [`Tensor`] is what ggml calls an allocated tensor: weights, a KV cache, a
//! graph output read back. Graph nodes are plain data; a `Tensor` is how a
//! node's bytes are reached. All accesses are bounds-checked against the
//! tensor's extent (ggml asserts; Tessera returns [`Error::OutOfBounds`]).

use std::sync::Arc;

use crate::buffer::{Buffer, check_range, copy_between, try_filled_vec, try_zeroed_vec};
use crate::element::Element;
use crate::{DType, Error, Layout, Result, quant};

/// A layout placed in a buffer.
#[derive(Clone, Debug)]
pub struct Tensor {
    layout: Layout,
    buffer: Arc<dyn Buffer>,
    offset: usize,
}

impl Tensor {
    /// Place `layout` at byte `offset` of `buffer`. Checks that the tensor's
    /// bytes lie inside the buffer.
    pub fn new(layout: Layout, buffer: Arc<dyn Buffer>, offset: usize) -> Result<Self> {
        let n = layout.checked_nbytes()?;
        check_range(buffer.name(), buffer.size(), offset, n)?;
        Ok(Tensor {
            layout,
            buffer,
            offset,
        })
    }

    /// Type, extents and strides.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }

    /// The buffer holding the bytes.
    pub fn buffer(&self) -> &Arc<dyn Buffer> {
        &self.buffer
    }

    /// Byte offset in the buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes spanned.
    pub fn nbytes(&self) -> usize {
        self.layout.nbytes()
    }

    /// Write `data` at byte `offset` of the tensor (ggml's `ggml_backend_tensor_set`).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        self.buffer.write(self.offset + offset, data)
    }

    /// Read `out.len()` bytes at byte `offset` of the tensor.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        self.buffer.read(self.offset + offset, out)
    }

    /// Set `len` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.check(offset, len)?;
        self.buffer.fill(self.offset + offset, len, value)
    }

    /// All bytes of a contiguous tensor.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = try_zeroed_vec(self.nbytes(), "reading a tensor's bytes")?;
        self.read(0, &mut out)?;
        Ok(out)
    }

    /// Write `values` converted to the tensor's type (quantized types are
    /// quantized with the reference quantizer). The tensor must be contiguous
    /// and hold exactly `values.len()` elements.
    pub fn write_f32(&self, values: &[f32]) -> Result<()> {
        self.ensure_contiguous_len(values.len())?;
        if self.layout.dtype == DType::F32 {
            return self.write(0, bytemuck::cast_slice(values));
        }
        let mut bytes = try_zeroed_vec(self.nbytes(), "converting values for a tensor")?;
        let row = self.layout.ne[0];
        let row_bytes = self.layout.row_bytes();
        if row > 0 {
            for (src, dst) in values.chunks(row).zip(bytes.chunks_mut(row_bytes)) {
                quant::from_f32(self.layout.dtype, src, dst)?;
            }
        }
        self.write(0, &bytes)
    }

    /// All elements converted to f32 (dequantized for quantized types; I32
    /// converted). The tensor must be contiguous.
    pub fn read_f32(&self) -> Result<Vec<f32>> {
        let n = self.layout.checked_nelements()?;
        self.ensure_contiguous_len(n)?;
        let mut out = try_filled_vec(n, 0f32, "reading a tensor as f32")?;
        if self.layout.dtype == DType::F32 {
            // Straight into the result (a decoding step's logits: 1 MB for
            // a 262,144-token vocabulary, every token).
            self.read(0, bytemuck::cast_slice_mut(&mut out))?;
            return Ok(out);
        }
        let bytes = self.to_bytes()?;
        let row = self.layout.ne[0];
        let row_bytes = self.layout.row_bytes();
        if row > 0 {
            for (src, dst) in bytes.chunks(row_bytes).zip(out.chunks_mut(row)) {
                quant::to_f32(self.layout.dtype, src, dst)?;
            }
        }
        Ok(out)
    }

    /// Write plain values of the tensor's own element type (e.g. `i32` ids
    /// into an `I32` tensor). `T::DTYPE` must be the tensor's type, else
    /// [`Error::InvalidLayout`] naming both; for raw bytes use
    /// [`Tensor::write`].
    pub fn write_slice<T: Element>(&self, values: &[T]) -> Result<()> {
        self.ensure_element::<T>("write", "into")?;
        self.ensure_contiguous_len(values.len())?;
        self.write(0, bytemuck::cast_slice(values))
    }

    /// Read plain values of the tensor's own element type. `T::DTYPE` must
    /// be the tensor's type, else [`Error::InvalidLayout`] naming both; for
    /// raw bytes use [`Tensor::to_bytes`] or [`Tensor::read`].
    pub fn read_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.ensure_element::<T>("read", "from")?;
        let n = self.layout.checked_nelements()?;
        self.ensure_contiguous_len(n)?;
        let mut out = try_filled_vec(n, T::zeroed(), "reading a tensor's values")?;
        self.read(0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Copy all bytes into `dst`, which must have the same layout, through
    /// whatever path the two buffers allow (ggml's `ggml_backend_tensor_copy`).
    pub fn copy_to(&self, dst: &Tensor) -> Result<()> {
        if self.layout != dst.layout {
            return Err(Error::InvalidLayout(format!(
                "copy between different layouts {} and {}",
                self.layout, dst.layout
            )));
        }
        copy_between(
            self.buffer.as_ref(),
            self.offset,
            dst.buffer.as_ref(),
            dst.offset,
            self.nbytes(),
        )
    }

    /// `Err(OutOfBounds)` unless `len` bytes at `offset` lie inside the tensor.
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.nbytes() => Ok(()),
            _ => Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of a {} tensor of {} bytes",
                self.layout,
                self.nbytes()
            ))),
        }
    }

    fn ensure_element<T: Element>(&self, verb: &str, prep: &str) -> Result<()> {
        if T::DTYPE == self.layout.dtype {
            return Ok(());
        }
        Err(Error::InvalidLayout(format!(
            "cannot {verb} {} values ({}) {prep} a {} tensor",
            T::DTYPE,
            std::any::type_name::<T>(),
            self.layout.dtype
        )))
    }

    fn ensure_contiguous_len(&self, n: usize) -> Result<()> {
        if !self.layout.is_contiguous() {
            return Err(Error::InvalidLayout(format!(
                "{} is not contiguous",
                self.layout
            )));
        }
        let want = self.layout.checked_nelements()?;
        if n != want {
            return Err(Error::InvalidLayout(format!(
                "{n} values given for a {} tensor of {want} elements",
                self.layout
            )));
        }
        Ok(())
    }
}
