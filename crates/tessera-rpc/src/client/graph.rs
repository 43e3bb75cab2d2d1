//! Client side: a range of a Tessera graph, placed in remote memory, as a
//! GRAPH_COMPUTE payload.
//!
//! The nodes to compute are the range's op nodes; every tensor they read
//! (sources, view roots) is sent too, sources first (graph order is
//! topological). Tensors outside the range travel as leaves (op NONE) at
//! their memory, so the server never recomputes them. Tensor ids are graph
//! positions plus one (0 means "none" on the wire).

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use tessera::{Error, Flags, Graph, Op, Placement, Result, TensorId};

use crate::client::buffer::RpcBuffer;
use crate::client::conn::Conn;
use crate::msg::Request;
use crate::ops;
use crate::proto::{FLAG_COMPUTE, FLAG_INPUT, FLAG_OUTPUT};
use crate::wire_tensor::{RpcTensor, type_traits};

fn wire_id(id: TensorId) -> u64 {
    id.index() as u64 + 1
}

/// Can node `id` of `graph` travel over ggml-rpc: an op of the allow-list,
/// every layout it touches with extents and strides under 4 GiB and a type
/// the wire accepts.
pub fn can_send(graph: &Graph, id: TensorId) -> bool {
    let Ok(node) = graph.node(id) else {
        return false;
    };
    if ops::encode(graph, id).is_err() {
        return false;
    }
    std::iter::once(id)
        .chain(node.src_ids())
        .chain(node.view_src)
        .all(|t| graph.node(t).is_ok_and(|n| layout_fits(&n.layout)))
}

fn layout_fits(l: &tessera::Layout) -> bool {
    type_traits(l.dtype.ggml_id()).is_ok()
        && l.ne.iter().chain(&l.nb).all(|&v| u32::try_from(v).is_ok())
}

fn u32s(v: [usize; 4], what: &str) -> Result<[u32; 4]> {
    let mut o = [0u32; 4];
    for (d, s) in o.iter_mut().zip(v) {
        *d = u32::try_from(s)
            .map_err(|_| Error::Overflow(format!("{what} {s} does not fit the wire's 32 bits")))?;
    }
    Ok(o)
}

fn tensor(
    graph: &Graph,
    placement: &Placement,
    id: TensorId,
    is_node: bool,
    conn: &Arc<Conn>,
) -> Result<RpcTensor> {
    let node = graph.node(id)?;
    let mut t = RpcTensor {
        id: wire_id(id),
        dtype: node.layout.dtype.ggml_id(),
        ne: u32s(node.layout.ne, "extent")?,
        nb: u32s(node.layout.nb, "stride")?,
        ..RpcTensor::default()
    };
    if node.flags.contains(Flags::INPUT) {
        t.flags |= FLAG_INPUT;
    }
    if node.flags.contains(Flags::OUTPUT) {
        t.flags |= FLAG_OUTPUT;
    }
    t.set_name(&node.name);
    if let Some(place) = placement.get(id) {
        let b = place
            .buffer
            .as_any()
            .downcast_ref::<RpcBuffer>()
            .filter(|b| Arc::ptr_eq(b.conn(), conn))
            .ok_or_else(|| {
                Error::unsupported(
                    conn.name(),
                    format!(
                        "tensor {} in buffer '{}', which the remote device cannot read",
                        node.label(id),
                        place.buffer.name()
                    ),
                )
            })?;
        t.buffer = b.handle();
        t.data = b.address(place.offset)?;
    } else {
        return Err(Error::Unallocated {
            tensor: node.name.clone(),
            id: id.index(),
        });
    }
    if is_node {
        t.flags |= FLAG_COMPUTE;
        let (op, params, srcs) = ops::encode(graph, id)?;
        t.op = op;
        t.op_params = params;
        for (d, s) in t.src.iter_mut().zip(srcs) {
            *d = s.map_or(0, wire_id);
        }
        if let Some(v) = node.view_src {
            t.view_src = wire_id(v);
            t.view_offs = node.view_offs as u64;
        }
    }
    Ok(t)
}

/// The GRAPH_COMPUTE request for the op nodes of `graph` in `range`, or
/// `None` if the range has nothing to compute.
pub fn graph_request(
    graph: &Graph,
    placement: &Placement,
    range: Range<usize>,
    device: u32,
    conn: &Arc<Conn>,
) -> Result<Option<Request>> {
    let end = range.end.min(graph.len());
    let nodes: Vec<TensorId> = graph
        .ids()
        .skip(range.start)
        .take(end.saturating_sub(range.start))
        .filter(|&id| {
            let op = graph.nodes()[id.index()].op;
            !op.is_leaf() && op != Op::Transfer
        })
        .collect();
    if nodes
        .iter()
        .all(|&id| graph.nodes()[id.index()].op.is_view())
    {
        return Ok(None);
    }
    let node_set: BTreeSet<TensorId> = nodes.iter().copied().collect();
    let mut needed = node_set.clone();
    for &id in &nodes {
        let n = &graph.nodes()[id.index()];
        needed.extend(n.src_ids());
        needed.extend(n.view_src);
    }
    let mut tensors = Vec::with_capacity(needed.len());
    for &id in &needed {
        tensors.push(tensor(graph, placement, id, node_set.contains(&id), conn)?);
    }
    Ok(Some(Request::GraphCompute {
        device,
        nodes: nodes.iter().map(|&id| wire_id(id)).collect(),
        tensors,
    }))
}
