//! An RMS_NORM and its MUL whose result only a residual ADD reads, the ADD,
//! and the RMS_NORM and MUL of the sum, as one dispatch (`rows.wgsl`'s
//! mode 8): `s = r + norm(x) * w1` stored, `y = norm(s) * w2`.
//!
//! Why: Gemma 3 normalizes the attention's output and the feed-forward
//! block's before adding them to the residual stream, and the sum is
//! normalized again right away (the next half's input): with
//! [`crate::fuse`]'s runs, a norm and its MUL, then the ADD with the next
//! norm and MUL, two dispatches where the row fits one workgroup's
//! registers; here one, the first MUL's result never stored. Each value
//! is computed as the two dispatches compute it (the same register code,
//! the same reductions, in the same order), so the results are bit for
//! bit theirs.
//!
//! Fused where: the first norm and MUL are as [`crate::fuse`] fuses them
//! alone; the MUL's result is read by nothing but the ADD, the next node
//! that computes anything, which with the norm and MUL after it is a run
//! [`crate::fuse`] fuses; rows of at most [`crate::fuse::QUANTIZED_ROW`]
//! values (the registers' path); the first weights an F32 vector of the
//! row's length, in the second weights' buffer; the residual and the
//! second weights ready when the first norm runs; the results apart from
//! every input or exactly over it.

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Placement, Result, TensorId};

use crate::call::{Call, operand};
use crate::device::Core;
use crate::fuse::{
    NormMul, Run, add_norm_mul, disjoint_or_in_place, next_computing, norm_mul, overlap,
};
use crate::wgsl::Binding;

env_switch!("TESSERA_WGPU_FUSE_SANDWICH");

/// The run that starts at RMS_NORM node `id`, if one does (see the module
/// docs); `end` is the end of the range being encoded.
/// `TESSERA_WGPU_FUSE_SANDWICH=0` (or `TESSERA_WGPU_FUSE=0`) leaves such
/// nodes to two dispatches, for measuring.
pub(crate) fn plan(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    if !switch_on(crate::fuse::enabled) {
        return None;
    }
    let first = norm_mul(graph, counts, id, end)?;
    let y1 = first.mul;
    let add = TensorId::from_index(next_computing(graph, y1, end)? as u32);
    let run = add_norm_mul(graph, counts, add, end)?;
    let node = graph.node(add).ok()?;
    let r = if node.src(0) == Some(y1) {
        node.src(1)?
    } else if node.src(1) == Some(y1) {
        node.src(0)?
    } else {
        return None;
    };
    let x = graph.layout(graph.node(id).ok()?.src(0)?).ok()?;
    let w1 = graph.layout(first.w).ok()?;
    // Computed before the first norm (or leaves): the residual and the
    // second weights, which the dispatch reads from its start.
    let ready = |t: TensorId| {
        graph.memory_root(t).ok().is_some_and(|(root, _)| {
            root.index() < id.index()
                || graph.nodes().get(root.index()).is_some_and(|n| n.is_leaf())
        })
    };
    let ok = counts.get(y1.index()) == Some(&1)
        && !graph.node(y1).ok()?.flags.contains(Flags::OUTPUT)
        && x.ne[0] <= crate::fuse::QUANTIZED_ROW
        && w1.dtype == DType::F32
        && w1.ne == [x.ne[0], 1, 1, 1]
        && w1.is_contiguous()
        && ready(r)
        && ready(run.w);
    ok.then_some(Run {
        pair: None,
        pre: Some(NormMul {
            norm: id,
            mul: y1,
            w: first.w,
        }),
        ..run
    })
}

/// The dispatch's call (mode 8, see `rows.wgsl`) and the layout whose
/// rows it goes over; `None` where the operands do not lie as the module
/// docs ask.
pub(crate) fn call(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
    pre: &NormMul,
    add: TensorId,
) -> Result<Option<(Call, Layout)>> {
    let tessera::Op::RmsNorm { eps } = graph.node(pre.norm)?.op else {
        return Ok(None);
    };
    let node = graph.node(add)?;
    let (Some(x), Some(a), Some(b)) = (graph.node(pre.norm)?.src(0), node.src(0), node.src(1))
    else {
        return Ok(None);
    };
    let r = if a == pre.mul { b } else { a };
    let ops = [run.mul, add, x, r, pre.w, run.w].map(|t| operand(core, graph, placement, t));
    let [
        Ok(Some(dst)),
        Ok(Some(sum)),
        Ok(Some(x)),
        Ok(Some(r)),
        Ok(Some(w1)),
        Ok(Some(w2)),
    ] = ops
    else {
        return Ok(None);
    };
    if w1.buffer != w2.buffer || overlap(&dst, &sum)? {
        return Ok(None);
    }
    for out in [&dst, &sum] {
        for inp in [&x, &r, &w1, &w2] {
            if !disjoint_or_in_place(out, inp)? {
                return Ok(None);
            }
        }
    }
    let mut call = Call::new(&dst, &[Some(&x), Some(&r), Some(&w2), Some(&sum)])?;
    // The sum is written (s3): read-write, and so is every source in its
    // buffer (wgpu allows one kind of use of a buffer per dispatch).
    for (k, binding) in call.bindings.iter_mut().enumerate().skip(1) {
        if k == 4 || call.buffers[k] == sum.buffer {
            *binding = Binding::plain(binding.name, binding.dtype);
        }
    }
    call.params.iu[0] = 8;
    call.params.iu[3] = crate::params::u32_of(w1.offset, "the first norm's weights")?;
    call.params.fp[1] = eps;
    Ok(Some((call, x.layout)))
}

#[cfg(test)]
#[path = "fuse_sandwich_tests.rs"]
mod tests;
