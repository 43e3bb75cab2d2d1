//! The scheduler over the GPU device and the CPU (lavapipe in CI): a
//! transformer graph with its weights on the GPU, whole or with chosen ops
//! pinned to the CPU (forcing splits and copies both ways), agrees with the
//! same graph on the CPU alone within the harness's MUL_MAT threshold
//! (NMSE 5e-4), over several computes with changing inputs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{
    DType, Device, GraphAllocator, Placement, Reason, Scheduler, SchedulerOptions, Stream,
    StreamOptions,
};
use tessera_testkit::block::{Block, BlockShape};

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (f64::from(*g) - f64::from(*w)).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| f64::from(*w).powi(2)).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

fn bind(b: &Block, dev: &Arc<dyn Device>, p: &mut Placement) -> tessera::TensorSet {
    b.bind_weights(dev.as_ref(), p).unwrap()
}

fn cpu_reference(b: &Block, step: u64) -> Vec<f32> {
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    let mut p = Placement::new(&b.graph);
    let _w = bind(b, &cpu, &mut p);
    GraphAllocator::new(cpu.buffer_type())
        .alloc_graph(&b.graph, &mut p)
        .unwrap();
    p.tensor(&b.graph, b.x)
        .unwrap()
        .write_f32(&b.input_values(step).unwrap())
        .unwrap();
    let s = cpu.new_stream(&StreamOptions::new().threads(2)).unwrap();
    s.compute(&b.graph, &p).unwrap();
    p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap()
}

#[test]
fn a_transformer_over_gpu_and_cpu_matches_the_cpu() {
    let Some(gpu) = common::device("a_transformer_over_gpu_and_cpu_matches_the_cpu") else {
        return;
    };
    let gpu: Arc<dyn Device> = gpu;
    let cpu: Arc<dyn Device> = tessera_cpu::device();
    for (wtype, pinned, n_copies) in [
        (DType::F32, &[][..], 1),
        (DType::Q8_0, &["SOFT_MAX"][..], 1),
        (DType::Q4_0, &["SOFT_MAX", "RMS_NORM", "ADD"][..], 1),
        (DType::Q8_0, &["SOFT_MAX"][..], 2),
    ] {
        let b = Block::build(BlockShape {
            n_embd: 64,
            n_ff: 128,
            n_tokens: 5,
            n_layers: 2,
            wtype,
        })
        .unwrap();
        let streams: Vec<Arc<dyn Stream>> = vec![
            gpu.new_stream(&StreamOptions::new()).unwrap(),
            cpu.new_stream(&StreamOptions::new().threads(2)).unwrap(),
        ];
        let opts = SchedulerOptions {
            n_copies,
            ..Default::default()
        };
        let mut sc = Scheduler::new(streams, opts).unwrap();
        let mut pins = 0;
        for id in b.graph.op_ids() {
            if pinned.contains(&b.graph.node(id).unwrap().op.display_name()) {
                sc.pin(id, 1).unwrap();
                pins += 1;
            }
        }
        let mut p = Placement::new(&b.graph);
        let _w = bind(&b, &gpu, &mut p);
        for step in 0..3 {
            sc.alloc_graph(&b.graph, &mut p).unwrap();
            p.tensor(&b.graph, b.x)
                .unwrap()
                .write_f32(&b.input_values(step).unwrap())
                .unwrap();
            sc.compute(&b.graph, &p).unwrap();
            let got = p.tensor(&b.graph, b.out).unwrap().read_f32().unwrap();
            let e = nmse(&got, &cpu_reference(&b, step));
            assert!(
                e < 5e-4,
                "{wtype} pinned {pinned:?} n_copies {n_copies} step {step}: NMSE {e}"
            );
        }
        assert_eq!(sc.plan_count(), 1);
        for id in b.graph.op_ids() {
            let n = b.graph.node(id).unwrap();
            let (d, why) = sc.device_of(id).unwrap();
            if pinned.contains(&n.op.display_name()) {
                assert_eq!((d, why), (1, Reason::Pin), "{}", n.label(id));
            } else if !n.op.is_view() {
                assert_eq!(d, 0, "{} runs on the GPU", n.label(id));
            }
        }
        if pins == 0 {
            // The input is the only copy.
            assert_eq!((sc.n_splits(), sc.n_copies_made()), (1, 1), "{wtype}");
        } else {
            assert!(sc.n_splits() > 2 && sc.n_copies_made() >= sc.n_splits() - 1);
        }
        let sizes = sc.reserve_size(&b.graph, &p).unwrap();
        assert_eq!(
            sizes,
            vec![sc.buffer_size(0).unwrap(), sc.buffer_size(1).unwrap()]
        );
    }
}
