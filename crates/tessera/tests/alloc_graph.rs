//! Graph allocator: in-place rules, inputs and outputs, reserve/alloc
//! agreement, chunking, the fast path and errors. Placements are checked by
//! the independent liveness checker of `alloc_common`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod alloc_common;

use std::sync::Arc;

use alloc_common::*;
use tessera::{BufferType, DType, Error, Graph, GraphAllocator, Placement, TensorId};

const F32: DType = DType::F32;

/// Allocate `g` on a fresh allocator over `buft` with `binds` bound to user
/// memory; check the placement; return it with the allocator.
fn run(g: &Graph, buft: &Arc<dyn BufferType>, binds: &[TensorId]) -> (Placement, GraphAllocator) {
    let user = host();
    let mut p = Placement::new(g);
    let bound: Vec<_> = binds
        .iter()
        .map(|&id| (id, bind_fresh(g, &mut p, id, &user)))
        .collect();
    let mut alloc = GraphAllocator::new(buft.clone());
    ok(alloc.alloc_graph(g, &mut p));
    if let Err(e) = check_placement(g, &p, &bound) {
        panic!("{e}");
    }
    (p, alloc)
}

fn t(g: &mut Graph, ne: &[usize]) -> TensorId {
    ok(g.new_tensor(F32, ne))
}

fn at_same_place(g: &Graph, p: &Placement, a: TensorId, b: TensorId) -> bool {
    same_place(&place(p, g, a), &place(p, g, b))
}

#[test]
fn add_reuses_the_single_use_product_in_place() {
    let mut g = Graph::new();
    let (a, b) = (t(&mut g, &[16, 4]), t(&mut g, &[16, 4]));
    let c = t(&mut g, &[16, 1]);
    let m = ok(g.mul(a, b));
    let s = ok(g.add(m, c));
    ok(g.set_output(s));
    let (p, _) = run(&g, &host(), &[a, b]);
    assert!(at_same_place(&g, &p, s, m));
    // c is broadcast (another layout): never a candidate.
    assert!(!overlap(&g, &p, s, c));
}

#[test]
fn no_in_place_over_a_parent_with_two_consumers() {
    let mut g = Graph::new();
    let (a, b) = (t(&mut g, &[16, 4]), t(&mut g, &[16, 4]));
    let c = t(&mut g, &[16, 1]);
    let m = ok(g.mul(a, b));
    let s = ok(g.add(m, c));
    let u = ok(g.scale(m, 2.0));
    ok(g.set_output(s));
    ok(g.set_output(u));
    let (p, _) = run(&g, &host(), &[a, b]);
    assert!(!overlap(&g, &p, s, m));
    // By the time u is computed, u is m's last reader: ggml hands m over.
    assert!(at_same_place(&g, &p, u, m));
}

#[test]
fn no_in_place_over_an_output() {
    let mut g = Graph::new();
    let (a, b) = (t(&mut g, &[16, 4]), t(&mut g, &[16, 4]));
    let m = ok(g.mul(a, b));
    ok(g.set_output(m));
    let s = ok(g.scale(m, 3.0));
    let s2 = ok(g.scale(s, 3.0));
    let (p, _) = run(&g, &host(), &[a, b]);
    assert!(!overlap(&g, &p, s, m));
    assert!(!overlap(&g, &p, s2, m));
    // s is not an output: s2 takes it over.
    assert!(at_same_place(&g, &p, s2, s));
}

#[test]
fn no_in_place_for_mul_mat() {
    let mut g = Graph::new();
    let (w, x) = (t(&mut g, &[16, 16]), t(&mut g, &[16, 16]));
    let h = ok(g.scale(x, 0.5));
    let y = ok(g.mul_mat(w, h));
    ok(g.set_output(y));
    assert_eq!(g.node(y).unwrap().layout, g.node(h).unwrap().layout);
    let (p, _) = run(&g, &host(), &[w, x]);
    assert!(!overlap(&g, &p, y, h));
}

#[test]
fn in_place_over_a_view_at_offset_zero_only() {
    let mut g = Graph::new();
    let (a, b) = (t(&mut g, &[16, 4]), t(&mut g, &[16, 4]));
    let r = ok(g.mul(a, b));
    let v = ok(g.reshape(r, &[64]));
    let y = ok(g.scale(v, 2.0));
    ok(g.set_output(y));
    let (p, _) = run(&g, &host(), &[a, b]);
    assert!(at_same_place(&g, &p, y, r));

    let mut g = Graph::new();
    let (a, b) = (t(&mut g, &[16, 4]), t(&mut g, &[16, 4]));
    let r = ok(g.mul(a, b));
    let v = ok(g.view_1d(r, 32, 128));
    let y = ok(g.scale(v, 2.0));
    ok(g.set_output(y));
    let (p, _) = run(&g, &host(), &[a, b]);
    assert!(!overlap(&g, &p, y, r));
}

#[test]
fn an_unbound_leaf_is_planned_and_may_be_taken_over() {
    // ggml semantics: leaves the user did not bind are the allocator's,
    // including inputs; a single-use one can be computed over in place.
    let mut g = Graph::new();
    let x = ok(g.input("x", F32, &[16, 4]));
    let y = ok(g.scale(x, 2.0));
    ok(g.set_output(y));
    let (p, _) = run(&g, &host(), &[]);
    assert!(at_same_place(&g, &p, y, x));
}

#[test]
fn inputs_never_overlap_the_intermediates_computed_before_their_use() {
    let mut g = Graph::new();
    let a = t(&mut g, &[16, 4]);
    let x = ok(g.input("x", F32, &[16, 4]));
    let mut cur = a;
    let mut temps = Vec::new();
    for _ in 0..4 {
        cur = ok(g.mul(cur, a));
        temps.push(cur);
    }
    let y = ok(g.add(cur, x));
    ok(g.set_output(y));
    let (p, _) = run(&g, &host(), &[a]);
    for &t in &temps {
        assert!(
            !overlap(&g, &p, x, t),
            "input x overlaps {}",
            g.node(t).unwrap().label(t)
        );
    }
}

#[test]
fn outputs_are_never_reused() {
    let mut g = Graph::new();
    let a = t(&mut g, &[16, 4]);
    let o = ok(g.mul(a, a));
    ok(g.set_output(o));
    let mut cur = ok(g.add(o, a));
    let mut later = vec![cur];
    for _ in 0..5 {
        cur = ok(g.mul(cur, a));
        let d = ok(g.dup(cur));
        later.extend([cur, d]);
        cur = d;
    }
    let (p, _) = run(&g, &host(), &[a]);
    for &l in &later {
        assert!(
            !overlap(&g, &p, o, l),
            "output overlaps {}",
            g.node(l).unwrap().label(l)
        );
    }
}

#[test]
fn the_root_of_an_output_view_is_never_reused() {
    let mut g = Graph::new();
    let a = t(&mut g, &[16, 4]);
    let r = ok(g.mul(a, a));
    let v = ok(g.reshape(r, &[64]));
    ok(g.set_output(v));
    let w = ok(g.scale(v, 2.0));
    let mut cur = ok(g.dup(w));
    let mut later = vec![w, cur];
    for _ in 0..3 {
        cur = ok(g.dup(cur));
        later.push(cur);
    }
    let (p, _) = run(&g, &host(), &[a]);
    for &l in &later {
        assert!(
            !overlap(&g, &p, r, l),
            "output view's root overlaps {}",
            g.node(l).unwrap().label(l)
        );
    }
}

/// Graphs of every shape the planner must handle, with the ids to bind.
fn sample_graphs(width: usize) -> Vec<(&'static str, Graph, Vec<TensorId>)> {
    let mut out = Vec::new();

    let mut g = Graph::new();
    let a = t(&mut g, &[width, 4]);
    let mut cur = a;
    for i in 0..6 {
        cur = if i % 2 == 0 {
            ok(g.silu(cur))
        } else {
            ok(g.dup(cur))
        };
    }
    ok(g.set_output(cur));
    out.push(("chain", g, vec![]));

    let mut g = Graph::new();
    let x = ok(g.input("x", F32, &[width, 4]));
    let l = ok(g.silu(x));
    let r = ok(g.gelu(x));
    let j = ok(g.mul(l, r));
    let k = ok(g.add(j, x));
    ok(g.set_output(k));
    out.push(("diamond", g, vec![]));

    let mut g = Graph::new();
    let x = t(&mut g, &[width, 8]);
    let bias = t(&mut g, &[width, 1]);
    let scale = t(&mut g, &[1, 8]);
    let y = ok(g.add(x, bias));
    let z = ok(g.mul(y, scale));
    let n = ok(g.rms_norm(z, 1e-5));
    ok(g.set_output(n));
    out.push(("broadcast", g, vec![bias]));

    let mut g = Graph::new();
    let w1 = t(&mut g, &[width, 2 * width]);
    let w2 = t(&mut g, &[2 * width, width]);
    let x = ok(g.input("x", F32, &[width, 3]));
    let h = ok(g.mul_mat(w1, x));
    let h = ok(g.silu(h));
    let y = ok(g.mul_mat(w2, h));
    let y = ok(g.add(y, x));
    ok(g.set_output(y));
    out.push(("mlp", g, vec![w1, w2]));

    let mut g = Graph::new();
    let x = ok(g.input("x", F32, &[width, 4]));
    let q = ok(g.scale(x, 0.5));
    let qt = ok(g.transpose(q));
    let qc = ok(g.cont(qt));
    let flat = ok(g.reshape(qc, &[4 * width]));
    let half = ok(g.view_1d(flat, 2 * width, 0));
    let o1 = ok(g.silu(half));
    let rest = ok(g.view_1d(flat, 2 * width, 8 * width));
    let o2 = ok(g.mul(rest, o1));
    ok(g.set_output(o2));
    let cache = t(&mut g, &[2 * width]);
    let c = ok(g.cpy(o1, cache));
    ok(g.set_output(c));
    out.push(("views", g, vec![cache]));

    let mut g = Graph::new();
    let a = t(&mut g, &[width, 2]);
    let mut outs = Vec::new();
    let mut cur = a;
    for i in 0..8 {
        cur = ok(g.soft_max(cur));
        if i % 3 == 0 {
            ok(g.set_output(cur));
            outs.push(cur);
        }
        cur = ok(g.dup(cur));
    }
    out.push(("outputs", g, vec![a]));
    out
}

#[test]
fn reserve_size_is_what_reserve_allocates() {
    for (buft, width) in [(host(), 16), (host_max("SMALL", 4096), 64)] {
        for (name, g, binds) in sample_graphs(width) {
            let user = host();
            let mut p = Placement::new(&g);
            for &id in &binds {
                bind_fresh(&g, &mut p, id, &user);
            }
            let mut alloc = GraphAllocator::new(buft.clone());
            let sizes = ok(alloc.reserve_size(&g, &p, None));
            ok(alloc.reserve(&g, &p));
            assert_eq!(sizes, vec![ok(alloc.buffer_size(0))], "{name}");
            let chunks: usize = ok(alloc.chunk_buffers(0)).iter().map(|b| b.size()).sum();
            assert_eq!(chunks, sizes[0], "{name}");
            assert_eq!(alloc.planned_sizes(), sizes, "{name}");
            for b in ok(alloc.chunk_buffers(0)) {
                assert!(b.size() <= buft.max_size(), "{name}: chunk of {}", b.size());
                assert_eq!(b.usage(), tessera::BufferUsage::Compute);
            }
            let lower = live_lower_bound(&g, &binds, buft.alignment());
            let upper = no_reuse_size(&g, &binds, buft.alignment());
            assert!(
                lower <= sizes[0] && sizes[0] <= upper,
                "{name}: {lower} <= {} <= {upper}",
                sizes[0]
            );
            let bound: Vec<_> = binds.iter().map(|&id| (id, place(&p, &g, id))).collect();
            ok(alloc.alloc_graph(&g, &mut p));
            assert_eq!(
                alloc.plan_count(),
                1,
                "{name}: alloc_graph after reserve re-planned"
            );
            if let Err(e) = check_placement(&g, &p, &bound) {
                panic!("{name}: {e}");
            }
        }
    }
}

#[test]
fn reserve_size_per_buffer_type_with_shared_types() {
    let (a, b) = (host(), host_max("B", 4096));
    for (name, g, binds) in sample_graphs(16) {
        let ids: Vec<usize> = (0..g.len()).map(|i| i % 3).collect();
        let user = host();
        let mut p = Placement::new(&g);
        for &id in &binds {
            bind_fresh(&g, &mut p, id, &user);
        }
        let mut alloc = GraphAllocator::with_buffer_types(vec![a.clone(), b.clone(), a.clone()]);
        let sizes = ok(alloc.reserve_size(&g, &p, Some(&ids)));
        ok(alloc.reserve_with(&g, &p, &ids));
        let got: Vec<usize> = (0..3).map(|i| ok(alloc.buffer_size(i))).collect();
        assert_eq!(sizes, got, "{name}");
        assert_eq!(got[2], 0, "{name}: a duplicate buffer type reports 0");
        assert_eq!(
            ok(alloc.chunk_buffers(2)).len(),
            ok(alloc.chunk_buffers(0)).len()
        );
        let bound: Vec<_> = binds.iter().map(|&id| (id, place(&p, &g, id))).collect();
        ok(alloc.alloc_graph(&g, &mut p));
        if let Err(e) = check_placement(&g, &p, &bound) {
            panic!("{name}: {e}");
        }
        for id in g.ids() {
            if g.node(id).unwrap().view_src.is_none() && !binds.contains(&id) {
                let want = if ids[id.index()] == 1 { "B" } else { "CPU" };
                assert_eq!(
                    place(&p, &g, id).buffer.name(),
                    want,
                    "{name}: {}",
                    g.node(id).unwrap().label(id)
                );
            }
        }
    }
}

#[test]
fn chunked_plans_keep_every_tensor_inside_one_small_chunk() {
    let mut g = Graph::new();
    let xs: Vec<_> = (0..8)
        .map(|i| ok(g.input(&format!("x{i}"), F32, &[256])))
        .collect();
    let mut acc = xs[0];
    for &x in &xs[1..] {
        acc = ok(g.add(acc, x));
        acc = ok(g.dup(acc));
    }
    ok(g.set_output(acc));
    let buft = host_max("SMALL", 4096);
    let (p, alloc) = run(&g, &buft, &[]);
    let chunks = ok(alloc.chunk_buffers(0));
    assert!(
        chunks.len() >= 2,
        "8 KiB of inputs in 4 KiB chunks: {} chunk(s)",
        chunks.len()
    );
    for id in g.ids() {
        let pl = place(&p, &g, id);
        assert!(chunks.iter().any(|c| same(c, &pl.buffer)));
        assert!(pl.buffer.size() <= 4096);
        assert!(pl.offset + g.node(id).unwrap().layout.nbytes() <= pl.buffer.size());
        assert_eq!(pl.offset % 64, 0);
    }
}

#[test]
fn a_tensor_larger_than_a_chunk_is_an_error_naming_it() {
    let mut g = Graph::new();
    let x = ok(g.input("x", F32, &[256]));
    let big = ok(g.concat(x, x, 0));
    let huge = ok(g.concat(big, big, 0));
    let huge = ok(g.concat(huge, big, 0));
    ok(g.set_name(huge, "too_big"));
    let mut alloc = GraphAllocator::new(host_max("SMALL", 4096));
    let p = Placement::new(&g);
    for r in [
        alloc.reserve_size(&g, &p, None).map(|_| ()),
        alloc.reserve(&g, &p),
    ] {
        match r {
            Err(Error::OutOfMemory { detail, .. }) => {
                assert!(detail.contains("too_big"), "{detail}")
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
}

fn layered(layers: usize, width: usize) -> (Graph, Vec<TensorId>) {
    let mut g = Graph::new();
    let w = t(&mut g, &[width, width]);
    let mut cur = ok(g.input("x", F32, &[width, 2]));
    for _ in 0..layers {
        let h = ok(g.mul_mat(w, cur));
        let h = ok(g.silu(h));
        cur = ok(g.add(h, cur));
    }
    ok(g.set_output(cur));
    (g, vec![w])
}

fn places(g: &Graph, p: &Placement) -> Vec<(usize, usize)> {
    g.ids()
        .map(|id| {
            let pl = place(p, g, id);
            (Arc::as_ptr(&pl.buffer) as *const u8 as usize, pl.offset)
        })
        .collect()
}

#[test]
fn alloc_graph_fast_path_and_replanning() {
    let user = host();
    let mut alloc = GraphAllocator::new(host());
    let alloc_fresh = |alloc: &mut GraphAllocator, g: &Graph, binds: &[TensorId]| {
        let mut p = Placement::new(g);
        let bound: Vec<_> = binds
            .iter()
            .map(|&id| (id, bind_fresh(g, &mut p, id, &user)))
            .collect();
        ok(alloc.alloc_graph(g, &mut p));
        check_placement(g, &p, &bound).unwrap();
        p
    };
    let (g, w) = layered(3, 32);
    let p1 = alloc_fresh(&mut alloc, &g, &w);
    assert_eq!(alloc.plan_count(), 1);
    let size1 = ok(alloc.buffer_size(0));

    // Same graph, fresh placement: same offsets, no new plan.
    let p2 = alloc_fresh(&mut alloc, &g, &w);
    assert_eq!(alloc.plan_count(), 1);
    let unbound: Vec<_> = g.ids().filter(|id| !w.contains(id)).collect();
    for &id in &unbound {
        assert!(same_place(&place(&p1, &g, id), &place(&p2, &g, id)));
    }
    // Reusing the placement re-places the allocator's own tensors.
    let mut p3 = p2.clone();
    ok(alloc.alloc_graph(&g, &mut p3));
    assert_eq!(places(&g, &p3), places(&g, &p2));
    assert_eq!(alloc.plan_count(), 1);

    // Same structure, smaller tensors: fits the plan.
    let (small, w) = layered(3, 16);
    alloc_fresh(&mut alloc, &small, &w);
    assert_eq!(alloc.plan_count(), 1);

    // More nodes: re-planned, buffers grow.
    let (deeper, w) = layered(5, 32);
    alloc_fresh(&mut alloc, &deeper, &w);
    assert_eq!(alloc.plan_count(), 2);
    // Wider: re-planned again, and the buffer grew.
    let (wider, w) = layered(5, 64);
    alloc_fresh(&mut alloc, &wider, &w);
    assert_eq!(alloc.plan_count(), 3);
    assert!(ok(alloc.buffer_size(0)) > size1);
    // Back to the first graph: a new plan (other node count); the buffer
    // does not shrink.
    let grown = ok(alloc.buffer_size(0));
    let (g, w) = layered(3, 32);
    alloc_fresh(&mut alloc, &g, &w);
    assert_eq!(alloc.plan_count(), 4);
    assert_eq!(ok(alloc.buffer_size(0)), grown);
}

#[test]
fn a_changed_flag_or_unbound_tensor_triggers_a_new_plan() {
    let user = host();
    let (g, w) = layered(2, 16);
    let mut alloc = GraphAllocator::new(host());
    let mut p = Placement::new(&g);
    bind_fresh(&g, &mut p, w[0], &user);
    ok(alloc.alloc_graph(&g, &mut p));
    assert_eq!(alloc.plan_count(), 1);
    // The weight is no longer bound: it needs planned memory.
    let mut p = Placement::new(&g);
    ok(alloc.alloc_graph(&g, &mut p));
    assert_eq!(alloc.plan_count(), 2);
    check_placement(&g, &p, &[]).unwrap();
    // An intermediate becomes an output: it must not be reused any more.
    let mut g2 = g.clone();
    let mid = g2.op_ids().nth(1).unwrap();
    ok(g2.set_output(mid));
    let mut p = Placement::new(&g2);
    ok(alloc.alloc_graph(&g2, &mut p));
    assert_eq!(alloc.plan_count(), 3);
    check_placement(&g2, &p, &[]).unwrap();
}

#[derive(Debug)]
struct RefusingBuft {
    inner: Arc<dyn BufferType>,
    limit: usize,
}

impl BufferType for RefusingBuft {
    fn name(&self) -> &str {
        "REFUSING"
    }
    fn alloc_buffer(&self, size: usize) -> tessera::Result<Arc<dyn tessera::Buffer>> {
        if size > self.limit {
            return Err(Error::OutOfMemory {
                device: "REFUSING".into(),
                requested: size,
                detail: "device memory exhausted".into(),
            });
        }
        self.inner.alloc_buffer(size)
    }
    fn alignment(&self) -> usize {
        64
    }
    fn device(&self) -> Option<Arc<dyn tessera::Device>> {
        None
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn errors_instead_of_aborts() {
    let (g, w) = layered(2, 16);
    let p = Placement::new(&g);
    let mut alloc = GraphAllocator::new(host());
    assert!(matches!(
        alloc.reserve_with(&g, &p, &[0; 3]),
        Err(Error::OutOfBounds(_))
    ));
    let mut ids = vec![0; g.len()];
    ids[3] = 7;
    match alloc.reserve_with(&g, &p, &ids) {
        Err(Error::NotFound(m)) => assert!(m.contains("buffer type 7"), "{m}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(alloc.buffer_size(1).is_err());
    assert!(alloc.chunk_buffers(1).is_err());

    // A view placed in user memory while its root is not.
    let mut g2 = Graph::new();
    let a = t(&mut g2, &[16, 4]);
    let r = ok(g2.reshape(a, &[64]));
    let s = ok(g2.silu(r));
    ok(g2.set_output(s));
    let mut p2 = Placement::new(&g2);
    let user = ok(host().alloc_buffer(4096));
    ok(p2.set(
        &g2,
        r,
        tessera::Place {
            buffer: user,
            offset: 0,
        },
    ));
    assert!(matches!(
        alloc.alloc_graph(&g2, &mut p2),
        Err(Error::InvalidLayout(_))
    ));

    // The device refuses the planned size: OutOfMemory with context; the
    // size query still answers.
    let refusing: Arc<dyn BufferType> = Arc::new(RefusingBuft {
        inner: host(),
        limit: 100,
    });
    let mut alloc = GraphAllocator::new(refusing);
    let mut p = Placement::new(&g);
    bind_fresh(&g, &mut p, w[0], &host());
    let need = ok(alloc.reserve_size(&g, &p, None));
    assert!(need[0] > 100);
    match alloc.alloc_graph(&g, &mut p) {
        Err(Error::OutOfMemory { device, detail, .. }) => {
            assert_eq!(device, "REFUSING");
            assert!(detail.contains("graph allocator"), "{detail}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert_eq!(ok(alloc.buffer_size(0)), 0);
}
