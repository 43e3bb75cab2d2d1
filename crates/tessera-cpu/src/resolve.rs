//! Resolving a graph's tensors to memory the kernels can use, with every
//! check that makes the kernels' raw pointers sound.
//!
//! For each tensor a node touches: it is placed, its buffer has a host
//! pointer, its bytes lie inside the buffer, the pointer is aligned for its
//! type ([`resolve`]); a result does not overlap its operands except as the
//! `kernels` module allows ([`check_overlap`]); a result's buffer accepts
//! writes ([`check_writable`]). Per-compute caches keep this to one check per
//! tensor ([`Cache`], [`SaneCache`]): it runs for every node of every
//! compute, so it is part of the per-node overhead.

use std::ptr::NonNull;

use tessera::buffer::check_range;
use tessera::{Error, Graph, Op, Placement, Result, TensorId};

use crate::kernels::TensorRef;
use crate::kernels::elem::elem_align;
use crate::support;

/// A type aligned like every element type (and a cache line), for the
/// dangling pointer of an empty tensor.
#[repr(align(64))]
struct Aligned64;

/// Check that the result's buffer accepts writes (a read-only file mapping
/// does not), so a wrong placement is an error, not a fault.
pub(crate) fn check_writable(graph: &Graph, placement: &Placement, id: TensorId) -> Result<()> {
    match placement.get(id) {
        Some(place) if !place.buffer.is_writable() => Err(Error::unsupported(
            "CPU",
            format!(
                "{}: writing the result into read-only buffer '{}'",
                support::describe(graph, id),
                place.buffer.name()
            ),
        )),
        _ => Ok(()),
    }
}

pub(crate) fn tensor_id(idx: usize) -> Result<TensorId> {
    u32::try_from(idx)
        .map(TensorId::from_index)
        .map_err(|_| Error::Overflow(format!("tensor index {idx}")))
}

/// [`support::SaneMemo`] for one compute: stamps per tensor id.
pub(crate) struct SaneCache<'a> {
    pub(crate) stamps: &'a mut [u64],
    pub(crate) generation: u64,
}

impl support::SaneMemo for SaneCache<'_> {
    #[inline]
    fn sane(&mut self, id: TensorId, l: &tessera::Layout) -> bool {
        match self.stamps.get_mut(id.index()) {
            Some(s) if *s == self.generation => true,
            Some(s) => {
                let ok = support::sane(l);
                if ok {
                    *s = self.generation;
                }
                ok
            }
            None => support::sane(l),
        }
    }
}

/// [`resolve`], remembered for the current compute (a tensor is the result
/// of one node and the operand of others).
pub(crate) struct Cache<'a> {
    /// (generation, pointer, byte span) per tensor id.
    pub(crate) slots: &'a mut [(u64, usize, usize)],
    pub(crate) generation: u64,
}

impl Cache<'_> {
    pub(crate) fn resolve(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        id: TensorId,
    ) -> Result<(TensorRef, usize)> {
        if let (Some(&(g, ptr, n)), Some(node)) =
            (self.slots.get(id.index()), graph.nodes().get(id.index()))
            && g == self.generation
        {
            let r = TensorRef {
                ptr: std::ptr::with_exposed_provenance_mut(ptr),
                layout: node.layout,
            };
            return Ok((r, n));
        }
        let (r, n) = resolve(graph, placement, id)?;
        if let Some(slot) = self.slots.get_mut(id.index()) {
            *slot = (self.generation, r.ptr.expose_provenance(), n);
        }
        Ok((r, n))
    }
}

/// The memory of tensor `id` and its byte span, checked: placed, in host
/// memory, inside its buffer, aligned for its type.
fn resolve(graph: &Graph, placement: &Placement, id: TensorId) -> Result<(TensorRef, usize)> {
    let node = graph
        .nodes()
        .get(id.index())
        .ok_or(Error::InvalidTensorId {
            id: id.index(),
            len: graph.len(),
        })?;
    let place = placement.get(id).ok_or_else(|| Error::Unallocated {
        tensor: node.name.clone(),
        id: id.index(),
    })?;
    let layout = node.layout;
    let nbytes = match support::span_bytes(&layout) {
        Some(n) => n,
        // The error says why (overflow or partial blocks).
        None => layout.checked_nbytes()?,
    };
    let buffer = &place.buffer;
    let size = buffer.size();
    // `Buffer::name` allocates: only ask for it when reporting an error.
    if place
        .offset
        .checked_add(nbytes)
        .is_none_or(|end| end > size)
    {
        check_range(&buffer.name(), size, place.offset, nbytes)?;
    }
    let ptr = if nbytes == 0 {
        // Nothing is read or written through an empty tensor's pointer.
        NonNull::<Aligned64>::dangling().as_ptr() as *mut u8
    } else {
        let base = buffer.host_ptr().ok_or_else(|| {
            Error::unsupported(
                "CPU",
                format!(
                    "tensor {} in buffer '{}': the buffer is not host memory the CPU can address",
                    node.label(id),
                    buffer.name()
                ),
            )
        })?;
        // SAFETY: `offset + nbytes <= size` was checked above, so the
        // pointer stays inside the buffer's allocation.
        unsafe { base.as_ptr().add(place.offset) }
    };
    let align = elem_align(layout.dtype);
    if !(ptr as usize).is_multiple_of(align) {
        return Err(Error::InvalidLayout(format!(
            "tensor {} at offset {} of buffer '{}' is not aligned to the {align} bytes of {}",
            node.label(id),
            place.offset,
            buffer.name(),
            layout.dtype
        )));
    }
    Ok((TensorRef { ptr, layout }, nbytes))
}

/// `Err` if the result of node `id` overlaps operand `i` in a way the
/// kernels do not allow (see the `kernels` module docs).
pub(crate) fn check_overlap(
    graph: &Graph,
    id: TensorId,
    i: usize,
    (dst, dst_bytes): (&TensorRef, usize),
    (src, src_bytes): (&TensorRef, usize),
) -> Result<()> {
    let (d0, s0) = (dst.ptr as usize, src.ptr as usize);
    let overlap = dst_bytes > 0 && src_bytes > 0 && d0 < s0 + src_bytes && s0 < d0 + dst_bytes;
    if !overlap {
        return Ok(());
    }
    let op = graph.node(id)?.op;
    let allowed = match (op, i) {
        (Op::Cpy, 1) | (Op::SetRows, 0) => true,
        _ => op.can_inplace() && d0 == s0 && dst.layout == src.layout,
    };
    if allowed {
        return Ok(());
    }
    Err(Error::InvalidLayout(format!(
        "{}: the result's memory overlaps operand {i}; only in-place ops may share memory, and only with an identical layout",
        support::describe(graph, id)
    )))
}
