//! What a scheduler plan depends on, to reuse it for a graph of the same
//! structure (graph reuse) and to re-plan when anything changed.
//!
//! A plan is a function of: every node's op (with parameters), layout,
//! sources, view source and offset, and flags; for every tensor whose memory
//! the user provided, its buffer type, usage and host-ness (the passes read
//! nothing else of a buffer); and the pins. Names are not part of it. The
//! key holds all of that; a 64-bit hash of it makes a mismatch cheap to see,
//! and a full comparison makes a hash collision harmless.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::buffer::BufferUsage;
use crate::placement::Placement;
use crate::{Flags, Graph, Layout, MAX_SRC, Op};

#[derive(Clone, Debug, PartialEq)]
struct NodeSig {
    op: Op,
    layout: Layout,
    srcs: [Option<u32>; MAX_SRC],
    view_src: Option<u32>,
    view_offs: usize,
    flags: Flags,
}

/// The memory a user provided for one tensor, as the passes see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlacedSig {
    buft: usize,
    usage: BufferUsage,
    host: bool,
}

/// Everything a plan depends on.
#[derive(Clone, Debug)]
pub(super) struct GraphKey {
    hash: u64,
    nodes: Vec<NodeSig>,
    placed: Vec<Option<PlacedSig>>,
    pins: Vec<(usize, usize)>,
}

impl PartialEq for GraphKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.nodes == other.nodes
            && self.placed == other.placed
            && self.pins == other.pins
    }
}

impl GraphKey {
    /// The key of `graph` with the user's memory `placement` (only the
    /// tensors the user placed: the caller leaves out the scheduler's own).
    pub(super) fn of(graph: &Graph, placement: &Placement, pins: &[(usize, usize)]) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut nodes = Vec::with_capacity(graph.len());
        let mut placed = Vec::with_capacity(graph.len());
        for id in graph.ids() {
            let n = &graph.nodes()[id.index()];
            let sig = NodeSig {
                op: n.op,
                layout: n.layout,
                srcs: n.srcs.map(|s| s.map(|s| s.index() as u32)),
                view_src: n.view_src.map(|s| s.index() as u32),
                view_offs: n.view_offs,
                flags: n.flags,
            };
            n.op.name().hash(&mut h);
            sig.layout.ne.hash(&mut h);
            sig.layout.nb.hash(&mut h);
            sig.srcs.hash(&mut h);
            sig.view_src.hash(&mut h);
            sig.view_offs.hash(&mut h);
            nodes.push(sig);
            let p = placement.get(id).map(|p| PlacedSig {
                buft: Arc::as_ptr(&p.buffer.buffer_type()) as *const u8 as usize,
                usage: p.buffer.usage(),
                host: p.buffer.is_host(),
            });
            p.hash(&mut h);
            placed.push(p);
        }
        pins.hash(&mut h);
        GraphKey {
            hash: h.finish(),
            nodes,
            placed,
            pins: pins.to_vec(),
        }
    }
}
