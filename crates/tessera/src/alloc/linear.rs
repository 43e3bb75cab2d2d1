//! The linear allocator (ggml's `ggml_tallocr`): tensors placed one after the
//! other in a single buffer, each at an aligned offset, never freed.
//!
//! It suits memory that lives as long as its buffer: model weights, a KV
//! cache, the tensors of [`super::alloc_tensors`]. When the buffer is full,
//! ggml aborts; this returns [`Error::OutOfMemory`] naming the buffer and
//! the sizes.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::tensor::Tensor;
use crate::{Error, Layout, Result};

use super::{checked_alignment, pad, tensor_alloc_size};

/// Bump allocation in one buffer.
#[derive(Debug)]
pub struct LinearAllocator {
    buffer: Arc<dyn Buffer>,
    alignment: usize,
    offset: usize,
}

impl LinearAllocator {
    /// Allocate from the start of `buffer`, with its buffer type's alignment.
    pub fn new(buffer: Arc<dyn Buffer>) -> Result<Self> {
        let alignment = checked_alignment(buffer.buffer_type().as_ref())?;
        Ok(LinearAllocator {
            buffer,
            alignment,
            offset: 0,
        })
    }

    /// The buffer tensors are placed in.
    pub fn buffer(&self) -> &Arc<dyn Buffer> {
        &self.buffer
    }

    /// Offset of the next tensor (bytes used so far, padding included).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buffer.size().saturating_sub(self.offset)
    }

    /// Place a tensor of `layout` at the next aligned offset: takes the
    /// buffer type's `alloc_size` padded to the alignment, and calls the
    /// buffer's `init_tensor`.
    pub fn alloc(&mut self, layout: &Layout) -> Result<Tensor> {
        let buft = self.buffer.buffer_type();
        let size = pad(tensor_alloc_size(buft.as_ref(), layout)?, self.alignment)?;
        let end = self
            .offset
            .checked_add(size)
            .filter(|&e| e <= self.buffer.size());
        let Some(end) = end else {
            return Err(Error::OutOfMemory {
                device: self.buffer.name().to_owned(),
                requested: size,
                detail: format!(
                    "a {layout} tensor needs {size} bytes but buffer '{}' of {} bytes has {} left",
                    self.buffer.name(),
                    self.buffer.size(),
                    self.remaining()
                ),
            });
        };
        let tensor = Tensor::new(*layout, self.buffer.clone(), self.offset)?;
        self.buffer.init_tensor(layout, self.offset)?;
        self.offset = end;
        Ok(tensor)
    }
}
