//! Property test of the graph allocator on small random graphs: element-wise
//! ops, views, reshapes, transposes, copies, mul_mats, random INPUT/OUTPUT
//! flags, bound leaves, one or several buffer types, small chunks.
//! Graphs with a tensor larger than its buffer type allows must fail to plan.
//!
//! For every graph: `reserve_size` equals what `reserve_with` allocates; the
//! placement passes the independent liveness checker (no two live tensors
//! share bytes except a legal in-place hand-over; bound tensors untouched);
//! every chunk respects the maximum size; and allocating again takes the
//! fast path to the very same places.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod alloc_common;

use std::sync::Arc;

use alloc_common::*;
use proptest::prelude::*;
use tessera::{BufferType, DType, Graph, GraphAllocator, Placement, TensorId};

const SHAPES: [[usize; 2]; 7] = [[16, 4], [16, 1], [4, 4], [8, 2], [16, 16], [32, 1], [64, 8]];

#[derive(Clone, Debug)]
enum Step {
    Unary(usize, u8),
    Binary(usize, usize, u8),
    MulMat(usize, usize),
    Reshape(usize),
    View(usize, bool),
    Transpose(usize),
    Cpy(usize, usize),
}

#[derive(Clone, Debug)]
struct Spec {
    /// Shape index, INPUT flag, bound to user memory.
    leaves: Vec<(usize, bool, bool)>,
    /// The op, and whether its result is an OUTPUT.
    steps: Vec<(Step, bool)>,
    /// 0: one unlimited type; 1: one type with small chunks; 2: [A, B, A].
    bufts: u8,
    /// Buffer type choice per tensor (used modulo the type count).
    ids: Vec<usize>,
}

fn step() -> impl Strategy<Value = Step> {
    let i = || 0usize..64;
    prop_oneof![
        3 => (i(), 0u8..6).prop_map(|(a, k)| Step::Unary(a, k)),
        3 => (i(), i(), 0u8..3).prop_map(|(a, b, k)| Step::Binary(a, b, k)),
        1 => (i(), i()).prop_map(|(a, b)| Step::MulMat(a, b)),
        1 => i().prop_map(Step::Reshape),
        1 => (i(), any::<bool>()).prop_map(|(a, h)| Step::View(a, h)),
        1 => i().prop_map(Step::Transpose),
        1 => (i(), i()).prop_map(|(a, b)| Step::Cpy(a, b)),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(
            (
                0..SHAPES.len(),
                prop::bool::weighted(0.3),
                prop::bool::weighted(0.2),
            ),
            1..6,
        ),
        prop::collection::vec((step(), prop::bool::weighted(0.15)), 1..30),
        0u8..3,
        prop::collection::vec(0usize..3, 64),
    )
        .prop_map(|(leaves, steps, bufts, ids)| Spec {
            leaves,
            steps,
            bufts,
            ids,
        })
}

/// Build the graph; ops the builder rejects are skipped.
fn build(spec: &Spec) -> (Graph, Vec<TensorId>) {
    let mut g = Graph::new();
    let mut ids = Vec::new();
    let mut bound = Vec::new();
    for (k, &(s, input, bind)) in spec.leaves.iter().enumerate() {
        let id = if input {
            g.input(&format!("in{k}"), DType::F32, &SHAPES[s]).unwrap()
        } else {
            g.new_tensor(DType::F32, &SHAPES[s]).unwrap()
        };
        if bind {
            bound.push(id);
        }
        ids.push(id);
    }
    for (st, output) in &spec.steps {
        let pick = |i: &usize| ids[*i % ids.len()];
        let r = match st {
            Step::Unary(a, k) => {
                let a = pick(a);
                match k {
                    0 => g.silu(a),
                    1 => g.scale(a, 0.5),
                    2 => g.rms_norm(a, 1e-5),
                    3 => g.soft_max(a),
                    4 => g.dup(a),
                    _ => g.cont(a),
                }
            }
            Step::Binary(a, b, k) => {
                let (a, b) = (pick(a), pick(b));
                match k {
                    0 => g.add(a, b),
                    1 => g.mul(a, b),
                    _ => g.div(a, b),
                }
            }
            Step::MulMat(a, b) => g.mul_mat(pick(a), pick(b)),
            Step::Reshape(a) => {
                let a = pick(a);
                let n = g.node(a).unwrap().layout.nelements();
                g.reshape(a, &[n])
            }
            Step::View(a, second) => {
                let a = pick(a);
                let half = g.node(a).unwrap().layout.nelements() / 2;
                g.view_1d(a, half, if *second { half * 4 } else { 0 })
            }
            Step::Transpose(a) => g.transpose(pick(a)),
            Step::Cpy(a, b) => g.cpy(pick(a), pick(b)),
        };
        if let Ok(id) = r {
            if *output {
                g.set_output(id).unwrap();
            }
            ids.push(id);
        }
    }
    (g, bound)
}

fn buffer_types(kind: u8) -> Vec<Arc<dyn BufferType>> {
    match kind {
        0 => vec![host()],
        1 => vec![host_max("SMALL", 4096)],
        _ => {
            let a = host();
            vec![a.clone(), host_max("B", 4096), a]
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_are_planned_safely(spec in spec()) {
        let (g, binds) = build(&spec);
        let bufts = buffer_types(spec.bufts);
        let n = bufts.len();
        let ids: Vec<usize> = (0..g.len()).map(|i| spec.ids[i % spec.ids.len()] % n).collect();
        let user = host();
        let mut p = Placement::new(&g);
        let bound: Vec<_> = binds.iter().map(|&id| (id, bind_fresh(&g, &mut p, id, &user))).collect();

        let mut alloc = GraphAllocator::with_buffer_types(bufts.clone());
        // A planned tensor larger than its buffer type's maximum: both the
        // size query and the reservation fail with OutOfMemory.
        let too_big = g.ids().any(|id| {
            g.node(id).unwrap().view_src.is_none()
                && !binds.contains(&id)
                && g.node(id).unwrap().layout.nbytes().next_multiple_of(64) > bufts[ids[id.index()]].max_size()
        });
        if too_big {
            let size = alloc.reserve_size(&g, &p, Some(&ids));
            prop_assert!(matches!(size, Err(tessera::Error::OutOfMemory { .. })), "{:?}", size);
            let res = alloc.reserve_with(&g, &p, &ids);
            prop_assert!(matches!(res, Err(tessera::Error::OutOfMemory { .. })), "{:?}", res);
            return Ok(());
        }
        let sizes = alloc.reserve_size(&g, &p, Some(&ids)).unwrap();
        alloc.reserve_with(&g, &p, &ids).unwrap();
        let got: Vec<usize> = (0..n).map(|i| alloc.buffer_size(i).unwrap()).collect();
        prop_assert_eq!(&sizes, &got);
        let total: usize = sizes.iter().sum();
        prop_assert!(total >= live_lower_bound(&g, &binds, 64));
        prop_assert!(total <= no_reuse_size(&g, &binds, 64));
        for (i, b) in bufts.iter().enumerate() {
            for c in alloc.chunk_buffers(i).unwrap() {
                prop_assert!(c.size() <= b.max_size());
            }
        }

        alloc.alloc_graph(&g, &mut p).unwrap();
        prop_assert_eq!(alloc.plan_count(), 1);
        if let Err(e) = check_placement(&g, &p, &bound) {
            return Err(TestCaseError::fail(e));
        }
        for id in g.ids() {
            let pl = place(&p, &g, id);
            prop_assert!(pl.offset + g.node(id).unwrap().layout.nbytes() <= pl.buffer.size());
        }

        // Again, with a fresh placement: the fast path, the same places.
        let mut p2 = Placement::new(&g);
        for (id, pl) in &bound {
            p2.set(&g, *id, pl.clone()).unwrap();
        }
        alloc.alloc_graph(&g, &mut p2).unwrap();
        prop_assert_eq!(alloc.plan_count(), 1);
        for id in g.ids() {
            prop_assert!(same_place(&place(&p, &g, id), &place(&p2, &g, id)));
        }
    }
}
