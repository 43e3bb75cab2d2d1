//! Memory allocators (ggml-alloc): where tensors get their bytes.
//!
//! Three allocators, from the simplest to the planner:
//!
//! - [`LinearAllocator`] (ggml's `ggml_tallocr`): bump allocation in one
//!   buffer, for tensors that live as long as the buffer (weights, caches).
//! - [`alloc_tensors`] / [`alloc_tensors_size`] (ggml's
//!   `ggml_backend_alloc_ctx_tensors_from_buft(_size)`): a list of layouts
//!   packed into as few buffers as the buffer type's maximum size allows,
//!   grouped in a [`crate::MultiBuffer`] when there are several.
//! - [`GraphAllocator`] (ggml's `ggml_gallocr`): plans the intermediates of a
//!   compute graph so that tensors whose lifetimes do not overlap share
//!   memory, with the [`DynamicAllocator`] (ggml's `ggml_dyn_tallocr`) as its
//!   best-fit address planner over up to [`MAX_CHUNKS`] chunk buffers.
//! - [`PlanningType`]: any buffer type's rules without its memory, to place
//!   weights and caches that are not loaded yet and measure what they and
//!   the graphs over them would take (fitting a model to devices).
//!
//! Memory planning is authoritative: [`GraphAllocator::reserve_size`] reports
//! exactly the bytes that [`GraphAllocator::reserve`] then allocates. Where
//! ggml aborts (a full buffer, a tensor larger than the buffer type allows),
//! these return [`Error::OutOfMemory`] naming the tensor and the sizes.

mod dynamic;
mod graph;
mod linear;
mod plan;
mod planning;
mod tensors;

pub use dynamic::{DynamicAllocator, MAX_CHUNKS, VirtualAddress};
pub use graph::{EXTERNAL, GraphAllocator};
pub use linear::LinearAllocator;
pub use planning::{PlanningBuffer, PlanningType};
pub use tensors::{TensorSet, alloc_tensors, alloc_tensors_size};

use crate::buffer::BufferType;
use crate::{Error, Layout, Result};

/// The alignment of `buft`, checked to be a power of two.
fn checked_alignment(buft: &dyn BufferType) -> Result<usize> {
    let a = buft.alignment();
    if a.is_power_of_two() {
        Ok(a)
    } else {
        Err(Error::device(
            buft.name(),
            format!("buffer type alignment {a} is not a power of two"),
        ))
    }
}

/// `size` rounded up to a multiple of `alignment` (a power of two).
fn pad(size: usize, alignment: usize) -> Result<usize> {
    size.checked_next_multiple_of(alignment)
        .ok_or_else(|| Error::Overflow(format!("{size} bytes padded to {alignment}")))
}

/// Bytes `buft` needs for a tensor of `layout` (ggml's `get_alloc_size`),
/// checked to cover the tensor's bytes (ggml asserts it).
fn tensor_alloc_size(buft: &dyn BufferType, layout: &Layout) -> Result<usize> {
    let nbytes = layout.checked_nbytes()?;
    let size = buft.alloc_size(layout);
    if size < nbytes {
        return Err(Error::device(
            buft.name(),
            format!("alloc_size of {layout} is {size} bytes, less than its {nbytes} bytes"),
        ));
    }
    Ok(size)
}
