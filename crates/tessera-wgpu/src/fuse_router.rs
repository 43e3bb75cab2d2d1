//! A mixture-of-experts router's SOFT_MAX and the ARGSORT of its
//! probabilities as one dispatch (`rows.wgsl`'s mode 3 with its sort):
//! each token's workgroup normalizes its row, keeps the values it stored
//! in workgroup memory and ranks them there, as `sort.wgsl` ranks them.
//!
//! Why: a MoE layer's routing is several dispatches of a few hundred
//! values each (the router's product, SOFT_MAX, ARGSORT, the weights);
//! with 48 layers (Qwen3 30B-A3B) this saves 48 dispatches a token. The
//! probabilities are the SOFT_MAX kernel's, bit for bit, and the order is
//! computed from those same bits: the separate dispatches' results.
//!
//! Fused where: the SOFT_MAX has no mask and no sinks, F32 rows of at
//! most 256 values (experts) with contiguous elements; the next node
//! computing anything is an ARGSORT (either order) of exactly that
//! result, into I32 in the same buffer as the probabilities, apart from
//! them and from the router's logits. `TESSERA_WGPU_FUSE_ROUTER=0` (or
//! `TESSERA_WGPU_FUSE=0`) records them apart, for measuring.

use std::sync::Arc;

use tessera::{DType, Graph, Op, Placement, Result, SortOrder, TensorId};

use crate::batch::Batch;
use crate::call::{Call, operand};
use crate::device::Core;
use crate::encode::rows;
use crate::fuse::{next_computing, overlap};

env_switch!("TESSERA_WGPU_FUSE_ROUTER");

/// Most values a row may have (one per invocation of the workgroup).
const MAX_ROW: usize = 256;

/// A SOFT_MAX and the ARGSORT of its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    soft_max: TensorId,
    argsort: TensorId,
    desc: bool,
}

impl Run {
    /// The node after the first that the run records (to skip).
    pub(crate) fn rest(&self) -> [TensorId; 1] {
        [self.argsort]
    }
}

/// The run that starts at SOFT_MAX node `id`, if one does (see the module
/// docs); `end` is the end of the range being encoded.
pub(crate) fn plan(graph: &Graph, id: TensorId, end: usize) -> Option<Run> {
    if !switch_on(crate::fuse::enabled) {
        return None;
    }
    let node = graph.node(id).ok()?;
    let (Op::SoftMax { .. }, Some(x), None, None) =
        (node.op, node.src(0), node.src(1), node.src(2))
    else {
        return None;
    };
    let lx = graph.layout(x).ok()?;
    let n = lx.ne[0];
    let rows_ok = lx.dtype == DType::F32
        && lx.nb[0] == 4
        && node.layout.dtype == DType::F32
        && node.layout.nb[0] == 4
        && (1..=MAX_ROW).contains(&n);
    if !rows_ok {
        return None;
    }
    let argsort = TensorId::from_index(next_computing(graph, id, end)? as u32);
    let an = graph.node(argsort).ok()?;
    let Op::Argsort { order } = an.op else {
        return None;
    };
    let sorted = an.src(0) == Some(id)
        && an.view_src.is_none()
        && an.layout.dtype == DType::I32
        && an.layout.ne == node.layout.ne;
    sorted.then_some(Run {
        soft_max: id,
        argsort,
        desc: order == SortOrder::Desc,
    })
}

/// Record `run` as one dispatch; `false` (nothing recorded) where an
/// operand has no memory or they do not lie as the module docs ask.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
) -> Result<bool> {
    let node = graph.node(run.soft_max)?;
    let (Op::SoftMax { scale, max_bias }, Some(x)) = (node.op, node.src(0)) else {
        return Ok(false);
    };
    let get = |t| operand(core, graph, placement, t);
    let (Some(x), Some(probs), Some(order)) = (get(x)?, get(run.soft_max)?, get(run.argsort)?)
    else {
        return Ok(false);
    };
    // The order is stored in a binding the kernel writes: the
    // probabilities' buffer; each row's workgroup reads its logits while
    // others store.
    if order.buffer != probs.buffer || overlap(&order, &probs)? || overlap(&order, &x)? {
        return Ok(false);
    }
    let mut call = Call::new(&probs, &[Some(&x), None, None, Some(&order)])?;
    call.params.iu = [3, 0, 0, 0];
    call.params.iu2[3] = if run.desc { 2 } else { 1 };
    call.params.fp = [scale, max_bias, 0.0, 0.0];
    rows(batch, core, call, &x.layout)?;
    Ok(true)
}

#[cfg(test)]
#[path = "fuse_router_tests.rs"]
mod tests;
