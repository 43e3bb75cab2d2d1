//! The two products of a feed-forward block's gate and up matrices and
//! the split GLU that reads them, as one dispatch
//! (`shaders/matvec_q8_glu.wgsl`): `y = act(A x) * (B x)`.
//!
//! Why: merged ([`crate::merge_products`]), gate and up are one dispatch,
//! and the GLU a second that only reads their results and writes (and
//! quantizes, for the down product) its own: one of a layer's nine
//! dispatches, each paying the GPU's cost of starting a dispatch after the
//! barrier before it, for a few thousand values. Here the rows of both
//! products are summed as the subgroup kernel sums them, and act and the
//! product are computed as `glu.wgsl` computes them, so the results are
//! bit for bit those of the separate dispatches; the products' results
//! are not stored at all.
//!
//! Taken where: the device's kernels use subgroups ([`crate::subgroups`];
//! the kernel has no tree form); two consecutive products of one input
//! that would merge (same weight type, weights in one buffer, both taken
//! by the integer kernel, at most 8 columns); the next node computing
//! anything is a split GLU (not SWIGLU_OAI) of exactly their two results,
//! which nothing else reads and which are not outputs; the GLU's result
//! contiguous F32, apart from the weights (it may lie over the input,
//! which the kernel does not read: it reads the input's quantization).
//! `TESSERA_WGPU_GLU_PRODUCTS=0` (or `TESSERA_WGPU_MERGE=0`, or
//! `TESSERA_WGPU_FUSE=0`) leaves them to the separate dispatches, for
//! measuring.

use std::sync::Arc;

use tessera::{DType, Graph, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, operand};
use crate::device::Core;
use crate::encode::unary_code;
use crate::fuse::{next_computing, overlap};
use crate::matvec_q8;
use crate::merge_products::product;
use crate::q8_scratch::u32_of;
use crate::wgsl::Binding;

/// The kernels by `[cols > 1]`.
const MATVEC_Q8_GLU: [&str; 2] = [
    matvec_q8_source!(1, "matvec_q8_glu.wgsl"),
    matvec_q8_source!(8, "matvec_q8_glu.wgsl"),
];

/// Rows a workgroup (the kernel's `MG_ROWS`: one block of 32 values of
/// each column, for the quantization).
const ROWS: usize = 32;

env_switch!("TESSERA_WGPU_GLU_PRODUCTS");

/// Two products and the GLU of their results (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// The products in graph order.
    first: TensorId,
    second: TensorId,
    glu: TensorId,
}

impl Run {
    /// The nodes after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> crate::compute::Taken {
        [Some(self.second), Some(self.glu), None, None]
    }
}

/// The run that starts at product node `id` (see the module docs), if
/// one does; `end` is the end of the range being encoded.
pub(crate) fn plan(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    counts: &[u32],
    id: TensorId,
    end: usize,
) -> Result<Option<Run>> {
    if !(switch_on(crate::merge_products::enabled) && crate::subgroups::on(core)) {
        return Ok(None);
    }
    let Some(p1) = product(core, graph, placement, id)? else {
        return Ok(None);
    };
    let Some(j) = next_computing(graph, id, end) else {
        return Ok(None);
    };
    let second = TensorId::from_index(j as u32);
    if graph.node(second)?.src(1) != graph.node(id)?.src(1) {
        return Ok(None);
    }
    let Some(p2) = product(core, graph, placement, second)? else {
        return Ok(None);
    };
    let Some(j) = next_computing(graph, second, end) else {
        return Ok(None);
    };
    let glu = TensorId::from_index(j as u32);
    let node = graph.node(glu)?;
    let (Op::Glu { .. }, Some(x), Some(g)) = (node.op, node.src(0), node.src(1)) else {
        return Ok(None);
    };
    let pair_read = (x, g) == (id, second) || (x, g) == (second, id);
    let only_read_there = |t: TensorId| {
        counts.get(t.index()) == Some(&1)
            && graph
                .node(t)
                .is_ok_and(|n| !n.flags.contains(tessera::Flags::OUTPUT))
    };
    let Some(out) = operand(core, graph, placement, glu)? else {
        return Ok(None);
    };
    let fits = pair_read
        && only_read_there(id)
        && only_read_there(second)
        && node.view_src.is_none()
        && out.layout.dtype == DType::F32
        && out.layout.is_contiguous()
        && out.layout.ne == p1.dst.layout.ne
        && p1.dst.layout.ne == p2.dst.layout.ne
        && p1.a.layout.dtype == p2.a.layout.dtype
        && p1.a.layout.nb == p2.a.layout.nb
        && p1.a.buffer == p2.a.buffer
        && !overlap(&out, &p1.a)?
        && !overlap(&out, &p2.a)?;
    Ok(fits.then_some(Run {
        first: id,
        second,
        glu,
    }))
}

/// Record `run` as one dispatch (and the quantization of its input, unless
/// this compute made it already); `false` (nothing recorded) where an
/// operand has no memory or the input's quantization no room (the nodes
/// are then recorded by the other paths).
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    q8: &mut matvec_q8::Compute,
    run: &Run,
) -> Result<bool> {
    let node = graph.node(run.glu)?;
    let (Op::Glu { op, .. }, Some(x)) = (node.op, node.src(0)) else {
        return Ok(false);
    };
    let (Some(p1), Some(p2), Some(out)) = (
        product(core, graph, placement, run.first)?,
        product(core, graph, placement, run.second)?,
        operand(core, graph, placement, run.glu)?,
    ) else {
        return Ok(false);
    };
    // A: the product whose result the activation takes; B: the other.
    let (a, b) = if x == run.first {
        (&p1, &p2)
    } else {
        (&p2, &p1)
    };
    let Some(b_id) = graph.node(run.first)?.src(1) else {
        return Ok(false);
    };
    let (b_root, _) = graph.memory_root(b_id)?;
    let Some((base, pairs, scratch)) =
        matvec_q8::quantized_input(batch, core, q8, (b_id, b_root, &p1.b))?
    else {
        return Ok(false);
    };
    let (m, cols) = (out.layout.ne[0], out.layout.ne[1]);
    // The products that read the result find it quantized (whole blocks).
    let quant = if m % 32 == 0 && m <= u32::MAX as usize {
        q8.plan_for(graph, run.glu)
    } else {
        None
    };
    let mut call = Call::new(&out, &[Some(&a.a), Some(&scratch)])?;
    match &quant {
        // The scratch is also written (s2): bound read-write here too.
        Some(q) => {
            call.bindings[2] = Binding::plain("s1", DType::F32).as_vec4();
            q.bind(&mut call, 2, 0)?;
        }
        None => {
            call.bindings[2] = call.bindings[2].as_vec4();
            call.pad_sources(3);
        }
    }
    call.params.iu = [u32_of(base)?, u32_of(pairs)?, u32_of(cols)?, 0];
    call.params.iu2[3] = u32_of(b.a.offset)?;
    let groups = m.div_ceil(ROWS);
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    params.off2[3] = unary_code(op.activation());
    let body = MATVEC_Q8_GLU[usize::from(cols > 1)];
    call.record(batch, core, "mul_mat_vec_q8_glu", body, params, groups)?;
    if let Some(q) = &quant {
        q8.commit(graph.memory_root(run.glu)?.0, q);
    }
    Ok(true)
}

#[cfg(test)]
#[path = "glu_products_tests.rs"]
mod tests;
