//! Allocate a set of tensors at once (ggml's
//! `ggml_backend_alloc_ctx_tensors_from_buft` and its `_size` variant).
//!
//! The tensors are packed in order, each padded to the buffer type's
//! alignment. Whenever the next tensor would push the current buffer past the
//! buffer type's maximum size, the buffer is closed and a new one begun; the
//! buffers are grouped in a [`MultiBuffer`] when there are several. This is
//! how model weights are loaded onto devices that limit one allocation.
//!
//! Unlike ggml, a single tensor larger than the maximum size is an error
//! naming it (ggml tries to allocate it anyway), and an empty list gives an
//! empty set over a zero-byte buffer (ggml returns NULL, the same as a failure).

use std::sync::Arc;

use crate::buffer::{Buffer, BufferType, BufferUsage};
use crate::multi_buffer::MultiBuffer;
use crate::tensor::Tensor;
use crate::{Error, Layout, Result};

use super::linear::LinearAllocator;
use super::{checked_alignment, pad, tensor_alloc_size};

/// Tensors and the memory holding them.
#[derive(Clone, Debug)]
pub struct TensorSet {
    /// The one buffer, or a [`MultiBuffer`] of the parts the tensors live in.
    pub buffer: Arc<dyn Buffer>,
    /// One tensor per layout given, in order.
    pub tensors: Vec<Tensor>,
}

/// A run of consecutive tensors that share one buffer.
struct Range {
    start: usize,
    end: usize,
    size: usize,
}

/// Split `layouts` into buffer-sized ranges.
fn ranges(buft: &dyn BufferType, layouts: &[Layout]) -> Result<Vec<Range>> {
    let alignment = checked_alignment(buft)?;
    let max = buft.max_size();
    let mut out = Vec::new();
    let (mut start, mut cur) = (0, 0usize);
    for (i, layout) in layouts.iter().enumerate() {
        let size = pad(tensor_alloc_size(buft, layout)?, alignment)?;
        if size > max {
            return Err(Error::OutOfMemory {
                device: buft.name().to_owned(),
                requested: size,
                detail: format!(
                    "tensor {i} ({layout}) needs {size} bytes, more than the maximum allocation of {max} bytes"
                ),
            });
        }
        let next = cur
            .checked_add(size)
            .ok_or_else(|| Error::Overflow("total size of the tensors".into()))?;
        if cur > 0 && next > max {
            out.push(Range {
                start,
                end: i,
                size: cur,
            });
            start = i;
            cur = size;
        } else {
            cur = next;
        }
    }
    if start < layouts.len() || out.is_empty() {
        out.push(Range {
            start,
            end: layouts.len(),
            size: cur,
        });
    }
    Ok(out)
}

/// Bytes [`alloc_tensors`] would allocate for `layouts` in `buft`.
pub fn alloc_tensors_size(buft: &Arc<dyn BufferType>, layouts: &[Layout]) -> Result<usize> {
    Ok(ranges(buft.as_ref(), layouts)?.iter().map(|r| r.size).sum())
}

/// Allocate one tensor per layout in as few buffers of `buft` as its maximum
/// size allows, all tagged with `usage` (e.g. [`BufferUsage::Weights`]).
pub fn alloc_tensors(
    buft: &Arc<dyn BufferType>,
    layouts: &[Layout],
    usage: BufferUsage,
) -> Result<TensorSet> {
    let ranges = ranges(buft.as_ref(), layouts)?;
    let mut parts = Vec::with_capacity(ranges.len());
    let mut tensors = Vec::with_capacity(layouts.len());
    for r in &ranges {
        let buffer = buft.alloc_buffer(r.size).map_err(|e| match e {
            Error::OutOfMemory {
                device,
                requested,
                detail,
            } => Error::OutOfMemory {
                device,
                requested,
                detail: format!(
                    "{detail}; for tensors {}..{} of {}",
                    r.start,
                    r.end,
                    layouts.len()
                ),
            },
            other => other,
        })?;
        let mut linear = LinearAllocator::new(buffer.clone())?;
        for layout in layouts.get(r.start..r.end).unwrap_or(&[]) {
            tensors.push(linear.alloc(layout)?);
        }
        parts.push(buffer);
    }
    let buffer: Arc<dyn Buffer> = match parts.len() {
        1 => parts.remove(0),
        _ => Arc::new(MultiBuffer::new(parts, buft.clone())),
    };
    buffer.set_usage(usage);
    Ok(TensorSet { buffer, tensors })
}
