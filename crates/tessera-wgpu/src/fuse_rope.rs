//! ROPE and the SET_ROWS that stores its result into a cache, as one
//! dispatch.
//!
//! Why: every attention layer rotates its keys and then writes them into
//! the KV cache (llama.cpp's graphs: `ggml_rope` of K, a reshape, then
//! `ggml_set_rows` into the cache). On a GPU each dispatch costs a launch
//! and a barrier; here the rotation writes straight into the cache rows,
//! converted to the cache's type exactly as SET_ROWS converts (the same
//! store), and the rotated keys are never written anywhere else.
//!
//! Fused only where nothing can tell: the ROPE (single-section modes, F32)
//! is read by nothing but one view of all of it that the SET_ROWS reads
//! (or by the SET_ROWS itself), neither of those is an output, the SET_ROWS is the
//! next node that computes anything, its destination is a float type
//! apart from the ROPE's input, and the shapes are those of a cache
//! write: the ROPE's [d, heads, tokens] as the SET_ROWS's [d * heads,
//! tokens] rows, one id per token.

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Operand, ROPE, operand, rope_call};
use crate::fuse::{next_computing, overlap};

/// A ROPE and the SET_ROWS that stores its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    rope: TensorId,
    set_rows: TensorId,
}

impl Run {
    /// The node after the first that this run records (to skip).
    pub(crate) fn rest(&self) -> [Option<TensorId>; 2] {
        [Some(self.set_rows), None]
    }
}

/// The run that starts at ROPE node `id`, if any (see the module docs).
/// `counts` are the graph's [`Graph::use_counts`]; `end` the end of the
/// range being encoded.
pub(crate) fn plan(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    if !crate::fuse::enabled() {
        return None;
    }
    let nodes = graph.nodes();
    let rope = nodes.get(id.index())?;
    let Op::Rope(p) = rope.op else {
        return None;
    };
    let lr = rope.layout;
    let single = |t: TensorId| {
        counts.get(t.index()) == Some(&1)
            && graph
                .node(t)
                .is_ok_and(|n| !n.flags.contains(Flags::OUTPUT))
    };
    if p.mode.is_multi() || lr.dtype != DType::F32 || !lr.is_contiguous() || lr.ne[3] != 1 {
        return None;
    }
    if !single(id) {
        return None;
    }
    let j = next_computing(graph, id, end)?;
    let set = &nodes[j];
    let rows = set.src(1)?;
    // The SET_ROWS reads the ROPE, or one view of all of it.
    let via_view = rows != id;
    if via_view {
        let v = graph.node(rows).ok()?;
        // A view of the ROPE itself (not of another view of it, which
        // could have readers of its own).
        let whole = v.op.is_view()
            && v.src(0) == Some(id)
            && graph.memory_root(rows).ok()? == (id, 0)
            && v.layout.is_contiguous()
            && single(rows);
        if !whole {
            return None;
        }
    }
    let ls = graph.layout(rows).ok()?;
    let ids = graph.layout(set.src(2)?).ok()?;
    let cache_write = set.op == Op::SetRows
        && !set.layout.dtype.is_quantized()
        && ls.ne == [lr.ne[0] * lr.ne[1], lr.ne[2], 1, 1]
        && ids.ne[0] == lr.ne[2]
        && ids.ne[1] * ids.ne[2] * ids.ne[3] == 1;
    cache_write.then_some(Run {
        rope: id,
        set_rows: TensorId::from_index(j as u32),
    })
}

/// Record `run` as one dispatch; `false` (nothing recorded) where the
/// cache overlaps the ROPE's input, or an operand has no memory (the nodes
/// are then recorded one by one).
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
) -> Result<bool> {
    let rope = graph.node(run.rope)?;
    let set = graph.node(run.set_rows)?;
    let Op::Rope(p) = rope.op else {
        return Ok(false);
    };
    let (Some(a), Some(pos), Some(ids)) = (rope.src(0), rope.src(1), set.src(2)) else {
        return Ok(false);
    };
    let get = |t: TensorId| operand(core, graph, placement, t);
    let ff = match rope.src(2) {
        Some(t) => match get(t)? {
            Some(o) => Some(o),
            None => return Ok(false),
        },
        None => None,
    };
    let (Some(cache), Some(a), Some(pos), Some(ids)) =
        (get(run.set_rows)?, get(a)?, get(pos)?, get(ids)?)
    else {
        return Ok(false);
    };
    if overlap(&cache, &a)? {
        return Ok(false);
    }
    // The ROPE's result as it lies in the cache: element i0 of head i1 of
    // token i2 at row ids[i2] (the stride nb[2]), column i1 d + i0.
    let (d, heads, tokens) = (rope.layout.ne[0], rope.layout.ne[1], rope.layout.ne[2]);
    let (nb0, nb1) = (cache.layout.nb[0], cache.layout.nb[1]);
    let layout = Layout {
        dtype: cache.layout.dtype,
        ne: [d, heads, tokens, 1],
        nb: [nb0, nb0 * d, nb1, nb1 * tokens],
    };
    let dst = Operand { layout, ..cache };
    let rows = cache.layout.ne[1];
    let (call, items) = rope_call(&dst, [&a, &pos], ff.as_ref(), Some((&ids, rows)), &p)?;
    call.items(batch, core, "rope", ROPE, items)?;
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tessera::{DType, Graph, RopeMode, RopeParams, Stream};

    /// Keys [16 x 3 heads, 4 tokens] rotated (NeoX or normal) and stored
    /// into rows 5, -1, 9, 2 of an F16 cache of 8 rows (ids clamped into the
    /// cache as SET_ROWS clamps them: rows 5, 0, 7, 2): one dispatch, the
    /// cache's bytes those of the separate ROPE and SET_ROWS (the ROPE's
    /// result made an output, which keeps them apart), rows not written
    /// left as they were. Through two views, the first an output, the
    /// nodes stay apart too (the output must be written).
    #[test]
    fn a_rope_stores_into_the_cache_rows_in_one_dispatch() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let (d, heads, tokens, slots) = (16, 3, 4, 8);
        // `apart`: 0 fused, 1 the ROPE an output, 2 two views, the first an
        // output.
        let run = |mode: RopeMode, apart: u8| -> (Vec<u8>, u64) {
            let mut g = Graph::new();
            let k = g.input("k", DType::F32, &[d * heads, tokens]).unwrap();
            let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
            let at = g.input("at", DType::I64, &[tokens]).unwrap();
            let cache = g.input("cache", DType::F16, &[d * heads, slots]).unwrap();
            let k3 = g.reshape(k, &[d, heads, tokens]).unwrap();
            let r = g
                .rope(k3, pos, None, RopeParams::new(d, mode, 10000.0))
                .unwrap();
            let (k2, middle) = if apart == 2 {
                let flat = g.reshape(r, &[d * heads * tokens]).unwrap();
                (g.reshape(flat, &[d * heads, tokens]).unwrap(), Some(flat))
            } else {
                (g.reshape(r, &[d * heads, tokens]).unwrap(), None)
            };
            let w = g.set_rows(cache, k2, at).unwrap();
            g.set_output(w).unwrap();
            if apart == 1 {
                g.set_output(r).unwrap();
            }
            if let Some(m) = middle {
                g.set_output(m).unwrap();
            }
            let stream = dev.new_wgpu_stream().unwrap();
            let (pl, _galloc) = crate::test_placement(&dev, &g);
            let x: Vec<f32> = (0..d * heads * tokens)
                .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
                .collect();
            pl.tensor(&g, k).unwrap().write_f32(&x).unwrap();
            let p: Vec<u8> = [3i32, 9, 10, 11]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            pl.tensor(&g, pos).unwrap().write(0, &p).unwrap();
            let a: Vec<u8> = [5i64, -1, 9, 2]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            pl.tensor(&g, at).unwrap().write(0, &a).unwrap();
            let before: Vec<f32> = (0..d * heads * slots).map(|i| i as f32 * 0.5).collect();
            let mut c = vec![0u8; d * heads * slots * 2];
            tessera::quant::from_f32(DType::F16, &before, &mut c).unwrap();
            pl.tensor(&g, cache).unwrap().write(0, &c).unwrap();
            let n0 = crate::batch::counts::now().0;
            stream.compute(&g, &pl).unwrap();
            let n = crate::batch::counts::now().0 - n0;
            let mut out = vec![0u8; c.len()];
            pl.tensor(&g, cache).unwrap().read(0, &mut out).unwrap();
            (out, n)
        };
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let (fused, n_fused) = run(mode, 0);
            let (apart, n_apart) = run(mode, 1);
            let (chained, n_chained) = run(mode, 2);
            assert_eq!(n_fused, 1, "{mode:?}: one dispatch");
            assert_eq!(n_apart, 2, "{mode:?}: ROPE, SET_ROWS");
            assert_eq!(n_chained, 2, "{mode:?}: through an output view");
            assert!(chained == apart, "{mode:?}: the cache through two views");
            assert!(fused == apart, "{mode:?}: the cache's bytes differ");
            let row = |r: usize| &fused[r * d * heads * 2..(r + 1) * d * heads * 2];
            let mut kept = vec![0u8; d * heads * 2];
            let was: Vec<f32> = (0..d * heads)
                .map(|i| (d * heads + i) as f32 * 0.5)
                .collect();
            tessera::quant::from_f32(DType::F16, &was, &mut kept).unwrap();
            assert!(row(1) == &kept[..], "{mode:?}: row 1 was written");
            assert_ne!(row(5), row(1), "{mode:?}: row 5 is written");
        }
    }
}
