//! The scheduler's planning cost (issue 10's benchmark): a 32-layer
//! transformer graph (~930 nodes) over two devices (a decorator refusing
//! SOFT_MAX, then the CPU), planned from scratch (assign, split, memory
//! plan) and through the reuse path (same structure: key comparison and the
//! allocator's fast path), and the compute time of a decode step of a
//! 1B-shaped model (16 layers, n_embd 2048, n_ff 8192, Q4_0, one token) on
//! the CPU with 2 threads, to put the plan in proportion. Also prints the
//! compute bytes planned against the sum of every intermediate's size.
//!
//! Run: `cargo bench -p tessera-cpu --bench sched`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, OnceLock};

use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Graph, Placement, Scheduler, SchedulerOptions, StreamOptions,
    TensorId,
};
use tessera_testkit::block::{Block, BlockShape};
use tessera_testkit::decorate::Refusing;

fn main() {
    divan::main();
}

fn shape_32() -> BlockShape {
    BlockShape {
        n_embd: 2048,
        n_ff: 8192,
        n_tokens: 1,
        n_layers: 32,
        wtype: DType::Q4_0,
    }
}

/// The two devices (one decorator for the whole run: its memory kind is
/// its identity).
fn devices() -> Vec<Arc<dyn Device>> {
    static DEC: OnceLock<Arc<dyn Device>> = OnceLock::new();
    let dec = DEC.get_or_init(|| {
        Refusing::new(tessera_cpu::device(), "DEC", |g: &Graph, id: TensorId| {
            g.node(id).unwrap().op.display_name() == "SOFT_MAX"
        })
    });
    vec![dec.clone(), tessera_cpu::device()]
}

fn scheduler(devs: &[Arc<dyn Device>]) -> Scheduler {
    let streams = devs
        .iter()
        .map(|d| d.new_stream(&StreamOptions::new().threads(2)).unwrap())
        .collect();
    Scheduler::new(streams, SchedulerOptions::default()).unwrap()
}

/// The 32-layer graph with its weights placed (in memory, not written) on
/// the first device; built once.
fn planned() -> &'static (Block, Placement, tessera::TensorSet) {
    static P: OnceLock<(Block, Placement, tessera::TensorSet)> = OnceLock::new();
    P.get_or_init(|| {
        let b = Block::build(shape_32()).unwrap();
        let mut p = Placement::new(&b.graph);
        let layouts: Vec<_> = b
            .weights
            .iter()
            .map(|&w| b.graph.node(w).unwrap().layout)
            .collect();
        let set = alloc_tensors(&devices()[0].buffer_type(), &layouts, BufferUsage::Weights).unwrap();
        for (&w, t) in b.weights.iter().zip(&set.tensors) {
            p.bind(&b.graph, w, t).unwrap();
        }
        let intermediates: usize = b
            .graph
            .nodes()
            .iter()
            .filter(|n| !n.op.is_leaf() && !n.op.is_view())
            .map(|n| n.layout.nbytes())
            .sum();
        let mut sc = scheduler(&devices());
        let sizes = sc.reserve_size(&b.graph, &p).unwrap();
        eprintln!(
            "32 layers: {} nodes, {} splits, {} copies; compute bytes planned {:?} = {} of {} bytes of intermediates ({:.1} %)",
            b.graph.len(),
            sc.n_splits(),
            sc.n_copies_made(),
            sizes,
            sizes.iter().sum::<usize>(),
            intermediates,
            100.0 * sizes.iter().sum::<usize>() as f64 / intermediates as f64
        );
        (b, p, set)
    })
}

/// A full plan: assignment, splitting and memory planning of a graph the
/// scheduler has not seen.
#[divan::bench(sample_count = 20)]
fn full_plan_32_layers(bencher: divan::Bencher) {
    let (b, p, _) = planned();
    let devs = devices();
    let mut sc = scheduler(&devs);
    bencher.bench_local(|| {
        sc.reset();
        sc.reserve_size(&b.graph, p).unwrap()
    });
}

/// The reuse path: the same structure again (what every decode step after
/// the first takes): `alloc_graph` compares the graph with the plan's key
/// and the user memory with the last allocation's, and places nothing anew.
#[divan::bench(sample_count = 20)]
fn reuse_32_layers(bencher: divan::Bencher) {
    let (b, p, _) = planned();
    let devs = devices();
    let mut sc = scheduler(&devs);
    let mut place = p.clone();
    sc.alloc_graph(&b.graph, &mut place).unwrap();
    let plans = sc.plan_count();
    // A decode loop keeps its placement from one step to the next.
    bencher.bench_local(|| sc.alloc_graph(&b.graph, &mut place).unwrap());
    assert_eq!(sc.plan_count(), plans, "the reuse path did not plan");
}

/// A decode step of a 1B-shaped model (16 layers, one token, Q4_0) on the
/// CPU with 2 threads: the compute the plan is weighed against.
#[divan::bench(sample_count = 10)]
fn decode_step_1b_q4_0_cpu(bencher: divan::Bencher) {
    let b = Block::build(BlockShape {
        n_layers: 16,
        ..shape_32()
    })
    .unwrap();
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let mut sc = scheduler(std::slice::from_ref(&cpu));
    let mut p = Placement::new(&b.graph);
    let layouts: Vec<_> = b
        .weights
        .iter()
        .map(|&w| b.graph.node(w).unwrap().layout)
        .collect();
    let set = alloc_tensors(&cpu.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    for (&w, t) in b.weights.iter().zip(&set.tensors) {
        p.bind(&b.graph, w, t).unwrap();
    }
    sc.alloc_graph(&b.graph, &mut p).unwrap();
    bencher.bench_local(|| sc.compute(&b.graph, &p).unwrap());
}
