//! The bad-input suite on the wgpu device (issue 9): the shared device
//! groups (buffers, streams, events, compute, allocators; see
//! `tessera_testkit::badinput`) plus `wgpu-specific`: opening devices with
//! bad indices and options, a destroyed (lost) device still being used,
//! events, copies and computes across two logical devices of one adapter.
//! Every case runs in a child process, so a crash, hang or leaked thread is
//! counted; the test asserts there were none. Without an adapter it prints
//! why and passes, unless `TESSERA_REQUIRE_GPU=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{
    Buffer, DType, Device, Graph, GraphAllocator, Placement, StreamOptions, Tensor, copy_async,
};
use tessera_testkit::badinput::{
    Case, DeviceProvider, Group, Options, Stop, device_groups, ensure, must_fail, run_suite, setup,
};
use tessera_wgpu::{DeviceOptions, WgpuDevice};

fn first() -> tessera::Result<Arc<WgpuDevice>> {
    tessera_wgpu::family()
        .wgpu_devices()
        .into_iter()
        .next()
        .ok_or_else(|| tessera::Error::NotFound("a wgpu adapter".into()))
}

fn gpu() -> DeviceProvider {
    Arc::new(|| Ok(first()? as Arc<dyn Device>))
}

#[test]
fn bad_input_wgpu_device() {
    if std::env::var_os(tessera_testkit::badinput::runner::CHILD_ENV).is_none()
        && common::device("bad_input_wgpu_device").is_none()
    {
        return;
    }
    let mut groups = device_groups("wgpu", gpu());
    groups.push(
        Group::new("wgpu-specific", wgpu_cases)
            .with_setup(|| first().map(drop).map_err(|e| e.to_string())),
    );
    let summaries = run_suite("bad_input_wgpu_device", &groups, &Options::default());
    let bad: Vec<String> = summaries
        .iter()
        .flat_map(|s| {
            s.failures()
                .map(move |(n, o)| format!("{}: {n}: {o}", s.group))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} failing cases:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A second logical device on the first adapter.
fn second(max: Option<usize>) -> tessera::Result<Arc<WgpuDevice>> {
    tessera_wgpu::family().open_device(
        0,
        &DeviceOptions {
            name: Some("WGPU-second".into()),
            max_buffer_size: max,
        },
    )
}

/// `y = x + x` over 16 F32 on `dev`, allocated by the graph allocator.
fn doubled(dev: &dyn Device) -> Result<(Graph, Placement), Stop> {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[16])?;
    let y = g.add(x, x)?;
    g.set_output(y)?;
    let mut p = Placement::new(&g);
    GraphAllocator::new(dev.buffer_type()).alloc_graph(&g, &mut p)?;
    p.tensor(&g, x)?.write_f32(&[1.0; 16])?;
    Ok((g, p))
}

fn wgpu_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let maxes = [None, Some(0usize), Some(3), Some(usize::MAX)];
    for (index, max) in [0usize, 1, 7, usize::MAX]
        .into_iter()
        .flat_map(|i| maxes.map(|m| (i, m)))
    {
        cases.push(Case::new(
            format!("open_device({index}, max_buffer_size {max:?})"),
            move || -> Result<(), Stop> {
                let d = tessera_wgpu::family().open_device(
                    index,
                    &DeviceOptions {
                        name: Some("é\u{0}x".into()),
                        max_buffer_size: max,
                    },
                )?;
                let buft = d.buffer_type();
                let _ = buft.alloc_buffer(0)?;
                match buft.alloc_buffer(buft.max_size().saturating_add(1)) {
                    Ok(_) => return Err(Stop::Wrong("allocated past the max size".into())),
                    Err(tessera::Error::OutOfMemory { .. }) => {}
                    Err(e) => return Err(Stop::Wrong(format!("not OutOfMemory: {e}"))),
                }
                let (g, p) = doubled(d.as_ref())?;
                d.new_stream(&StreamOptions::new())?.compute(&g, &p)?;
                Ok(())
            },
        ));
    }
    let lost = [
        "write",
        "read",
        "fill",
        "alloc",
        "stream",
        "compute",
        "event",
        "copy",
        "get_async",
    ];
    for (k, what) in lost.into_iter().enumerate() {
        cases.push(Case::new(
            format!("{what} after destroy() (a lost device)"),
            move || -> Result<(), Stop> {
                let d = setup(second(None))?;
                let b = setup(d.buffer_type().alloc_buffer(64))?;
                let st = setup(d.new_stream(&StreamOptions::new()))?;
                let ev = setup(d.new_event())?;
                let (g, p) = doubled(d.as_ref())?;
                d.destroy();
                let t = Tensor::new(
                    tessera::Layout::contiguous(DType::F32, &[16])?,
                    b.clone(),
                    0,
                )?;
                match k {
                    0 => must_fail(b.write(0, &[1; 8]), "a write to a lost device")?,
                    1 => must_fail(b.read(0, &mut [0; 8]), "a read from a lost device")?,
                    2 => must_fail(b.fill(0, 8, 1), "a fill on a lost device")?,
                    3 => {
                        let _ = d.buffer_type().alloc_buffer(64)?;
                    }
                    4 => {
                        let s = d.new_stream(&StreamOptions::new())?;
                        must_fail(s.synchronize(), "synchronize on a lost device")?;
                    }
                    5 => must_fail(st.compute(&g, &p), "a compute on a lost device")?,
                    6 => {
                        st.record_event(ev.as_ref())?;
                        ev.synchronize()?;
                        let _ = ev.is_signaled()?;
                    }
                    7 => {
                        let host = tessera_testkit::ReferenceDevice::new();
                        let hb = host.buffer_type().alloc_buffer(64)?;
                        tessera::copy_between(hb.as_ref(), 0, b.as_ref(), 0, 64)?;
                    }
                    _ => {
                        st.get_async(&t, 0, 64)?.wait()?;
                    }
                }
                Ok(())
            },
        ));
    }
    // Dispatches past the 65535 workgroups of one dimension.
    for (k, what) in [
        "silu of 2^24 f32",
        "get_rows of 2^20 rows",
        "mul_mat with 2^20 rows",
    ]
    .into_iter()
    .enumerate()
    {
        cases.push(Case::new(what, move || -> Result<(), Stop> {
            let d = setup(first())?;
            let mut g = Graph::new();
            let r = match k {
                0 => {
                    let x = g.input("x", DType::F32, &[1 << 24])?;
                    g.silu(x)?
                }
                1 => {
                    let a = g.input("a", DType::F32, &[4, 2])?;
                    let ids = g.input("ids", DType::I32, &[1 << 20])?;
                    g.get_rows(a, ids)?
                }
                _ => {
                    let a = g.input("a", DType::F32, &[16, 1 << 20])?;
                    let b = g.input("b", DType::F32, &[16, 2])?;
                    g.mul_mat(a, b)?
                }
            };
            g.set_output(r)?;
            let mut p = Placement::new(&g);
            GraphAllocator::new(d.buffer_type()).alloc_graph(&g, &mut p)?;
            for id in g.leaf_ids() {
                let t = p.tensor(&g, id)?;
                t.fill(0, t.nbytes(), 0)?;
            }
            d.new_stream(&StreamOptions::new())?.compute(&g, &p)?;
            let out = p.tensor(&g, r)?.read_f32()?;
            ensure(out.iter().all(|&v| v == 0.0), || {
                "a result of zeros is not zero".into()
            })
        }));
    }
    let cross = [
        "record an event of another logical device",
        "wait on an event of another logical device",
        "copy_async between two logical devices",
        "compute with an operand in another logical device's buffer",
        "copy_from between buffers of two logical devices",
    ];
    for (k, what) in cross.into_iter().enumerate() {
        cases.push(Case::new(what, move || -> Result<(), Stop> {
            let a = setup(first())?;
            let b = setup(second(Some(1 << 20)))?;
            let sa = setup(a.new_stream(&StreamOptions::new()))?;
            let sb = setup(b.new_stream(&StreamOptions::new()))?;
            let eb = setup(b.new_event())?;
            match k {
                0 => must_fail(sa.record_event(eb.as_ref()), "a foreign event recorded")?,
                1 => {
                    let (g, p) = doubled(b.as_ref())?;
                    sb.compute_async(&g, &p, 0..g.len())?;
                    sb.record_event(eb.as_ref())?;
                    sa.wait_event(eb.as_ref())?;
                    ensure(eb.is_signaled()?, || "waited but not signalled".into())?;
                }
                2 => {
                    let (ga, pa) = doubled(a.as_ref())?;
                    let (gb, pb) = doubled(b.as_ref())?;
                    let ta = pa.tensor(&ga, tessera::TensorId::from_index(1))?;
                    let tb = pb.tensor(&gb, tessera::TensorId::from_index(0))?;
                    copy_async(sa.as_ref(), sb.as_ref(), &ta, &tb)?;
                    sb.synchronize()?;
                    ensure(
                        tb.read_f32()? == vec![0.0; 16] || tb.read_f32()? == vec![2.0; 16],
                        || "the copy is neither old nor new".into(),
                    )?;
                }
                3 => {
                    let (g, mut p) = doubled(a.as_ref())?;
                    let foreign: Arc<dyn Buffer> = b.buffer_type().alloc_buffer(64)?;
                    let x = tessera::TensorId::from_index(0);
                    p.set(
                        &g,
                        x,
                        tessera::Place {
                            buffer: foreign,
                            offset: 0,
                        },
                    )?;
                    must_fail(sa.compute(&g, &p), "an operand in another device's memory")?;
                }
                _ => {
                    let ba = a.buffer_type().alloc_buffer(64)?;
                    let bb = b.buffer_type().alloc_buffer(64)?;
                    let _ = ba.copy_from(0, bb.as_ref(), 0, 64)?;
                    tessera::copy_between(bb.as_ref(), 8, ba.as_ref(), 0, 56)?;
                    let _ = a.supports_buffer_type(b.buffer_type().as_ref());
                }
            }
            Ok(())
        }));
    }
    cases
}
