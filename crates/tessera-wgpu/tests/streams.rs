//! Streams and events: the async contract of `tessera::stream` on the wgpu
//! device (set -> compute -> get ordering, events, two streams on one device,
//! concurrent streams), two logical devices on one adapter exchanging
//! tensors, and the error paths of a compute. Results are compared with a
//! naive host computation of the same graph.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tessera::{
    DType, Device, Error, Graph, Layout, Placement, Tensor, TensorId, alloc_tensors, copy_async,
};
use tessera_wgpu::{DeviceOptions, WgpuDevice, WgpuEvent};

/// `y = x * 2 + 1` over `n` F32 values.
fn affine_graph(n: usize) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let y = g.scale_bias(x, 2.0, 1.0).unwrap();
    g.set_output(y).unwrap();
    (g, x, y)
}

fn affine(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x * 2.0 + 1.0).collect()
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32) * 0.37 + seed).sin()).collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

fn floats(b: &[u8]) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(b)
}

/// Two device tensors of `n` F32 bound as `x` and `y` of `g`.
fn bind(dev: &dyn Device, g: &Graph, x: TensorId, y: TensorId) -> (Placement, Tensor, Tensor) {
    let l = Layout::contiguous(DType::F32, &[g.node(x).unwrap().layout.ne[0]]).unwrap();
    let set = alloc_tensors(&dev.buffer_type(), &[l, l], tessera::BufferUsage::Compute).unwrap();
    let (tx, ty) = (set.tensors[0].clone(), set.tensors[1].clone());
    let mut p = Placement::new(g);
    p.bind(g, x, &tx).unwrap();
    p.bind(g, y, &ty).unwrap();
    (p, tx, ty)
}

#[test]
fn set_compute_get_are_ordered_and_events_signal() {
    let Some(dev) = common::device("set_compute_get_are_ordered_and_events_signal") else {
        return;
    };
    let n = 1 << 20;
    let (g, x, y) = affine_graph(n);
    let (p, tx, ty) = bind(dev.as_ref(), &g, x, y);
    let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    let event = dev.new_event().unwrap();
    assert!(
        event.is_signaled().unwrap(),
        "a never recorded event counts as signalled"
    );
    let (d1, d2) = (values(n, 0.0), values(n, 1.5));
    s.set_async(&tx, 0, bytes(&d1)).unwrap();
    s.compute_async(&g, &p, 0..g.len()).unwrap();
    let r1 = s.get_async(&ty, 0, 4 * n).unwrap();
    s.record_event(event.as_ref()).unwrap();
    // Queued after the first read: must not change what it returns.
    s.set_async(&tx, 0, bytes(&d2)).unwrap();
    s.compute_async(&g, &p, 0..g.len()).unwrap();
    let r2 = s.get_async(&ty, 4, 8).unwrap();
    event.synchronize().unwrap();
    assert!(event.is_signaled().unwrap());
    assert_eq!(floats(&r1.wait().unwrap()), affine(&d1));
    assert_eq!(floats(&r2.wait().unwrap()), affine(&d2)[1..3]);
    s.synchronize().unwrap();
    let native = event.as_any().downcast_ref::<WgpuEvent>().unwrap();
    assert_eq!(native.record_count(), 1);
    // Out-of-range async accesses are errors, not panics.
    assert!(matches!(
        s.set_async(&tx, 4 * n - 2, vec![0; 4]),
        Err(Error::OutOfBounds(_))
    ));
    assert!(matches!(
        s.get_async(&ty, 1, 4 * n),
        Err(Error::OutOfBounds(_))
    ));
}

#[test]
fn a_second_stream_waits_on_an_event_of_the_first() {
    let Some(dev) = common::device("a_second_stream_waits_on_an_event_of_the_first") else {
        return;
    };
    let n = 300_001;
    let (g1, x, y) = affine_graph(n);
    let (p1, tx, ty) = bind(dev.as_ref(), &g1, x, y);
    // Graph 2 reads graph 1's output: z = y * y.
    let mut g2 = Graph::new();
    let y2 = g2.input("y", DType::F32, &[n]).unwrap();
    let z = g2.mul(y2, y2).unwrap();
    let (mut p2, _, tz) = bind(dev.as_ref(), &g2, y2, z);
    p2.bind(&g2, y2, &ty).unwrap();
    let (s1, s2) = (
        dev.new_stream(&tessera::StreamOptions::new()).unwrap(),
        dev.new_stream(&tessera::StreamOptions::new()).unwrap(),
    );
    let e = dev.new_event().unwrap();
    let d = values(n, 0.25);
    s1.set_async(&tx, 0, bytes(&d)).unwrap();
    s1.compute_async(&g1, &p1, 0..g1.len()).unwrap();
    s1.record_event(e.as_ref()).unwrap();
    s2.wait_event(e.as_ref()).unwrap();
    s2.compute_async(&g2, &p2, 0..g2.len()).unwrap();
    let got = floats(&s2.get_async(&tz, 0, 4 * n).unwrap().wait().unwrap());
    let want: Vec<f32> = affine(&d).iter().map(|v| v * v).collect();
    assert_eq!(got, want);
}

#[test]
fn streams_on_several_threads_compute_independently() {
    let Some(dev) = common::device("streams_on_several_threads_compute_independently") else {
        return;
    };
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let n = 4099 + t;
                let (g, x, y) = affine_graph(n);
                let (p, tx, ty) = bind(dev.as_ref(), &g, x, y);
                let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
                for round in 0..8 {
                    let d = values(n, t as f32 + round as f32);
                    s.set_async(&tx, 0, bytes(&d)).unwrap();
                    s.compute_async(&g, &p, 0..g.len()).unwrap();
                    let got = floats(&s.get_async(&ty, 0, 4 * n).unwrap().wait().unwrap());
                    assert_eq!(got, affine(&d), "thread {t} round {round}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn two_logical_devices_exchange_tensors() {
    let Some(_) = common::device("two_logical_devices_exchange_tensors") else {
        return;
    };
    let family = tessera_wgpu::family();
    let open = |name: &str| {
        family
            .open_device(
                0,
                &DeviceOptions {
                    name: Some(name.into()),
                    max_buffer_size: None,
                },
            )
            .unwrap()
    };
    let (a, b): (Arc<WgpuDevice>, Arc<WgpuDevice>) = (open("WGPU0.a"), open("WGPU0.b"));
    assert_ne!(a.name(), b.name());
    assert!(!a.supports_buffer_type(b.buffer_type().as_ref()));
    let n = 1000;
    let (g, x, y) = affine_graph(n);
    let (pa, txa, tya) = bind(a.as_ref(), &g, x, y);
    let (pb, txb, tyb) = bind(b.as_ref(), &g, x, y);
    let (sa, sb) = (
        a.new_stream(&tessera::StreamOptions::new()).unwrap(),
        b.new_stream(&tessera::StreamOptions::new()).unwrap(),
    );
    let d = values(n, 3.0);
    sa.set_async(&txa, 0, bytes(&d)).unwrap();
    sa.compute_async(&g, &pa, 0..g.len()).unwrap();
    // a's result becomes b's input: an async copy between devices.
    copy_async(sa.as_ref(), sb.as_ref(), &tya, &txb).unwrap();
    sb.compute_async(&g, &pb, 0..g.len()).unwrap();
    let ea = a.new_event().unwrap();
    sa.record_event(ea.as_ref()).unwrap();
    sb.wait_event(ea.as_ref()).unwrap(); // another device's event: a host wait
    let got = floats(&sb.get_async(&tyb, 0, 4 * n).unwrap().wait().unwrap());
    assert_eq!(got, affine(&affine(&d)));
    // And back, with a blocking copy.
    tyb.copy_to(&txa).unwrap();
    assert_eq!(txa.read_f32().unwrap(), affine(&affine(&d)));
    // A stream cannot record another device's event.
    assert!(sb.record_event(ea.as_ref()).is_err());
}

#[test]
fn compute_errors_are_returned() {
    let Some(dev) = common::device("compute_errors_are_returned") else {
        return;
    };
    let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    assert!(
        dev.new_stream(&tessera::StreamOptions::new().threads(4))
            .is_err()
    );
    // An op the device does not run: FLASH_ATTN_EXT with V rows over 512.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[16, 1, 1]).unwrap();
    let k = g.input("k", DType::F16, &[16, 4, 1]).unwrap();
    let v = g.input("v", DType::F16, &[520, 4, 1]).unwrap();
    let o = g.flash_attn_ext(q, k, v, None, 0.25, 0.0, 0.0).unwrap();
    assert!(!dev.supports_op(&g, o));
    let layouts: Vec<Layout> = [q, k, v, o]
        .iter()
        .map(|&t| g.node(t).unwrap().layout)
        .collect();
    let set = alloc_tensors(&dev.buffer_type(), &layouts, tessera::BufferUsage::Compute).unwrap();
    let mut p = Placement::new(&g);
    for (t, tensor) in [q, k, v, o].iter().zip(&set.tensors) {
        p.bind(&g, *t, tensor).unwrap();
    }
    match s.compute(&g, &p) {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("FLASH_ATTN_EXT"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A tensor in host memory: the kernels cannot read it.
    let (g, x, y) = affine_graph(16);
    let host = dev.host_buffer_type().unwrap();
    let l16 = Layout::contiguous(DType::F32, &[16]).unwrap();
    let hset = alloc_tensors(&host, &[l16], tessera::BufferUsage::Any).unwrap();
    let (mut p, _, _) = bind(dev.as_ref(), &g, x, y);
    p.bind(&g, x, &hset.tensors[0]).unwrap();
    match s.compute(&g, &p) {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("buffer"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Unplaced tensors.
    assert!(matches!(
        s.compute(&g, &Placement::new(&g)),
        Err(Error::Unallocated { .. })
    ));
    // The abort callback cancels before submission.
    let (p, _, _) = bind(dev.as_ref(), &g, x, y);
    let stop = Arc::new(AtomicBool::new(true));
    let flag = stop.clone();
    s.set_abort_callback(Some(Arc::new(move || flag.load(Ordering::Relaxed))))
        .unwrap();
    assert!(matches!(s.compute(&g, &p), Err(Error::Aborted)));
    stop.store(false, Ordering::Relaxed);
    s.compute(&g, &p).unwrap();
}

#[test]
fn a_lost_device_returns_errors() {
    let Some(_) = common::device("a_lost_device_returns_errors") else {
        return;
    };
    let dev = tessera_wgpu::family()
        .open_device(
            0,
            &DeviceOptions {
                name: Some("WGPU0.lost".into()),
                max_buffer_size: None,
            },
        )
        .unwrap();
    let (g, x, y) = affine_graph(64);
    let (p, tx, _) = bind(dev.as_ref(), &g, x, y);
    let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    dev.destroy();
    let lost = |r: tessera::Result<()>| match r {
        Err(Error::Device { message, .. }) => assert!(message.contains("lost"), "{message}"),
        other => panic!("expected a device-lost error, got {other:?}"),
    };
    lost(s.compute(&g, &p));
    lost(tx.write(0, &[0; 8]));
    lost(s.synchronize());
    assert!(dev.buffer_type().alloc_buffer(64).is_err());
}
