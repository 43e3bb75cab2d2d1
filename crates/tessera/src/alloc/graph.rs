//! The graph allocator (ggml's `ggml_gallocr`): plans the memory of a
//! compute graph's intermediates, owns the buffers that hold them and places
//! each tensor of a graph in them.
//!
//! Usage: `reserve` once with the largest graph (llama.cpp reserves with
//! worst-case shapes), then `alloc_graph` before each compute. `alloc_graph`
//! takes a fast path when the graph matches the recorded plan — same tensor
//! count and structure, every tensor needing no more bytes than planned —
//! and only re-places tensors at their recorded addresses; otherwise it
//! plans again (growing the buffers if needed).
//!
//! Pre-placed tensors — those the placement already has in memory that is
//! not this allocator's (bound weights, KV caches, user inputs) — are never
//! touched. Places in this allocator's own current buffers (left by an
//! earlier `alloc_graph` with the same placement) are treated as the
//! allocator's and placed again, so a placement can be reused from one call
//! to the next. The consequence: memory planned by this allocator cannot be
//! bound as an input of a graph it allocates — copy such a result out first
//! (it would be overwritten anyway).
//!
//! Buffer types given several times share one address planner and one set
//! of buffers, as in ggml; the duplicates report a size of 0.

use std::sync::Arc;

use crate::buffer::{Buffer, BufferType, BufferUsage, same_buffer_type};
use crate::placement::{Place, Placement};
use crate::{Error, Graph, Result};

use super::plan::{NodeSig, Plan, PlanInput, make_plan, validate_graph};

/// Buffer id of a tensor whose memory the caller provides (see
/// [`GraphAllocator::reserve_with`]).
pub const EXTERNAL: usize = usize::MAX;

/// `preplaced`, with every tensor of buffer id [`EXTERNAL`] counted as placed.
fn with_external(mut preplaced: Vec<bool>, ids: &[usize]) -> Vec<bool> {
    for (p, &id) in preplaced.iter_mut().zip(ids) {
        *p |= id == EXTERNAL;
    }
    preplaced
}
use super::tensor_alloc_size;

/// Plans and holds the compute memory of graphs.
#[derive(Debug)]
pub struct GraphAllocator {
    bufts: Vec<Arc<dyn BufferType>>,
    /// Per buffer type: its planner (and buffer set) index.
    planner_of: Vec<usize>,
    /// Per planner: the first buffer type using it.
    first_of: Vec<usize>,
    /// Per planner: the chunk buffers, once reserved.
    chunks: Vec<Option<Vec<Arc<dyn Buffer>>>>,
    plan: Option<Plan>,
    plans: usize,
}

impl GraphAllocator {
    /// An allocator over one buffer type.
    pub fn new(buft: Arc<dyn BufferType>) -> Self {
        Self::with_buffer_types(vec![buft])
    }

    /// An allocator over several buffer types (one per device of a split
    /// graph); tensors choose theirs through the `buffer_ids` of
    /// [`GraphAllocator::reserve_with`].
    pub fn with_buffer_types(bufts: Vec<Arc<dyn BufferType>>) -> Self {
        let mut planner_of = Vec::with_capacity(bufts.len());
        let mut first_of = Vec::new();
        for (i, b) in bufts.iter().enumerate() {
            let shared = bufts
                .iter()
                .take(i)
                .position(|e| same_buffer_type(e.as_ref(), b.as_ref()));
            match shared {
                Some(j) => planner_of.push(planner_of[j]),
                None => {
                    planner_of.push(first_of.len());
                    first_of.push(i);
                }
            }
        }
        let chunks = vec![None; first_of.len()];
        GraphAllocator {
            bufts,
            planner_of,
            first_of,
            chunks,
            plan: None,
            plans: 0,
        }
    }

    /// The buffer types, by index.
    pub fn buffer_types(&self) -> &[Arc<dyn BufferType>] {
        &self.bufts
    }

    /// How many plans were made (by `reserve*` and by `alloc_graph` when the
    /// fast path did not apply).
    pub fn plan_count(&self) -> usize {
        self.plans
    }

    /// Plan `graph` with every tensor in buffer type 0 and allocate the
    /// buffers it needs (ggml's `ggml_gallocr_reserve`).
    pub fn reserve(&mut self, graph: &Graph, placement: &Placement) -> Result<()> {
        self.reserve_with(graph, placement, &vec![0; graph.len()])
    }

    /// Plan `graph` with tensor `i` in buffer type `buffer_ids[i]` and
    /// allocate the buffers it needs (ggml's `ggml_gallocr_reserve_n`). A
    /// tensor with buffer id [`EXTERNAL`] gets no memory from the
    /// allocator: the caller places it (before `alloc_graph`), as if bound.
    /// Buffers only grow: a buffer type's chunks are allocated again, at the
    /// planned sizes, only if some chunk needs more than it has.
    pub fn reserve_with(
        &mut self,
        graph: &Graph,
        placement: &Placement,
        buffer_ids: &[usize],
    ) -> Result<()> {
        validate_graph(graph)?;
        let preplaced = with_external(self.preplaced(graph, placement)?, buffer_ids);
        self.reserve_impl(graph, &preplaced, buffer_ids)
    }

    /// The bytes per buffer type index that [`GraphAllocator::reserve_with`]
    /// would plan for `graph` (all in buffer type 0 if `buffer_ids` is
    /// `None`), without allocating (ggml's `ggml_gallocr_reserve_n_size`).
    /// Duplicated buffer types report 0 after the first, so the sum is the
    /// total. On a fresh allocator, `reserve_with` then allocates exactly
    /// these sizes ([`GraphAllocator::buffer_size`]).
    pub fn reserve_size(
        &self,
        graph: &Graph,
        placement: &Placement,
        buffer_ids: Option<&[usize]>,
    ) -> Result<Vec<usize>> {
        validate_graph(graph)?;
        let preplaced = self.preplaced(graph, placement)?;
        let zeros;
        let ids = match buffer_ids {
            Some(ids) => ids,
            None => {
                zeros = vec![0; graph.len()];
                &zeros
            }
        };
        let preplaced = with_external(preplaced, ids);
        let plan = make_plan(&self.plan_input(graph, &preplaced, ids))?;
        Ok(self.sizes_of(&plan))
    }

    /// Give every tensor of `graph` that has no memory yet its planned place
    /// in this allocator's buffers, then place the views (ggml's
    /// `ggml_gallocr_alloc_graph`). Plans again when the graph does not
    /// match the recorded plan, with the last plan's buffer ids if the graph
    /// has as many tensors, else with every tensor in buffer type 0.
    pub fn alloc_graph(&mut self, graph: &Graph, placement: &mut Placement) -> Result<()> {
        validate_graph(graph)?;
        let preplaced = self.preplaced(graph, placement)?;
        if !self.plan_fits(graph, &preplaced)? {
            let ids = match &self.plan {
                Some(p) if p.buffer_ids.len() == graph.len() => p.buffer_ids.clone(),
                _ => vec![0; graph.len()],
            };
            self.reserve_impl(graph, &preplaced, &ids)?;
        }
        let plan = self.plan.as_ref().ok_or_else(|| internal("no plan"))?;
        for buf in self.chunks.iter().flatten().flatten() {
            buf.reset();
        }
        for id in graph.ids() {
            let i = id.index();
            if preplaced.get(i).copied().unwrap_or(true) || graph.nodes()[id.index()].is_view() {
                continue;
            }
            let a = plan
                .allocs
                .get(i)
                .copied()
                .flatten()
                .ok_or_else(|| internal("unplanned tensor"))?;
            let buffer = self
                .planner_chunks(a.buffer_id)?
                .get(a.addr.chunk)
                .ok_or_else(|| internal("missing chunk buffer"))?
                .clone();
            let offset = a.addr.offset;
            buffer.init_tensor(&graph.nodes()[id.index()].layout, offset)?;
            placement.set(graph, id, Place { buffer, offset })?;
        }
        placement.place_views(graph)?;
        for id in graph.ids() {
            if graph.nodes()[id.index()].is_view()
                && !preplaced.get(id.index()).copied().unwrap_or(true)
                && let Some(p) = placement.get(id)
            {
                p.buffer
                    .init_tensor(&graph.nodes()[id.index()].layout, p.offset)?;
            }
        }
        Ok(())
    }

    /// Bytes held for buffer type `i` (the sum of its chunk buffers; 0 before
    /// the first reserve and for a buffer type listed earlier too), ggml's
    /// `ggml_gallocr_get_buffer_size`.
    pub fn buffer_size(&self, i: usize) -> Result<usize> {
        let planner = self.planner_index(i)?;
        if self.first_of.get(planner) != Some(&i) {
            return Ok(0);
        }
        Ok(self
            .chunks
            .get(planner)
            .and_then(Option::as_ref)
            .map_or(0, |c| c.iter().map(|b| b.size()).sum()))
    }

    /// Bytes per buffer type index that the current plan needs (all 0 before
    /// the first plan); the buffers hold at least this much.
    pub fn planned_sizes(&self) -> Vec<usize> {
        match &self.plan {
            Some(p) => self.sizes_of(p),
            None => vec![0; self.bufts.len()],
        }
    }

    /// The chunk buffers of buffer type `i` (shared with the other indices
    /// of the same buffer type); empty before the first reserve.
    pub fn chunk_buffers(&self, i: usize) -> Result<&[Arc<dyn Buffer>]> {
        let planner = self.planner_index(i)?;
        Ok(self
            .chunks
            .get(planner)
            .and_then(Option::as_deref)
            .unwrap_or(&[]))
    }

    fn planner_index(&self, i: usize) -> Result<usize> {
        self.planner_of.get(i).copied().ok_or_else(|| {
            Error::NotFound(format!(
                "buffer type index {i}: the allocator has {} buffer types",
                self.bufts.len()
            ))
        })
    }

    fn planner_chunks(&self, buffer_id: usize) -> Result<&[Arc<dyn Buffer>]> {
        let planner = self.planner_index(buffer_id)?;
        self.chunks
            .get(planner)
            .and_then(Option::as_deref)
            .ok_or_else(|| internal("buffers not allocated"))
    }

    fn plan_input<'a>(
        &'a self,
        graph: &'a Graph,
        preplaced: &'a [bool],
        buffer_ids: &'a [usize],
    ) -> PlanInput<'a> {
        PlanInput {
            graph,
            preplaced,
            buffer_ids,
            bufts: &self.bufts,
            planner_of: &self.planner_of,
            first_of: &self.first_of,
        }
    }

    /// Per buffer type index: the plan's total, 0 for duplicates.
    fn sizes_of(&self, plan: &Plan) -> Vec<usize> {
        (0..self.bufts.len())
            .map(|i| {
                let p = self.planner_of.get(i).copied().unwrap_or(usize::MAX);
                if self.first_of.get(p) != Some(&i) {
                    return 0;
                }
                plan.chunk_sizes.get(p).map_or(0, |c| c.iter().sum())
            })
            .collect()
    }

    /// Is `buffer` one of this allocator's current chunk buffers?
    /// Is `buffer` one of this allocator's own (compute memory it planned)?
    pub fn owns(&self, buffer: &Arc<dyn Buffer>) -> bool {
        self.is_own(buffer)
    }

    fn is_own(&self, buffer: &Arc<dyn Buffer>) -> bool {
        self.chunks
            .iter()
            .flatten()
            .flatten()
            .any(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(buffer)))
    }

    /// Per tensor: placed in memory that is not this allocator's. A placed
    /// view whose root is not placed is an error.
    fn preplaced(&self, graph: &Graph, placement: &Placement) -> Result<Vec<bool>> {
        let pre: Vec<bool> = graph
            .ids()
            .map(|id| placement.get(id).is_some_and(|p| !self.is_own(&p.buffer)))
            .collect();
        for id in graph.ids() {
            if let Some(root) = graph.nodes()[id.index()].view_src
                && pre[id.index()]
                && !pre[root.index()]
            {
                return Err(Error::InvalidLayout(format!(
                    "view {} is placed but its root {} is not: bind the root instead",
                    graph.nodes()[id.index()].label(id),
                    graph.nodes()[root.index()].label(root)
                )));
            }
        }
        Ok(pre)
    }

    /// Can `graph` reuse the recorded plan as it is?
    fn plan_fits(&self, graph: &Graph, preplaced: &[bool]) -> Result<bool> {
        let Some(plan) = &self.plan else {
            return Ok(false);
        };
        if plan.allocs.len() != graph.len() || plan.signature.len() != graph.len() {
            return Ok(false);
        }
        for id in graph.ids() {
            let i = id.index();
            if plan.signature[i] != NodeSig::of(graph, id) {
                return Ok(false);
            }
            if preplaced[i] || graph.nodes()[id.index()].is_view() {
                continue;
            }
            let Some(a) = plan.allocs[i] else {
                return Ok(false);
            };
            let buft = self
                .bufts
                .get(a.buffer_id)
                .ok_or_else(|| internal("buffer type"))?;
            if tensor_alloc_size(buft.as_ref(), &graph.nodes()[id.index()].layout)? > a.size_max {
                return Ok(false);
            }
            if self.planner_chunks(a.buffer_id).is_err() {
                return Ok(false);
            }
        }
        for &(node, parent) in &plan.inplace {
            let (n, p) = (&graph.nodes()[node.index()], &graph.nodes()[parent.index()]);
            if !n.layout.same_layout(&p.layout) || (p.is_view() && p.view_offs != 0) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Plan, then make sure every planner's buffers hold its chunks.
    fn reserve_impl(&mut self, graph: &Graph, preplaced: &[bool], ids: &[usize]) -> Result<()> {
        let plan = make_plan(&self.plan_input(graph, preplaced, ids))?;
        self.plan = None;
        self.plans += 1;
        for (planner, need) in plan.chunk_sizes.iter().enumerate() {
            let grow = match self.chunks.get(planner).and_then(Option::as_ref) {
                None => true,
                Some(have) => need
                    .iter()
                    .enumerate()
                    .any(|(c, &n)| n > have.get(c).map_or(0, |b| b.size())),
            };
            if !grow {
                continue;
            }
            let slot = self
                .chunks
                .get_mut(planner)
                .ok_or_else(|| internal("planner"))?;
            // Free the old buffers before allocating (device memory is tight).
            *slot = None;
            let b = *self
                .first_of
                .get(planner)
                .ok_or_else(|| internal("planner"))?;
            let buft = self.bufts.get(b).ok_or_else(|| internal("buffer type"))?;
            let mut bufs = Vec::with_capacity(need.len());
            for (c, &size) in need.iter().enumerate() {
                let buf = buft
                    .alloc_buffer(size)
                    .map_err(|e| with_context(e, b, c, need))?;
                buf.set_usage(BufferUsage::Compute);
                bufs.push(buf);
            }
            if let Some(slot) = self.chunks.get_mut(planner) {
                *slot = Some(bufs);
            }
        }
        self.plan = Some(plan);
        Ok(())
    }
}

/// Say which chunk of which buffer type failed to allocate.
fn with_context(e: Error, buft: usize, chunk: usize, sizes: &[usize]) -> Error {
    let what = format!(
        "graph allocator: chunk {chunk} of {} for buffer type {buft} (chunks of {sizes:?} bytes)",
        sizes.len()
    );
    match e {
        Error::OutOfMemory {
            device,
            requested,
            detail,
        } => Error::OutOfMemory {
            device,
            requested,
            detail: format!("{detail}; {what}"),
        },
        Error::Device { device, message } => Error::Device {
            device,
            message: format!("{message}; {what}"),
        },
        other => other,
    }
}

fn internal(what: &str) -> Error {
    Error::device("graph allocator", format!("internal error: {what}"))
}
