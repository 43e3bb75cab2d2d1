//! A multi-layer transformer (tessera-testkit's `Block`) split layer-wise
//! between the local CPU and a remote CPU on loopback by the scheduler:
//! over several steps (the later ones re-send the same graphs, so the
//! remote recomputes its stored graph), the output equals the CPU alone,
//! byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::{THREADS, cpu, remote, server};
use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Placement, Scheduler, SchedulerOptions, StreamOptions, TensorSet,
};
use tessera_testkit::block::{Block, BlockShape};

fn stream(d: &Arc<dyn Device>) -> Arc<dyn tessera::Stream> {
    let o = if d.family_name() == "RPC" {
        StreamOptions::new()
    } else {
        StreamOptions::new().threads(THREADS)
    };
    d.new_stream(&o).unwrap()
}

/// Bind the weights of layers `< first_remote` on `local`, the rest on
/// `far`.
fn bind(
    b: &Block,
    p: &mut Placement,
    local: &Arc<dyn Device>,
    far: &Arc<dyn Device>,
    first_remote: usize,
) -> Vec<TensorSet> {
    let mut sets = Vec::new();
    for (dev, want_remote) in [(local, false), (far, true)] {
        let ids: Vec<_> = b
            .weights
            .iter()
            .copied()
            .filter(|&w| {
                let name = &b.graph.node(w).unwrap().name;
                let layer: usize = name.split('.').nth(1).unwrap().parse().unwrap();
                (layer >= first_remote) == want_remote
            })
            .collect();
        if ids.is_empty() {
            continue;
        }
        let layouts: Vec<_> = ids
            .iter()
            .map(|&w| b.graph.node(w).unwrap().layout)
            .collect();
        let set = alloc_tensors(&dev.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
        for (&w, t) in ids.iter().zip(&set.tensors) {
            p.bind(&b.graph, w, t).unwrap();
            t.write_f32(&b.weight_values(w).unwrap()).unwrap();
        }
        sets.push(set);
    }
    sets
}

fn outputs(devs: &[Arc<dyn Device>], b: &Block, first_remote: usize) -> (Vec<Vec<u8>>, usize) {
    let mut sc = Scheduler::new(
        devs.iter().map(stream).collect(),
        SchedulerOptions::default(),
    )
    .unwrap();
    let mut p = Placement::new(&b.graph);
    let far = &devs[0];
    let _sets = bind(b, &mut p, &cpu(), far, first_remote);
    sc.alloc_graph(&b.graph, &mut p).unwrap();
    let mut outs = Vec::new();
    for step in 0..3 {
        p.tensor(&b.graph, b.x)
            .unwrap()
            .write_f32(&b.input_values(step).unwrap())
            .unwrap();
        sc.compute(&b.graph, &p).unwrap();
        outs.push(p.tensor(&b.graph, b.out).unwrap().to_bytes().unwrap());
    }
    (outs, sc.n_splits())
}

#[test]
fn a_model_split_layer_wise_over_local_and_remote_equals_local() {
    let h = server();
    let dev = remote(&h);
    for wtype in [DType::F32, DType::Q8_0] {
        let b = Block::build(BlockShape {
            n_embd: 64,
            n_ff: 128,
            n_tokens: 7,
            n_layers: 4,
            wtype,
        })
        .unwrap();
        let (want, one) = outputs(&[cpu()], &b, usize::MAX);
        assert_eq!(one, 1);
        for first_remote in [0, 2] {
            let (got, splits) = outputs(&[dev.clone(), cpu()], &b, first_remote);
            if first_remote == 2 {
                assert!(splits >= 2, "{wtype}: no split between CPU and remote");
            }
            assert_eq!(got, want, "{wtype}, remote from layer {first_remote}");
        }
    }
}
