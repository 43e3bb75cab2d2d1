//! Computing a graph range on the device: check every node against
//! [`support::supports_op`] (the same oracle the scheduler asked), record
//! each op node ([`crate::encode`]; an RMS_NORM and the MUL after it, or a
//! residual ADD with both, as one dispatch where [`crate::fuse`] allows,
//! a ROPE with the SET_ROWS that stores it, [`crate::fuse_rope`],
//! consecutive products of one input, [`crate::merge_products`], and two
//! such products with the GLU of their results, [`crate::glu_products`]),
//! and submit the recording in parts, so that the GPU starts on the first
//! while the host records the rest. The abort callback is asked before
//! each submission.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tessera::profile::{OpTotals, op_label};
use tessera::{AbortCallback, Error, Graph, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::encode_node;
use crate::{
    fuse, fuse_moe, fuse_rope, fuse_router, glu_products, matvec_q8, merge_products, support,
};

/// Record the op nodes of `range` and submit them, in parts
/// ([`part_size`]); returns the last submission's index (`None` when
/// nothing needed computing). With `profile`, the dispatches
/// are timed and, once the submission has completed, added to it per kind
/// of node (this waits for the GPU).
pub(crate) fn compute(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    range: std::ops::Range<usize>,
    abort: Option<&AbortCallback>,
    profile: Option<&mut OpTotals>,
    scratch: &mut matvec_q8::Scratch,
) -> Result<Option<wgpu::SubmissionIndex>> {
    let began = std::time::Instant::now();
    let end = range.end.min(graph.len());
    let start = range.start.min(end);
    let ids = || (start..end).map(|i| TensorId::from_index(i as u32));
    for id in ids() {
        let node = &graph.nodes()[id.index()];
        if !node.is_leaf()
            && !node.op.is_view()
            && node.op != Op::Transfer
            && !support::supports_op(graph, id)
        {
            return Err(Error::unsupported(&core.name, graph.describe_node(id)));
        }
    }
    placement.check_complete(graph, start..end)?;
    let mut batch = if profile.is_some() {
        Batch::timed(core)
    } else {
        Batch::new(core)
    };
    let mut parts = 0;
    let counts = graph.use_counts();
    let q8_bytes = matvec_q8::scratch_bytes(graph, start..end)
        .saturating_add(crate::attention::scratch_bytes(graph, start..end));
    let mut q8 = matvec_q8::Compute::new(scratch, core, q8_bytes, graph, start..end)?;
    // Nodes already recorded with a node before them (crate::fuse).
    let mut fused: Vec<TensorId> = Vec::new();
    for id in ids() {
        let node = &graph.nodes()[id.index()];
        // TRANSFER nodes are the scheduler's copies, made before the compute.
        if node.is_leaf() || node.op.is_view() || node.op == Op::Transfer {
            continue;
        }
        if let Some(q8) = q8.as_mut() {
            // Regions no later product reads are free again.
            q8.retire(id.index());
            if let Some(root) = node.view_src {
                // This node writes into another tensor's memory.
                q8.written(root);
            }
        }
        if fused.contains(&id) {
            continue;
        }
        let label = |batch: &mut Batch<'_>, suffix: &str| {
            if profile.is_some() {
                let src = |i: usize| node.src(i).and_then(|s| graph.layout(s).ok());
                let (a, b) = (src(0), src(1));
                let label = op_label(node.op, a.as_ref(), b.as_ref(), node.layout.dtype);
                batch.set_label(label + suffix);
            }
        };
        fused.clear();
        if let Some(run) = fuse::plan(graph, &counts, id, end) {
            label(&mut batch, run.label());
            // The products that read the run's result find it quantized
            // (the kernel quantizes rows of whole blocks that it holds in
            // registers: at most fuse::QUANTIZED_ROW values).
            let n = graph.layout(run.result())?.ne[0];
            let whole_blocks = n % 32 == 0 && n <= fuse::QUANTIZED_ROW && run.quantizes();
            let quant = q8
                .as_mut()
                .filter(|_| whole_blocks)
                .and_then(|q| q.plan_for(graph, run.result()));
            if fuse::encode(&mut batch, core, graph, placement, &run, quant.as_ref())
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest().into_iter().flatten());
                if let (Some(q8), Some(quant)) = (q8.as_mut(), &quant) {
                    q8.commit(graph.memory_root(run.result())?.0, quant);
                }
            } else if let (Some(q8), Some(quant)) = (q8.as_mut(), &quant) {
                // Not fused after all: nothing writes the region.
                q8.cancel(quant);
            }
        }
        if let Some(run) = fuse_rope::plan(graph, &counts, id, end).filter(|_| fused.is_empty()) {
            // fuse_rope::encode names what it took in.
            label(&mut batch, "");
            if let Some(rest) = fuse_rope::encode(&mut batch, core, graph, placement, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(rest.into_iter().flatten());
            }
        }
        if fused.is_empty()
            && let Some(q8) = q8.as_mut()
            && let Some(run) = glu_products::plan(core, graph, placement, &counts, id, end)
                .map_err(|e| annotate(e, graph, id))?
        {
            label(&mut batch, " (2 merged + GLU)");
            if glu_products::encode(&mut batch, core, graph, placement, q8, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest().into_iter().flatten());
            }
        }
        if fused.is_empty()
            && let Some(run) = fuse_moe::plan_weights(graph, &counts, id, end)
        {
            label(&mut batch, "+SUM_ROWS+CLAMP+DIV");
            if fuse_moe::encode_weights(&mut batch, core, graph, placement, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest());
            }
        }
        if fused.is_empty()
            && let Some(q8) = q8.as_mut()
            && let Some(run) = fuse_moe::plan_glu(core, graph, placement, &counts, id, end)
                .map_err(|e| annotate(e, graph, id))?
        {
            label(&mut batch, " (2 merged + GLU)");
            if fuse_moe::encode_glu(&mut batch, core, graph, placement, q8, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest());
            }
        }
        if fused.is_empty()
            && let Some(q8) = q8.as_mut()
            && let Some(run) = fuse_moe::plan(core, graph, &counts, id, end)
        {
            label(&mut batch, &format!(" (weighted sum of {})", run.used()));
            if fuse_moe::encode(&mut batch, core, graph, placement, q8, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest());
            }
        }
        if fused.is_empty()
            && let Some(run) = fuse_router::plan(graph, id, end)
        {
            label(&mut batch, "+ARGSORT");
            if fuse_router::encode(&mut batch, core, graph, placement, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest());
            }
        }
        if fused.is_empty()
            && let Some(q8) = q8.as_mut()
            && let Some(run) = merge_products::plan(core, graph, placement, id, end)
                .map_err(|e| annotate(e, graph, id))?
        {
            label(&mut batch, &format!(" ({} merged)", run.len()));
            if merge_products::encode(&mut batch, core, graph, placement, q8, &run)
                .map_err(|e| annotate(e, graph, id))?
            {
                fused.extend(run.rest().into_iter().flatten());
            }
        }
        if fused.is_empty() {
            label(&mut batch, "");
            encode_node(&mut batch, core, graph, placement, id, q8.as_mut())
                .map_err(|e| annotate(e, graph, id))?;
        }
        if batch.pending() >= part_size(parts) {
            check_abort(core, abort)?;
            batch.submit_part("computing a graph")?;
            parts += 1;
        }
    }
    check_abort(core, abort)?;
    let (index, timing) = batch.submit_timed("computing a graph")?;
    if let (Some(totals), Some(timing)) = (profile, timing) {
        // The host's side too: checking, encoding and submitting the range.
        totals.add(HOST_LABEL, began.elapsed().as_nanos() as u64, 0);
        timing.fold(core, totals)?;
    }
    Ok(index)
}

/// The nodes after the first that a fused dispatch took in (to skip).
pub(crate) type Taken = [Option<TensorId>; 4];

fn check_abort(core: &Core, abort: Option<&AbortCallback>) -> Result<()> {
    if let Some(cb) = abort {
        match catch_unwind(AssertUnwindSafe(|| cb())) {
            Ok(false) => {}
            Ok(true) => return Err(Error::Aborted),
            Err(_) => return Err(Error::device(&core.name, "the abort callback panicked")),
        }
    }
    Ok(())
}

/// Dispatches in part `k` of a compute's submissions: a short first part
/// (the GPU starts while the host records the rest), then longer ones
/// (each submission costs the host some time of its own).
/// `TESSERA_WGPU_SUBMIT=first,then` sets both; `0` submits a compute whole.
pub(crate) fn part_size(k: usize) -> usize {
    static SIZES: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    let (first, then) = *SIZES.get_or_init(|| {
        let parse = |v: &str| -> Option<(usize, usize)> {
            let mut it = v.split(',').map(|x| x.trim().parse::<usize>().ok());
            match (it.next()?, it.next()) {
                (Some(0), _) => Some((usize::MAX, usize::MAX)),
                (Some(a), None) => Some((a, a)),
                (Some(a), Some(Some(b))) if b > 0 => Some((a, b)),
                _ => None,
            }
        };
        std::env::var("TESSERA_WGPU_SUBMIT")
            .ok()
            .and_then(|v| parse(&v))
            .unwrap_or((DEFAULT_FIRST_PART, DEFAULT_PART))
    });
    if k == 0 { first } else { then }
}

/// [`part_size`]'s defaults, after ggml's Vulkan backend (which submits
/// every 1/40 of a graph's matrix bytes and at least every 100 nodes, the
/// first parts smaller): 5 submissions for a decoding step of a 1B model
/// (about 290 dispatches). On an NVIDIA H200, 1B Q4_0 tg128: 288 t/s
/// against 243 for one submission (`TESSERA_WGPU_SUBMIT=0`); 8,32 and
/// 32,128 gave the same within noise.
const DEFAULT_FIRST_PART: usize = 16;
const DEFAULT_PART: usize = 64;

/// The profile's entry for the host's time in [`compute`] (not GPU time;
/// timed computes give each dispatch a pass of its own, so it is somewhat
/// more than an untimed compute's).
pub(crate) const HOST_LABEL: &str = "(host) encoding and submission";

fn annotate(e: Error, graph: &Graph, id: TensorId) -> Error {
    match e {
        Error::Device { device, message } => Error::Device {
            device,
            message: format!("{message} (node {})", graph.describe_node(id)),
        },
        other => other,
    }
}
