//! What a scheduler plan depends on, to reuse it for a graph of the same
//! structure (graph reuse) and to re-plan when anything changed.
//!
//! A plan is a function of: every node's op (with parameters), layout,
//! sources, view source and offset, and flags; for every tensor whose memory
//! the user provided, its buffer type, usage and host-ness (the passes read
//! nothing else of a buffer); and the pins. Names are not part of it. The
//! key holds all of that (and a 64-bit structural hash, for listings);
//! [`GraphKey::matches`] compares a graph with it in place, without
//! allocating, which is what makes the reuse path cheap.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::buffer::BufferUsage;
use crate::placement::{Place, Placement};
use crate::{Flags, Graph, Layout, MAX_SRC, Node, Op};

#[derive(Clone, Debug, PartialEq)]
struct NodeSig {
    op: Op,
    layout: Layout,
    srcs: [Option<u32>; MAX_SRC],
    view_src: Option<u32>,
    view_offs: usize,
    flags: Flags,
}

impl NodeSig {
    fn of(n: &Node) -> Self {
        NodeSig {
            op: n.op,
            layout: n.layout,
            srcs: n.srcs.map(|s| s.map(|s| s.index() as u32)),
            view_src: n.view_src.map(|s| s.index() as u32),
            view_offs: n.view_offs,
            flags: n.flags,
        }
    }

    fn matches(&self, n: &Node) -> bool {
        self.layout == n.layout
            && self.op == n.op
            && self.view_offs == n.view_offs
            && self.flags == n.flags
            && self.view_src == n.view_src.map(|s| s.index() as u32)
            && self
                .srcs
                .iter()
                .zip(n.srcs.iter())
                .all(|(a, b)| *a == b.map(|s| s.index() as u32))
    }
}

/// The memory a user provided for one tensor, as the passes see it (and
/// the buffer itself, to recognise it quickly).
#[derive(Clone, Debug)]
struct PlacedSig {
    buffer: usize,
    buft: usize,
    usage: BufferUsage,
    host: bool,
}

impl PlacedSig {
    fn of(p: &Place) -> Self {
        PlacedSig {
            buffer: Arc::as_ptr(&p.buffer) as *const u8 as usize,
            buft: Arc::as_ptr(&p.buffer.buffer_type()) as *const u8 as usize,
            usage: p.buffer.usage(),
            host: p.buffer.is_host(),
        }
    }

    /// Same for the passes: the same buffer (usage checked), or another one
    /// of the same type, usage and host-ness.
    fn matches(&self, p: &Place) -> bool {
        let buffer = Arc::as_ptr(&p.buffer) as *const u8 as usize;
        if buffer == self.buffer {
            return p.buffer.usage() == self.usage;
        }
        let other = PlacedSig::of(p);
        other.buft == self.buft && other.usage == self.usage && other.host == self.host
    }
}

/// Everything a plan depends on.
#[derive(Clone, Debug)]
pub(super) struct GraphKey {
    /// Structural hash of the nodes (for listings and quick rejection).
    pub hash: u64,
    nodes: Vec<NodeSig>,
    placed: Vec<Option<PlacedSig>>,
    pins: Vec<(usize, usize)>,
}

impl GraphKey {
    /// The key of `graph` with the user's memory: the places of `placement`
    /// for which `is_user` holds (the caller leaves out its own memory).
    pub(super) fn of(
        graph: &Graph,
        placement: &Placement,
        is_user: impl Fn(crate::TensorId, &Place) -> bool,
        pins: &[(usize, usize)],
    ) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut nodes = Vec::with_capacity(graph.len());
        let mut placed = Vec::with_capacity(graph.len());
        for id in graph.ids() {
            let sig = NodeSig::of(&graph.nodes()[id.index()]);
            sig.op.name().hash(&mut h);
            sig.layout.ne.hash(&mut h);
            sig.layout.nb.hash(&mut h);
            sig.srcs.hash(&mut h);
            sig.view_src.hash(&mut h);
            sig.view_offs.hash(&mut h);
            nodes.push(sig);
            let p = placement
                .get(id)
                .filter(|p| is_user(id, p))
                .map(PlacedSig::of);
            p.as_ref().map(|p| (p.buft, p.usage, p.host)).hash(&mut h);
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

    /// Would [`GraphKey::of`] give a key equal to this one? (Compared in
    /// place, without allocating.)
    pub(super) fn matches(
        &self,
        graph: &Graph,
        placement: &Placement,
        is_user: impl Fn(crate::TensorId, &Place) -> bool,
        pins: &[(usize, usize)],
    ) -> bool {
        if self.nodes.len() != graph.len() || self.pins != pins {
            return false;
        }
        let nodes = graph.nodes();
        for (i, (sig, placed)) in self.nodes.iter().zip(&self.placed).enumerate() {
            if !sig.matches(&nodes[i]) {
                return false;
            }
            let id = crate::TensorId::from_index(i as u32);
            let p = placement.get(id).filter(|p| is_user(id, p));
            match (placed, p) {
                (None, None) => {}
                (Some(s), Some(p)) if s.matches(p) => {}
                _ => return false,
            }
        }
        true
    }
}
