//! A buffer made of several buffers (ggml's multi-buffer).
//!
//! When tensors do not fit in one allocation of a buffer type (its max size
//! is smaller than the total), they are spread over several buffers, and the
//! multi-buffer holds them together so that usage, clearing and lifetime are
//! handled once. Tensors are placed in the parts, never in the multi-buffer
//! itself, so its byte accessors are not available.

use std::any::Any;
use std::sync::Arc;

use crate::buffer::{Buffer, BufferType, BufferUsage};
use crate::{Error, Result};

/// Several buffers handled as one.
#[derive(Debug)]
pub struct MultiBuffer {
    parts: Vec<Arc<dyn Buffer>>,
    buft: Arc<dyn BufferType>,
}

impl MultiBuffer {
    /// Group `parts`, all of buffer type `buft`.
    pub fn new(parts: Vec<Arc<dyn Buffer>>, buft: Arc<dyn BufferType>) -> Self {
        MultiBuffer { parts, buft }
    }

    /// The buffers.
    pub fn parts(&self) -> &[Arc<dyn Buffer>] {
        &self.parts
    }

    /// Is `buffer` a multi-buffer?
    pub fn is_multi(buffer: &dyn Buffer) -> bool {
        buffer.as_any().is::<MultiBuffer>()
    }

    fn no_bytes(&self) -> Error {
        Error::unsupported(
            format!("multi-buffer of {}", self.buft.name()),
            "byte access: tensors live in its parts",
        )
    }
}

impl Buffer for MultiBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        self.buft.name()
    }

    fn size(&self) -> usize {
        self.parts.iter().map(|p| p.size()).sum()
    }

    fn is_writable(&self) -> bool {
        self.parts.iter().all(|p| p.is_writable())
    }

    fn write(&self, _offset: usize, _data: &[u8]) -> Result<()> {
        Err(self.no_bytes())
    }

    fn read(&self, _offset: usize, _out: &mut [u8]) -> Result<()> {
        Err(self.no_bytes())
    }

    fn fill(&self, _offset: usize, _len: usize, _value: u8) -> Result<()> {
        Err(self.no_bytes())
    }

    fn clear(&self, value: u8) -> Result<()> {
        self.parts.iter().try_for_each(|p| p.clear(value))
    }

    fn reset(&self) {
        self.parts.iter().for_each(|p| p.reset());
    }

    fn usage(&self) -> BufferUsage {
        self.parts.first().map(|p| p.usage()).unwrap_or_default()
    }

    /// Propagated to every part (as in ggml).
    fn set_usage(&self, usage: BufferUsage) {
        self.parts.iter().for_each(|p| p.set_usage(usage));
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
