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
//! for its readers. Where its one reader is a SCALE right after the run
//! (Gemma 3 scales its queries there), not an output, of an F32 result of
//! the same shape and contiguous rows, the queries' items store the
//! scaled result in the SCALE's place instead, computed as the SCALE
//! computes it (`x * scale + bias`), and the SCALE is not recorded.

use std::sync::Arc;

use tessera::{DType, Flags, Graph, Layout, Op, Placement, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Operand, SRC_NAMES, operand};
use crate::device::Core;
use crate::encode::{ROPE, rope_call};
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
    /// The SCALE of the queries' result after the run, joining.
    query_scale: Option<TensorId>,
}

impl Run {
    /// The nodes after the first that a recording of the whole run takes
    /// in (to skip).
    fn rest(&self) -> crate::compute::Taken {
        match self.query {
            Some(_) => [
                Some(self.rope),
                Some(self.set_rows),
                self.values,
                self.query_scale,
            ],
            None => [Some(self.set_rows), self.values, None, None],
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
        query_scale: query_scale(graph, counts, id, run.values.unwrap_or(run.set_rows), end),
        ..run
    })
}

/// The SCALE of the queries' ROPE `q` that can join a run ending at node
/// `last` (see the module docs): the next node that computes anything,
/// the ROPE's one reader, neither an output, F32 results of one shape.
fn query_scale(
    graph: &Graph,
    counts: &[u32],
    q: TensorId,
    last: TensorId,
    end: usize,
) -> Option<TensorId> {
    let rope = graph.node(q).ok()?;
    let j = next_computing(graph, last, end)?;
    let scale = graph.nodes().get(j)?;
    let ok = matches!(scale.op, Op::Scale { .. })
        && scale.src(0) == Some(q)
        && counts.get(q.index()) == Some(&1)
        && !rope.flags.contains(Flags::OUTPUT)
        && scale.view_src.is_none()
        && scale.layout.dtype == DType::F32
        && scale.layout.ne == rope.layout.ne
        && scale.layout.nb[0] == 4;
    ok.then(|| TensorId::from_index(j as u32))
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
        query_scale: None,
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
) -> Result<Option<crate::compute::Taken>> {
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
        && values_apart(
            &cache,
            &vc,
            &vr,
            [Some(&a), Some(&pos), Some(&ids), ff.as_ref()],
        )?
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
    // (The queries' result: the SCALE's, where it joins.)
    let query_scale = match run.query_scale {
        Some(t) => match graph.node(t)?.op {
            Op::Scale { scale, bias } => Some((t, scale, bias)),
            _ => None,
        },
        None => None,
    };
    let query = match run.query {
        Some(q) => {
            let node = graph.node(q)?;
            let src = node.src(0).map(get).transpose()?.flatten();
            let (Some(qs), Some(qd)) = (src, get(query_scale.map_or(q, |s| s.0))?) else {
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
        if let Some((_, scale, bias)) = query_scale {
            // Stored as the SCALE would (see rope.wgsl's header).
            call.params.src[1][0][0] = 1;
            call.params.src[2][0][2] = scale.to_bits();
            call.params.src[2][0][3] = bias.to_bits();
        }
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
    let scale_label = if query_scale.is_some() { "+SCALE" } else { "" };
    batch.extend_label(&format!("{queries}+SET_ROWS{values_label}{scale_label}"));
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
/// dispatch (keys' cache `kc`; `read`: the ROPE's input first, then its
/// positions, ids and factors): the cache in the keys' cache's buffer (the
/// one destination binding) with its elements at the same stride, the
/// rows in the ROPE input's buffer (the source binding), and nothing
/// written overlapping anything read or written by another item.
fn values_apart(
    kc: &Operand,
    vc: &Operand,
    vr: &Operand,
    read: [Option<&Operand>; 4],
) -> Result<bool> {
    let [Some(a), ..] = read else {
        return Ok(false);
    };
    if vc.buffer != kc.buffer || vr.buffer != a.buffer || vc.layout.nb[0] != kc.layout.nb[0] {
        return Ok(false);
    }
    for o in read.iter().flatten().chain([&kc, &vr]) {
        if overlap(vc, o)? {
            return Ok(false);
        }
    }
    Ok(!overlap(kc, vr)?)
}

#[cfg(test)]
#[path = "fuse_rope_tests.rs"]
mod tests;
