//! Graphs whose compute memory exceeds one binding: the graph allocator
//! splits it into chunk buffers within the buffer type's `max_size` (the
//! adapter's storage binding limit), and every kernel still binds whole
//! buffers. Once with a device capped at 64 KiB per buffer (cheap), once
//! over the adapter's real limit (128 MiB on lavapipe). Results are compared
//! with the same computation on the host.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tessera::{DType, Device, Graph, GraphAllocator, Placement, TensorId};
use tessera_wgpu::{DeviceOptions, WgpuDevice};

/// x -> a = 2x + 1 -> b = silu(a) -> c = a + b -> d = c * x, all kept as outputs.
fn chain(n: usize) -> (Graph, TensorId, [TensorId; 4]) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let a = g.scale_bias(x, 2.0, 1.0).unwrap();
    let b = g.silu(a).unwrap();
    let c = g.add(a, b).unwrap();
    let d = g.mul(c, x).unwrap();
    for t in [a, b, c, d] {
        g.set_output(t).unwrap();
    }
    (g, x, [a, b, c, d])
}

fn host_chain(x: &[f32]) -> [Vec<f32>; 4] {
    let a: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
    let b: Vec<f32> = a.iter().map(|v| v / (1.0 + (-v).exp())).collect();
    let c: Vec<f32> = a.iter().zip(&b).map(|(p, q)| p + q).collect();
    let d: Vec<f32> = c.iter().zip(x).map(|(p, q)| p * q).collect();
    [a, b, c, d]
}

fn run(dev: &WgpuDevice, n: usize, min_chunks: usize) {
    let (g, x, outs) = chain(n);
    let buft = dev.buffer_type();
    let mut alloc = GraphAllocator::new(buft.clone());
    let mut p = Placement::new(&g);
    alloc.reserve(&g, &p).unwrap();
    alloc.alloc_graph(&g, &mut p).unwrap();
    let chunks = alloc.chunk_buffers(0).unwrap();
    let sizes: Vec<usize> = chunks.iter().map(|c| c.size()).collect();
    assert!(chunks.len() >= min_chunks, "chunks {sizes:?} for n = {n}");
    assert!(
        sizes.iter().sum::<usize>() > buft.max_size(),
        "chunks {sizes:?}"
    );
    assert!(
        sizes.iter().all(|&s| s <= buft.max_size()),
        "chunks {sizes:?} > {}",
        buft.max_size()
    );
    let xs: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32) / 500.0 - 1.0).collect();
    p.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    s.compute(&g, &p).unwrap();
    let want = host_chain(&xs);
    for (id, w) in outs.iter().zip(&want) {
        let got = p.tensor(&g, *id).unwrap().read_f32().unwrap();
        let worst = got
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-5,
            "{}: relative error {worst}",
            g.node(*id).unwrap().label(*id)
        );
    }
}

#[test]
fn a_graph_larger_than_a_capped_binding_is_chunked() {
    let Some(_) = common::device("a_graph_larger_than_a_capped_binding_is_chunked") else {
        return;
    };
    let dev = tessera_wgpu::family()
        .open_device(
            0,
            &DeviceOptions {
                name: Some("WGPU0.small".into()),
                max_buffer_size: Some(64 << 10),
            },
        )
        .unwrap();
    // Tensors of 32 KiB, most of them alive at once: more than one 64 KiB chunk.
    run(&dev, 8192, 2);
}

#[test]
fn a_graph_larger_than_the_adapter_binding_limit_is_chunked() {
    let Some(dev) = common::device("a_graph_larger_than_the_adapter_binding_limit_is_chunked")
    else {
        return;
    };
    let max = dev.buffer_type().max_size();
    if max > 256 << 20 {
        eprintln!(
            "skipped: the adapter binds {max} bytes at once; the capped test covers chunking"
        );
        return;
    }
    // Five tensors of a bit over a third of the limit each.
    let n = (max / 3 / 4 + 1024).next_multiple_of(256);
    run(&dev, n, 2);
}
