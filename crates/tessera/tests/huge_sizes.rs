//! Sizes that come from a caller never reach the allocator unchecked: reads
//! past a tensor are range errors before anything is allocated, and host
//! vectors too large to allocate are [`Error::OutOfMemory`], not a
//! "capacity overflow" panic or an allocation-failure abort (issue 9).
//!
//! The huge tensors here live in a fake device buffer that claims a size it
//! does not have; the requested sizes (1 PiB, more than `isize::MAX`) can
//! never be mapped, whatever the machine's overcommit policy.

#![allow(clippy::unwrap_used)]

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use tessera::buffer::{UsageCell, check_range, try_zeroed_vec};
use tessera::*;

const TIB: usize = 1 << 40;
const PIB: usize = 1 << 50;

/// Device memory that claims `size` bytes and reads as zeros.
#[derive(Debug)]
struct Phantom {
    size: usize,
    buft: Arc<dyn BufferType>,
    usage: UsageCell,
    /// Length of every read, in order.
    reads: std::sync::Mutex<Vec<usize>>,
}

impl Buffer for Phantom {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn name(&self) -> &str {
        "PHANTOM"
    }
    fn size(&self) -> usize {
        self.size
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_range("PHANTOM", self.size, offset, data.len())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range("PHANTOM", self.size, offset, out.len())?;
        self.reads.lock().unwrap().push(out.len());
        out.fill(0);
        Ok(())
    }
    fn fill(&self, offset: usize, len: usize, _value: u8) -> Result<()> {
        check_range("PHANTOM", self.size, offset, len)
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

fn phantom(size: usize) -> Arc<dyn Buffer> {
    Arc::new(Phantom {
        size,
        buft: HostBufferType::new("PHANTOM", usize::MAX, None),
        usage: UsageCell::default(),
        reads: Default::default(),
    })
}

/// A stream that keeps every default method, `get_async` included.
#[derive(Debug)]
struct DefaultStream;

impl Stream for DefaultStream {
    fn name(&self) -> &str {
        "DEFAULT"
    }
    fn device(&self) -> Arc<dyn Device> {
        Arc::new(NoDevice)
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn compute_async(&self, _g: &Graph, _p: &Placement, _r: Range<usize>) -> Result<()> {
        Err(Error::unsupported("DEFAULT", "compute"))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct NoDevice;

impl Device for NoDevice {
    fn name(&self) -> &str {
        "No0"
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
        "NO"
    }
    fn new_stream(&self, _options: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        Ok(Arc::new(DefaultStream))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        HostBufferType::new("NO", usize::MAX, None)
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

fn is_oom<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(Error::OutOfMemory { .. }))
}

#[test]
fn default_get_async_checks_the_range_before_allocating() {
    let buft = HostBufferType::new("HOST", usize::MAX, None);
    let l = Layout::contiguous(DType::F32, &[16]).unwrap();
    let t = Tensor::new(l, buft.alloc_buffer(64).unwrap(), 0).unwrap();
    t.write_slice(&[1.5f32; 16]).unwrap();
    let s = DefaultStream;
    for len in [
        usize::MAX,
        usize::MAX - 1,
        usize::MAX - 7,
        usize::MAX - 63,
        TIB,
    ] {
        for offset in [0, 8, 64] {
            match s.get_async(&t, offset, len) {
                Err(Error::OutOfBounds(msg)) => assert!(msg.contains(&len.to_string()), "{msg}"),
                other => panic!("len {len} at {offset}: expected OutOfBounds, got {other:?}"),
            }
        }
    }
    // In-range reads still work.
    let bytes = s.get_async(&t, 60, 4).unwrap().wait().unwrap();
    assert_eq!(bytes, 1.5f32.to_le_bytes());
}

#[test]
fn reads_of_tensors_too_large_for_the_host_are_out_of_memory() {
    // 1 PiB of f32 and i32, and a tensor past isize::MAX bytes.
    let buf = phantom(usize::MAX);
    let f = Tensor::new(
        Layout::contiguous(DType::F32, &[PIB / 4]).unwrap(),
        buf.clone(),
        0,
    )
    .unwrap();
    assert!(is_oom(f.to_bytes()));
    assert!(is_oom(f.read_f32()));
    assert!(is_oom(f.read_vec::<f32>()));
    let i = Tensor::new(
        Layout::contiguous(DType::I32, &[PIB / 4]).unwrap(),
        buf.clone(),
        0,
    )
    .unwrap();
    assert!(is_oom(i.read_vec::<i32>()));
    let huge = usize::MAX / 8 * 8 - 8;
    let l = Layout::contiguous(DType::I64, &[huge / 8]).unwrap();
    let h = Tensor::new(l, buf.clone(), 0).unwrap();
    assert!(is_oom(h.to_bytes()));
    assert!(is_oom(h.read_vec::<i64>()));
    // The error names the request.
    match try_zeroed_vec(usize::MAX - 3, "a test vector") {
        Err(Error::OutOfMemory {
            requested, detail, ..
        }) => {
            assert_eq!(requested, usize::MAX - 3);
            assert!(detail.contains("a test vector"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn staging_copies_move_bounded_pieces() {
    // A copy between two device buffers goes through host staging of at
    // most 16 MiB at a time, whatever the length asked for: the length
    // never sizes an allocation.
    let (a, b) = (phantom(PIB), phantom(PIB));
    let len = (40 << 20) + 5;
    copy_between(a.as_ref(), 3, b.as_ref(), 0, len).unwrap();
    let reads = a
        .as_any()
        .downcast_ref::<Phantom>()
        .unwrap()
        .reads
        .lock()
        .unwrap()
        .clone();
    assert_eq!(reads, vec![16 << 20, 16 << 20, (8 << 20) + 5]);
    // Out-of-range copies are range errors, checked first.
    assert!(matches!(
        copy_between(a.as_ref(), 8, b.as_ref(), 0, PIB),
        Err(Error::OutOfBounds(_))
    ));
    assert!(matches!(
        copy_between(a.as_ref(), 0, b.as_ref(), 0, usize::MAX - 1),
        Err(Error::OutOfBounds(_))
    ));
}
