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
//!
//! The SET_ROWS of the values that usually follows (same ids, a cache of
//! the same type in the same buffer, F32 rows of their own in the ROPE
//! input's buffer, nothing overlapping) joins the dispatch: work items
//! after the keys' copy the value rows into their cache rows, converted by
//! the same store. A layer's K and V cache writes are then one dispatch.

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Operand, ROPE, operand, rope_call};
use crate::fuse::{next_computing, overlap};

/// A ROPE and the SET_ROWS that stores its result, and maybe the SET_ROWS
/// of the values after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    rope: TensorId,
    set_rows: TensorId,
    values: Option<TensorId>,
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
    if !cache_write {
        return None;
    }
    let set_rows = TensorId::from_index(j as u32);
    Some(Run {
        rope: id,
        set_rows,
        values: value_write(graph, set_rows, end),
    })
}

/// The SET_ROWS of values right after the keys' `set_rows` that can join
/// the dispatch, as far as the graph tells (the buffers are checked in
/// [`encode`]): the same ids, a cache of the same type and rows, F32 rows
/// of their own, one per token.
fn value_write(graph: &Graph, set_rows: TensorId, end: usize) -> Option<TensorId> {
    let keys = graph.node(set_rows).ok()?;
    let j = next_computing(graph, set_rows, end)?;
    let set = &graph.nodes()[j];
    let rows = graph.layout(set.src(1)?).ok()?;
    let (lk, lv) = (keys.layout, set.layout);
    let ok = set.op == Op::SetRows
        && set.src(2) == keys.src(2)
        && lv.dtype == lk.dtype
        && lv.ne[1] == lk.ne[1]
        && lv.ne[2] * lv.ne[3] == 1
        && rows.dtype == DType::F32
        && rows.nb[0] == 4
        && rows.ne == [lv.ne[0], graph.layout(keys.src(2)?).ok()?.ne[0], 1, 1];
    ok.then(|| TensorId::from_index(j as u32))
}

/// Record `run` as one dispatch: the nodes after the ROPE that it recorded
/// (to skip), or `None` (nothing recorded) where the cache overlaps the
/// ROPE's input, or an operand has no memory (the nodes are then recorded
/// one by one). The values' SET_ROWS is left out (recorded on its own)
/// where its operands do not lie as [`values_apart`] needs.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
) -> Result<Option<[Option<TensorId>; 2]>> {
    let rope = graph.node(run.rope)?;
    let set = graph.node(run.set_rows)?;
    let Op::Rope(p) = rope.op else {
        return Ok(None);
    };
    let (Some(a), Some(pos), Some(ids)) = (rope.src(0), rope.src(1), set.src(2)) else {
        return Ok(None);
    };
    let get = |t: TensorId| operand(core, graph, placement, t);
    let ff = match rope.src(2) {
        Some(t) => match get(t)? {
            Some(o) => Some(o),
            None => return Ok(None),
        },
        None => None,
    };
    let (Some(cache), Some(a), Some(pos), Some(ids)) =
        (get(run.set_rows)?, get(a)?, get(pos)?, get(ids)?)
    else {
        return Ok(None);
    };
    if overlap(&cache, &a)? {
        return Ok(None);
    }
    // The values' cache and rows, where they can join.
    let mut values = None;
    if let Some(v) = run.values
        && let Some(rows) = graph.node(v)?.src(1)
        && let (Some(vc), Some(vr)) = (get(v)?, get(rows)?)
        && values_apart(&cache, &a, &vc, &vr)?
    {
        values = Some((vc, vr));
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
    let (mut call, items) = rope_call(&dst, [&a, &pos], ff.as_ref(), Some((&ids, rows)), &p)?;
    let Some((vc, vr)) = values else {
        call.items(batch, core, "rope", ROPE, items)?;
        return Ok(Some([Some(run.set_rows), None]));
    };
    // Items from `items` on copy the value rows (see rope.wgsl's header).
    let u = |v: usize| crate::params::u32_of(v, "a value row's offset or size");
    let len = vr.layout.ne[0];
    call.params.iu2[2] = 1;
    call.params.src[3][0] = [u(items)?, u(vr.offset)?, u(vr.layout.nb[1])?, u(len)?];
    call.params.src[2][0] = [u(vc.offset)?, u(vc.layout.nb[1])?, 0, 0];
    let total = len
        .checked_mul(vr.layout.ne[1])
        .and_then(|n| n.checked_add(items))
        .ok_or_else(|| tessera::Error::Overflow("ROPE and SET_ROWS work items".into()))?;
    batch.extend_label("+SET_ROWS");
    call.items(batch, core, "rope", ROPE, total)?;
    Ok(Some([Some(run.set_rows), run.values]))
}

/// Whether the values' cache `vc` and rows `vr` can be written in the keys'
/// dispatch (keys' cache `kc`, ROPE input `a`): the cache in the keys'
/// cache's buffer (the one destination binding) with its elements at the
/// same stride, the rows in the ROPE input's buffer (the source binding),
/// and no overlap between what is written and anything read or written.
fn values_apart(kc: &Operand, a: &Operand, vc: &Operand, vr: &Operand) -> Result<bool> {
    Ok(vc.buffer == kc.buffer
        && vr.buffer == a.buffer
        && vc.layout.nb[0] == kc.layout.nb[0]
        && !overlap(vc, kc)?
        && !overlap(vc, a)?
        && !overlap(vc, vr)?
        && !overlap(kc, vr)?)
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

    /// Keys rotated into their cache and values (16 wide, 2 heads) stored
    /// into theirs with the same ids (5, -1, 9, 2 into 8 rows: clamped as
    /// SET_ROWS clamps them): one dispatch, both caches' bytes those of the
    /// values stored by a SET_ROWS of their own (ids of another tensor with
    /// the same values: two dispatches), and the value rows the F16 of the
    /// values, rows not written as they were.
    #[test]
    fn the_values_store_joins_the_keys_dispatch() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let (d, heads, tokens, slots, dv) = (16, 3, 4, 8, 32);
        let ids = [5i64, -1, 9, 2];
        let run = |same_ids: bool| -> (Vec<u8>, Vec<u8>, u64) {
            let mut g = Graph::new();
            let k = g.input("k", DType::F32, &[d * heads, tokens]).unwrap();
            let v = g.input("v", DType::F32, &[dv, tokens]).unwrap();
            let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
            let at = g.input("at", DType::I64, &[tokens]).unwrap();
            let at2 = g.input("at2", DType::I64, &[tokens]).unwrap();
            let ck = g.input("ck", DType::F16, &[d * heads, slots]).unwrap();
            let cv = g.input("cv", DType::F16, &[dv, slots]).unwrap();
            let k3 = g.reshape(k, &[d, heads, tokens]).unwrap();
            let r = g
                .rope(k3, pos, None, RopeParams::new(d, RopeMode::Neox, 10000.0))
                .unwrap();
            let k2 = g.reshape(r, &[d * heads, tokens]).unwrap();
            let wk = g.set_rows(ck, k2, at).unwrap();
            let wv = g.set_rows(cv, v, if same_ids { at } else { at2 }).unwrap();
            g.set_output(wk).unwrap();
            g.set_output(wv).unwrap();
            let stream = dev.new_wgpu_stream().unwrap();
            let (pl, _galloc) = crate::test_placement(&dev, &g);
            let f = |n: usize, m: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * m) % 101) as f32 / 25.0 - 2.0)
                    .collect()
            };
            pl.tensor(&g, k)
                .unwrap()
                .write_f32(&f(d * heads * tokens, 37))
                .unwrap();
            pl.tensor(&g, v)
                .unwrap()
                .write_f32(&f(dv * tokens, 53))
                .unwrap();
            let p: Vec<u8> = [3i32, 9, 10, 11]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            pl.tensor(&g, pos).unwrap().write(0, &p).unwrap();
            let a: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
            pl.tensor(&g, at).unwrap().write(0, &a).unwrap();
            pl.tensor(&g, at2).unwrap().write(0, &a).unwrap();
            for (c, n) in [(ck, d * heads), (cv, dv)] {
                let before: Vec<f32> = (0..n * slots).map(|i| i as f32 * 0.5).collect();
                let mut h = vec![0u8; n * slots * 2];
                tessera::quant::from_f32(DType::F16, &before, &mut h).unwrap();
                pl.tensor(&g, c).unwrap().write(0, &h).unwrap();
            }
            let n0 = crate::batch::counts::now().0;
            stream.compute(&g, &pl).unwrap();
            let n = crate::batch::counts::now().0 - n0;
            let read = |c, n: usize| {
                let mut out = vec![0u8; n * slots * 2];
                pl.tensor(&g, c).unwrap().read(0, &mut out).unwrap();
                out
            };
            (read(ck, d * heads), read(cv, dv), n)
        };
        let (k1, v1, n1) = run(true);
        let (k2, v2, n2) = run(false);
        assert_eq!(n1, 1, "keys and values in one dispatch");
        assert_eq!(n2, 2, "values with other ids: a dispatch of their own");
        assert!(k1 == k2, "the keys' cache differs");
        assert!(v1 == v2, "the values' cache differs");
        // Value row t in cache row clamp(ids[t]); row 1 untouched.
        let vals: Vec<f32> = (0..dv * tokens)
            .map(|i| ((i * 53) % 101) as f32 / 25.0 - 2.0)
            .collect();
        let mut want = vec![0u8; dv * tokens * 2];
        tessera::quant::from_f32(DType::F16, &vals, &mut want).unwrap();
        for (t, &id) in ids.iter().enumerate() {
            let row = id.clamp(0, slots as i64 - 1) as usize;
            assert_eq!(
                &v1[row * dv * 2..(row + 1) * dv * 2],
                &want[t * dv * 2..(t + 1) * dv * 2],
                "value row {t} in cache row {row}"
            );
        }
        let was: Vec<f32> = (dv..2 * dv).map(|i| i as f32 * 0.5).collect();
        let mut kept = vec![0u8; dv * 2];
        tessera::quant::from_f32(DType::F16, &was, &mut kept).unwrap();
        assert_eq!(&v1[dv * 2..2 * dv * 2], &kept[..], "row 1 was written");
    }
}
