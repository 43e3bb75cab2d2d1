//! The async contract checks on the reference device (synchronous: they must
//! hold trivially, which checks the checks' own plumbing) and on the gated
//! device (asynchronous, deterministically: nothing runs until the host
//! waits), and proof that the event checks fail on a device whose
//! `record_event` or `wait_event` does nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tessera::alloc::{GraphAllocator, alloc_tensors};
use tessera::{BufferUsage, DType, Device, Error, Graph, Placement};
use tessera_testkit::refdev::ComputeHook;
use tessera_testkit::sabotage::{SkipEvents, skip_events};
use tessera_testkit::{GatedDevice, ReferenceDevice, contract};

#[test]
fn reference_device_keeps_the_stream_contract() {
    let d: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_all(&d).unwrap();
}

#[test]
fn gated_device_keeps_the_stream_contract() {
    let d: Arc<dyn Device> = GatedDevice::new();
    contract::check_all(&d).unwrap();
    let r: Arc<dyn Device> = ReferenceDevice::new();
    contract::check_copy_between(&d, &r).unwrap();
    contract::check_copy_between(&r, &d).unwrap();
    // Two gated devices: the wait on the other device's event is a host wait.
    let d2: Arc<dyn Device> = GatedDevice::new();
    contract::check_events_between(&d, &d2).unwrap();
    contract::check_events_between(&d, &r).unwrap();
}

/// The vehicle of the sabotage test must really defer: queued work does
/// not run until a host wait needs it, and then only what that wait needs.
#[test]
fn gated_device_runs_nothing_until_the_host_waits() {
    let dev = GatedDevice::new();
    let d: Arc<dyn Device> = dev.clone();
    let n = 64;
    let mut g = Graph::new();
    let xi = g.input("x", DType::F32, &[n]).unwrap();
    let yi = g.scale(xi, 2.0).unwrap();
    g.set_output(yi).unwrap();
    let mut p = Placement::new(&g);
    let inputs = alloc_tensors(
        &d.buffer_type(),
        &[g.node(xi).unwrap().layout],
        BufferUsage::Any,
    )
    .unwrap();
    let x = inputs.tensors[0].clone();
    p.bind(&g, xi, &x).unwrap();
    let mut galloc = GraphAllocator::new(d.buffer_type());
    galloc.alloc_graph(&g, &mut p).unwrap();
    let y = p.tensor(&g, yi).unwrap();
    y.write_f32(&vec![-1.0; n]).unwrap();

    let (s1, s2) = (
        d.new_stream(&tessera::StreamOptions::new()).unwrap(),
        d.new_stream(&tessera::StreamOptions::new()).unwrap(),
    );
    let ev = d.new_event().unwrap();
    let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    s1.set_async(&x, 0, bytemuck::cast_slice(&v).to_vec())
        .unwrap();
    s1.compute_async(&g, &p, 0..g.len()).unwrap();
    s1.record_event(ev.as_ref()).unwrap();
    assert_eq!(dev.pending(), 3);
    assert!(!ev.is_signaled().unwrap(), "nothing has run yet");
    assert_eq!(y.read_f32().unwrap(), vec![-1.0; n], "the compute is held");

    // Stream 2 has nothing queued: synchronizing it runs nothing of stream 1.
    s2.synchronize().unwrap();
    assert_eq!(dev.pending(), 3);
    // A wait on the event queues a mark; a read behind it pulls stream 1.
    s2.wait_event(ev.as_ref()).unwrap();
    let r = s2.get_async(&y, 0, 4 * n).unwrap();
    assert_eq!(dev.pending(), 5);
    let want: Vec<f32> = v.iter().map(|a| a * 2.0).collect();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&r.wait().unwrap()), want);
    assert_eq!(dev.pending(), 0);
    assert!(ev.is_signaled().unwrap());

    // Bounds are checked at the call; errors of held operations surface
    // at synchronize, once.
    assert!(s1.set_async(&x, 4 * n - 2, vec![0; 4]).is_err());
    let hook: ComputeHook = Arc::new(|_, _| Err(Error::device("REF", "hooked failure")));
    let failing: Arc<dyn Device> =
        GatedDevice::wrap(ReferenceDevice::with_hook(Some(hook), vec![]));
    let s = failing.new_stream(&tessera::StreamOptions::new()).unwrap();
    s.compute_async(&g, &p, 0..g.len()).unwrap();
    let e = s.synchronize().unwrap_err();
    assert!(e.to_string().contains("hooked failure"), "{e}");
    s.synchronize().unwrap();
}

fn sabotaged(record: bool, wait: bool) -> Arc<dyn Device> {
    skip_events(GatedDevice::new(), SkipEvents { record, wait })
}

/// The sabotage test: with `record_event` and/or `wait_event` turned into
/// no-ops on an asynchronous device, the event check returns `Err`, each
/// time for the reason the sabotage implies. The untouched device passes.
#[test]
fn event_checks_fail_when_record_or_wait_does_nothing() {
    let honest: Arc<dyn Device> = GatedDevice::new();
    contract::check_events(&honest).unwrap();

    // No recording: the event stays "never recorded", i.e. signalled, and
    // the host reads the result before stream A has computed it.
    let e = contract::check_events(&sabotaged(true, false)).unwrap_err();
    assert!(e.contains("host read after Event::synchronize"), "{e}");
    let e = contract::check_events(&sabotaged(true, true)).unwrap_err();
    assert!(e.contains("host read after Event::synchronize"), "{e}");

    // No wait: stream B runs and synchronizes while A's compute is held.
    let e = contract::check_events(&sabotaged(false, true)).unwrap_err();
    assert!(e.contains("the wait did not hold B back"), "{e}");

    // Across devices: B on another device skips its (host) wait.
    let a: Arc<dyn Device> = GatedDevice::new();
    let b = skip_events(
        GatedDevice::new(),
        SkipEvents {
            record: false,
            wait: true,
        },
    );
    let e = contract::check_events_between(&a, &b).unwrap_err();
    assert!(e.contains("the wait did not hold B back"), "{e}");
    let b2: Arc<dyn Device> = GatedDevice::new();
    contract::check_events_between(&a, &b2).unwrap();

    // check_all runs the event check: it fails too.
    assert!(contract::check_all(&sabotaged(false, true)).is_err());
}
