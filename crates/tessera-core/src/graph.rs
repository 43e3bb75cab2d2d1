//! The compute graph: a flat list of tensor nodes addressed by [`TensorId`].
//!
//! ggml links tensors with raw pointers; Tessera keeps them as plain data. A
//! [`Graph`] owns a `Vec<Node>`; each node has a layout, an op with typed
//! parameters, source ids, an optional view source and flags. Sources always
//! come earlier in the list, so the list order is an execution order.
//!
//! A graph says nothing about memory. Where each tensor lives (a buffer and an
//! offset) is a separate table, produced by the graph allocator for compute
//! tensors and filled by the user for *bound* tensors (weights, caches) that
//! live outside any graph. That makes a graph cheap to copy to another device,
//! to hash for reuse and to send over the network.
//!
//! The op constructors (`add`, `mul_mat`, `rope`, ...) live in `build`;
//! each validates its operands and returns an [`Error`] instead of panicking.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::op::Op;

/// Most sources an op can have.
pub const MAX_SRC: usize = 6;

/// Index of a tensor in its [`Graph`].
///
/// An id is the tensor's position in the graph's node list, plus the tag of
/// the graph that made it: every graph entry point that takes an id checks
/// it, so an id from another graph is an [`Error::ForeignTensorId`], never a
/// panic and never silently another tensor. A clone of a graph keeps its tag
/// (the clone has the same tensors). Equality, ordering and hashing look at
/// the position only, so two graphs built the same way compare equal.
#[derive(Clone, Copy, Debug)]
pub struct TensorId {
    index: u32,
    /// The graph's tag; 0 for an id made by [`TensorId::from_index`].
    graph: u32,
}

impl TensorId {
    /// The position in the graph's node list.
    pub const fn index(self) -> usize {
        self.index as usize
    }

    /// The id at position `index` of whatever graph it is used with (only
    /// the range is checked then): for code that walks a graph by position.
    pub const fn from_index(index: u32) -> Self {
        TensorId { index, graph: 0 }
    }
}

impl PartialEq for TensorId {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}

impl Eq for TensorId {}

impl std::hash::Hash for TensorId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.index.hash(state);
    }
}

impl PartialOrd for TensorId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TensorId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index.cmp(&other.index)
    }
}

impl std::fmt::Display for TensorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.index)
    }
}

/// A fresh graph tag (never 0).
fn next_tag() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let t = NEXT.fetch_add(1, Ordering::Relaxed);
        if t != 0 {
            return t;
        }
    }
}

/// Per-tensor flags (ggml's `GGML_TENSOR_FLAG_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Data is written by the user before each compute; the allocator gives
    /// inputs their own memory, placed first, never shared.
    pub const INPUT: Flags = Flags(1);
    /// Data is read by the user after compute; the allocator never frees or
    /// reuses it.
    pub const OUTPUT: Flags = Flags(2);

    /// No flags.
    pub const fn empty() -> Self {
        Flags(0)
    }

    /// All of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Set `other`.
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }
}

/// One tensor of a graph: a leaf (op [`Op::None`]) or the result of an op.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Type, extents and strides.
    pub layout: Layout,
    /// What computes it.
    pub op: Op,
    /// Operands, in ggml's order; `None` for absent optional operands.
    pub srcs: [Option<TensorId>; MAX_SRC],
    /// For views: the root tensor whose memory this one uses (never itself a view).
    pub view_src: Option<TensorId>,
    /// For views: byte offset into `view_src`'s memory.
    pub view_offs: usize,
    /// Input/output flags.
    pub flags: Flags,
    /// Name for messages and lookup (may be empty).
    pub name: String,
}

impl Node {
    /// The present operands, in order.
    pub fn src_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.srcs.iter().flatten().copied()
    }

    /// Operand `i`, if present.
    pub fn src(&self, i: usize) -> Option<TensorId> {
        self.srcs.get(i).copied().flatten()
    }

    /// This tensor uses another tensor's memory.
    pub fn is_view(&self) -> bool {
        self.view_src.is_some()
    }

    /// A leaf: no op computes it.
    pub fn is_leaf(&self) -> bool {
        self.op.is_leaf()
    }

    /// `name` or, if empty, `#id`, for messages.
    pub fn label(&self, id: TensorId) -> String {
        if self.name.is_empty() {
            id.to_string()
        } else {
            format!("{} ({id})", self.name)
        }
    }
}

/// A compute graph: nodes in execution order.
#[derive(Clone, Debug)]
pub struct Graph {
    nodes: Vec<Node>,
    /// Tag of the ids this graph hands out (see [`TensorId`]).
    tag: u32,
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

/// Graphs are equal when their nodes are (tags are not compared).
impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Graph {
            nodes: Vec::new(),
            tag: next_tag(),
        }
    }

    /// The id of position `i` in this graph.
    fn id_at(&self, i: usize) -> TensorId {
        TensorId {
            index: i as u32,
            graph: self.tag,
        }
    }

    /// `Ok` if `id` may be used with this graph: made by it (or a clone), or
    /// by [`TensorId::from_index`], and in range.
    pub fn check_id(&self, id: TensorId) -> Result<()> {
        if id.graph != 0 && id.graph != self.tag {
            return Err(Error::ForeignTensorId { id: id.index() });
        }
        if id.index() >= self.nodes.len() {
            return Err(Error::InvalidTensorId {
                id: id.index(),
                len: self.nodes.len(),
            });
        }
        Ok(())
    }

    /// Number of tensors (leaves and op results).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// No tensors.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `id`, or an error if `id` is not in this graph.
    pub fn node(&self, id: TensorId) -> Result<&Node> {
        self.check_id(id)?;
        self.nodes
            .get(id.index())
            .ok_or_else(|| Error::InvalidTensorId {
                id: id.index(),
                len: self.nodes.len(),
            })
    }

    /// The layout of `id`.
    pub fn layout(&self, id: TensorId) -> Result<Layout> {
        Ok(self.node(id)?.layout)
    }

    /// All nodes in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// All ids in order.
    pub fn ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        (0..self.nodes.len()).map(|i| self.id_at(i))
    }

    /// Ids of nodes that an op computes (not leaves), in execution order.
    pub fn op_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(|id| !self.nodes[id.index()].is_leaf())
    }

    /// Ids of leaves.
    pub fn leaf_ids(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.ids().filter(|id| self.nodes[id.index()].is_leaf())
    }

    /// The first tensor named `name`.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| self.id_at(i))
    }

    /// A new leaf of `dtype` and extents `ne` (at most four), contiguous.
    pub fn new_tensor(&mut self, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let layout = Layout::contiguous(dtype, ne)?;
        self.push_leaf(layout)
    }

    /// A new leaf with an explicit layout (e.g. a bound tensor's).
    pub fn new_leaf(&mut self, layout: Layout) -> Result<TensorId> {
        layout.checked_nbytes()?;
        if layout.nb[0] == 0 && layout.ne[0] > 1 {
            return Err(Error::InvalidLayout(format!(
                "leaf {layout} has a zero row stride"
            )));
        }
        self.push_leaf(layout)
    }

    /// A new leaf flagged as an input, with a name.
    pub fn input(&mut self, name: &str, dtype: DType, ne: &[usize]) -> Result<TensorId> {
        let id = self.new_tensor(dtype, ne)?;
        self.set_input(id)?;
        self.set_name(id, name)?;
        Ok(id)
    }

    fn push_leaf(&mut self, layout: Layout) -> Result<TensorId> {
        self.push(Node {
            layout,
            op: Op::None,
            srcs: [None; MAX_SRC],
            view_src: None,
            view_offs: 0,
            flags: Flags::empty(),
            name: String::new(),
        })
    }

    /// Name `id`.
    pub fn set_name(&mut self, id: TensorId, name: &str) -> Result<()> {
        self.node_mut(id)?.name = name.to_owned();
        Ok(())
    }

    /// Flag `id` as an input.
    pub fn set_input(&mut self, id: TensorId) -> Result<()> {
        self.node_mut(id)?.flags.insert(Flags::INPUT);
        Ok(())
    }

    /// Flag `id` as an output.
    pub fn set_output(&mut self, id: TensorId) -> Result<()> {
        self.node_mut(id)?.flags.insert(Flags::OUTPUT);
        Ok(())
    }

    fn node_mut(&mut self, id: TensorId) -> Result<&mut Node> {
        self.check_id(id)?;
        let len = self.nodes.len();
        self.nodes
            .get_mut(id.index())
            .ok_or_else(|| Error::InvalidTensorId {
                id: id.index(),
                len,
            })
    }

    /// Append a node whose sources are already validated to belong to this
    /// graph. Used by the op constructors.
    pub(crate) fn push(&mut self, mut node: Node) -> Result<TensorId> {
        // Every stored id is checked (and carries this graph's tag), so the
        // ids inside a graph are always valid in it.
        for s in node.srcs.iter_mut().flatten() {
            self.check_id(*s)?;
            *s = self.id_at(s.index());
        }
        if let Some(v) = node.view_src.as_mut() {
            self.check_id(*v)?;
            *v = self.id_at(v.index());
        }
        let id = u32::try_from(self.nodes.len())
            .map_err(|_| Error::Overflow("a graph holds at most 2^32 tensors".into()))?;
        self.nodes.push(node);
        Ok(TensorId {
            index: id,
            graph: self.tag,
        })
    }

    /// The root of `id`'s memory and the byte offset into it: `(id, 0)` for a
    /// non-view.
    pub fn memory_root(&self, id: TensorId) -> Result<(TensorId, usize)> {
        let n = self.node(id)?;
        Ok(match n.view_src {
            Some(root) => (root, n.view_offs),
            None => (id, 0),
        })
    }

    /// `OP label = dst from [srcs]` (e.g. `MUL_MAT #5 = f32[4,2,1,1] from
    /// [q4_0[64,4,1,1], f32[64,2,1,1]]`), for error messages that name a node.
    pub fn describe_node(&self, id: TensorId) -> String {
        let Ok(node) = self.node(id) else {
            return format!("{id} (not in the graph)");
        };
        let srcs: Vec<String> = node
            .src_ids()
            .map(|s| {
                self.node(s)
                    .map_or_else(|_| format!("{s}?"), |n| n.layout.describe())
            })
            .collect();
        format!(
            "{} {} = {} from [{}]",
            node.op.display_name(),
            node.label(id),
            node.layout.describe(),
            srcs.join(", ")
        )
    }

    /// Count, for every tensor, how many op nodes read it as a source.
    pub fn use_counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.nodes.len()];
        for n in &self.nodes {
            for s in n.src_ids() {
                counts[s.index()] += 1;
            }
        }
        counts
    }
}
