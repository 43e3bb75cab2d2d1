//! GPU profiling (`WgpuStream::set_profiling`): every dispatch of a timed
//! compute is counted under its kind of node with its GPU time, results are
//! the same as untimed, and nothing is recorded when profiling is off.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera::{DType, Graph, GraphAllocator, Placement, Stream};

#[test]
fn timed_computes_count_every_node_by_kind() {
    let Some(dev) = common::device("timed_computes_count_every_node_by_kind") else {
        return;
    };
    let stream = dev.new_wgpu_stream().unwrap();
    if !stream.can_profile() {
        stream.set_profiling(true);
        assert!(stream.take_profile().is_empty());
        eprintln!("skipped: the adapter has no timestamp queries");
        return;
    }
    // y = W x + b with W 64 x 512 F32, then silu.
    let mut g = Graph::new();
    let w = g.input("w", DType::F32, &[512, 64]).unwrap();
    let x = g.input("x", DType::F32, &[512, 1]).unwrap();
    let b = g.input("b", DType::F32, &[64, 1]).unwrap();
    let wx = g.mul_mat(w, x).unwrap();
    let s = g.add(wx, b).unwrap();
    let y = g.silu(s).unwrap();
    g.set_output(y).unwrap();
    let mut p = Placement::new(&g);
    GraphAllocator::new(tessera::Device::buffer_type(dev.as_ref()))
        .alloc_graph(&g, &mut p)
        .unwrap();
    let fill = |id, n: usize, k: f32| {
        let v: Vec<f32> = (0..n).map(|i| ((i as f32) * k).sin()).collect();
        p.tensor(&g, id).unwrap().write_f32(&v).unwrap();
    };
    fill(w, 512 * 64, 0.37);
    fill(x, 512, 0.11);
    fill(b, 64, 0.5);
    stream.compute(&g, &p).unwrap();
    let plain = p.tensor(&g, y).unwrap().read_f32().unwrap();
    assert!(stream.take_profile().is_empty(), "profiling is off");

    stream.set_profiling(true);
    for _ in 0..3 {
        stream.compute(&g, &p).unwrap();
    }
    let timed = p.tensor(&g, y).unwrap().read_f32().unwrap();
    assert_eq!(plain, timed, "timing changed the results");
    let prof = stream.take_profile();
    let find = |what: &str| prof.iter().find(|t| t.what == what);
    for what in ["MUL_MAT f32 n=1", "ADD", "UNARY"] {
        let t = find(what).unwrap_or_else(|| panic!("no {what} in {prof:?}"));
        assert_eq!(t.calls, 3, "{what}: {prof:?}");
        assert_eq!(t.wait_nanos, 0);
    }
    // And the host's side of each compute, under its own label.
    let host = find(tessera_wgpu::HOST_PROFILE_LABEL).unwrap_or_else(|| panic!("{prof:?}"));
    assert_eq!(host.calls, 3, "{prof:?}");
    assert!(host.nanos > 0, "{prof:?}");
    assert_eq!(prof.len(), 4, "{prof:?}");
    assert!(
        find("MUL_MAT f32 n=1").unwrap().nanos > 0,
        "a 64 x 512 product took no GPU time: {prof:?}"
    );
    assert!(stream.take_profile().is_empty(), "take starts over");
    stream.set_profiling(false);
    stream.compute(&g, &p).unwrap();
    assert!(stream.take_profile().is_empty(), "profiling is off again");
}
