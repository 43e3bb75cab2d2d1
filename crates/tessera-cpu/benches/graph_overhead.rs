//! Per-node overhead of the CPU executor: a chain of 1000 tiny ADDs (16
//! floats each), the shape of ggml's graph-overhead measurement (ggml's CPU
//! backend on this kind of machine: about 0.09 µs per node on 1 thread and
//! 0.41 µs on 2; measured live beside Tessera: 0.045 and 0.25-0.30 µs).
//! Divide the reported time by 1000 for the cost per node; it includes the
//! plan-cache check (validation and resolution run on the first compute
//! only), the kernel calls and, with 2 threads, the barriers (none between
//! tiny nodes: thread 0 runs them back to back).
//!
//! Run: `cargo bench -p tessera-cpu --bench graph_overhead`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use tessera::{DType, Device, Graph, Place, Placement, Stream};

fn main() {
    divan::main();
}

/// `x_{k+1} = x_k + one`, `n` times, every tensor in one host buffer.
fn add_chain(n: usize) -> (Graph, Placement) {
    let mut g = Graph::new();
    let x0 = g.new_tensor(DType::F32, &[16]).unwrap();
    let one = g.new_tensor(DType::F32, &[16]).unwrap();
    let mut x = x0;
    for _ in 0..n {
        x = g.add(x, one).unwrap();
    }
    let buffer = tessera_cpu::device()
        .buffer_type()
        .alloc_buffer(64 * g.len())
        .unwrap();
    let mut p = Placement::new(&g);
    for id in g.ids() {
        p.set(
            &g,
            id,
            Place {
                buffer: buffer.clone(),
                offset: 64 * id.index(),
            },
        )
        .unwrap();
    }
    (g, p)
}

/// The whole compute on one thread (no barrier cost).
#[divan::bench]
fn chain_of_1000_adds_1_thread(bencher: divan::Bencher) {
    chain_of_1000_adds(bencher, 1);
}

/// The whole compute on two threads (a barrier per node).
#[divan::bench]
fn chain_of_1000_adds_2_threads(bencher: divan::Bencher) {
    chain_of_1000_adds(bencher, 2);
}

fn chain_of_1000_adds(bencher: divan::Bencher, threads: usize) {
    let (graph, placement) = add_chain(1000);
    let stream: Arc<dyn Stream> = tessera_cpu::device()
        .new_stream(&tessera::StreamOptions::new().threads(threads))
        .unwrap();
    bencher.bench_local(|| stream.compute(&graph, &placement).unwrap());
}

/// The validation part alone: `supports_op` on each of the 1000 nodes.
#[divan::bench]
fn supports_op_of_1000_adds(bencher: divan::Bencher) {
    let (graph, _) = add_chain(1000);
    let dev = tessera_cpu::device();
    bencher.bench_local(|| {
        graph
            .op_ids()
            .filter(|&id| dev.supports_op(&graph, id))
            .count()
    });
}

/// `Placement::check_complete` over the graph.
#[divan::bench]
fn check_complete_of_1000_adds(bencher: divan::Bencher) {
    let (graph, placement) = add_chain(1000);
    bencher.bench_local(|| placement.check_complete(&graph, 0..graph.len()).unwrap());
}
