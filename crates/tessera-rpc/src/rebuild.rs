//! Server side: from wire tensors to memory and graphs, validating as it
//! goes.
//!
//! Buffers are named by opaque per-connection handles; the "address" a
//! client sees for a buffer is a fake base, `handle << 40`, so `data` on the
//! wire is `base + offset` and is turned back into an offset with checked
//! arithmetic, then checked against the buffer's size together with the
//! tensor's byte span. A graph is rebuilt tensor by tensor in wire order
//! (sources first, as every ggml client sends them): tensors that are not
//! nodes to compute (not in the node list, or without
//! `GGML_TENSOR_FLAG_COMPUTE`, which ggml's CPU backend skips) become leaves bound to their memory, nodes are rebuilt
//! by [`crate::ops::decode`] through Tessera's constructors. A source that
//! is not defined before its user (dangling, self-referencing, cyclic), a
//! node id of 0 or unknown, a tensor without a buffer (whatever its `data`
//! says) are refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tessera::{Buffer, Error, Graph, Layout, MAX_DIMS, Place, Placement, Result, TensorId};

use crate::ops::{self, WireSrcs};
use crate::proto::{FLAG_COMPUTE, WIRE_MAX_SRC};
use crate::wire_tensor::RpcTensor;

/// Bits of a handle's fake base address: buffers are smaller than 1 TiB.
pub const BASE_SHIFT: u32 = 40;

/// The fake base address a client sees for buffer `handle`.
pub fn fake_base(handle: u64) -> u64 {
    handle << BASE_SHIFT
}

/// The memory a wire tensor names: buffer handle, buffer, byte offset of
/// its first byte and the bytes it spans.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Buffer handle.
    pub handle: u64,
    /// The buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Offset of the tensor in the buffer.
    pub offset: usize,
    /// Bytes spanned.
    pub nbytes: usize,
}

impl Resolved {
    /// Offset in the buffer of `len` bytes at `offset` into the tensor,
    /// checked against the tensor's span.
    pub fn sub_range(&self, offset: u64, len: u64) -> Result<usize> {
        let end = offset.checked_add(len);
        if end.is_none_or(|e| e > self.nbytes as u64) {
            return Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of a tensor of {} bytes",
                self.nbytes
            )));
        }
        // offset <= nbytes <= buffer size, so this fits in usize.
        Ok(self.offset + offset as usize)
    }
}

/// Resolve `t` to its memory: a known buffer (handle 0 is refused), data
/// at or after the buffer's fake base, and the whole span inside it.
pub fn resolve(t: &RpcTensor, lookup: &dyn Fn(u64) -> Option<Arc<dyn Buffer>>) -> Result<Resolved> {
    let nbytes = t.checked_nbytes()?;
    if t.buffer == 0 {
        return Err(Error::Malformed(format!(
            "tensor {} has no buffer (data {:#x})",
            t.id, t.data
        )));
    }
    let buffer = lookup(t.buffer)
        .ok_or_else(|| Error::Malformed(format!("unknown buffer handle {:#x}", t.buffer)))?;
    let offset = t
        .data
        .checked_sub(fake_base(t.buffer))
        .ok_or_else(|| Error::OutOfBounds(format!("data {:#x} before its buffer", t.data)))?;
    let end = offset.checked_add(nbytes);
    if end.is_none_or(|e| e > buffer.size() as u64) {
        return Err(Error::OutOfBounds(format!(
            "tensor of {nbytes} bytes at offset {offset} does not fit in a buffer of {} bytes",
            buffer.size()
        )));
    }
    Ok(Resolved {
        handle: t.buffer,
        buffer,
        offset: offset as usize,
        nbytes: nbytes as usize,
    })
}

/// A rebuilt graph with its memory, ready to compute.
#[derive(Debug)]
pub struct Rebuilt {
    /// The graph (nodes to compute are op nodes, the rest leaves).
    pub graph: Graph,
    /// Where every tensor lives.
    pub placement: Placement,
    /// Handles of every buffer it uses (to invalidate it when one is freed).
    pub buffers: HashSet<u64>,
}

fn layout_of(t: &RpcTensor) -> Result<Layout> {
    let dtype = ops::dtype(t.dtype)?;
    let mut ne = [0usize; MAX_DIMS];
    let mut nb = [0usize; MAX_DIMS];
    for i in 0..MAX_DIMS {
        ne[i] = t.ne[i] as usize;
        nb[i] = t.nb[i] as usize;
    }
    let l = Layout { dtype, ne, nb };
    l.checked_nbytes()?;
    Ok(l)
}

/// Rebuild the graph of a GRAPH_COMPUTE.
pub fn rebuild(
    nodes: &[u64],
    tensors: &[RpcTensor],
    lookup: &dyn Fn(u64) -> Option<Arc<dyn Buffer>>,
) -> Result<Rebuilt> {
    let mut node_set = HashSet::with_capacity(nodes.len());
    for &n in nodes {
        if n == 0 {
            return Err(Error::Malformed("graph node id 0".into()));
        }
        node_set.insert(n);
    }
    let mut g = Graph::new();
    let mut p = Placement::default();
    let mut map: HashMap<u64, TensorId> = HashMap::with_capacity(tensors.len());
    let mut buffers = HashSet::new();
    let find = |map: &HashMap<u64, TensorId>, id: u64, user: u64| -> Result<Option<TensorId>> {
        if id == 0 {
            return Ok(None);
        }
        map.get(&id).copied().map(Some).ok_or_else(|| {
            Error::Malformed(format!(
                "tensor {user} uses tensor {id}, which is not defined before it"
            ))
        })
    };
    for t in tensors {
        if t.id == 0 || map.contains_key(&t.id) {
            return Err(Error::Malformed(format!(
                "tensor id {} is 0 or repeated",
                t.id
            )));
        }
        if t.buffer == 0 && t.data != 0 {
            return Err(Error::Malformed(format!(
                "tensor {} has data {:#x} but no buffer",
                t.id, t.data
            )));
        }
        let layout = layout_of(t)?;
        // As ggml's CPU backend: a node without the COMPUTE flag is not
        // computed (here: it is a leaf at its memory).
        let is_node =
            node_set.contains(&t.id) && t.op != ops::id::NONE && t.flags & FLAG_COMPUTE != 0;
        let tid = if is_node {
            let mut srcs: WireSrcs = [None; WIRE_MAX_SRC];
            for (d, &s) in srcs.iter_mut().zip(&t.src) {
                *d = find(&map, s, t.id)?;
            }
            find(&map, t.view_src, t.id)?;
            let tid = ops::decode(&mut g, t.op, &t.op_params, &srcs, &layout)?;
            if g.node(tid)?.view_src.is_none() {
                bind(&mut g, &mut p, &mut buffers, tid, t, lookup)?;
            }
            tid
        } else {
            let tid = g.new_leaf(layout)?;
            bind(&mut g, &mut p, &mut buffers, tid, t, lookup)?;
            tid
        };
        g.set_name(tid, &t.name_str())?;
        map.insert(t.id, tid);
    }
    for n in nodes {
        if !map.contains_key(n) {
            return Err(Error::Malformed(format!(
                "graph node {n} is not among the graph's tensors"
            )));
        }
    }
    p.place_views(&g)?;
    p.check_complete(&g, 0..g.len())?;
    Ok(Rebuilt {
        graph: g,
        placement: p,
        buffers,
    })
}

fn bind(
    g: &mut Graph,
    p: &mut Placement,
    buffers: &mut HashSet<u64>,
    tid: TensorId,
    t: &RpcTensor,
    lookup: &dyn Fn(u64) -> Option<Arc<dyn Buffer>>,
) -> Result<()> {
    let r = resolve(t, lookup)?;
    buffers.insert(r.handle);
    p.set(
        g,
        tid,
        Place {
            buffer: r.buffer,
            offset: r.offset,
        },
    )
}
