//! Two RMS_NORM + MUL runs in a row, each of its own tensor, as one
//! dispatch (`rows.wgsl`'s mode 9): the workgroups after the first
//! tensor's rows take the second's.
//!
//! Why: Qwen 3 and Gemma 3 normalize each head of the queries and of the
//! keys (their `attn_q_norm` and `attn_k_norm`) right after the products
//! and before the rotations: two dispatches a layer of a few rows each,
//! where one does. Each row is computed by the same register code as a
//! run of its own (mode 6), so the results are bit for bit theirs.
//!
//! Fused where: both are runs [`crate::fuse`] fuses alone, the second's
//! norm the next node computing anything after the first's MUL, with the
//! same eps; rows of
//! one length, at most [`crate::fuse::QUANTIZED_ROW`] values, of F32 with
//! contiguous elements; weights contiguous F32 vectors of that length,
//! in one buffer; the inputs in one buffer, the second's computed before
//! the first norm runs; the results contiguous, in one buffer, apart from
//! each other and from every input (a result may lie exactly over its own
//! input). No quantization for the integer products (two results).
//! `TESSERA_WGPU_FUSE_PAIR=0` (or `TESSERA_WGPU_FUSE=0`) records them as
//! two dispatches, for measuring.

use std::sync::Arc;

use tessera::{DType, Graph, Layout, Op, Placement, Result, TensorId};

use crate::call::{Call, operand};
use crate::device::Core;
use crate::fuse::{NormMul, Run, disjoint_or_in_place, next_computing, norm_mul, overlap};
use crate::params::u32_of;

env_switch!("TESSERA_WGPU_FUSE_PAIR");

/// The pair of runs that starts at RMS_NORM node `id`, if one does (see
/// the module docs); `end` is the end of the range being encoded.
pub(crate) fn plan(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    if !switch_on(crate::fuse::enabled) {
        return None;
    }
    let first = norm_mul(graph, counts, id, end)?;
    let id2 = TensorId::from_index(next_computing(graph, first.mul, end)? as u32);
    let second = norm_mul(graph, counts, id2, end)?;
    let x1 = graph.layout(graph.node(id).ok()?.src(0)?).ok()?;
    let x2_id = graph.node(id2).ok()?.src(0)?;
    let x2 = graph.layout(x2_id).ok()?;
    let n = x1.ne[0];
    let vector = |w: TensorId| {
        graph
            .layout(w)
            .is_ok_and(|l| l.dtype == DType::F32 && l.ne == [n, 1, 1, 1] && l.is_contiguous())
    };
    let rows = |x: &Layout| x.dtype == DType::F32 && x.nb[0] == 4 && x.ne[0] == n;
    // The second input and weights are there when the first norm runs.
    let ready = |t: TensorId| {
        graph.memory_root(t).ok().is_some_and(|(root, _)| {
            root.index() < id.index()
                || graph.nodes().get(root.index()).is_some_and(|n| n.is_leaf())
        })
    };
    let eps = |t: TensorId| match graph.node(t).map(|n| n.op) {
        Ok(Op::RmsNorm { eps }) => Some(eps.to_bits()),
        _ => None,
    };
    let ok = n <= crate::fuse::QUANTIZED_ROW
        && eps(id).is_some()
        && eps(id) == eps(id2)
        && rows(&x1)
        && rows(&x2)
        && vector(first.w)
        && vector(second.w)
        && ready(x2_id)
        && ready(second.w);
    ok.then_some(Run {
        pair: Some(NormMul {
            norm: id2,
            mul: second.mul,
            w: second.w,
        }),
        ..first
    })
}

/// The dispatch's call (mode 9, see `rows.wgsl`) and a layout of as many
/// rows as both tensors have; `None` where the operands do not lie as the
/// module docs ask.
pub(crate) fn call(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
    pair: &NormMul,
) -> Result<Option<(Call, Layout)>> {
    let Op::RmsNorm { eps } = graph.node(run.norm)?.op else {
        return Ok(None);
    };
    let (Some(x1), Some(x2)) = (graph.node(run.norm)?.src(0), graph.node(pair.norm)?.src(0)) else {
        return Ok(None);
    };
    let ops =
        [run.mul, pair.mul, x1, x2, run.w, pair.w].map(|t| operand(core, graph, placement, t));
    let [
        Ok(Some(d1)),
        Ok(Some(d2)),
        Ok(Some(x1)),
        Ok(Some(x2)),
        Ok(Some(w1)),
        Ok(Some(w2)),
    ] = ops
    else {
        return Ok(None);
    };
    let same = d1.buffer == d2.buffer && x1.buffer == x2.buffer && w1.buffer == w2.buffer;
    if !same || !d1.layout.is_contiguous() || !d2.layout.is_contiguous() || overlap(&d1, &d2)? {
        return Ok(None);
    }
    // Each result apart from every input but its own, which it may lie
    // exactly over.
    for (d, own, other) in [(&d1, &x1, &x2), (&d2, &x2, &x1)] {
        if !disjoint_or_in_place(d, own)? || overlap(d, other)? {
            return Ok(None);
        }
        if overlap(d, &w1)? || overlap(d, &w2)? {
            return Ok(None);
        }
    }
    let mut call = Call::new(&d1, &[Some(&x1), Some(&w1), None])?;
    call.params.iu[0] = 9;
    call.params.iu[1] = u32_of(d2.offset, "a norm's result")?;
    call.params.off[3] = u32_of(x2.offset, "a norm's input")?;
    call.params.off2[0] = u32_of(w2.offset, "a norm's weights")?;
    let [ne, nb] = &mut call.params.src[2];
    for k in 0..4 {
        ne[k] = u32_of(x2.layout.ne[k], "an extent")?;
        nb[k] = u32_of(x2.layout.nb[k], "a stride")?;
    }
    call.params.fp[0] = eps;
    let rows = x1
        .layout
        .nrows()
        .checked_add(x2.layout.nrows())
        .ok_or_else(|| tessera::Error::Overflow("a pair of norms' rows".into()))?;
    Ok(Some((
        call,
        Layout::contiguous(DType::F32, &[x1.layout.ne[0], rows])?,
    )))
}

#[cfg(test)]
#[path = "fuse_pair_tests.rs"]
mod tests;
