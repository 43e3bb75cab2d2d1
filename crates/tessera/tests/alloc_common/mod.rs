//! Shared helpers of the allocator tests: buffer types, and an independent
//! checker of graph placements.
//!
//! The checker knows nothing of the allocator's algorithm. From the graph
//! alone it derives each memory root's live range — from its creation (-1
//! for leaves, which are written before the graph runs; the op's position
//! otherwise) to its last use by any op (through any view), or to the end of
//! time for OUTPUT roots and roots of OUTPUT views — and from the placement
//! each root's bytes. Two roots in the same buffer whose bytes intersect
//! must have disjoint live ranges, except for a legal in-place hand-over:
//! the later root is computed, by an op that may run in place, at the very
//! step the earlier one is last used, from a source over the earlier root
//! that has its exact address and layout.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::{
    Buffer, BufferType, Flags, Graph, HostBufferType, Layout, Place, Placement, Result, TensorId,
};

/// The unlimited host buffer type.
pub fn host() -> Arc<dyn BufferType> {
    HostBufferType::new("CPU", usize::MAX, None)
}

/// A host buffer type whose allocations are limited to `max` bytes.
pub fn host_max(name: &str, max: usize) -> Arc<dyn BufferType> {
    HostBufferType::new(name, max, None)
}

/// Same buffer object?
pub fn same(a: &Arc<dyn Buffer>, b: &Arc<dyn Buffer>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// The place of `id` (panics in tests if missing).
pub fn place(p: &Placement, g: &Graph, id: TensorId) -> Place {
    match p.get(id) {
        Some(pl) => pl.clone(),
        None => panic!("tensor {} has no place", g.node(id).unwrap().label(id)),
    }
}

/// Same buffer and offset.
pub fn same_place(a: &Place, b: &Place) -> bool {
    same(&a.buffer, &b.buffer) && a.offset == b.offset
}

/// Byte ranges of `a` and `b` intersect (same buffer, non-empty overlap).
pub fn overlap(g: &Graph, p: &Placement, a: TensorId, b: TensorId) -> bool {
    let (pa, pb) = (place(p, g, a), place(p, g, b));
    let (na, nb) = (
        g.node(a).unwrap().layout.nbytes(),
        g.node(b).unwrap().layout.nbytes(),
    );
    same(&pa.buffer, &pb.buffer)
        && na > 0
        && nb > 0
        && pa.offset < pb.offset + nb
        && pb.offset < pa.offset + na
}

/// Bind `id` to fresh user memory of `buft`; returns the place.
pub fn bind_fresh(g: &Graph, p: &mut Placement, id: TensorId, buft: &Arc<dyn BufferType>) -> Place {
    let set = tessera::alloc_tensors(
        buft,
        &[g.node(id).unwrap().layout],
        tessera::BufferUsage::Weights,
    )
    .expect("user memory");
    p.bind(g, id, &set.tensors[0]).expect("bind");
    place(p, g, id)
}

/// Live range `[birth, death]` of every memory root (None for views).
pub fn live_ranges(g: &Graph) -> Vec<Option<(i64, i64)>> {
    let n = g.len();
    let root = |id: TensorId| g.node(id).unwrap().view_src.unwrap_or(id);
    let mut r: Vec<Option<(i64, i64)>> = g
        .ids()
        .map(|id| {
            let node = &g.node(id).unwrap();
            if node.view_src.is_some() {
                None
            } else if node.is_leaf() {
                Some((-1, -1))
            } else {
                Some((id.index() as i64, id.index() as i64))
            }
        })
        .collect();
    let touch = |rid: TensorId, t: i64, r: &mut Vec<Option<(i64, i64)>>| {
        if let Some((_, d)) = r[rid.index()].as_mut() {
            *d = (*d).max(t);
        }
    };
    for id in g.op_ids() {
        let t = id.index() as i64;
        for s in g.node(id).unwrap().src_ids() {
            touch(root(s), t, &mut r);
        }
        if let Some(v) = g.node(id).unwrap().view_src {
            touch(v, t, &mut r);
        }
    }
    for id in g.ids() {
        if g.node(id).unwrap().flags.contains(Flags::OUTPUT) {
            touch(root(id), i64::MAX, &mut r);
        }
    }
    assert_eq!(r.len(), n);
    r
}

/// Is `later` legally computed in place over `earlier` (see the module docs)?
fn legal_inplace(g: &Graph, p: &Placement, earlier: TensorId, later: TensorId) -> bool {
    let node = &g.node(later).unwrap();
    if !node.op.can_inplace() {
        return false;
    }
    let pl = place(p, g, later);
    node.src_ids().any(|s| {
        g.node(s).unwrap().view_src.unwrap_or(s) == earlier
            && same_place(&place(p, g, s), &pl)
            && g.node(s).unwrap().layout == node.layout
    })
}

/// Check a complete placement of `g`: every tensor placed, views at their
/// root plus offset, bound tensors where they were bound, and no two live
/// planned roots sharing bytes. `bound` lists the user's places.
pub fn check_placement(
    g: &Graph,
    p: &Placement,
    bound: &[(TensorId, Place)],
) -> std::result::Result<(), String> {
    for id in g.ids() {
        if p.get(id).is_none() {
            return Err(format!("{} has no place", g.node(id).unwrap().label(id)));
        }
    }
    for (id, pl) in bound {
        if !same_place(&place(p, g, *id), pl) {
            return Err(format!(
                "bound tensor {} was moved",
                g.node(*id).unwrap().label(*id)
            ));
        }
    }
    for id in g.ids() {
        if let Some(root) = g.node(id).unwrap().view_src {
            let (pv, pr) = (place(p, g, id), place(p, g, root));
            if !same(&pv.buffer, &pr.buffer)
                || pv.offset != pr.offset + g.node(id).unwrap().view_offs
            {
                return Err(format!(
                    "view {} is not at its root plus offset",
                    g.node(id).unwrap().label(id)
                ));
            }
        }
    }
    let is_bound = |id: TensorId| bound.iter().any(|(b, _)| *b == id);
    let live = live_ranges(g);
    let roots: Vec<TensorId> = g
        .ids()
        .filter(|&id| live[id.index()].is_some() && !is_bound(id))
        .collect();
    for (k, &a) in roots.iter().enumerate() {
        for &b in &roots[k + 1..] {
            let (Some((ba, da)), Some((bb, db))) = (live[a.index()], live[b.index()]) else {
                continue;
            };
            if !overlap(g, p, a, b) || da < bb || db < ba {
                continue;
            }
            let ok =
                (da == bb && legal_inplace(g, p, a, b)) || (db == ba && legal_inplace(g, p, b, a));
            if !ok {
                return Err(format!(
                    "{} live [{ba}, {da}] and {} live [{bb}, {db}] share bytes at {}+{} / {}+{}",
                    g.node(a).unwrap().label(a),
                    g.node(b).unwrap().label(b),
                    place(p, g, a).offset,
                    g.node(a).unwrap().layout.nbytes(),
                    place(p, g, b).offset,
                    g.node(b).unwrap().layout.nbytes(),
                ));
            }
        }
    }
    Ok(())
}

/// The largest number of bytes that must be live at once, padded to
/// `align`: at each step, the roots created by then and needed after it.
/// Any correct plan of the unbound roots needs at least this much.
pub fn live_lower_bound(g: &Graph, bound: &[TensorId], align: usize) -> usize {
    let live = live_ranges(g);
    let mut best = 0;
    for t in -1..g.len() as i64 {
        let sum: usize = g
            .ids()
            .filter(|id| !bound.contains(id))
            .filter_map(|id| live[id.index()].map(|r| (id, r)))
            .filter(|&(_, (b, d))| b <= t && d > t)
            .map(|(id, _)| g.node(id).unwrap().layout.nbytes().next_multiple_of(align))
            .sum();
        best = best.max(sum);
    }
    best
}

/// Sum of the padded sizes of all unbound roots: a plan that reuses nothing.
pub fn no_reuse_size(g: &Graph, bound: &[TensorId], align: usize) -> usize {
    g.ids()
        .filter(|&id| g.node(id).unwrap().view_src.is_none() && !bound.contains(&id))
        .map(|id| g.node(id).unwrap().layout.nbytes().next_multiple_of(align))
        .sum()
}

/// A contiguous F32 layout.
pub fn f32_layout(ne: &[usize]) -> Layout {
    Layout::contiguous(tessera::DType::F32, ne).expect("layout")
}

/// Unwrap helper that keeps test code short.
pub fn ok<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e}"),
    }
}
