//! Copy a graph's data to another device, and compare two devices node by
//! node (ggml's `ggml_backend_graph_copy` and `ggml_backend_compare_graph_backend`).
//!
//! Because a [`Graph`] is plain data, "copying a graph" only means giving
//! the same graph a second [`Placement`] on the other device and copying the
//! bytes of every tensor there (inputs, weights and intermediates alike, as
//! ggml does). Comparing then runs each op node on both devices in turn and
//! hands the two results to a callback — the basis of the conformance
//! harness and of debugging a new device against the CPU.

use std::sync::Arc;

use crate::alloc::{TensorSet, alloc_tensors};
use crate::buffer::BufferUsage;
use crate::device::Device;
use crate::placement::{Place, Placement};
use crate::stream::Stream;
use crate::tensor::Tensor;
use crate::{Graph, Result, TensorId};

/// A graph's tensors copied to another device.
#[derive(Debug)]
pub struct GraphCopy {
    /// Where each tensor lives on the target device.
    pub placement: Placement,
    /// The memory holding every copied tensor (views excluded).
    pub memory: TensorSet,
}

/// Copy every non-view tensor of `graph` (as placed by `src`) into new
/// buffers of `device`'s buffer type; views are placed over the copies.
/// Tensors that have no memory in `src` get memory on the device, unwritten.
pub fn graph_copy(graph: &Graph, src: &Placement, device: &Arc<dyn Device>) -> Result<GraphCopy> {
    let roots: Vec<TensorId> = graph
        .ids()
        .filter(|&id| !graph.nodes()[id.index()].is_view())
        .collect();
    let layouts: Vec<_> = roots
        .iter()
        .map(|&id| graph.nodes()[id.index()].layout)
        .collect();
    let memory = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Any)?;
    let mut placement = Placement::new(graph);
    for (&id, dst) in roots.iter().zip(memory.tensors.iter()) {
        if src.get(id).is_some() {
            src.tensor(graph, id)?.copy_to(dst)?;
        }
        placement.set(
            graph,
            id,
            Place {
                buffer: dst.buffer().clone(),
                offset: dst.offset(),
            },
        )?;
    }
    placement.place_views(graph)?;
    Ok(GraphCopy { placement, memory })
}

/// Run `graph` on two streams and compare them node by node: the graph is
/// copied to `stream2`'s device, then each op node (views skipped) is
/// computed on both streams — each from its own earlier results — and
/// `callback(id, result1, result2)` decides whether to go on. Returns
/// `Ok(true)` if every node was compared, `Ok(false)` if the callback stopped.
pub fn compare_graph(
    stream1: &dyn Stream,
    stream2: &dyn Stream,
    graph: &Graph,
    placement1: &Placement,
    mut callback: impl FnMut(TensorId, &Tensor, &Tensor) -> bool,
) -> Result<bool> {
    let copy = graph_copy(graph, placement1, &stream2.device())?;
    for id in graph.op_ids() {
        if graph.nodes()[id.index()].op.is_view() {
            continue;
        }
        let range = id.index()..id.index() + 1;
        stream1.compute_async(graph, placement1, range.clone())?;
        stream2.compute_async(graph, &copy.placement, range)?;
        stream1.synchronize()?;
        stream2.synchronize()?;
        let t1 = placement1.tensor(graph, id)?;
        let t2 = copy.placement.tensor(graph, id)?;
        if !callback(id, &t1, &t2) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Run the whole `graph` on both streams and compare only `nodes` (how fused
/// kernels are checked: intermediate nodes may not exist on a fusing device).
pub fn compare_graph_nodes(
    stream1: &dyn Stream,
    stream2: &dyn Stream,
    graph: &Graph,
    placement1: &Placement,
    nodes: &[TensorId],
    mut callback: impl FnMut(TensorId, &Tensor, &Tensor) -> bool,
) -> Result<bool> {
    let copy = graph_copy(graph, placement1, &stream2.device())?;
    stream1.compute(graph, placement1)?;
    stream2.compute(graph, &copy.placement)?;
    for &id in nodes {
        let t1 = placement1.tensor(graph, id)?;
        let t2 = copy.placement.tensor(graph, id)?;
        if !callback(id, &t1, &t2) {
            return Ok(false);
        }
    }
    Ok(true)
}
