//! The object model without a compute device: host buffers and their bounds,
//! memory borrowed from elsewhere, tensors, placements, the registry, the
//! multi-buffer, raw copies between host and device-like buffers, and the
//! stream fallbacks for async copies.

#![allow(clippy::unwrap_used)]

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};

use tessera::buffer::{UsageCell, check_range};
use tessera::*;

fn host_buft(max: usize) -> Arc<HostBufferType> {
    HostBufferType::new("HOST", max, None)
}

#[test]
fn host_buffers_check_bounds_and_fail_cleanly() {
    let buft = host_buft(1 << 20);
    let b = buft.alloc_buffer(100).unwrap();
    assert_eq!(b.size(), 100);
    assert!(b.is_host());
    b.write(96, &[1, 2, 3, 4]).unwrap();
    let mut out = [0u8; 4];
    b.read(96, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    assert!(matches!(b.write(97, &[0; 4]), Err(Error::OutOfBounds(_))));
    assert!(matches!(
        b.read(usize::MAX, &mut out),
        Err(Error::OutOfBounds(_))
    ));
    assert!(matches!(b.fill(50, 51, 0), Err(Error::OutOfBounds(_))));
    b.clear(7).unwrap();
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [7; 4]);
    // Fresh memory is zeroed; an empty buffer works without memory.
    let z = buft.alloc_buffer(8).unwrap();
    let mut zero = [1u8; 8];
    z.read(0, &mut zero).unwrap();
    assert_eq!(zero, [0; 8]);
    let e = buft.alloc_buffer(0).unwrap();
    assert_eq!(e.size(), 0);
    assert!(e.host_region().is_none());
    e.write(0, &[]).unwrap();
}

#[test]
fn allocations_over_the_limit_are_out_of_memory_errors() {
    let buft = host_buft(1000);
    match buft.alloc_buffer(1001) {
        Err(Error::OutOfMemory {
            device, requested, ..
        }) => {
            assert_eq!(device, "HOST");
            assert_eq!(requested, 1001);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // More than the address space allows: the system allocator refuses.
    let huge = host_buft(usize::MAX);
    assert!(matches!(
        huge.alloc_buffer(usize::MAX - 4096),
        Err(Error::OutOfMemory { .. })
    ));
}

#[test]
fn borrowed_memory_is_kept_alive_and_read_only_when_asked() {
    let buft = host_buft(usize::MAX);
    let bytes: Arc<Vec<u8>> = Arc::new((0u8..64).collect());
    let owner = ArcBytes(bytes.clone());
    let b = HostBuffer::from_memory(HostMemory::borrowed(owner), buft.clone());
    assert_eq!(
        Arc::strong_count(&bytes),
        2,
        "the buffer keeps the owner alive"
    );
    let mut out = [0u8; 3];
    b.read(10, &mut out).unwrap();
    assert_eq!(out, [10, 11, 12]);
    assert!(matches!(b.write(0, &[1]), Err(Error::Unsupported { .. })));
    drop(b);
    assert_eq!(Arc::strong_count(&bytes), 1);

    // Inline owners must not dangle after being moved into the buffer.
    let w = HostBuffer::from_memory(HostMemory::borrowed_mut([5u8; 32]), buft);
    w.write(0, &[9]).unwrap();
    let mut two = [0u8; 2];
    w.read(0, &mut two).unwrap();
    assert_eq!(two, [9, 5]);
}

#[derive(Debug)]
struct ArcBytes(Arc<Vec<u8>>);
impl AsRef<[u8]> for ArcBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[test]
fn tensors_are_bounds_checked_views_of_buffers() {
    let buft = host_buft(usize::MAX);
    let b = buft.alloc_buffer(64).unwrap();
    let l = Layout::contiguous(DType::F32, &[4, 2]).unwrap();
    assert!(
        Tensor::new(l, b.clone(), 40).is_err(),
        "32 bytes at 40 exceed 64"
    );
    let t = Tensor::new(l, b.clone(), 32).unwrap();
    t.write_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        .unwrap();
    assert_eq!(t.read_vec::<f32>().unwrap()[5], 6.0);
    assert!(matches!(t.write(30, &[0; 4]), Err(Error::OutOfBounds(_))));
    assert!(t.write_slice(&[1i64]).is_err(), "wrong element type");
    assert!(t.write_slice(&[1i32; 8]).is_err(), "same size, wrong type");
    assert!(t.write_slice(&[1.0f32; 7]).is_err(), "wrong count");
    // copy_to needs equal layouts.
    let other = Tensor::new(Layout::contiguous(DType::F32, &[8]).unwrap(), b.clone(), 0).unwrap();
    assert!(t.copy_to(&other).is_err());
    let same = Tensor::new(l, b, 0).unwrap();
    t.copy_to(&same).unwrap();
    assert_eq!(
        same.read_vec::<f32>().unwrap(),
        t.read_vec::<f32>().unwrap()
    );
}

#[test]
fn placements_bind_check_and_place_views() {
    let buft = host_buft(usize::MAX);
    let b = buft.alloc_buffer(256).unwrap();
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[8]).unwrap();
    let y = g.new_tensor(DType::F32, &[8]).unwrap();
    let v = g.view_1d(x, 4, 16).unwrap();
    let s = g.add(v, v).unwrap();
    let mut p = Placement::new(&g);
    let wrong = Tensor::new(Layout::contiguous(DType::F32, &[4]).unwrap(), b.clone(), 0).unwrap();
    assert!(p.bind(&g, x, &wrong).is_err(), "layout mismatch");
    let tx = Tensor::new(g.node(x).unwrap().layout, b.clone(), 64).unwrap();
    assert!(p.bind(&g, v, &tx).is_err(), "views are not bindable");
    p.bind(&g, x, &tx).unwrap();
    match p.check_complete(&g, 0..g.len()) {
        Err(Error::Unallocated { id, .. }) => assert_eq!(id, v.index()),
        other => panic!("expected Unallocated, got {other:?}"),
    }
    p.place_views(&g).unwrap();
    assert_eq!(p.get(v).unwrap().offset, 64 + 16);
    assert!(matches!(
        p.check_complete(&g, 0..g.len()),
        Err(Error::Unallocated { .. })
    ));
    let ts = Tensor::new(g.node(s).unwrap().layout, b.clone(), 128).unwrap();
    p.bind(&g, s, &ts).unwrap();
    p.check_complete(&g, 0..g.len()).unwrap();
    assert!(
        p.get(y).is_none(),
        "y is unused by ops and was never placed"
    );
    assert!(p.tensor(&g, y).is_err());
}

#[test]
fn multi_buffers_group_parts_and_propagate_usage() {
    let buft = host_buft(usize::MAX);
    let parts = vec![
        buft.alloc_buffer(16).unwrap(),
        buft.alloc_buffer(8).unwrap(),
    ];
    let m = MultiBuffer::new(parts.clone(), buft.clone());
    assert_eq!(m.size(), 24);
    assert!(MultiBuffer::is_multi(&m));
    m.set_usage(BufferUsage::Weights);
    assert!(parts.iter().all(|p| p.usage() == BufferUsage::Weights));
    m.clear(3).unwrap();
    let mut out = [0u8; 8];
    parts[1].read(0, &mut out).unwrap();
    assert_eq!(out, [3; 8]);
    assert!(m.write(0, &[1]).is_err(), "tensors live in the parts");
}

/// A buffer of "device memory": no host pointer, so copies must go through
/// `read`/`write` or a staging copy.
#[derive(Debug)]
struct DeviceMem {
    bytes: Mutex<Vec<u8>>,
    buft: Arc<dyn BufferType>,
    usage: UsageCell,
}

impl Buffer for DeviceMem {
    fn name(&self) -> &str {
        "device-mem"
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn size(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut b = self.bytes.lock().unwrap();
        check_range("DEV", b.len(), offset, data.len())?;
        b[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let b = self.bytes.lock().unwrap();
        check_range("DEV", b.len(), offset, out.len())?;
        out.copy_from_slice(&b[offset..offset + out.len()]);
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        let mut b = self.bytes.lock().unwrap();
        check_range("DEV", b.len(), offset, len)?;
        b[offset..offset + len].fill(value);
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

fn device_mem(n: usize) -> Arc<dyn Buffer> {
    Arc::new(DeviceMem {
        bytes: Mutex::new(vec![0; n]),
        buft: host_buft(usize::MAX),
        usage: UsageCell::default(),
    })
}

#[test]
fn copies_take_every_path_between_host_and_device_memory() {
    let host = host_buft(usize::MAX).alloc_buffer(32).unwrap();
    let dev_a = device_mem(32);
    let dev_b = device_mem(32);
    host.write(0, &[1, 2, 3, 4]).unwrap();
    copy_between(host.as_ref(), 0, dev_a.as_ref(), 8, 4).unwrap(); // host src
    copy_between(dev_a.as_ref(), 8, dev_b.as_ref(), 16, 4).unwrap(); // staging
    copy_between(dev_b.as_ref(), 16, host.as_ref(), 20, 4).unwrap(); // host dst
    let mut out = [0u8; 4];
    host.read(20, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    assert!(copy_between(host.as_ref(), 30, dev_a.as_ref(), 0, 4).is_err());
    assert!(copy_between(host.as_ref(), 0, dev_a.as_ref(), 30, 4).is_err());
}

/// A synchronous stream that relies on every default method of the trait.
#[derive(Debug)]
struct PlainStream {
    syncs: Mutex<usize>,
}

impl Stream for PlainStream {
    fn name(&self) -> &str {
        "PLAIN"
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(NullDevice)
    }
    fn synchronize(&self) -> Result<()> {
        *self.syncs.lock().unwrap() += 1;
        Ok(())
    }
    fn compute_async(&self, _g: &Graph, _p: &Placement, _r: Range<usize>) -> Result<()> {
        Err(Error::unsupported("PLAIN", "compute"))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn stream_fallbacks_synchronize_then_copy() {
    let s = PlainStream {
        syncs: Mutex::new(0),
    };
    let b = device_mem(64);
    let l = Layout::contiguous(DType::F32, &[4]).unwrap();
    let t = Tensor::new(l, b.clone(), 0).unwrap();
    let u = Tensor::new(l, b, 32).unwrap();
    s.set_async(
        &t,
        0,
        bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0]).to_vec(),
    )
    .unwrap();
    let pending = s.get_async(&t, 4, 8).unwrap();
    assert_eq!(
        pending.wait().unwrap(),
        bytemuck::cast_slice(&[2.0f32, 3.0]).to_vec()
    );
    copy_async(&s, &s, &t, &u).unwrap();
    assert_eq!(u.read_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert!(
        *s.syncs.lock().unwrap() >= 4,
        "each fallback synchronizes first"
    );
    assert!(
        s.set_async(&t, 8, vec![0; 16]).is_err(),
        "bounds still checked"
    );
    assert!(matches!(
        s.record_event(&NullEvent),
        Err(Error::Unsupported { .. })
    ));
    s.wait_event(&NullEvent).unwrap();
    assert!(s.set_n_threads(2).is_err());
    assert!(s.set_abort_callback(None).is_err());
}

#[derive(Debug)]
struct NullEvent;
impl Event for NullEvent {
    fn device_name(&self) -> &str {
        "NULL"
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn is_signaled(&self) -> Result<bool> {
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct NullDevice;
impl Device for NullDevice {
    fn name(&self) -> &str {
        "Null0"
    }
    fn description(&self) -> &str {
        "a device that runs nothing"
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo::default()
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn family_name(&self) -> &str {
        "NULL"
    }
    fn new_stream(&self, _options: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        Ok(Arc::new(PlainStream {
            syncs: Mutex::new(0),
        }))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        host_buft(usize::MAX)
    }
    fn supports_op(&self, _g: &Graph, _id: TensorId) -> bool {
        false
    }
    fn supports_buffer_type(&self, _b: &dyn BufferType) -> bool {
        false
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct NullFamily;
impl DeviceFamily for NullFamily {
    fn name(&self) -> &str {
        "NULL"
    }
    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![Arc::new(NullDevice)]
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn registry_finds_by_name_and_type_and_defaults_are_upstreams() {
    let reg = Registry::new();
    assert!(
        reg.init_best().is_err(),
        "an empty registry has no best device"
    );
    assert!(reg.register(Arc::new(NullFamily)));
    assert!(
        !reg.register(Arc::new(NullFamily)),
        "families are not added twice"
    );
    assert_eq!(reg.family_by_name("null").unwrap().name(), "NULL");
    let d = reg.device_by_name("NULL0").unwrap();
    assert_eq!(d.device_type(), DeviceType::Gpu);
    assert!(reg.device_by_type(DeviceType::Cpu).is_err());
    assert!(reg.device_by_name("nope").is_err());
    assert_eq!(reg.init_best().unwrap().name(), "PLAIN");
    // Defaults: no host buffer type, no events, no offload, no host memory.
    assert!(d.host_buffer_type().is_none());
    assert!(d.new_event().is_err());
    let g = Graph::new();
    assert!(!d.offload_op(&g, TensorId::from_index(0)));
    assert!(
        d.buffer_from_host_memory(HostMemory::borrowed(vec![0u8; 4]), 4)
            .is_err()
    );
    let props = d.props();
    assert_eq!(props.name, "Null0");
    assert!(props.device_id.is_none());
    // A buffer type keeps a weak link to its device.
    let w: Weak<dyn Device> = Arc::downgrade(&d);
    let bt = HostBufferType::new("X", 10, Some(w));
    assert_eq!(bt.device().unwrap().name(), "Null0");
    assert!(same_buffer_type(bt.as_ref(), bt.as_ref()));
    assert!(!same_buffer_type(bt.as_ref(), host_buft(10).as_ref()));
}

#[test]
fn check_range_names_the_buffer() {
    match check_range("WEIGHTS", 10, 8, 4) {
        Err(Error::OutOfBounds(m)) => assert!(m.contains("WEIGHTS") && m.contains("offset 8")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn strided_copies_check_every_piece_first_and_never_loop_for_ever() {
    // Found by the bad-input suite: `usize::MAX` pieces at one place made
    // the default `write_2d` / `read_2d` loop for ever.
    let b = host_buft(1 << 20).alloc_buffer(64).unwrap();
    let mut out = [0u8; 16];
    for (piece, n, bs, ds) in [(1, usize::MAX, 0, 0), (4, 3, 2, 4)] {
        assert!(b.write_2d(0, &[7; 16], piece, n, bs, ds).is_err());
        assert!(b.read_2d(0, &mut out, piece, n, ds, bs).is_err());
    }
    // Nothing to copy is not an error; a piece past either side is, and
    // nothing is written then.
    b.write_2d(0, &[], 0, usize::MAX, 0, 0).unwrap();
    b.read_2d(0, &mut out, 3, 0, 0, 0).unwrap();
    assert!(matches!(
        b.write_2d(0, &[9; 16], 4, 4, 21, 4),
        Err(Error::OutOfBounds(_))
    ));
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [0; 16]);
    // Reading one piece of the buffer into several places is fine.
    b.write(0, &[1, 2, 3, 4]).unwrap();
    b.read_2d(0, &mut out, 4, 4, 0, 4).unwrap();
    assert_eq!(out, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
    // And one host piece into several places of the buffer.
    b.write_2d(8, &[5, 6], 2, 3, 4, 0).unwrap();
    let mut all = [0u8; 20];
    b.read(0, &mut all).unwrap();
    assert_eq!(all[8..18], [5, 6, 0, 0, 5, 6, 0, 0, 5, 6]);
}
