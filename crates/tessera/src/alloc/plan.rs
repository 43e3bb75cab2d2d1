//! Graph memory planning (ggml's `ggml_gallocr_alloc_graph_impl`): which
//! virtual address each tensor of a graph gets.
//!
//! Planning is a pure function of the graph, the set of pre-placed tensors,
//! the buffer type of each tensor and the buffer types themselves, so that
//! [`super::GraphAllocator::reserve_size`] and
//! [`super::GraphAllocator::reserve`] compute the very same plan.
//!
//! The walk follows ggml:
//! 1. every leaf that is not pre-placed gets memory first;
//! 2. one pass counts, for each tensor, the ops that read it (`children`)
//!    and, for each view root, its views; tensors flagged INPUT get memory
//!    now, so inputs are placed at the start, each in its own memory;
//! 3. in execution order, each op node gets memory (views excepted, they use
//!    their root's) — in place over a source when ggml allows it, by best
//!    fit otherwise — and then each source whose last reader this was is
//!    freed (or, for a view, its root once the root has no readers and no
//!    views left). OUTPUT tensors are never freed.
//!
//! Differences from ggml, all on the safe side: each tensor is planned in
//! its own buffer type (ggml uses the consumer's for unallocated sources,
//! which only differs for malformed inputs); in-place reuse also requires
//! the parent to be planned by the same address planner (ggml would move the
//! node to the parent's buffer type); the view-parent case of in-place reuse
//! works as ggml intends (ggml's ownership check makes it dead code); and a
//! root is kept alive while any of its views is an OUTPUT.

use std::sync::Arc;

use crate::buffer::BufferType;
use crate::{Error, Flags, Graph, MAX_SRC, Result, TensorId};

use super::dynamic::{DynamicAllocator, VirtualAddress};
use super::{checked_alignment, pad, tensor_alloc_size};

/// What the planner needs besides the graph.
pub(super) struct PlanInput<'a> {
    /// The graph (validated by [`validate_graph`]).
    pub graph: &'a Graph,
    /// Per tensor id: memory given by the user; the planner skips it.
    pub preplaced: &'a [bool],
    /// Per tensor id: index into `bufts`.
    pub buffer_ids: &'a [usize],
    /// The buffer types.
    pub bufts: &'a [Arc<dyn BufferType>],
    /// Per buffer type: its address planner (several types may share one).
    pub planner_of: &'a [usize],
    /// Per planner: the buffer type that defines it.
    pub first_of: &'a [usize],
}

/// Where one tensor was planned (ggml's `tensor_alloc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TensorAlloc {
    /// Buffer type index.
    pub buffer_id: usize,
    /// Chunk and offset.
    pub addr: VirtualAddress,
    /// Bytes the tensor needed when planned; a later tensor at this id fits
    /// if it needs no more.
    pub size_max: usize,
}

/// The structure of a node that the plan depends on (besides sizes).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct NodeSig {
    op: &'static str,
    srcs: [Option<TensorId>; MAX_SRC],
    view_src: Option<TensorId>,
    flags: Flags,
}

impl NodeSig {
    pub(super) fn of(graph: &Graph, id: TensorId) -> Self {
        let n = &graph.nodes()[id.index()];
        NodeSig {
            op: n.op.name(),
            srcs: n.srcs,
            view_src: n.view_src,
            flags: n.flags,
        }
    }
}

/// A complete plan for one graph.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// Per tensor id; `None` for views and pre-placed tensors.
    pub allocs: Vec<Option<TensorAlloc>>,
    /// Per planner: the size of each chunk buffer.
    pub chunk_sizes: Vec<Vec<usize>>,
    /// Per tensor id: the structure the plan was made for.
    pub signature: Vec<NodeSig>,
    /// `(node, parent)`: `node` took `parent`'s memory in place.
    pub inplace: Vec<(TensorId, TensorId)>,
    /// The buffer type index of each tensor used for the plan.
    pub buffer_ids: Vec<usize>,
}

/// `Err` unless every source and view root of every node is an earlier
/// tensor of the graph and view roots are not views themselves.
pub(super) fn validate_graph(graph: &Graph) -> Result<()> {
    let len = graph.len();
    for id in graph.ids() {
        let node = &graph.nodes()[id.index()];
        for s in node.src_ids().chain(node.view_src) {
            if s.index() >= len {
                return Err(Error::InvalidTensorId { id: s.index(), len });
            }
            if s >= id {
                return Err(Error::Malformed(format!(
                    "tensor {} refers to {s}, which does not come before it",
                    node.label(id)
                )));
            }
        }
        if let Some(root) = node.view_src
            && graph.nodes()[root.index()].view_src.is_some()
        {
            return Err(Error::Malformed(format!(
                "view {} has the view {} as its root",
                node.label(id),
                graph.nodes()[root.index()].label(root)
            )));
        }
    }
    Ok(())
}

/// Per-tensor planning state (ggml's `hash_node`).
#[derive(Clone, Copy, Debug, Default)]
struct State {
    children: u32,
    views: u32,
    buffer_id: usize,
    addr: Option<VirtualAddress>,
    /// Currently holds memory from a planner (ggml's `allocated`).
    owned: bool,
}

struct Planner<'a> {
    input: &'a PlanInput<'a>,
    planners: Vec<DynamicAllocator>,
    state: Vec<State>,
    /// A root that must outlive the graph: OUTPUT, or a view of it is.
    keep: Vec<bool>,
    inplace: Vec<(TensorId, TensorId)>,
}

/// Plan every tensor of `input.graph`.
pub(super) fn make_plan(input: &PlanInput<'_>) -> Result<Plan> {
    let graph = input.graph;
    let len = graph.len();
    if input.preplaced.len() != len || input.buffer_ids.len() != len {
        return Err(Error::OutOfBounds(format!(
            "{} buffer ids for a graph of {len} tensors",
            input.buffer_ids.len()
        )));
    }
    let mut planners = Vec::with_capacity(input.first_of.len());
    for &b in input.first_of {
        let buft = input.bufts.get(b).ok_or_else(|| internal("buffer type"))?;
        let align = checked_alignment(buft.as_ref())?;
        planners.push(DynamicAllocator::new(buft.name(), align, buft.max_size())?);
    }
    let mut keep = vec![false; len];
    for id in graph.ids() {
        let n = &graph.nodes()[id.index()];
        if n.flags.contains(Flags::OUTPUT) {
            let (root, _) = graph.memory_root(id)?;
            keep[root.index()] = true;
        }
    }
    let mut p = Planner {
        input,
        planners,
        state: vec![State::default(); len],
        keep,
        inplace: Vec::new(),
    };
    p.walk()?;
    p.finish()
}

impl Planner<'_> {
    fn walk(&mut self) -> Result<()> {
        let graph = self.input.graph;
        for id in graph.leaf_ids() {
            self.allocate(id)?;
        }
        for id in graph.op_ids() {
            let node = &graph.nodes()[id.index()];
            if let Some(root) = node.view_src {
                let v = &mut self.state[root.index()].views;
                *v = v.saturating_add(1);
            }
            if node.flags.contains(Flags::INPUT) {
                self.allocate(id)?;
            }
            for s in node.src_ids() {
                let c = &mut self.state[s.index()].children;
                *c = c.saturating_add(1);
                if graph.nodes()[s.index()].flags.contains(Flags::INPUT) {
                    self.allocate(s)?;
                }
            }
        }
        for id in graph.op_ids() {
            let node = &graph.nodes()[id.index()];
            for s in node.src_ids() {
                self.allocate(s)?;
            }
            self.allocate(id)?;
            for s in node.src_ids() {
                self.release(s)?;
            }
        }
        Ok(())
    }

    /// One reader of `s` is done: free it, or its view root, when nothing
    /// reads it any more.
    fn release(&mut self, s: TensorId) -> Result<()> {
        let st = &mut self.state[s.index()];
        st.children = st.children.saturating_sub(1);
        if st.children != 0 || st.views != 0 {
            return Ok(());
        }
        let owned = st.owned;
        match self.input.graph.nodes()[s.index()].view_src {
            Some(root) => {
                let rs = &mut self.state[root.index()];
                rs.views = rs.views.saturating_sub(1);
                if rs.views == 0 && rs.children == 0 && rs.owned {
                    self.free(root)?;
                }
            }
            None if owned => self.free(s)?,
            None => {}
        }
        Ok(())
    }

    fn needs_memory(&self, id: TensorId) -> bool {
        let i = id.index();
        !self.input.preplaced[i] && self.input.graph.nodes()[id.index()].view_src.is_none()
    }

    fn buft(&self, buffer_id: usize, id: TensorId) -> Result<&Arc<dyn BufferType>> {
        self.input.bufts.get(buffer_id).ok_or_else(|| {
            Error::NotFound(format!(
                "buffer type {buffer_id} for tensor {}: the allocator has {} buffer types",
                self.input.graph.nodes()[id.index()].label(id),
                self.input.bufts.len()
            ))
        })
    }

    fn planner_index(&self, buffer_id: usize) -> Result<usize> {
        self.input
            .planner_of
            .get(buffer_id)
            .copied()
            .ok_or_else(|| internal("planner"))
    }

    fn planner_mut(&mut self, buffer_id: usize) -> Result<&mut DynamicAllocator> {
        let i = self.planner_index(buffer_id)?;
        self.planners.get_mut(i).ok_or_else(|| internal("planner"))
    }

    fn size_of(&self, id: TensorId, buffer_id: usize) -> Result<usize> {
        tensor_alloc_size(
            self.buft(buffer_id, id)?.as_ref(),
            &self.input.graph.nodes()[id.index()].layout,
        )
    }

    /// Give `id` memory unless it has some (ggml's `ggml_gallocr_allocate_node`).
    fn allocate(&mut self, id: TensorId) -> Result<()> {
        if !self.needs_memory(id) || self.state[id.index()].addr.is_some() {
            return Ok(());
        }
        let buffer_id = self.input.buffer_ids[id.index()];
        let size = self.size_of(id, buffer_id)?;
        let node = &self.input.graph.nodes()[id.index()];
        if node.op.can_inplace() {
            for p in node.src_ids() {
                if self.try_inplace(id, p, buffer_id)? {
                    return Ok(());
                }
            }
        }
        let graph = self.input.graph;
        let addr = self
            .planner_mut(buffer_id)?
            .alloc(size, || graph.nodes()[id.index()].label(id))?;
        let st = &mut self.state[id.index()];
        st.buffer_id = buffer_id;
        st.addr = Some(addr);
        st.owned = true;
        Ok(())
    }

    /// Give `id` the memory of its source `p` if ggml's in-place rules allow.
    fn try_inplace(&mut self, id: TensorId, p: TensorId, buffer_id: usize) -> Result<bool> {
        let graph = self.input.graph;
        let (node, parent) = (&graph.nodes()[id.index()], &graph.nodes()[p.index()]);
        let root = parent.view_src.unwrap_or(p);
        let (ps, rs) = (self.state[p.index()], self.state[root.index()]);
        let Some(addr) = rs.addr else {
            return Ok(false);
        };
        let allowed = rs.owned
            && !parent.flags.contains(Flags::OUTPUT)
            && !graph.nodes()[root.index()].flags.contains(Flags::OUTPUT)
            && !self.keep[root.index()]
            && node.layout.same_layout(&parent.layout)
            && ps.children == 1
            && ps.views == 0
            && (parent.view_src.is_none()
                || (rs.views == 1 && rs.children == 0 && parent.view_offs == 0))
            && self.planner_index(rs.buffer_id)? == self.planner_index(buffer_id)?;
        if !allowed {
            return Ok(false);
        }
        self.state[p.index()].owned = false;
        self.state[root.index()].owned = false;
        let st = &mut self.state[id.index()];
        st.buffer_id = rs.buffer_id;
        st.addr = Some(addr);
        st.owned = true;
        self.inplace.push((id, p));
        // The node may be smaller than the memory it took: free the tail.
        let align = self.planner_mut(rs.buffer_id)?.alignment();
        let root_size = pad(self.size_of(root, rs.buffer_id)?, align)?;
        let node_size = pad(self.size_of(id, rs.buffer_id)?, align)?;
        if root_size > node_size {
            let tail = VirtualAddress {
                chunk: addr.chunk,
                offset: addr.offset + node_size,
            };
            self.planner_mut(rs.buffer_id)?
                .free(tail, root_size - node_size)?;
        }
        Ok(true)
    }

    /// Return `id`'s memory, unless it must survive the graph.
    fn free(&mut self, id: TensorId) -> Result<()> {
        if self.keep[id.index()] {
            return Ok(());
        }
        let st = self.state[id.index()];
        let Some(addr) = st.addr else {
            return Ok(());
        };
        let size = self.size_of(id, st.buffer_id)?;
        self.planner_mut(st.buffer_id)?.free(addr, size)?;
        self.state[id.index()].owned = false;
        Ok(())
    }

    fn finish(self) -> Result<Plan> {
        let graph = self.input.graph;
        let mut allocs = Vec::with_capacity(graph.len());
        for id in graph.ids() {
            if !self.needs_memory(id) {
                allocs.push(None);
                continue;
            }
            let st = self.state[id.index()];
            let addr = st.addr.ok_or_else(|| internal("unplanned tensor"))?;
            allocs.push(Some(TensorAlloc {
                buffer_id: st.buffer_id,
                addr,
                size_max: self.size_of(id, st.buffer_id)?,
            }));
        }
        Ok(Plan {
            allocs,
            chunk_sizes: self.planners.iter().map(|p| p.chunk_sizes()).collect(),
            signature: graph.ids().map(|id| NodeSig::of(graph, id)).collect(),
            inplace: self.inplace,
            buffer_ids: self.input.buffer_ids.to_vec(),
        })
    }
}

fn internal(what: &str) -> Error {
    Error::device("graph allocator", format!("internal error: no {what}"))
}
