//! Resolving a graph's tensors to memory the kernels can use, with every
//! check that makes the kernels' raw pointers sound.
//!
//! For each tensor a node touches: it is placed, its buffer has a host
//! pointer, its bytes lie inside the buffer, the pointer is aligned for its
//! type ([`resolve`]); a result does not overlap its operands except as the
//! `kernels` module allows ([`check_overlap`]); a result's buffer accepts
//! writes ([`check_writable`]). Per-compute caches keep this to one check per
//! tensor ([`Cache`], [`SaneCache`]): it runs for every node of every
//! compute, so it is part of the per-node overhead. [`PlanCache`] remembers
//! what a plan was built from, so that recomputing an unchanged graph on an
//! unchanged placement skips all of this after one comparison pass.

use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use tessera::buffer::check_range;
use tessera::{
    Buffer, Error, Graph, HostRegion, Layout, MAX_SRC, Node, Op, Placement, Result, TensorId,
};

use crate::kernels::TensorRef;
use crate::kernels::elem::elem_align;
use crate::repack::{Packing, RepackBuffer};
use crate::support;

/// A type aligned like every element type (and a cache line), for the
/// dangling pointer of an empty tensor.
#[repr(align(64))]
struct Aligned64;

/// The host memory of `buffer` as the CPU's kernels address it: a host
/// buffer's region, or a [`RepackBuffer`]'s (whose tensors the executor
/// reads with their [`Packing`]).
pub(crate) fn cpu_region(buffer: &dyn Buffer) -> Option<HostRegion<'_>> {
    buffer.host_region().or_else(|| {
        buffer
            .as_any()
            .downcast_ref::<RepackBuffer>()
            .and_then(RepackBuffer::region)
    })
}

/// A [`RepackBuffer`]'s [`RepackBuffer::generation`] (0 for other
/// buffers): how its bytes are laid out can change under a remembered plan.
fn layout_generation(buffer: &dyn Buffer) -> u64 {
    buffer
        .as_any()
        .downcast_ref::<RepackBuffer>()
        .map_or(0, RepackBuffer::generation)
}

/// Check that the result's buffer accepts writes (a read-only file mapping
/// does not), so a wrong placement is an error, not a fault.
pub(crate) fn check_writable(graph: &Graph, placement: &Placement, id: TensorId) -> Result<()> {
    match placement.get(id) {
        Some(place) if !place.buffer.is_writable() => Err(Error::unsupported(
            "CPU",
            format!(
                "{}: writing the result into read-only buffer '{}'",
                graph.describe_node(id),
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
    /// (generation, pointer, byte span, packing) per tensor id.
    pub(crate) slots: &'a mut [(u64, usize, usize, Packing)],
    pub(crate) generation: u64,
}

impl Cache<'_> {
    pub(crate) fn resolve(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        id: TensorId,
    ) -> Result<(TensorRef, usize)> {
        if let (Some(&(g, ptr, n, packing)), Some(node)) =
            (self.slots.get(id.index()), graph.nodes().get(id.index()))
            && g == self.generation
        {
            let r = TensorRef {
                ptr: std::ptr::with_exposed_provenance_mut(ptr),
                layout: node.layout,
                packing,
            };
            return Ok((r, n));
        }
        let (r, n) = resolve(graph, placement, id)?;
        if let Some(slot) = self.slots.get_mut(id.index()) {
            *slot = (self.generation, r.ptr.expose_provenance(), n, r.packing);
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
    let mut packing = Packing::Standard;
    let ptr = if nbytes == 0 {
        // Nothing is read or written through an empty tensor's pointer.
        NonNull::<Aligned64>::dangling().as_ptr() as *mut u8
    } else {
        let region = cpu_region(buffer.as_ref()).ok_or_else(|| {
            Error::unsupported(
                "CPU",
                format!(
                    "tensor {} in buffer '{}': the buffer is not host memory the CPU can address",
                    node.label(id),
                    buffer.name()
                ),
            )
        })?;
        // Bounds against the region the buffer vouches for (not `size()`,
        // which a buffer implementation could get wrong in safe code).
        check_range(buffer.name(), region.len(), place.offset, nbytes)?;
        if let Some(r) = buffer.as_any().downcast_ref::<RepackBuffer>() {
            packing = r.packing_of(place.offset, &layout, nbytes)?;
        }
        // SAFETY: `offset + nbytes <= region.len()` was checked just above,
        // so the pointer stays inside the region's memory. Kernels access it
        // only while the executor holds the region's lock (see
        // `Executor::compute`), which `HostRegion::new`'s contract makes
        // sufficient.
        unsafe { region.as_ptr().add(place.offset) }
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
    Ok((
        TensorRef {
            ptr,
            layout,
            packing,
        },
        nbytes,
    ))
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
        graph.describe_node(id)
    )))
}

/// What a plan was built from, so the next compute of the same graph on the
/// same placement can reuse it instead of validating and resolving again.
///
/// A plan depends on: every node of the computed range (its op, layout,
/// operands, view source and offset; a node that computes nothing today
/// could compute tomorrow), the same of every operand outside the range,
/// each of these tensors' placement (buffer identity and offset), the
/// buffers' size, host pointer and writability, the range and the thread
/// count. [`PlanCache::hit`] compares all of it; when everything is equal,
/// every check the executor made (bounds, alignment, overlap, read-only
/// buffers, `supports_op`) would give the same answer and every resolved
/// pointer is the same, so the plan is reused. Names and flags are not
/// compared: nothing checked or resolved depends on them.
///
/// Buffers are remembered by [`Weak`] reference: the cache never keeps a
/// buffer's memory alive, and a remembered buffer's allocation cannot be
/// reused for another buffer while the `Weak` exists, so pointer identity
/// is reliable.
#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    valid: bool,
    range: (usize, usize),
    nth: usize,
    /// [`crate::tuning::generation`] when planned: a change of tuning may
    /// change kernels and their scratch.
    tuning: u64,
    /// The tensors the plan depends on, in id order.
    ids: Vec<u32>,
    /// Per entry of `ids`: the node as it was.
    keys: Vec<NodeKey>,
    /// Per entry of `ids`: (buffer identity, offset), or (0, 0) if unplaced.
    places: Vec<(usize, usize)>,
    /// Distinct buffers, as they were.
    buffers: Vec<BufferState>,
    /// Per entry of `buffers`: a tensor placed in it, and whether a node of
    /// the range writes into it (its lock is then taken exclusively).
    locks: Vec<(u32, bool)>,
    /// Scratch bytes the plan needs.
    pub(crate) scratch_bytes: usize,
}

/// What a plan depends on of a buffer: its host region's length and
/// address, its writability and its [`layout_generation`].
#[derive(Debug)]
struct BufferState {
    buffer: Weak<dyn Buffer>,
    len: usize,
    ptr: usize,
    writable: bool,
    generation: u64,
}

impl BufferState {
    fn of(buffer: &Arc<dyn Buffer>) -> Self {
        let region = cpu_region(buffer.as_ref());
        BufferState {
            buffer: Arc::downgrade(buffer),
            len: region.map_or(0, |r| r.len()),
            ptr: region.map_or(0, |r| r.as_ptr() as usize),
            writable: buffer.is_writable(),
            generation: layout_generation(buffer.as_ref()),
        }
    }
}

impl PartialEq for BufferState {
    /// The same state (the buffers themselves are compared by the caller).
    fn eq(&self, o: &Self) -> bool {
        (self.len, self.ptr, self.writable, self.generation)
            == (o.len, o.ptr, o.writable, o.generation)
    }
}

/// The parts of a node a plan depends on.
#[derive(Debug, Clone, PartialEq)]
struct NodeKey {
    layout: Layout,
    op: Op,
    srcs: [Option<TensorId>; MAX_SRC],
    view_src: Option<TensorId>,
    view_offs: usize,
}

impl NodeKey {
    fn of(n: &Node) -> Self {
        NodeKey {
            layout: n.layout,
            op: n.op,
            srcs: n.srcs,
            view_src: n.view_src,
            view_offs: n.view_offs,
        }
    }

    #[inline]
    fn matches(&self, n: &Node) -> bool {
        self.layout == n.layout
            && self.srcs == n.srcs
            && self.op == n.op
            && self.view_src == n.view_src
            && self.view_offs == n.view_offs
    }
}

/// Identity of a placement entry: (buffer address, offset).
#[inline]
fn place_key(placement: &Placement, id: TensorId) -> (usize, usize) {
    placement.get(id).map_or((0, 0), |p| {
        (Arc::as_ptr(&p.buffer) as *const u8 as usize, p.offset)
    })
}

impl PlanCache {
    /// The host regions of every buffer the plan touches, each with whether
    /// the plan writes into it: what [`tessera::host_region::lock_all`] takes
    /// before the plan runs. Only valid after [`PlanCache::record`] (or a
    /// [`PlanCache::hit`]) on the same `placement`.
    pub(crate) fn regions<'p>(&self, placement: &'p Placement) -> Vec<(HostRegion<'p>, bool)> {
        self.locks
            .iter()
            .filter_map(|&(id, write)| {
                let place = placement.get(TensorId::from_index(id))?;
                Some((cpu_region(place.buffer.as_ref())?, write))
            })
            .collect()
    }

    /// A plan is remembered.
    pub(crate) fn is_valid(&self) -> bool {
        self.valid
    }

    /// Forget the plan (call before planning, so a failed plan is never reused).
    pub(crate) fn invalidate(&mut self) {
        self.valid = false;
    }

    /// Is the remembered plan valid for computing `range` of `graph` on
    /// `placement` with `nth` threads?
    pub(crate) fn hit(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: (usize, usize),
        nth: usize,
    ) -> bool {
        if !self.valid
            || self.range != range
            || self.nth != nth
            || self.tuning != crate::tuning::generation()
        {
            return false;
        }
        let nodes = graph.nodes();
        for ((&id, key), &place) in self.ids.iter().zip(&self.keys).zip(&self.places) {
            let Some(n) = nodes.get(id as usize) else {
                return false;
            };
            if !key.matches(n) || place_key(placement, TensorId::from_index(id)) != place {
                return false;
            }
        }
        self.buffers.iter().all(|was| {
            was.buffer
                .upgrade()
                .is_some_and(|b| BufferState::of(&b) == *was)
        })
    }

    /// Remember the plan just built for `range` of `graph` on `placement`
    /// with `nth` threads.
    pub(crate) fn record(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        range: (usize, usize),
        nth: usize,
        scratch_bytes: usize,
    ) {
        self.tuning = crate::tuning::generation();
        self.ids.clear();
        self.keys.clear();
        self.places.clear();
        self.buffers.clear();
        self.locks.clear();
        let nodes = graph.nodes();
        let mut ids: Vec<u32> = Vec::new();
        for idx in range.0..range.1 {
            let Some(n) = nodes.get(idx) else { break };
            ids.push(idx as u32);
            if !n.op.is_leaf() {
                ids.extend(n.src_ids().map(|s| s.index() as u32));
            }
        }
        ids.sort_unstable();
        ids.dedup();
        for &id in &ids {
            let Some(n) = nodes.get(id as usize) else {
                // An id outside the graph: never plan on it.
                self.valid = false;
                return;
            };
            let tid = TensorId::from_index(id);
            self.keys.push(NodeKey::of(n));
            self.places.push(place_key(placement, tid));
            if let Some(p) = placement.get(tid) {
                let addr = Arc::as_ptr(&p.buffer) as *const u8 as usize;
                // A node of the range that computes writes its result here.
                let written = (range.0..range.1).contains(&(id as usize))
                    && !n.op.is_leaf()
                    && !n.op.is_view();
                match self
                    .buffers
                    .iter()
                    .position(|s| s.buffer.as_ptr() as *const u8 as usize == addr)
                {
                    Some(k) => {
                        if let Some(l) = self.locks.get_mut(k) {
                            l.1 |= written;
                        }
                    }
                    None => {
                        self.buffers.push(BufferState::of(&p.buffer));
                        self.locks.push((id, written));
                    }
                }
            }
        }
        self.ids = ids;
        self.range = range;
        self.nth = nth;
        self.scratch_bytes = scratch_bytes;
        self.valid = true;
    }
}
