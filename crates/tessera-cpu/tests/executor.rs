//! The CPU executor's contract: what it refuses (unsupported nodes,
//! unplaced tensors, memory it cannot address or write, overlaps and
//! misalignment), aborting, partial ranges and thread-count independence.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cpu_util::{GUARD, Rng, place};
use tessera::buffer::UsageCell;
use tessera::{
    Buffer, BufferType, BufferUsage, DType, Device, Error, Graph, HostMemory, Place, Placement,
    RopeMode, RopeParams, Stream, UnaryOp,
};

#[test]
fn an_unsupported_node_is_named() {
    let dev = tessera_cpu::device();
    // Q8_K rows cannot be gathered on the CPU; F32 + F16 is not a ggml combination.
    let mut g = Graph::new();
    let q = g.new_tensor(DType::Q8K, &[256, 4]).unwrap();
    let ids = g.new_tensor(DType::I32, &[2]).unwrap();
    let rows = g.get_rows(q, ids).unwrap();
    let a = g.new_tensor(DType::F32, &[8]).unwrap();
    let b = g.new_tensor(DType::F16, &[8]).unwrap();
    let sum = g.add(a, b).unwrap();
    let ok = g.add(b, a).unwrap();
    assert!(!dev.supports_op(&g, rows));
    assert!(!dev.supports_op(&g, sum));
    assert!(dev.supports_op(&g, ok));
    let r = place(g);
    match r.compute(2).unwrap_err() {
        Error::Unsupported { device, what } => {
            assert_eq!(device, "CPU");
            assert!(what.contains("GET_ROWS") && what.contains("q8_K"), "{what}");
        }
        e => panic!("expected Unsupported, got {e:?}"),
    }
}

#[test]
fn an_unplaced_tensor_is_unallocated() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4]).unwrap();
    let b = g.new_tensor(DType::F32, &[4]).unwrap();
    g.set_name(b, "bias").unwrap();
    let out = g.add(a, b).unwrap();
    let r = place(g);
    let mut p = r.placement.clone();
    p.clear(b);
    let err = cpu_util::stream(1).compute(&r.graph, &p).unwrap_err();
    assert!(
        matches!(&err, Error::Unallocated { tensor, id } if tensor == "bias" && *id == b.index()),
        "{err:?}"
    );
    let _ = out;
}

/// A buffer type whose memory the CPU cannot address (like a GPU's).
#[derive(Debug)]
struct DeviceMemory;

#[derive(Debug)]
struct DeviceBuffer {
    bytes: std::sync::Mutex<Vec<u8>>,
    usage: UsageCell,
}

impl BufferType for DeviceMemory {
    fn name(&self) -> &str {
        "FakeGPU"
    }
    fn alloc_buffer(&self, size: usize) -> tessera::Result<Arc<dyn Buffer>> {
        Ok(Arc::new(DeviceBuffer {
            bytes: std::sync::Mutex::new(vec![0; size]),
            usage: UsageCell::default(),
        }))
    }
    fn alignment(&self) -> usize {
        64
    }
    fn device(&self) -> Option<Arc<dyn Device>> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Buffer for DeviceBuffer {
    fn name(&self) -> &str {
        "FakeGPU"
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        Arc::new(DeviceMemory)
    }
    fn size(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
    fn write(&self, offset: usize, data: &[u8]) -> tessera::Result<()> {
        self.bytes.lock().unwrap()[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> tessera::Result<()> {
        out.copy_from_slice(&self.bytes.lock().unwrap()[offset..offset + out.len()]);
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> tessera::Result<()> {
        self.bytes.lock().unwrap()[offset..offset + len].fill(value);
        Ok(())
    }
    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn device_memory_is_refused_naming_the_buffer() {
    let dev = tessera_cpu::device();
    assert!(!dev.supports_buffer_type(&DeviceMemory));
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[16]).unwrap();
    let out = g.unary(a, UnaryOp::Relu).unwrap();
    let r = place(g);
    let mut p = r.placement.clone();
    let gpu = DeviceMemory.alloc_buffer(64).unwrap();
    p.set(
        &r.graph,
        a,
        Place {
            buffer: gpu,
            offset: 0,
        },
    )
    .unwrap();
    match cpu_util::stream(2).compute(&r.graph, &p).unwrap_err() {
        Error::Unsupported { what, .. } => assert!(what.contains("FakeGPU"), "{what}"),
        e => panic!("expected Unsupported, got {e:?}"),
    }
    let _ = out;
}

#[test]
fn read_only_memory_can_be_read_but_not_written() {
    let dev = tessera_cpu::device();
    let mut g = Graph::new();
    let w = g.new_tensor(DType::F32, &[4]).unwrap();
    let out = g.scale(w, 2.0).unwrap();
    let weights: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mapped = dev
        .buffer_from_host_memory(HostMemory::borrowed(weights), 16)
        .unwrap();
    let r = place(g);
    // Reading weights from the read-only mapping works.
    let mut p = r.placement.clone();
    p.set(
        &r.graph,
        w,
        Place {
            buffer: mapped.clone(),
            offset: 0,
        },
    )
    .unwrap();
    cpu_util::stream(2).compute(&r.graph, &p).unwrap();
    let got = cpu_util::Placed {
        placement: p.clone(),
        ..r
    };
    assert_eq!(got.get(out), vec![2.0, 4.0, 6.0, 8.0]);
    // Writing a result into it is an error, not a crash.
    let mut p2 = got.placement.clone();
    p2.set(
        &got.graph,
        out,
        Place {
            buffer: mapped.clone(),
            offset: 0,
        },
    )
    .unwrap();
    match cpu_util::stream(1).compute(&got.graph, &p2).unwrap_err() {
        Error::Unsupported { what, .. } => assert!(what.contains("read-only"), "{what}"),
        e => panic!("expected Unsupported, got {e:?}"),
    }
    let mut back = [0u8; 16];
    mapped.read(0, &mut back).unwrap();
    assert_eq!(f32::from_le_bytes(back[0..4].try_into().unwrap()), 1.0);
}

#[test]
fn overlapping_and_misaligned_placements_are_refused() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, 4]).unwrap();
    let at = g.transpose(a).unwrap();
    let s = g.sum_rows(a).unwrap();
    let u = g.unary(at, UnaryOp::Exp).unwrap();
    let r = place(g);
    let buf = r.buffer.clone();
    let a_off = r.offset(a);
    // SUM_ROWS (not in place) writing into its operand.
    let mut p = r.placement.clone();
    p.set(
        &r.graph,
        s,
        Place {
            buffer: buf.clone(),
            offset: a_off + 16,
        },
    )
    .unwrap();
    let e = cpu_util::stream(1).compute(&r.graph, &p).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLayout(m) if m.contains("overlaps")),
        "{e:?}"
    );
    // In place, but the operand is a transposed view: a different layout.
    let mut p = r.placement.clone();
    p.set(
        &r.graph,
        u,
        Place {
            buffer: buf.clone(),
            offset: a_off,
        },
    )
    .unwrap();
    let e = cpu_util::stream(1).compute(&r.graph, &p).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLayout(m) if m.contains("overlaps")),
        "{e:?}"
    );
    // An f32 tensor at an odd offset.
    let mut p = r.placement.clone();
    p.set(
        &r.graph,
        s,
        Place {
            buffer: buf.clone(),
            offset: 2,
        },
    )
    .unwrap();
    let e = cpu_util::stream(1).compute(&r.graph, &p).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLayout(m) if m.contains("aligned")),
        "{e:?}"
    );
}

#[test]
fn a_placement_too_small_for_the_graph_is_out_of_bounds() {
    let mut small = Graph::new();
    let a = small.new_tensor(DType::F32, &[4]).unwrap();
    small.unary(a, UnaryOp::Tanh).unwrap();
    let r = place(small);
    // The same ids, bigger tensors.
    let mut big = Graph::new();
    let a2 = big.new_tensor(DType::F32, &[4096]).unwrap();
    big.unary(a2, UnaryOp::Tanh).unwrap();
    let e = cpu_util::stream(1).compute(&big, &r.placement).unwrap_err();
    assert!(matches!(e, Error::OutOfBounds(_)), "{e:?}");
}

/// A chain of `n` ADDs: `x_{k+1} = x_k + one`.
fn add_chain(n: usize) -> (cpu_util::Placed, tessera::TensorId, tessera::TensorId) {
    let mut g = Graph::new();
    let x0 = g.new_tensor(DType::F32, &[8]).unwrap();
    let one = g.new_tensor(DType::F32, &[8]).unwrap();
    let mut x = x0;
    for _ in 0..n {
        x = g.add(x, one).unwrap();
    }
    let r = place(g);
    r.set(x0, &[0.5; 8]);
    r.set(one, &[1.0; 8]);
    (r, x0, x)
}

#[test]
fn abort_stops_the_compute_and_the_stream_stays_usable() {
    // (More threads than this machine's cores would only slow the barriers.)
    for threads in [1, 2] {
        let (r, _, last) = add_chain(2000);
        let stream = cpu_util::stream(threads);
        let polls = Arc::new(AtomicUsize::new(0));
        let counter = polls.clone();
        stream
            .set_abort_callback(Some(Arc::new(move || {
                counter.fetch_add(1, Ordering::SeqCst) + 1 > 100
            })))
            .unwrap();
        let e = stream.compute(&r.graph, &r.placement).unwrap_err();
        assert!(matches!(e, Error::Aborted), "{e:?}");
        // Polled once before each node, and no more after the abort.
        assert_eq!(polls.load(Ordering::SeqCst), 101);
        // The last node was never reached.
        assert!(r.get(last).iter().all(|v| v.is_nan() || *v != 2000.5));
        stream.set_abort_callback(None).unwrap();
        stream.compute(&r.graph, &r.placement).unwrap();
        assert_eq!(r.get(last), vec![2000.5; 8], "{threads} threads");
        // A callback that never aborts is polled once per node.
        let polls = Arc::new(AtomicUsize::new(0));
        let counter = polls.clone();
        stream
            .set_abort_callback(Some(Arc::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                false
            })))
            .unwrap();
        stream.compute(&r.graph, &r.placement).unwrap();
        assert_eq!(polls.load(Ordering::SeqCst), 2000);
    }
}

#[test]
fn a_panicking_abort_callback_is_an_error() {
    let (r, _, _) = add_chain(10);
    let stream = cpu_util::stream(2);
    stream
        .set_abort_callback(Some(Arc::new(|| panic!("callback bug"))))
        .unwrap();
    let e = stream.compute(&r.graph, &r.placement).unwrap_err();
    assert!(
        matches!(&e, Error::Device { message, .. } if message.contains("abort callback panicked")),
        "{e:?}"
    );
    stream.set_abort_callback(None).unwrap();
    stream.compute(&r.graph, &r.placement).unwrap();
}

#[test]
fn a_range_computes_only_its_nodes() {
    let (r, x0, _) = add_chain(6);
    let stream = cpu_util::stream(2);
    // Ids: x0 = 0, one = 1, adds = 2..8. Compute the first three adds.
    stream.compute_async(&r.graph, &r.placement, 0..5).unwrap();
    stream.synchronize().unwrap();
    let ids: Vec<_> = r.graph.ids().collect();
    assert_eq!(r.get(ids[4]), vec![3.5; 8]);
    let untouched = r.get_raw(ids[5]);
    assert!(untouched.iter().all(|&b| b == GUARD));
    // The rest, from where it stopped.
    stream
        .compute_async(&r.graph, &r.placement, 5..usize::MAX)
        .unwrap();
    assert_eq!(r.get(ids[7]), vec![6.5; 8]);
    let _ = x0;
}

#[test]
fn thread_counts_give_identical_results() {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[64, 6, 5]).unwrap();
    let w = g.new_tensor(DType::F32, &[64]).unwrap();
    let pos = g.new_tensor(DType::I32, &[5]).unwrap();
    let table = g.new_tensor(DType::F16, &[64, 40]).unwrap();
    let ids = g.new_tensor(DType::I32, &[7]).unwrap();
    let n = g.rms_norm(x, 1e-5).unwrap();
    let m = g.mul(n, w).unwrap();
    let rp = g
        .rope(m, pos, None, RopeParams::new(32, RopeMode::Neox, 10_000.0))
        .unwrap();
    let p = g.permute(rp, [0, 2, 1, 3]).unwrap();
    let c = g.cont(p).unwrap();
    let sm = g.soft_max_ext(c, None, 0.125, 0.0).unwrap();
    let s = g.silu(sm).unwrap();
    let sr = g.sum_rows(s).unwrap();
    let rows = g.get_rows(table, ids).unwrap();
    let gl = g.glu(rows, tessera::GluOp::GeGluErf, false).unwrap();
    let r = place(g);
    let mut rng = Rng::new(60);
    r.set(x, &rng.vec(1920, -2.0, 2.0));
    r.set(w, &rng.vec(64, 0.5, 1.5));
    r.set(pos, &[0.0, 5.0, 9.0, 100.0, 3.0]);
    r.set(table, &rng.vec(2560, -1.0, 1.0));
    r.set(ids, &[3.0, 39.0, 0.0, 3.0, 17.0, 22.0, 8.0]);
    let mut results = Vec::new();
    for threads in [1, 2, 3] {
        r.compute(threads).unwrap();
        results.push([s, sr, gl].map(|t| r.get_raw(t)));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
    assert!(r.get(sr).iter().all(|v| v.is_finite()));
}

#[test]
fn thread_count_settings() {
    let dev = tessera_cpu::device();
    let s = dev
        .new_cpu_stream(&tessera::StreamOptions::new().threads(2))
        .unwrap();
    assert_eq!(s.n_threads(), 2);
    assert!(s.set_n_threads(0).is_err());
    s.set_n_threads(5).unwrap();
    assert_eq!(s.n_threads(), 5);
    s.set_n_threads(1).unwrap();
    assert_eq!(s.n_threads(), 1);
    let (r, _, last) = add_chain(3);
    s.set_n_threads(4).unwrap();
    s.compute(&r.graph, &r.placement).unwrap();
    assert_eq!(r.get(last), vec![3.5; 8]);
    for bad in [
        "threads=0",
        "threads=x",
        "speed=9",
        "threads",
        "threads=100000",
    ] {
        let r = tessera::StreamOptions::parse(bad).and_then(|o| dev.new_stream(&o));
        assert!(r.is_err(), "{bad}");
    }
    let opts = |s: &str| tessera::StreamOptions::parse(s).unwrap();
    let scalar = dev
        .new_cpu_stream(&opts(" isa=scalar , threads=3 "))
        .unwrap();
    assert_eq!(scalar.isa(), tessera_cpu::isa::Isa::Scalar);
    assert_eq!(scalar.n_threads(), 3);
    // Each family by name; one the CPU lacks falls back to the best it has.
    use tessera_cpu::isa::Isa;
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        let s = dev
            .new_cpu_stream(&opts(&format!("isa={}", isa.name())))
            .unwrap();
        let want = if isa.available() { isa } else { Isa::best() };
        assert_eq!(s.isa(), want, "{}", isa.name());
    }
    assert!(dev.new_cpu_stream(&opts("isa=avx1024")).is_err());
    assert_eq!(
        dev.new_cpu_stream(&tessera::StreamOptions::new())
            .unwrap()
            .n_threads(),
        tessera_cpu::stream::default_threads()
    );
    let _ = Placement::new(&r.graph);
}

/// A host buffer whose writability and address can change between
/// computes (a plan reused across computes must notice both).
#[derive(Debug)]
struct Switchable {
    inner: [Arc<dyn Buffer>; 2],
    which: AtomicUsize,
    writable: std::sync::atomic::AtomicBool,
}

impl Buffer for Switchable {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.inner[0].buffer_type()
    }
    fn size(&self) -> usize {
        self.inner[0].size()
    }
    fn name(&self) -> &str {
        "switchable"
    }
    fn host_region(&self) -> Option<tessera::HostRegion<'_>> {
        self.cur().host_region()
    }
    fn is_writable(&self) -> bool {
        self.writable.load(Ordering::SeqCst)
    }
    fn write(&self, offset: usize, data: &[u8]) -> tessera::Result<()> {
        self.cur().write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> tessera::Result<()> {
        self.cur().read(offset, out)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> tessera::Result<()> {
        self.cur().fill(offset, len, value)
    }
    fn usage(&self) -> BufferUsage {
        self.inner[0].usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.inner[0].set_usage(usage)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Switchable {
    fn cur(&self) -> &Arc<dyn Buffer> {
        &self.inner[self.which.load(Ordering::SeqCst) % 2]
    }
}

#[test]
fn a_reused_plan_notices_buffer_changes() {
    let bt = tessera_cpu::device().buffer_type();
    let sw = Arc::new(Switchable {
        inner: [bt.alloc_buffer(256).unwrap(), bt.alloc_buffer(256).unwrap()],
        which: AtomicUsize::new(0),
        writable: std::sync::atomic::AtomicBool::new(true),
    });
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4]).unwrap();
    let out = g.scale(a, 3.0).unwrap();
    let mut p = Placement::new(&g);
    for (id, offset) in [(a, 0), (out, 64)] {
        let buffer: Arc<dyn Buffer> = sw.clone();
        p.set(&g, id, Place { buffer, offset }).unwrap();
    }
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let read = |b: &Arc<dyn Buffer>| {
        let mut o = [0u8; 16];
        b.read(64, &mut o).unwrap();
        o.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()
    };
    for threads in [1, 2] {
        let stream = cpu_util::stream(threads);
        sw.which.store(0, Ordering::SeqCst);
        sw.writable.store(true, Ordering::SeqCst);
        sw.inner[0].write(0, &f32s(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        sw.inner[1].write(0, &f32s(&[5.0, 6.0, 7.0, 8.0])).unwrap();
        stream.compute(&g, &p).unwrap();
        assert_eq!(read(&sw.inner[0]), vec![3.0, 6.0, 9.0, 12.0]);
        // Same graph, same placement, the buffer moved: the new memory is used.
        sw.which.store(1, Ordering::SeqCst);
        stream.compute(&g, &p).unwrap();
        assert_eq!(read(&sw.inner[1]), vec![15.0, 18.0, 21.0, 24.0]);
        // Now read-only: writing the result is refused again.
        sw.writable.store(false, Ordering::SeqCst);
        let e = stream.compute(&g, &p).unwrap_err();
        assert!(
            matches!(&e, Error::Unsupported { what, .. } if what.contains("read-only")),
            "{e:?}"
        );
        sw.writable.store(true, Ordering::SeqCst);
        stream.compute(&g, &p).unwrap();
    }
}

/// Ranges computed in turn, as a meta device or a scheduler runs a graph
/// every token: each range's plan is kept and reused, and a saved plan
/// still notices a changed graph or placement.
#[test]
fn saved_plans_of_ranges_are_reused_and_follow_changes() {
    let (r, x0, last) = add_chain(6);
    let stream = cpu_util::stream(2);
    let ids: Vec<_> = r.graph.ids().collect();
    for (round, start) in [0.5f64, 10.0, -3.0].into_iter().enumerate() {
        r.set(x0, &[start; 8]);
        for range in [0..4, 4..6, 6..usize::MAX] {
            stream.compute_async(&r.graph, &r.placement, range).unwrap();
        }
        stream.synchronize().unwrap();
        assert_eq!(r.get(last), vec![start + 6.0; 8], "round {round}");
        assert_eq!(r.get(ids[3]), vec![start + 2.0; 8], "round {round}");
    }
    // The middle range on another graph of the same length (MUL for ADD):
    // its saved plan must not be taken.
    let mut g2 = Graph::new();
    let a = g2.new_tensor(DType::F32, &[8]).unwrap();
    let one = g2.new_tensor(DType::F32, &[8]).unwrap();
    let mut x = a;
    for _ in 0..6 {
        x = g2.mul(x, one).unwrap();
    }
    r.set(x0, &[2.0; 8]);
    for range in [0..4, 4..6, 6..usize::MAX] {
        stream.compute_async(&g2, &r.placement, range).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(r.get(last), vec![2.0; 8]);
    let _ = x;
    // More ranges than the executor keeps plans: with the saved set full,
    // taking a plan back must take *that* plan (stashing the current one
    // evicts the oldest first).
    let (r, x0, _) = add_chain(70);
    r.set(x0, &[0.0; 8]);
    let ids: Vec<_> = r.graph.ids().collect();
    let n = r.graph.len();
    for i in 2..n {
        stream
            .compute_async(&r.graph, &r.placement, i..i + 1)
            .unwrap();
    }
    stream.synchronize().unwrap();
    // Node n-2 again, alone, over garbage: it must be recomputed.
    r.set(ids[n - 2], &[-100.0; 8]);
    stream
        .compute_async(&r.graph, &r.placement, n - 2..n - 1)
        .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(r.get(ids[n - 2]), vec![(n - 3) as f64; 8]);
}

#[test]
fn a_reused_plan_follows_graph_and_placement_changes() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[8]).unwrap();
    let b = g.new_tensor(DType::F32, &[8]).unwrap();
    let c = g.add(a, b).unwrap();
    let r = place(g);
    r.set(a, &[1.0; 8]);
    r.set(b, &[2.0; 8]);
    let stream = cpu_util::stream(2);
    stream.compute(&r.graph, &r.placement).unwrap();
    assert_eq!(r.get(c), vec![3.0; 8]);
    // The result moves (over `a`, an allowed in-place placement).
    let mut p = r.placement.clone();
    let pa = r.placement.get(a).unwrap().clone();
    p.set(&r.graph, c, pa).unwrap();
    stream.compute(&r.graph, &p).unwrap();
    let moved = cpu_util::Placed {
        placement: p.clone(),
        graph: r.graph.clone(),
        buffer: r.buffer.clone(),
    };
    assert_eq!(moved.get(a), vec![3.0; 8]);
    // The same ids with other ops: a new graph of equal length.
    let mut g2 = Graph::new();
    let a2 = g2.new_tensor(DType::F32, &[8]).unwrap();
    let b2 = g2.new_tensor(DType::F32, &[8]).unwrap();
    let c2 = g2.mul(a2, b2).unwrap();
    stream.compute(&g2, &p).unwrap();
    assert_eq!(moved.get(a), vec![6.0; 8]);
    // The graph grows: the new node is computed.
    let mut g3 = g2.clone();
    let d3 = g3.scale(c2, 0.5).unwrap();
    let mut p3 = p.clone();
    let pb = r.placement.get(b).unwrap().clone();
    p3.set(&g3, d3, pb).unwrap();
    stream.compute(&g3, &p3).unwrap();
    assert_eq!(moved.get(a), vec![12.0; 8]);
    assert_eq!(moved.get(b), vec![6.0; 8]);
}

#[test]
fn data_errors_are_caught_when_a_plan_is_reused() {
    let mut g = Graph::new();
    let table = g.new_tensor(DType::F32, &[4, 3]).unwrap();
    let ids = g.new_tensor(DType::I32, &[2]).unwrap();
    let rows = g.get_rows(table, ids).unwrap();
    let r = place(g);
    r.set(table, &(0..12).map(f64::from).collect::<Vec<_>>());
    r.set(ids, &[2.0, 0.0]);
    for threads in [1, 2] {
        let stream = cpu_util::stream(threads);
        stream.compute(&r.graph, &r.placement).unwrap();
        assert_eq!(r.get(rows), vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0]);
        r.set(ids, &[3.0, 0.0]);
        let e = stream.compute(&r.graph, &r.placement).unwrap_err();
        assert!(
            matches!(&e, Error::OutOfBounds(m) if m.contains("index 3")),
            "{e:?}"
        );
        r.set(ids, &[2.0, 0.0]);
    }
}

#[test]
fn long_chains_of_tiny_nodes_are_exact_on_any_thread_count() {
    // Solo scheduling: thread 0 runs tiny nodes back to back; big nodes in
    // between are shared by every thread.
    let mut g = Graph::new();
    let x0 = g.new_tensor(DType::F32, &[16]).unwrap();
    let big = g.new_tensor(DType::F32, &[40000]).unwrap();
    let one = g.new_tensor(DType::F32, &[16]).unwrap();
    let mut x = x0;
    let mut y = big;
    for k in 0..50 {
        x = g.add(x, one).unwrap();
        if k % 10 == 0 {
            y = g.add(y, big).unwrap();
        }
    }
    let r = place(g);
    r.set(x0, &[0.0; 16]);
    r.set(one, &[1.0; 16]);
    r.set(big, &vec![1.0; 40000]);
    for threads in [1, 2, 3] {
        r.compute(threads).unwrap();
        assert_eq!(r.get(x), vec![50.0; 16], "{threads} threads");
        assert_eq!(r.get(y), vec![6.0; 40000], "{threads} threads");
    }
}

#[test]
fn expert_ids_out_of_range_are_errors() {
    // MUL_MAT_ID and ADD_ID over 3 experts: a bad id in the data is an
    // OutOfBounds naming it, on any thread count, and a good id computes.
    let mut g = Graph::new();
    let w = g.new_tensor(DType::F32, &[4, 2, 3]).unwrap();
    let x = g.new_tensor(DType::F32, &[4, 1, 1]).unwrap();
    let ids = g.new_tensor(DType::I32, &[2, 1]).unwrap();
    let y = g.mul_mat_id(w, x, ids).unwrap();
    let bias = g.new_tensor(DType::F32, &[2, 3]).unwrap();
    let z = g.add_id(y, bias, ids).unwrap();
    g.set_output(z).unwrap();
    let r = place(g);
    r.set(w, &(0..24).map(f64::from).collect::<Vec<_>>());
    r.set(x, &[1.0, 0.0, 0.0, 0.0]);
    r.set(bias, &[100.0, 100.0, 200.0, 200.0, 300.0, 300.0]);
    for threads in [1, 2, 3] {
        let stream = cpu_util::stream(threads);
        r.set(ids, &[2.0, 0.0]);
        stream.compute(&r.graph, &r.placement).unwrap();
        // Expert 2's rows start at 16 and 20; expert 0's at 0 and 4.
        assert_eq!(r.get(y), vec![16.0, 20.0, 0.0, 4.0]);
        assert_eq!(r.get(z), vec![316.0, 320.0, 100.0, 104.0]);
        for bad in [3.0, -1.0] {
            r.set(ids, &[0.0, bad]);
            let e = stream.compute(&r.graph, &r.placement).unwrap_err();
            assert!(
                matches!(&e, Error::OutOfBounds(m) if m.contains("MUL_MAT_ID") && m.contains(&format!("{bad}"))),
                "{e:?}"
            );
        }
    }
}
