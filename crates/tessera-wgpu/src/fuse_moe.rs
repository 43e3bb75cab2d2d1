//! A mixture-of-experts layer's expert products with what follows them,
//! as single dispatches of `shaders/matvec_q8_id.wgsl` (llama.cpp's
//! `build_moe_ffn`, Tessera's `moe_ffn`):
//! - [`Run`]: the down product, then MUL by the router's weights (`[1,
//!   used, tokens]`), then views of each slot's rows and a chain of ADDs:
//!   the weighted sum of the experts' outputs;
//! - [`GluRun`]: the gate and up products of one input and ids, then the
//!   split GLU of their results (as [`crate::glu_products`] for dense
//!   layers);
//! - [`WeightsRun`]: the routing weights, GET_ROWS of the experts'
//!   probabilities, then SUM_ROWS, CLAMP and DIV (renormalised), as
//!   `rows.wgsl`'s mode 10 (one workgroup a token, the sum reduced as
//!   SUM_ROWS reduces it).
//!
//! Why: with 8 experts a token (Qwen3 30B-A3B) that is 9 dispatches a
//! layer, each but the first reading and writing a few thousand values
//! after a barrier. The kernel computes each slot's product as the
//! MUL_MAT_ID kernel does, multiplies it by its weight and adds it to the
//! running sum in the chain's order: the separate dispatches' values, bit
//! for bit where the GPU's compiler does not contract the multiply and
//! the add into one fused operation (lavapipe does not; the test compares
//! bits there).
//!
//! Together: a synthetic Qwen3 MoE (`synth qwen3moe … moe-1024`, 4
//! experts a token, 4 layers) decodes with 62 dispatches a token instead
//! of 94, the same greedy tokens (lavapipe; each run's bits are the
//! separate dispatches' there). All three follow `TESSERA_WGPU_FUSE_MOE`.
//!
//! [`Run`] is taken where: the device's kernels use subgroups; the MUL_MAT_ID is
//! taken by the integer matrix-vector kernel ([`crate::matvec_q8_id::takes`],
//! not prompts that take the tiled kernel, [`crate::matmul_q8_id`]) and read
//! only by the MUL (not an output); the next nodes computing anything
//! are that MUL (by F32 weights of one value per slot and token) and
//! `used - 1` ADDs (2 to 16 slots), each adding the next slot's view (its
//! rows of every token, in slot order) to the sum so far; every
//! intermediate result read only there and not an output; the sum
//! contiguous F32, apart from the weights, the ids and the router's
//! weights. `TESSERA_WGPU_FUSE_MOE=0` (or `TESSERA_WGPU_FUSE=0`) leaves
//! them to the separate dispatches, for measuring.

use std::sync::Arc;

use tessera::{DType, Graph, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, operand};
use crate::device::Core;
use crate::encode::{rows_of, unary_code};
use crate::fuse::{next_computing, overlap};
use crate::matvec_q8::Compute;

env_switch!("TESSERA_WGPU_FUSE_MOE");

/// Whether node `t` is read `reads` times (`counts`: the graph's use
/// counts), is not an output and writes its own memory (no view of
/// another's): what a fused dispatch may leave unstored.
fn read_only_by(graph: &Graph, counts: &[u32], t: TensorId, reads: u32) -> bool {
    counts.get(t.index()) == Some(&reads)
        && graph
            .node(t)
            .is_ok_and(|n| !n.flags.contains(tessera::Flags::OUTPUT) && n.view_src.is_none())
}

/// Most slots (experts a token) a run takes.
const MAX_USED: usize = 16;

/// The down product, the weighting and the sum (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    product: TensorId,
    mul: TensorId,
    /// The ADDs in order; the last one's result is the sum.
    adds: Vec<TensorId>,
}

impl Run {
    /// The nodes after the product that this run records (to skip).
    pub(crate) fn rest(&self) -> impl Iterator<Item = TensorId> + '_ {
        std::iter::once(self.mul).chain(self.adds.iter().copied())
    }

    /// The slots it sums.
    pub(crate) fn used(&self) -> usize {
        self.adds.len() + 1
    }
}

/// The run that starts at node `id`, if one does (see the module docs);
/// `counts` are the graph's use counts, `end` the end of the range being
/// encoded.
pub(crate) fn plan(
    core: &Core,
    graph: &Graph,
    counts: &[u32],
    id: TensorId,
    end: usize,
) -> Option<Run> {
    if !(switch_on(crate::fuse::enabled) && crate::subgroups::on(core)) {
        return None;
    }
    let node = graph.node(id).ok()?;
    let (Op::MulMatId, Some(a), Some(b)) = (node.op, node.src(0), node.src(1)) else {
        return None;
    };
    let ld = node.layout;
    let (la, lb) = (graph.layout(a).ok()?, graph.layout(b).ok()?);
    let (used, tokens) = (ld.ne[1], ld.ne[2]);
    let only_read_there = |t: TensorId, reads: u32| read_only_by(graph, counts, t, reads);
    let fits = crate::matvec_q8_id::takes(&la, &lb)
        && !crate::matmul_q8_id::takes(tokens, used, la.ne[2])
        && (2..=MAX_USED).contains(&used)
        && ld.dtype == DType::F32
        && ld.is_contiguous()
        && only_read_there(id, 1);
    if !fits {
        return None;
    }
    // The MUL by the router's weights, one per slot and token.
    let mul = TensorId::from_index(next_computing(graph, id, end)? as u32);
    let mn = graph.node(mul).ok()?;
    let (Op::Mul, Some(x), Some(w)) = (mn.op, mn.src(0), mn.src(1)) else {
        return None;
    };
    let lw = graph.layout(w).ok()?;
    let weighted = x == id
        && lw.dtype == DType::F32
        && lw.ne == [1, used, tokens, 1]
        && mn.layout.ne == ld.ne
        && mn.layout.is_contiguous()
        && only_read_there(mul, used as u32);
    if !weighted {
        return None;
    }
    // Slot s's rows of every token: a view of the MUL's result.
    let lm = mn.layout;
    let slot = |v: TensorId, s: usize| {
        graph.node(v).is_ok_and(|n| {
            n.op.is_view()
                && n.view_src == Some(mul)
                && n.src(0) == Some(mul)
                && !n.flags.contains(tessera::Flags::OUTPUT)
                && n.view_offs == s * lm.nb[1]
                && n.layout.ne == [ld.ne[0], tokens, 1, 1]
                && n.layout.nb[0] == 4
                && n.layout.nb[1] == lm.nb[2]
                && counts.get(v.index()) == Some(&1)
        })
    };
    let mut adds = Vec::with_capacity(used - 1);
    let mut sum: Option<TensorId> = None;
    let mut at = mul;
    for s in 1..used {
        let add = TensorId::from_index(next_computing(graph, at, end)? as u32);
        let an = graph.node(add).ok()?;
        let (Op::Add, Some(p), Some(q)) = (an.op, an.src(0), an.src(1)) else {
            return None;
        };
        // The sum so far (slot 0's view at first) and slot s's view, in
        // either order (a sum's two operands commute exactly).
        let so_far = |t: TensorId| match sum {
            None => slot(t, 0),
            Some(prev) => t == prev,
        };
        let chained = (so_far(p) && slot(q, s)) || (so_far(q) && slot(p, s));
        let last = s == used - 1;
        if !chained
            || an.layout.ne != [ld.ne[0], tokens, 1, 1]
            || (!last && !only_read_there(add, 1))
        {
            return None;
        }
        adds.push(add);
        sum = Some(add);
        at = add;
    }
    let out = graph.node(*adds.last()?).ok()?;
    (out.layout.dtype == DType::F32 && out.layout.is_contiguous() && out.view_src.is_none())
        .then_some(Run {
            product: id,
            mul,
            adds,
        })
}

/// Record `run` as one dispatch (and the quantization of the product's
/// input, unless this compute made it already); `false` (nothing
/// recorded) where an operand has no memory, the sum would overlap what
/// the dispatch reads, or the input's quantization has no room.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    q8: &mut Compute,
    run: &Run,
) -> Result<bool> {
    let node = graph.node(run.product)?;
    let mn = graph.node(run.mul)?;
    let (Some(a_id), Some(b_id), Some(ids_id), Some(w_id), Some(&sum_id)) = (
        node.src(0),
        node.src(1),
        node.src(2),
        mn.src(1),
        run.adds.last(),
    ) else {
        return Ok(false);
    };
    let get = |t| operand(core, graph, placement, t);
    let (Some(a), Some(b), Some(ids), Some(w), Some(sum)) = (
        get(a_id)?,
        get(b_id)?,
        get(ids_id)?,
        get(w_id)?,
        get(sum_id)?,
    ) else {
        return Ok(false);
    };
    if overlap(&sum, &a)? || overlap(&sum, &ids)? || overlap(&sum, &w)? {
        return Ok(false);
    }
    let (b_root, _) = graph.memory_root(b_id)?;
    crate::matvec_q8_id::encode(
        batch,
        core,
        q8,
        (b_id, b_root, &b),
        &sum,
        (&a, &ids, crate::matvec_q8_id::Mode::WeightedSum(&w)),
    )
}

/// A layer's gate and up expert products and their split GLU (see the
/// module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GluRun {
    first: TensorId,
    second: TensorId,
    glu: TensorId,
}

impl GluRun {
    /// The nodes after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> [TensorId; 2] {
        [self.second, self.glu]
    }
}

/// The gate/up run that starts at MUL_MAT_ID node `id`, if one does:
/// the next node computing anything is a MUL_MAT_ID of the same input
/// and ids by weights of the same type and strides in the same buffer,
/// both taken by the integer kernel; the next after it a split GLU (a
/// GLU op, not SWIGLU_OAI) of exactly their two results, which nothing else reads and
/// which are not outputs; the GLU's result contiguous F32, apart from the
/// weights and the ids.
pub(crate) fn plan_glu(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    counts: &[u32],
    id: TensorId,
    end: usize,
) -> Result<Option<GluRun>> {
    if !(switch_on(crate::fuse::enabled) && crate::subgroups::on(core)) {
        return Ok(None);
    }
    let taken = |t: TensorId| -> Result<Option<[TensorId; 3]>> {
        let n = graph.node(t)?;
        let (Op::MulMatId, Some(a), Some(b), Some(ids)) = (n.op, n.src(0), n.src(1), n.src(2))
        else {
            return Ok(None);
        };
        let ok = crate::matvec_q8_id::takes(&graph.layout(a)?, &graph.layout(b)?)
            && !crate::matmul_q8_id::takes(
                graph.layout(ids)?.ne[1],
                graph.layout(ids)?.ne[0],
                graph.layout(a)?.ne[2],
            )
            && read_only_by(graph, counts, t, 1);
        Ok(ok.then_some([a, b, ids]))
    };
    let Some([a1, b1, ids1]) = taken(id)? else {
        return Ok(None);
    };
    let Some(j) = next_computing(graph, id, end) else {
        return Ok(None);
    };
    let second = TensorId::from_index(j as u32);
    let Some([a2, b2, ids2]) = taken(second)? else {
        return Ok(None);
    };
    let Some(j) = next_computing(graph, second, end) else {
        return Ok(None);
    };
    let glu = TensorId::from_index(j as u32);
    let gn = graph.node(glu)?;
    let (Op::Glu { .. }, Some(x), Some(g)) = (gn.op, gn.src(0), gn.src(1)) else {
        return Ok(None);
    };
    let get = |t| operand(core, graph, placement, t);
    let (Some(w1), Some(w2), Some(ids), Some(out)) = (get(a1)?, get(a2)?, get(ids1)?, get(glu)?)
    else {
        return Ok(None);
    };
    let fits = (b1, ids1) == (b2, ids2)
        && ((x, g) == (id, second) || (x, g) == (second, id))
        && gn.view_src.is_none()
        && graph.layout(id)?.ne == graph.layout(second)?.ne
        && out.layout.ne == graph.layout(id)?.ne
        && out.layout.dtype == DType::F32
        && out.layout.is_contiguous()
        && w1.layout.dtype == w2.layout.dtype
        && w1.layout.nb == w2.layout.nb
        && w1.buffer == w2.buffer
        && !overlap(&out, &w1)?
        && !overlap(&out, &w2)?
        && !overlap(&out, &ids)?;
    Ok(fits.then_some(GluRun {
        first: id,
        second,
        glu,
    }))
}

/// Record `run` as one dispatch (and the quantization of its input,
/// unless this compute made it already); `false` (nothing recorded) where
/// an operand has no memory or the input's quantization no room.
pub(crate) fn encode_glu(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    q8: &mut Compute,
    run: &GluRun,
) -> Result<bool> {
    let gn = graph.node(run.glu)?;
    let (Op::Glu { op, .. }, Some(x)) = (gn.op, gn.src(0)) else {
        return Ok(false);
    };
    // A: the product whose result the activation takes; B: the other.
    let (pa, pb) = if x == run.first {
        (run.first, run.second)
    } else {
        (run.second, run.first)
    };
    let (na, nb) = (graph.node(pa)?, graph.node(pb)?);
    let (Some(wa), Some(wb), Some(b_id), Some(ids_id)) =
        (na.src(0), nb.src(0), na.src(1), na.src(2))
    else {
        return Ok(false);
    };
    let get = |t| operand(core, graph, placement, t);
    let (Some(wa), Some(wb), Some(b), Some(ids), Some(out)) =
        (get(wa)?, get(wb)?, get(b_id)?, get(ids_id)?, get(run.glu)?)
    else {
        return Ok(false);
    };
    let (b_root, _) = graph.memory_root(b_id)?;
    let mode = crate::matvec_q8_id::Mode::Glu(&wb, unary_code(op.activation()));
    crate::matvec_q8_id::encode(batch, core, q8, (b_id, b_root, &b), &out, (&wa, &ids, mode))
}

/// A layer's routing weights renormalised (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WeightsRun {
    gather: TensorId,
    sum: TensorId,
    clamp: TensorId,
    div: TensorId,
}

impl WeightsRun {
    /// The nodes after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> [TensorId; 3] {
        [self.sum, self.clamp, self.div]
    }
}

/// The run that starts at GET_ROWS node `id`, if one does: F32
/// probabilities `[1, experts, tokens]` gathered by I32 ids `[used,
/// tokens]`, the result read only through one view `w` of it as `[used,
/// tokens]`; the next nodes computing anything SUM_ROWS of `w`, CLAMP of
/// that sum and DIV of `w` by it, each intermediate read only there and
/// not an output; the DIV's result contiguous F32 `[used, tokens]`.
pub(crate) fn plan_weights(
    graph: &Graph,
    counts: &[u32],
    id: TensorId,
    end: usize,
) -> Option<WeightsRun> {
    if !switch_on(crate::fuse::enabled) {
        return None;
    }
    let node = graph.node(id).ok()?;
    let (Op::GetRows, Some(p), Some(ids)) = (node.op, node.src(0), node.src(1)) else {
        return None;
    };
    let (lp, li, lg) = (graph.layout(p).ok()?, graph.layout(ids).ok()?, node.layout);
    let (used, tokens) = (li.ne[0], li.ne[1]);
    let once = |t: TensorId, reads: u32| read_only_by(graph, counts, t, reads);
    let gathered = lp.dtype == DType::F32
        && lp.ne[0] == 1
        && lp.ne[2] == tokens
        && lp.ne[3] == 1
        && li.dtype == DType::I32
        && li.ne[2] == 1
        && lg.dtype == DType::F32
        && lg.ne == [1, used, tokens, 1]
        && lg.is_contiguous()
        && once(id, 1);
    if !gathered {
        return None;
    }
    let sum = TensorId::from_index(next_computing(graph, id, end)? as u32);
    let sn = graph.node(sum).ok()?;
    let (Op::SumRows, Some(w)) = (sn.op, sn.src(0)) else {
        return None;
    };
    let wn = graph.node(w).ok()?;
    let viewed = wn.op.is_view()
        && wn.view_src == Some(id)
        && wn.src(0) == Some(id)
        && !wn.flags.contains(tessera::Flags::OUTPUT)
        && wn.view_offs == 0
        && wn.layout.ne == [used, tokens, 1, 1]
        && wn.layout.is_contiguous()
        && counts.get(w.index()) == Some(&2)
        && once(sum, 1);
    let clamp = TensorId::from_index(next_computing(graph, sum, end)? as u32);
    let cn = graph.node(clamp).ok()?;
    let div = TensorId::from_index(next_computing(graph, clamp, end)? as u32);
    let dn = graph.node(div).ok()?;
    let fits = viewed
        && matches!(cn.op, Op::Clamp { .. })
        && cn.src(0) == Some(sum)
        && once(clamp, 1)
        && dn.op == Op::Div
        && (dn.src(0), dn.src(1)) == (Some(w), Some(clamp))
        && dn.view_src.is_none()
        && dn.layout.dtype == DType::F32
        && dn.layout.ne == [used, tokens, 1, 1]
        && dn.layout.is_contiguous();
    fits.then_some(WeightsRun {
        gather: id,
        sum,
        clamp,
        div,
    })
}

/// Record `run` as one dispatch; `false` (nothing recorded) where an
/// operand has no memory or the result would overlap what the dispatch
/// reads (each token's workgroup reads its probabilities and ids while
/// others write).
pub(crate) fn encode_weights(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &WeightsRun,
) -> Result<bool> {
    let node = graph.node(run.gather)?;
    let Op::Clamp { min, max } = graph.node(run.clamp)?.op else {
        return Ok(false);
    };
    let (Some(p), Some(ids)) = (node.src(0), node.src(1)) else {
        return Ok(false);
    };
    let get = |t| operand(core, graph, placement, t);
    let (Some(p), Some(ids), Some(out)) = (get(p)?, get(ids)?, get(run.div)?) else {
        return Ok(false);
    };
    if overlap(&out, &p)? || overlap(&out, &ids)? {
        return Ok(false);
    }
    let tokens = out.layout.ne[1];
    let mut call = Call::new(&out, &[Some(&p), Some(&ids)])?;
    call.params.iu[0] = 10;
    call.params.fp = [min, max, 0.0, 0.0];
    rows_of(batch, core, call, tokens)?;
    Ok(true)
}

#[cfg(test)]
#[path = "fuse_moe_tests.rs"]
mod tests;
