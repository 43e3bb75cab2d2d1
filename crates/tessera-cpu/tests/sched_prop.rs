//! Property test of the scheduler: random graphs (element-wise ops, norms,
//! softmax, matrix products, transposed copies) with weights on either
//! device and random sets of ops refused by the decorator device. For each:
//! every node runs on a device that supports it, consecutive splits are on
//! different devices unless a weight copy started a new one, the result is
//! identical to the CPU alone (both devices run the CPU's kernels), and
//! `reserve_size` on a fresh scheduler equals what `reserve` allocates.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use proptest::prelude::*;
use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Graph, Placement, Scheduler, SchedulerOptions, StreamOptions,
    TensorId,
};
use tessera_testkit::decorate::Refusing;
use tessera_testkit::rng::Rng;

const OPS: [&str; 7] = [
    "ADD", "MUL", "SCALE", "SILU", "RMS_NORM", "MUL_MAT", "SOFT_MAX",
];

struct Case {
    g: Graph,
    x: TensorId,
    weights: Vec<TensorId>,
    out: TensorId,
}

fn random_graph(rng: &mut Rng, n_ops: usize) -> Case {
    let (e, t) = (16, 4);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[e, t]).unwrap();
    let weights: Vec<TensorId> = (0..3)
        .map(|_| g.new_tensor(DType::F32, &[e, e]).unwrap())
        .collect();
    let mut pool = vec![x];
    for _ in 0..n_ops {
        let pick = |rng: &mut Rng, pool: &[TensorId]| pool[rng.below(pool.len() as u64) as usize];
        let a = pick(rng, &pool);
        let b = pick(rng, &pool);
        let y = match rng.below(8) {
            0 => g.add(a, b).unwrap(),
            1 => g.mul(a, b).unwrap(),
            2 => g.scale(a, 0.5).unwrap(),
            3 => g.silu(a).unwrap(),
            4 => g.rms_norm(a, 1e-5).unwrap(),
            5 => {
                let w = weights[rng.below(3) as usize];
                g.mul_mat(w, a).unwrap()
            }
            6 => g.soft_max(a).unwrap(),
            _ => {
                let tr = g.transpose(a).unwrap();
                let c = g.cont(tr).unwrap();
                let back = g.transpose(c).unwrap();
                g.cont(back).unwrap()
            }
        };
        pool.push(y);
    }
    // Sum everything still unused into the output, so every node matters.
    let mut out = *pool.last().unwrap();
    for &p in pool.iter().rev().skip(1).take(3) {
        out = g.add(out, p).unwrap();
    }
    g.set_output(out).unwrap();
    Case { g, x, weights, out }
}

fn run(c: &Case, devs: &[Arc<dyn Device>], weights_on: &[usize]) -> (Vec<f32>, Scheduler) {
    let streams = devs
        .iter()
        .map(|d| d.new_stream(&StreamOptions::new().threads(1)).unwrap())
        .collect();
    let mut sc = Scheduler::new(streams, SchedulerOptions::default()).unwrap();
    let mut p = Placement::new(&c.g);
    let mut keep = Vec::new();
    for (k, &w) in c.weights.iter().enumerate() {
        let dev = &devs[weights_on[k].min(devs.len() - 1)];
        let set = alloc_tensors(
            &dev.buffer_type(),
            &[c.g.node(w).unwrap().layout],
            BufferUsage::Weights,
        )
        .unwrap();
        p.bind(&c.g, w, &set.tensors[0]).unwrap();
        let vals: Vec<f32> = (0..256)
            .map(|i| ((i * 37 + k * 11) % 29) as f32 / 29.0 - 0.5)
            .collect();
        set.tensors[0].write_f32(&vals).unwrap();
        keep.push(set);
    }
    sc.alloc_graph(&c.g, &mut p).unwrap();
    let xs: Vec<f32> = (0..64).map(|i| (i % 13) as f32 / 13.0 - 0.4).collect();
    p.tensor(&c.g, c.x).unwrap().write_f32(&xs).unwrap();
    sc.compute(&c.g, &p).unwrap();
    let out = p.tensor(&c.g, c.out).unwrap().read_f32().unwrap();
    (out, sc)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn scheduled_random_graphs_match_the_cpu(
        seed in any::<u64>(),
        n_ops in 1usize..24,
        refused_mask in 0u32..(1 << OPS.len()),
        weights_on in proptest::collection::vec(0usize..2, 3),
    ) {
        let mut rng = Rng::new(seed);
        let c = random_graph(&mut rng, n_ops);
        let refused: Vec<&'static str> = OPS
            .iter()
            .enumerate()
            .filter(|(i, _)| refused_mask & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect();
        let dec: Arc<dyn Device> = Refusing::new(tessera_cpu::device(), "DEC", move |g: &Graph, id: TensorId| {
            refused.contains(&g.node(id).unwrap().op.display_name())
        });
        let cpu: Arc<dyn Device> = tessera_cpu::device();
        let (want, _) = run(&c, std::slice::from_ref(&cpu), &[0, 0, 0]);
        let (got, sc) = run(&c, &[dec.clone(), cpu.clone()], &weights_on);
        prop_assert_eq!(&got, &want);
        let devs = [dec.clone(), cpu.clone()];
        for id in c.g.op_ids() {
            let n = c.g.node(id).unwrap();
            if n.op.is_view() {
                continue;
            }
            let (d, why) = sc.device_of(id).unwrap();
            prop_assert!(devs[d].supports_op(&c.g, id), "{} on {} ({why:?})", n.label(id), devs[d].name());
        }
        for pair in sc.splits().windows(2) {
            let weight_copy = pair[1].inputs.iter().any(|i| c.weights.contains(&i.source));
            prop_assert!(pair[0].device != pair[1].device || weight_copy);
        }
        // reserve_size on a fresh scheduler is what reserve then allocates.
        let streams = devs
            .iter()
            .map(|d| d.new_stream(&StreamOptions::new().threads(1)).unwrap())
            .collect();
        let mut fresh = Scheduler::new(streams, SchedulerOptions::default()).unwrap();
        let mut p = Placement::new(&c.g);
        let mut keep = Vec::new();
        for (k, &w) in c.weights.iter().enumerate() {
            let set = alloc_tensors(
                &devs[weights_on[k]].buffer_type(),
                &[c.g.node(w).unwrap().layout],
                BufferUsage::Weights,
            )
            .unwrap();
            p.bind(&c.g, w, &set.tensors[0]).unwrap();
            keep.push(set);
        }
        let sizes = fresh.reserve_size(&c.g, &p).unwrap();
        fresh.reserve(&c.g, &p).unwrap();
        prop_assert_eq!(sizes, vec![fresh.buffer_size(0).unwrap(), fresh.buffer_size(1).unwrap()]);
    }
}
