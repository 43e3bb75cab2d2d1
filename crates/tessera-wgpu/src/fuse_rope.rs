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
//!
//! And the ROPE of the queries right before the keys' (the same op and
//! parameters, positions and frequency factors, the same head size and
//! tokens, a source of the same type in the same buffer, an F32 result of
//! contiguous rows that overlaps nothing else the dispatch reads or
//! writes, and its source not at all or exactly in place)
//! joins it too: its items come first and write the queries' result
//! (binding s4) as a ROPE of its own would. Its result is stored as usual,
//! for its readers.

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Operand, ROPE, SRC_NAMES, operand, rope_call};
use crate::fuse::{next_computing, overlap};
use crate::wgsl::Binding;

/// A ROPE and the SET_ROWS that stores its result, and maybe the SET_ROWS
/// of the values after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    rope: TensorId,
    set_rows: TensorId,
    values: Option<TensorId>,
    /// The queries' ROPE before the keys', joining (the run then starts
    /// there).
    query: Option<TensorId>,
}

impl Run {
    /// The nodes after the first that a recording of the whole run takes
    /// in (to skip).
    fn rest(&self) -> [Option<TensorId>; 3] {
        match self.query {
            Some(_) => [Some(self.rope), Some(self.set_rows), self.values],
            None => [Some(self.set_rows), self.values, None],
        }
    }
}

/// The run that starts at ROPE node `id`, if any (see the module docs).
/// `counts` are the graph's [`Graph::use_counts`]; `end` the end of the
/// range being encoded.
pub(crate) fn plan(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
    if !crate::fuse::enabled() {
        return None;
    }
    if let Some(run) = keys_run(graph, counts, id, end) {
        return Some(run);
    }
    // The queries' ROPE, if the next node starts a keys' run rotated alike.
    let q = graph.node(id).ok()?;
    let k_id = TensorId::from_index(next_computing(graph, id, end)? as u32);
    let k = graph.node(k_id).ok()?;
    let run = keys_run(graph, counts, k_id, end)?;
    let (lq, lk) = (q.layout, k.layout);
    let (sq, sk) = (graph.layout(q.src(0)?).ok()?, graph.layout(k.src(0)?).ok()?);
    let alike = matches!(q.op, Op::Rope(_))
        && q.op == k.op
        && q.src(1) == k.src(1)
        && q.src(2) == k.src(2)
        && lq.dtype == DType::F32
        && lq.is_contiguous()
        && lq.ne[3] == 1
        && lq.ne[0] == lk.ne[0]
        && lq.ne[2] == lk.ne[2]
        && sq.dtype == sk.dtype
        && sq.nb[0] == sk.nb[0]
        && sq.ne[3] == 1;
    alike.then_some(Run {
        query: Some(id),
        ..run
    })
}

/// The run of the keys' ROPE `id` (see the module docs), without queries.
fn keys_run(graph: &Graph, counts: &[u32], id: TensorId, end: usize) -> Option<Run> {
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
        query: None,
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

/// Record `run` as one dispatch: the nodes after the first that it
/// recorded (to skip), or `None` (nothing recorded) where the cache
/// overlaps the ROPE's input, an operand has no memory, or the queries
/// cannot join as [`query_apart`] needs (the nodes are then recorded one
/// by one, the keys' run from the keys' ROPE). The values' SET_ROWS is
/// left out (recorded on its own) where its operands do not lie as
/// [`values_apart`] needs.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    run: &Run,
) -> Result<Option<[Option<TensorId>; 3]>> {
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
    let dst = Operand {
        layout,
        buffer: cache.buffer.clone(),
        offset: cache.offset,
    };
    let rows = cache.layout.ne[1];
    // The queries' source and result, where they join.
    let query = match run.query {
        Some(q) => {
            let node = graph.node(q)?;
            let src = node.src(0).map(get).transpose()?.flatten();
            let (Some(qs), Some(qd)) = (src, get(q)?) else {
                return Ok(None);
            };
            let mut written = vec![&cache];
            written.extend(values.as_ref().map(|(vc, _)| vc));
            let mut read = vec![&a, &pos, &ids];
            read.extend(ff.as_ref());
            read.extend(values.as_ref().map(|(_, vr)| vr));
            if !query_apart(&qs, &qd, &a, &written, &read)? {
                return Ok(None);
            }
            Some((qs, qd))
        }
        None => None,
    };
    let (mut call, items) = rope_call(&dst, [&a, &pos], ff.as_ref(), Some((&ids, rows)), &p)?;
    let u = |v: usize| crate::params::u32_of(v, "a fused ROPE's offset or size");
    let mut total = items;
    if let Some((vc, vr)) = &values {
        // Items from `items` on copy the value rows (see rope.wgsl's header).
        let len = vr.layout.ne[0];
        call.params.iu2[2] = 1;
        call.params.src[3][0] = [u(items)?, u(vr.offset)?, u(vr.layout.nb[1])?, u(len)?];
        call.params.src[2][0] = [u(vc.offset)?, u(vc.layout.nb[1])?, 0, 0];
        total = len
            .checked_mul(vr.layout.ne[1])
            .and_then(|n| n.checked_add(total))
            .ok_or_else(|| tessera::Error::Overflow("ROPE and SET_ROWS work items".into()))?;
    }
    if let Some((qs, qd)) = &query {
        // The first items rotate the queries into s4 (see rope.wgsl's header).
        let heads = qs.layout.ne[1];
        let q_items = items / rope.layout.ne[1] * heads;
        call.params.off2[3] = u(q_items)?;
        call.params.src[1][0] = [0, u(heads)?, u(qs.offset)?, u(qd.offset)?];
        call.params.src[1][1][1..].copy_from_slice(&[
            u(qs.layout.nb[1])?,
            u(qs.layout.nb[2])?,
            u(qd.layout.nb[1])?,
        ]);
        call.params.src[2][1][1] = u(qd.layout.nb[2])?;
        call.buffers[5] = qd.buffer.clone();
        // Every binding of the queries' buffer is written now.
        for k in 1..5 {
            if call.buffers[k] == qd.buffer {
                call.bindings[k] = Binding::plain(SRC_NAMES[k - 1], call.bindings[k].dtype);
            }
        }
        total = total
            .checked_add(q_items)
            .ok_or_else(|| tessera::Error::Overflow("ROPE work items".into()))?;
    }
    // The profile's label: the first ROPE's, then what joined it.
    let queries = if query.is_some() { "+ROPE" } else { "" };
    let values_label = if values.is_some() { "+SET_ROWS" } else { "" };
    batch.extend_label(&format!("{queries}+SET_ROWS{values_label}"));
    call.items(batch, core, "rope", ROPE, total)?;
    let mut rest = run.rest();
    if values.is_none() {
        // The values' SET_ROWS is recorded on its own.
        rest.iter_mut()
            .filter(|t| **t == run.values)
            .for_each(|t| *t = None);
    }
    Ok(Some(rest))
}

/// Whether the queries (source `qs`, result `qd`) can be rotated in the
/// keys' dispatch (keys' source `a`): the source in the keys' source's
/// buffer (the one source binding) and its elements at the same stride,
/// the result F32 of contiguous rows, apart from everything else the
/// dispatch writes (`written`) and reads (`read`), and apart from its
/// source or exactly over it (in place, as the graph allocator places a
/// ROPE over a product read by nothing else: each item reads the elements
/// it writes, as a ROPE of its own does).
fn query_apart(
    qs: &Operand,
    qd: &Operand,
    a: &Operand,
    written: &[&Operand],
    read: &[&Operand],
) -> Result<bool> {
    if qs.buffer != a.buffer || qs.layout.nb[0] != a.layout.nb[0] || qd.layout.nb[0] != 4 {
        return Ok(false);
    }
    let in_place = qd.offset == qs.offset && qd.layout.nb == qs.layout.nb;
    if overlap(qd, qs)? && !in_place {
        return Ok(false);
    }
    for o in written.iter().chain(read) {
        if overlap(qd, o)? {
            return Ok(false);
        }
    }
    for w in written {
        if overlap(w, qs)? {
            return Ok(false);
        }
    }
    Ok(true)
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

    /// Queries (4 heads), keys (2 heads) and values of one layer, the
    /// queries' and keys' ROPE alike (NeoX, frequency factors): with
    /// fusion, one dispatch; every node alone, four; the queries' result
    /// and both caches the same bits. Queries rotated with another base
    /// stay a dispatch of their own (two in all), their result that of
    /// the same ROPE unfused.
    #[test]
    fn the_queries_rope_joins_the_keys_dispatch() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let (d, hq, hk, tokens, slots) = (16, 4, 2, 3, 6);
        // `keep_q`: the queries' input an output too, so their result is
        // not placed over it (else it is: the in-place case).
        let run = |q_base: f32, fuse: bool, keep_q: bool| -> (Vec<u32>, Vec<u8>, Vec<u8>, u64) {
            let mut g = Graph::new();
            let q = g.input("q", DType::F32, &[d * hq, tokens]).unwrap();
            let k = g.input("k", DType::F32, &[d * hk, tokens]).unwrap();
            let v = g.input("v", DType::F32, &[d * hk, tokens]).unwrap();
            let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
            let ff = g.input("ff", DType::F32, &[d / 2]).unwrap();
            let at = g.input("at", DType::I64, &[tokens]).unwrap();
            let ck = g.input("ck", DType::F16, &[d * hk, slots]).unwrap();
            let cv = g.input("cv", DType::F16, &[d * hk, slots]).unwrap();
            let p = |base| RopeParams::new(d, RopeMode::Neox, base);
            let q3 = g.reshape(q, &[d, hq, tokens]).unwrap();
            let rq = g.rope(q3, pos, Some(ff), p(q_base)).unwrap();
            let k3 = g.reshape(k, &[d, hk, tokens]).unwrap();
            let rk = g.rope(k3, pos, Some(ff), p(10000.0)).unwrap();
            let k2 = g.reshape(rk, &[d * hk, tokens]).unwrap();
            let wk = g.set_rows(ck, k2, at).unwrap();
            let wv = g.set_rows(cv, v, at).unwrap();
            for t in [rq, wk, wv] {
                g.set_output(t).unwrap();
            }
            if keep_q {
                g.set_output(q).unwrap();
            }
            let stream = dev.new_wgpu_stream().unwrap();
            let (pl, _galloc) = crate::test_placement(&dev, &g);
            let at_q = |t| pl.get(t).unwrap().offset;
            assert_eq!(at_q(rq) == at_q(q), !keep_q, "the queries' result in place");
            let f = |n: usize, m: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| ((i * m) % 101) as f32 / 25.0 - 2.0)
                    .collect()
            };
            pl.tensor(&g, q)
                .unwrap()
                .write_f32(&f(d * hq * tokens, 29))
                .unwrap();
            pl.tensor(&g, k)
                .unwrap()
                .write_f32(&f(d * hk * tokens, 37))
                .unwrap();
            pl.tensor(&g, v)
                .unwrap()
                .write_f32(&f(d * hk * tokens, 53))
                .unwrap();
            let factors: Vec<f32> = (0..d / 2).map(|i| 1.0 + i as f32 * 0.25).collect();
            pl.tensor(&g, ff).unwrap().write_f32(&factors).unwrap();
            let pb: Vec<u8> = [7i32, 8, 30].iter().flat_map(|x| x.to_le_bytes()).collect();
            pl.tensor(&g, pos).unwrap().write(0, &pb).unwrap();
            let ab: Vec<u8> = [4i64, 0, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
            pl.tensor(&g, at).unwrap().write(0, &ab).unwrap();
            for c in [ck, cv] {
                let before: Vec<f32> = (0..d * hk * slots).map(|i| i as f32 * 0.25).collect();
                let mut h = vec![0u8; before.len() * 2];
                tessera::quant::from_f32(DType::F16, &before, &mut h).unwrap();
                pl.tensor(&g, c).unwrap().write(0, &h).unwrap();
            }
            super::super::fuse::force(Some(fuse));
            let n0 = crate::batch::counts::now().0;
            stream.compute(&g, &pl).unwrap();
            let n = crate::batch::counts::now().0 - n0;
            super::super::fuse::force(None);
            let qs = pl.tensor(&g, rq).unwrap().read_f32().unwrap();
            let read = |c| {
                let mut out = vec![0u8; d * hk * slots * 2];
                pl.tensor(&g, c).unwrap().read(0, &mut out).unwrap();
                out
            };
            (
                qs.iter().map(|x| x.to_bits()).collect(),
                read(ck),
                read(cv),
                n,
            )
        };
        let (q1, k1, v1, n1) = run(10000.0, true, false);
        assert_eq!(n1, 1, "one dispatch fused");
        for keep_q in [false, true] {
            let (qf, kf, vf, nf) = run(10000.0, true, keep_q);
            let (q0, k0, v0, n0) = run(10000.0, false, keep_q);
            assert_eq!(
                (nf, n0),
                (1, 4),
                "one dispatch fused, four apart ({keep_q})"
            );
            assert!(qf == q0 && q0 == q1, "the queries differ ({keep_q})");
            assert!(kf == k0 && k0 == k1, "the keys' cache differs ({keep_q})");
            assert!(vf == v0 && v0 == v1, "the values' cache differs ({keep_q})");
        }
        let (q2, k2, _, n2) = run(500.0, true, false);
        let (q3, _, _, _) = run(500.0, false, false);
        assert_eq!(n2, 2, "queries rotated otherwise: a dispatch of their own");
        assert!(q2 == q3 && k2 == k1, "the queries with another base");
        assert!(q2 != q1, "another base rotates otherwise");
    }
}
