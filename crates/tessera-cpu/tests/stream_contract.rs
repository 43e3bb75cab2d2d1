//! The CPU device against the stream contract, across devices, and node by
//! node against the reference device with `compare_graph`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{
    BufferUsage, DType, Device, Graph, Placement, RopeMode, RopeParams, compare_graph,
    compare_graph_nodes, graph_copy,
};
use tessera_testkit::sabotage::{SkipEvents, skip_events};
use tessera_testkit::{GatedDevice, ReferenceDevice, contract};

fn cpu() -> Arc<dyn Device> {
    tessera_cpu::device()
}

#[test]
fn cpu_keeps_the_stream_contract() {
    contract::check_all(&cpu()).unwrap();
}

#[test]
fn copies_between_the_cpu_and_another_device_are_ordered() {
    let r: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_copy_between(&cpu(), &r).unwrap();
    contract::check_copy_between(&r, &cpu()).unwrap();
}

/// The CPU is synchronous: a no-op record or wait on its own events cannot
/// be observed (`contract::check_events` says what it checks instead). Its
/// wait on *another* device's event must block, though: with the gated
/// device (nothing runs until a host wait needs it) recording, a CPU stream
/// that did not wait would synchronize before the event signals. The same
/// check with the CPU's `wait_event` turned into a no-op fails.
#[test]
fn a_cpu_stream_waits_on_an_asynchronous_device_event() {
    let gated: Arc<dyn Device> = GatedDevice::new();
    contract::check_events_between(&gated, &cpu()).unwrap();
    contract::check_events_between(&cpu(), &gated).unwrap();
    let skip = SkipEvents {
        record: false,
        wait: true,
    };
    let e = contract::check_events_between(&gated, &skip_events(cpu(), skip)).unwrap_err();
    assert!(e.contains("the wait did not hold B back"), "{e}");
}

/// A small attention block: norm, projections, rope, attention, MLP.
fn block() -> (Graph, Vec<tessera::TensorId>) {
    let (d, heads, t) = (64usize, 4usize, 5usize);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[d, t]).unwrap();
    let pos = g.input("pos", DType::I32, &[t]).unwrap();
    let wq = g.new_tensor(DType::Q8_0, &[d, d]).unwrap();
    let wk = g.new_tensor(DType::F16, &[d, d]).unwrap();
    let w1 = g.new_tensor(DType::Q4_0, &[d, 2 * d]).unwrap();
    let w2 = g.new_tensor(DType::F32, &[d, d]).unwrap();
    let n = g.rms_norm(x, 1e-6).unwrap();
    let q = g.mul_mat(wq, n).unwrap();
    let k = g.mul_mat(wk, n).unwrap();
    let q = g.reshape(q, &[d / heads, heads, t]).unwrap();
    let k = g.reshape(k, &[d / heads, heads, t]).unwrap();
    let p = RopeParams::new(d / heads, RopeMode::Neox, 10000.0);
    let q = g.rope(q, pos, None, p).unwrap();
    let k = g.rope(k, pos, None, p).unwrap();
    let q = g.permute(q, [0, 2, 1, 3]).unwrap();
    let k = g.permute(k, [0, 2, 1, 3]).unwrap();
    let kq = g.mul_mat(k, q).unwrap();
    let kq = g.soft_max_ext(kq, None, 0.25, 0.0).unwrap();
    let h = g.mul_mat(w1, n).unwrap();
    let h = g.glu(h, tessera::GluOp::SwiGlu, false).unwrap();
    let o = g.mul_mat(w2, h).unwrap();
    let o = g.add(o, x).unwrap();
    g.set_output(o).unwrap();
    g.set_output(kq).unwrap();
    let leaves = vec![x, pos, wq, wk, w1, w2];
    (g, leaves)
}

fn fill(
    g: &Graph,
    placement: &mut Placement,
    leaves: &[tessera::TensorId],
    device: &Arc<dyn Device>,
) -> tessera::alloc::TensorSet {
    let layouts: Vec<_> = leaves
        .iter()
        .map(|&id| g.node(id).unwrap().layout)
        .collect();
    let set = alloc_tensors(&device.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    for (i, (&id, t)) in leaves.iter().zip(&set.tensors).enumerate() {
        placement.bind(g, id, t).unwrap();
        let n = t.layout().nelements();
        if t.dtype() == DType::I32 {
            t.write_slice(&(0..n as i32).map(|p| p * 3).collect::<Vec<_>>())
                .unwrap();
        } else {
            let v: Vec<f32> = (0..n)
                .map(|j| (((j * 7 + i * 13) % 41) as f32 - 20.0) / 25.0)
                .collect();
            t.write_f32(&v).unwrap();
        }
    }
    set
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        num += (*x as f64 - *y as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    num / den.max(f64::MIN_POSITIVE)
}

#[test]
fn compare_graph_checks_every_node_against_the_reference_device() {
    let device = cpu();
    let (g, leaves) = block();
    let mut placement = Placement::new(&g);
    let _inputs = fill(&g, &mut placement, &leaves, &device);
    let mut galloc = GraphAllocator::new(device.buffer_type());
    galloc.alloc_graph(&g, &mut placement).unwrap();
    let s1 = device.new_stream(&tessera::StreamOptions::new()).unwrap();
    let r: Arc<dyn Device> = ReferenceDevice::new();
    let s2 = r.new_stream(&tessera::StreamOptions::new()).unwrap();
    let mut compared = 0;
    let mut worst = 0f64;
    let done = compare_graph(s1.as_ref(), s2.as_ref(), &g, &placement, |id, t1, t2| {
        compared += 1;
        let e = nmse(&t1.read_f32().unwrap(), &t2.read_f32().unwrap());
        assert!(
            e < 5e-4,
            "node {} ({}) differs: nmse {e}",
            id,
            g.node(id).unwrap().op.name()
        );
        worst = worst.max(e);
        true
    })
    .unwrap();
    assert!(done);
    let views = g
        .op_ids()
        .filter(|&id| g.node(id).unwrap().op.is_view())
        .count();
    assert_eq!(
        compared,
        g.op_ids().count() - views,
        "every non-view op node compared"
    );

    // Stopping early: the callback's `false` ends the comparison.
    let mut seen = 0;
    let done = compare_graph(s1.as_ref(), s2.as_ref(), &g, &placement, |_, _, _| {
        seen += 1;
        seen < 3
    })
    .unwrap();
    assert!(!done);
    assert_eq!(seen, 3);

    // Whole-graph comparison of chosen nodes.
    let outs: Vec<_> = g
        .ids()
        .filter(|&id| g.node(id).unwrap().flags.contains(tessera::Flags::OUTPUT))
        .collect();
    let mut n_out = 0;
    assert!(
        compare_graph_nodes(
            s1.as_ref(),
            s2.as_ref(),
            &g,
            &placement,
            &outs,
            |_, t1, t2| {
                n_out += 1;
                nmse(&t1.read_f32().unwrap(), &t2.read_f32().unwrap()) < 5e-4
            }
        )
        .unwrap()
    );
    assert_eq!(n_out, 2);
}

#[test]
fn graph_copy_duplicates_every_tensor_on_the_target_device() {
    let device = cpu();
    let (g, leaves) = block();
    let mut placement = Placement::new(&g);
    let _inputs = fill(&g, &mut placement, &leaves, &device);
    let mut galloc = GraphAllocator::new(device.buffer_type());
    galloc.alloc_graph(&g, &mut placement).unwrap();
    let r: Arc<dyn Device> = ReferenceDevice::new();
    let copy = graph_copy(&g, &placement, &r).unwrap();
    for &id in &leaves {
        let a = placement.tensor(&g, id).unwrap().to_bytes().unwrap();
        let b = copy.placement.tensor(&g, id).unwrap().to_bytes().unwrap();
        assert_eq!(a, b, "leaf {id} copied byte for byte");
        assert_eq!(
            copy.placement.get(id).unwrap().buffer.buffer_type().name(),
            "REF"
        );
    }
    // Every op node has memory on the target, views over their roots.
    copy.placement.check_complete(&g, 0..g.len()).unwrap();
}
