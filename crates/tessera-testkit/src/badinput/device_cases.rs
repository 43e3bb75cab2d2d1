//! Bad input for any [`Device`]: its buffer types (absurd sizes must be
//! `OutOfMemory`), its buffers (ranges, strides, copies, checked against a
//! host mirror), streams (option strings, thread counts, async transfers
//! with bad ranges, copies between mismatched tensors, abort callbacks),
//! events (never recorded, of another device, outliving their stream) and
//! the allocators on its buffer type. Compute cases are in
//! `device_compute`.

use std::any::Any;
use std::sync::Arc;

use proptest::prelude::*;
use tessera::buffer::check_range;
use tessera::stream_options::MAX_THREADS;
use tessera::{
    Buffer, BufferType, BufferUsage, DType, Device, Error, Event, Graph, GraphAllocator,
    HostMemory, Layout, Placement, StreamOptions, Tensor, alloc_tensors, copy_async, copy_between,
};

use super::object_cases::CANARY;
use super::strategies::{any_len, huge, offset, option_string, sample, slice_len, threads};
use super::{Case, Group, Stop, ensure, must_fail, setup};
use crate::ReferenceDevice;

/// Opens the device under test (in the child process, on first use).
pub type DeviceProvider = Arc<dyn Fn() -> tessera::Result<Arc<dyn Device>> + Send + Sync>;

/// The groups for the device `provider` opens, named `<prefix>-buffers`,
/// `-streams`, `-events`, `-compute` and `-alloc`. Each child opens the
/// device and runs one small compute before its first case, so that
/// threads the device starts once are not blamed on a case.
pub fn device_groups(prefix: &str, provider: DeviceProvider) -> Vec<Group> {
    let p = provider.clone();
    let warm = move || -> Result<(), String> {
        let dev = p().map_err(|e| e.to_string())?;
        super::device_compute::warm_up(dev.as_ref()).map_err(|e| e.to_string())
    };
    let group = |name: &str, build: fn(&DeviceProvider) -> Vec<Case>| {
        let p = provider.clone();
        Group::new(&format!("{prefix}-{name}"), move || build(&p)).with_setup(warm.clone())
    };
    vec![
        group("buffers", buffer_cases),
        group("streams", stream_cases),
        group("events", event_cases),
        group("compute", super::device_compute::compute_cases),
        group("alloc", alloc_cases),
    ]
}

/// A device buffer of `size` bytes filled with [`CANARY`].
pub(super) fn dev_arena(dev: &dyn Device, size: usize) -> Result<Arc<dyn Buffer>, Stop> {
    let b = setup(dev.buffer_type().alloc_buffer(size))?;
    setup(b.clear(CANARY))?;
    Ok(b)
}

fn read_all(b: &dyn Buffer) -> Result<Vec<u8>, Stop> {
    let mut v = vec![0u8; b.size()];
    setup(b.read(0, &mut v))?;
    Ok(v)
}

fn expect_oom(r: tessera::Result<Arc<dyn Buffer>>, size: usize) -> Result<(), Stop> {
    match r {
        Err(e @ Error::OutOfMemory { .. }) => Err(Stop::Lib(e)),
        Ok(_) => Err(Stop::Wrong(format!("{size} bytes were allocated"))),
        Err(e) => Err(Stop::Wrong(format!("not OutOfMemory: {e}"))),
    }
}

fn buffer_cases(p: &DeviceProvider) -> Vec<Case> {
    let mut cases = Vec::new();
    let sizes = [
        (0usize, "max_size + 1"),
        (isize::MAX as usize + 1, "isize::MAX + 1"),
        (usize::MAX, "usize::MAX"),
        (usize::MAX - 3, "usize::MAX - 3"),
        (1 << 62, "2^62"),
    ];
    for (size, what) in sizes {
        for host in [false, true] {
            let p = p.clone();
            cases.push(Case::new(
                format!(
                    "alloc_buffer({what}) of the {} buffer type",
                    if host { "host" } else { "device" }
                ),
                move || -> Result<(), Stop> {
                    let dev = setup(p())?;
                    let buft = match (host, dev.host_buffer_type()) {
                        (false, _) => dev.buffer_type(),
                        (true, Some(b)) => b,
                        (true, None) => return Ok(()),
                    };
                    let size = if size == 0 {
                        buft.max_size().saturating_add(1)
                    } else {
                        size
                    };
                    if size == usize::MAX && buft.max_size() == usize::MAX && what != "usize::MAX" {
                        return Ok(());
                    }
                    expect_oom(buft.alloc_buffer(size), size)
                },
            ));
        }
    }
    let ops = (
        0usize..6,
        offset(),
        slice_len(),
        any_len(),
        (offset(), 0usize..3),
    );
    for (op, off, len, big, (so, kind)) in sample(ops, 140, 80) {
        let p = p.clone();
        cases.push(Case::new(
            format!("device buffer op {op}: offset {off}, len {len}, big {big}, src offset {so}, kind {kind}"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let buf = dev_arena(dev.as_ref(), 300)?;
                let mut mirror = read_all(buf.as_ref())?;
                let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let fits = |o: usize, n: usize| check_range("x", 300, o, n).is_ok();
                match op {
                    0 => {
                        buf.write(off, &data)?;
                        ensure(fits(off, len), || "an out-of-range write succeeded".into())?;
                        mirror[off..off + len].copy_from_slice(&data);
                    }
                    1 => {
                        let mut out = vec![0u8; len];
                        buf.read(off, &mut out)?;
                        ensure(fits(off, len), || "an out-of-range read succeeded".into())?;
                        ensure(out == mirror[off..off + len], || "read the wrong bytes".into())?;
                    }
                    2 => {
                        buf.fill(off, big, 0x11)?;
                        ensure(fits(off, big), || "an out-of-range fill succeeded".into())?;
                        mirror[off..off + big].fill(0x11);
                    }
                    3 | 4 => {
                        let src: Arc<dyn Buffer> = match kind {
                            0 => buf.clone(),
                            1 => dev_arena(dev.as_ref(), 100)?,
                            _ => setup(ReferenceDevice::new().buffer_type().alloc_buffer(100))?,
                        };
                        setup(src.write(0, &vec![0x22; src.size().min(100)]))?;
                        let before = read_all(src.as_ref())?;
                        mirror = read_all(buf.as_ref())?;
                        if op == 3 {
                            copy_between(src.as_ref(), so, buf.as_ref(), off, big)?;
                        } else {
                            let _ = buf.copy_from(off, src.as_ref(), so, big)?;
                            return Ok(());
                        }
                        ensure(check_range("x", src.size(), so, big).is_ok() && fits(off, big), || {
                            "an out-of-range copy succeeded".into()
                        })?;
                        mirror[off..off + big].copy_from_slice(&before[so..so + big]);
                    }
                    _ => {
                        let mut out = vec![0u8; len];
                        buf.read_2d(off, &mut out, len % 9, big % 5, so % 64, len % 11)?;
                        buf.write_2d(off, &data, len % 9, big % 5, so % 64, len % 11)?;
                        return Ok(());
                    }
                }
                ensure(read_all(buf.as_ref())? == mirror, || "the buffer differs from the mirror".into())
            },
        ));
    }
    for (len, writable, max) in sample(
        (
            0usize..300,
            any::<bool>(),
            prop_oneof![Just(0usize), Just(1), huge()],
        ),
        12,
        81,
    ) {
        let p = p.clone();
        cases.push(Case::new(
            format!("buffer_from_host_memory of {len} bytes, writable {writable}, max {max}"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let mem = if writable {
                    HostMemory::borrowed_mut(vec![1u8; len])
                } else {
                    HostMemory::borrowed(vec![1u8; len])
                };
                let b = dev.buffer_from_host_memory(mem, max)?;
                ensure(b.size() == len, || {
                    format!("size {} for {len} bytes", b.size())
                })?;
                let r = b.write(0, &[9]);
                ensure(r.is_err() || writable && len > 0, || {
                    "wrote read-only memory".into()
                })?;
                Ok(())
            },
        ));
    }
    cases
}

/// An abort callback that panics: user code the library must contain.
#[allow(clippy::panic)]
fn panicking_callback() -> bool {
    panic!("{}", super::runner::DELIBERATE_PANIC)
}

/// An event no device made.
#[derive(Debug)]
struct FakeEvent;

impl Event for FakeEvent {
    fn device_name(&self) -> &str {
        "FAKE"
    }
    fn synchronize(&self) -> tessera::Result<()> {
        Err(Error::device("FAKE", "this event always fails"))
    }
    fn is_signaled(&self) -> tessera::Result<bool> {
        Ok(false)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `y = x * 2` over `n` F32, both bound in one device buffer; plus stream.
pub(super) fn affine(
    dev: &dyn Device,
    n: usize,
) -> Result<(Graph, Placement, Tensor, Tensor), Stop> {
    let mut g = Graph::new();
    let x = setup(g.input("x", DType::F32, &[n]))?;
    let y = setup(g.scale(x, 2.0))?;
    let l = setup(Layout::contiguous(DType::F32, &[n]))?;
    let set = setup(alloc_tensors(
        &dev.buffer_type(),
        &[l, l],
        BufferUsage::Compute,
    ))?;
    let (tx, ty) = (set.tensors[0].clone(), set.tensors[1].clone());
    let mut pl = Placement::new(&g);
    setup(pl.bind(&g, x, &tx))?;
    setup(pl.bind(&g, y, &ty))?;
    Ok((g, pl, tx, ty))
}

fn stream_cases(p: &DeviceProvider) -> Vec<Case> {
    let mut cases = Vec::new();
    for s in sample(option_string(), 50, 90) {
        let p = p.clone();
        cases.push(Case::new(
            format!("new_stream(parse({s:?}))"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let o = StreamOptions::parse(&s)?;
                let st = dev.new_stream(&o)?;
                let (g, pl, tx, _) = affine(dev.as_ref(), 4)?;
                setup(tx.write_f32(&[1.0; 4]))?;
                st.compute(&g, &pl)?;
                Ok(())
            },
        ));
    }
    let mut counts = sample(threads(), 24, 91);
    counts.extend([MAX_THREADS, MAX_THREADS + 1]);
    for n in counts {
        for setter in [false, true] {
            let p = p.clone();
            cases.push(Case::new(
                format!(
                    "{} {n} threads",
                    if setter {
                        "set_n_threads"
                    } else {
                        "new_stream with"
                    }
                ),
                move || -> Result<(), Stop> {
                    let dev = setup(p())?;
                    let st = if setter {
                        let st = setup(dev.new_stream(&StreamOptions::new()))?;
                        st.set_n_threads(n)?;
                        st
                    } else {
                        dev.new_stream(&StreamOptions::new().threads(n))?
                    };
                    ensure((1..=MAX_THREADS).contains(&n), || {
                        format!("{n} threads accepted")
                    })?;
                    let (g, pl, tx, ty) = affine(dev.as_ref(), 64)?;
                    setup(tx.write_f32(&[1.5; 64]))?;
                    st.compute(&g, &pl)?;
                    ensure(setup(ty.read_f32())? == vec![3.0; 64], || {
                        "wrong result".into()
                    })
                },
            ));
        }
    }
    let io = (0usize..6, offset(), any_len(), any::<bool>());
    for (op, off, len, abort) in sample(io, 60, 92) {
        let p = p.clone();
        cases.push(Case::new(
            format!("stream op {op}: offset {off}, len {len}, abort callback {abort}"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let st = setup(dev.new_stream(&StreamOptions::new()))?;
                let (g, pl, tx, ty) = affine(dev.as_ref(), 16)?;
                let n = tx.nbytes();
                let fits = |o: usize, k: usize| o.checked_add(k).is_some_and(|e| e <= n);
                if abort {
                    let _ = st.set_abort_callback(Some(Arc::new(|| true)));
                }
                match op {
                    0 => {
                        st.set_async(&tx, off, vec![0u8; len.min(4096)])?;
                        ensure(fits(off, len.min(4096)), || "out-of-range set_async".into())?;
                    }
                    1 => {
                        let bytes = st.get_async(&ty, off, len)?.wait()?;
                        ensure(fits(off, len) && bytes.len() == len, || {
                            "bad get_async".into()
                        })?;
                    }
                    2 => {
                        let other = ReferenceDevice::new();
                        let (_, _, ox, _) = affine(other.as_ref(), 16 + len % 3)?;
                        let ost = setup(other.new_stream(&StreamOptions::new()))?;
                        let (src, dst) = if off % 2 == 0 { (&ox, &ty) } else { (&ty, &ox) };
                        copy_async(ost.as_ref(), st.as_ref(), src, dst)?;
                        copy_async(st.as_ref(), st.as_ref(), &tx, &tx)?;
                    }
                    3 => {
                        st.compute_async(&g, &pl, off..len)?;
                        st.synchronize()?;
                    }
                    4 => {
                        // A callback that panics: contained, the stream usable after.
                        let _ = st.set_abort_callback(Some(Arc::new(panicking_callback)));
                        setup(tx.write_f32(&[1.0; 16]))?;
                        let r = st.compute(&g, &pl);
                        let _ = st.set_abort_callback(None);
                        setup(st.compute(&g, &pl))?;
                        ensure(setup(ty.read_f32())? == vec![2.0; 16], || {
                            "wrong result".into()
                        })?;
                        r?;
                    }
                    _ => {
                        let r = st.compute(&g, &pl);
                        ensure(!abort || r.is_err(), || {
                            "the abort callback was ignored".into()
                        })?;
                        let _ = st.set_abort_callback(None);
                        setup(st.compute(&g, &pl))?;
                        r?;
                    }
                }
                Ok(())
            },
        ));
    }
    cases
}

fn event_cases(p: &DeviceProvider) -> Vec<Case> {
    let mut cases = Vec::new();
    let names = [
        "never recorded: synchronize, is_signaled, wait_event",
        "record an event of no device",
        "wait on an event of no device (its synchronize fails)",
        "event recorded, stream dropped, then used",
        "record on a stream, wait on another, drop both",
        "record the same event on two streams",
        "record and wait in a loop with computes",
        "event outlives its device handle",
    ];
    for (k, name) in names.into_iter().enumerate() {
        let p = p.clone();
        cases.push(Case::new(name, move || -> Result<(), Stop> {
            let dev = setup(p())?;
            let ev = match dev.new_event() {
                Ok(e) => e,
                Err(e) => return Err(Stop::Lib(e)),
            };
            let st = setup(dev.new_stream(&StreamOptions::new()))?;
            match k {
                0 => {
                    ev.synchronize()?;
                    ensure(ev.is_signaled()?, || {
                        "a never recorded event is not signalled".into()
                    })?;
                    st.wait_event(ev.as_ref())?;
                }
                1 => must_fail(
                    st.record_event(&FakeEvent),
                    "recording an event of no device",
                )?,
                2 => must_fail(st.wait_event(&FakeEvent), "waiting on a failing event")?,
                3 => {
                    st.record_event(ev.as_ref())?;
                    drop(st);
                    ev.synchronize()?;
                    let _ = ev.is_signaled()?;
                    let st2 = setup(dev.new_stream(&StreamOptions::new()))?;
                    st2.wait_event(ev.as_ref())?;
                }
                4 | 5 => {
                    let st2 = setup(dev.new_stream(&StreamOptions::new()))?;
                    st.record_event(ev.as_ref())?;
                    if k == 5 {
                        st2.record_event(ev.as_ref())?;
                    }
                    st2.wait_event(ev.as_ref())?;
                    drop((st, st2));
                    ev.synchronize()?;
                }
                6 => {
                    let (g, pl, _, _) = affine(dev.as_ref(), 32)?;
                    for _ in 0..20 {
                        st.compute_async(&g, &pl, 0..g.len())?;
                        st.record_event(ev.as_ref())?;
                        st.wait_event(ev.as_ref())?;
                    }
                    st.synchronize()?;
                }
                _ => {
                    st.record_event(ev.as_ref())?;
                    drop((st, dev));
                    ev.synchronize()?;
                    let _ = (ev.is_signaled()?, ev.device_name());
                }
            }
            Ok(())
        }));
    }
    cases
}

fn alloc_cases(p: &DeviceProvider) -> Vec<Case> {
    let mut cases = Vec::new();
    let specs = (
        prop::sample::select(vec![DType::F32, DType::F16, DType::I64, DType::Q4_0]),
        prop_oneof![huge(), Just(0usize)],
        0usize..4,
    );
    for (t, n, how) in sample(specs, 30, 100) {
        let p = p.clone();
        cases.push(Case::new(
            format!("allocator {how} with a {t} tensor of {n} elements beyond the max size"),
            move || -> Result<(), Stop> {
                let dev = setup(p())?;
                let buft: Arc<dyn BufferType> = dev.buffer_type();
                // Over the max size (or over isize::MAX where there is none).
                let n = if n == 0 {
                    let blocks = (buft.max_size() / t.type_size()).saturating_add(256);
                    blocks.saturating_mul(t.block_size()) / 256 * 256
                } else {
                    n / 256 * 256
                };
                let l = Layout::contiguous(t, &[n])?;
                match how {
                    0 => {
                        alloc_tensors(&buft, &[l], BufferUsage::Weights)?;
                    }
                    1 => {
                        let mut g = Graph::new();
                        let x = g.new_leaf(l)?;
                        let y = g.dup(x)?;
                        g.set_output(y)?;
                        let mut pl = Placement::new(&g);
                        GraphAllocator::new(buft).alloc_graph(&g, &mut pl)?;
                    }
                    2 => {
                        let mut g = Graph::new();
                        let x = g.new_leaf(l)?;
                        let _ = g.dup(x)?;
                        let pl = Placement::new(&g);
                        tessera::graph_copy(&g, &pl, &dev)?;
                    }
                    _ => {
                        let b = setup(buft.alloc_buffer(64))?;
                        let mut a = tessera::LinearAllocator::new(b)?;
                        a.alloc(&l)?;
                    }
                }
                Err(Stop::Wrong(format!("{} bytes were allocated", l.nbytes())))
            },
        ));
    }
    cases
}
