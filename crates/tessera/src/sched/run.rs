//! Running a plan: per split, copy its inputs in, then compute its nodes on
//! its device's stream (ggml's `compute_splits`, §2.9).
//!
//! Ordering comes from the stream contract (`crate::stream`): a
//! [`copy_async`] from the source device's stream to the split's stream runs
//! after everything queued on the source stream and before everything queued
//! on the split's stream afterwards, and the source stream cannot overwrite
//! the source before the copy has read it. So consecutive splits on
//! different devices need no further synchronisation, except where a split
//! reads another device's memory directly (a device that can read another's
//! buffer type): that split's stream is synchronized before the next one
//! starts, so the memory is not reused under it.

use std::sync::Arc;

use crate::event::Event;
use crate::placement::Placement;
use crate::stream::{Stream, copy_async};
use crate::tensor::Tensor;
use crate::{Error, Graph, Result, TensorId};

use super::split::Rewrite;

/// Observes chosen nodes of [`super::Scheduler::compute`] (ggml's eval
/// callback), e.g. to print or check intermediate tensors.
///
/// `want(graph, id)` is asked for every computed node of the user's graph;
/// for a node it wants, the scheduler computes up to and including that
/// node, waits for it, and calls `observe(graph, id, tensor)` with the
/// node's memory. Returning `false` from `observe` **stops the compute**:
/// nothing after that node is computed (neither the rest of its split nor
/// any later split), and `compute` returns [`Error::Aborted`]. Tensors
/// observed before the stop hold their values; later ones are not computed.
/// (ggml's header says the same, its code only leaves the current split.)
pub struct EvalCallback {
    /// Is node `id` of the user's graph to be observed?
    pub want: Box<WantFn>,
    /// Node `id` has been computed: look at it; `false` stops the compute.
    pub observe: Box<ObserveFn>,
}

/// [`EvalCallback::want`].
pub type WantFn = dyn FnMut(&Graph, TensorId) -> bool + Send;

/// [`EvalCallback::observe`].
pub type ObserveFn = dyn FnMut(&Graph, TensorId, &Tensor) -> bool + Send;

impl std::fmt::Debug for EvalCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvalCallback")
    }
}

/// Run every split of `rw` with the rewritten placement `rp`.
pub(super) fn run_splits(
    streams: &[Arc<dyn Stream>],
    rw: &Rewrite,
    rp: &Placement,
    user_graph: &Graph,
    slot_events: &[Option<Arc<dyn Event>>],
    mut eval: Option<&mut EvalCallback>,
) -> Result<()> {
    for (k, split) in rw.splits.iter().enumerate() {
        let stream = streams
            .get(split.device)
            .ok_or_else(|| Error::NotFound(format!("stream {}", split.device)))?;
        // Pipelining: the copy slot's previous use on this device is over.
        if let Some(Some(e)) = slot_events.get(split.device) {
            stream.wait_event(e.as_ref())?;
        }
        for input in &split.inputs {
            let src = rp.tensor(&rw.graph, input.from)?;
            let dst = rp.tensor(&rw.graph, input.to)?;
            let from = streams
                .get(input.from_device)
                .ok_or_else(|| Error::NotFound(format!("stream {}", input.from_device)))?;
            copy_async(from.as_ref(), stream.as_ref(), &src, &dst).map_err(|e| {
                Error::device(
                    stream.name(),
                    format!(
                        "split {k}: copying {} from {}: {e}",
                        user_graph.describe_node(input.source),
                        from.name()
                    ),
                )
            })?;
        }
        match eval.as_deref_mut() {
            Some(cb) => {
                let mut start = split.nodes.start;
                for n in split.nodes.clone() {
                    let node = &rw.graph.nodes()[n];
                    if node.op.is_leaf() || node.op.is_view() {
                        continue;
                    }
                    let Some(id) = rw.origin.get(n).copied().flatten() else {
                        continue;
                    };
                    if !(cb.want)(user_graph, id) {
                        continue;
                    }
                    stream.compute_async(&rw.graph, rp, start..n + 1)?;
                    stream.synchronize()?;
                    start = n + 1;
                    let t = rp.tensor(&rw.graph, TensorId::from_index(n as u32))?;
                    if !(cb.observe)(user_graph, id, &t) {
                        return Err(Error::Aborted);
                    }
                }
                stream.compute_async(&rw.graph, rp, start..split.nodes.end)?;
            }
            _ => stream.compute_async(&rw.graph, rp, split.nodes.clone())?,
        }
        if let Some(Some(e)) = slot_events.get(split.device) {
            stream.record_event(e.as_ref())?;
        }
        if split.reads_foreign {
            stream.synchronize()?;
        }
    }
    Ok(())
}
