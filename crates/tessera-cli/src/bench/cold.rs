//! Token-generation MUL_MAT with its weights streamed from memory.
//!
//! test-backend-ops repeats one node on one weight matrix, so on a machine
//! whose last-level cache holds the matrix (here: 33–235 MB against a large
//! L3) the figure is a cache figure. A model's decode step reads every weight
//! once per token from DRAM: this measurement runs the same node over enough
//! distinct copies of the weights (at least 2 GiB in all, each read once per
//! graph) that they cannot stay in cache, and reports the weight bytes per
//! second as a share of the machine's read bandwidth (`bench machine`).

use std::sync::Arc;

use tessera::alloc::alloc_tensors;
use tessera::{BufferUsage, Device, Graph, Layout, Placement, Result, Stream, TensorId};

use super::cases::PerfCase;
use super::fill;
use super::machine::Limits;

/// Bytes of weights a measurement cycles through.
const MIN_TOTAL: f64 = 2.0 * (1u64 << 30) as f64;

/// Is `case` one this measurement is for (MUL_MAT with one column)?
pub fn applies(case: &PerfCase) -> bool {
    case.weight_bytes.is_some() && case.name.starts_with("MUL_MAT") && case.name.contains(",n=1,")
}

/// Measure `case` with its weights (leaf 0) in `copies` distinct tensors,
/// one node per copy, for at least `seconds`; a line for the bench output.
pub fn measure(
    device: &Arc<dyn Device>,
    stream: &dyn Stream,
    case: &PerfCase,
    seconds: f64,
    limits: &Limits,
) -> Result<String> {
    let Some(wb) = case.weight_bytes.filter(|&b| b > 0.0) else {
        return Ok(String::new());
    };
    let copies = (MIN_TOTAL / wb).ceil().max(2.0) as usize;
    let mut g = Graph::new();
    let mut leaves: Vec<TensorId> = Vec::new();
    for l in &case.leaves {
        leaves.push(g.new_tensor(l.dtype, &l.ne)?);
    }
    let weights0 = leaves[0];
    let mut weights = vec![weights0];
    for _ in 1..copies {
        weights.push(g.new_tensor(case.leaves[0].dtype, &case.leaves[0].ne)?);
    }
    for &w in &weights {
        let mut ls = leaves.clone();
        ls[0] = w;
        let out = (case.build)(&mut g, &ls)?;
        g.set_output(out)?;
    }
    // Every leaf in one allocation: the weight copies, then the other inputs.
    let mut ids = weights.clone();
    ids.extend_from_slice(&leaves[1..]);
    let layouts: Vec<Layout> = ids.iter().map(|&id| g.nodes()[id.index()].layout).collect();
    let inputs = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Weights)?;
    let mut placement = Placement::new(&g);
    for (i, (&id, t)) in ids.iter().zip(&inputs.tensors).enumerate() {
        // Ids `0..copies` are weight copies (leaf 0), then leaves 1, 2, ...
        let leaf = &case.leaves[(i + 1).saturating_sub(copies)];
        fill::fill(t, leaf.fill)?;
        placement.bind(&g, id, t)?;
    }
    // As the cached measurement: every node writes the same output memory.
    let Some(_out_set) = super::bind_shared_output(device, &g, &mut placement)? else {
        return Ok(String::new());
    };
    let (secs, iters) = super::time_graph(stream, &g, &placement, seconds)?;
    let us = secs * 1e6 / (iters * copies) as f64;
    let gbs = wb / (us * 1e-6) / 1e9;
    Ok(format!(
        "    weights from memory ({copies} copies, {:.1} GB): {us:.2} us/run = {gbs:.1} GB/s of weights ({:.0}% of read bw)",
        wb * copies as f64 / 1e9,
        100.0 * gbs / limits.read_gbs
    ))
}
