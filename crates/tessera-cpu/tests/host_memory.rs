//! Soundness of the CPU device's access to host memory (issue 9, defect 1):
//! a safe `impl Buffer` that lies about its size cannot make the CPU read or
//! write outside the memory its region vouches for, and a compute's writes
//! never race with a read of the same bytes from another thread.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tessera::{
    Buffer, BufferType, BufferUsage, DType, Device, Error, Graph, HostRegion, Place, Placement,
    Tensor, copy_between,
};

/// Safe code claiming 1 GiB while forwarding the region of a 256-byte
/// buffer: before issue 9 the CPU trusted `size()` and read past the end.
#[derive(Debug)]
struct Liar(Arc<dyn Buffer>);

impl Buffer for Liar {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.0.buffer_type()
    }
    fn name(&self) -> &str {
        "liar"
    }
    fn size(&self) -> usize {
        1 << 30
    }
    fn host_region(&self) -> Option<HostRegion<'_>> {
        self.0.host_region()
    }
    fn write(&self, offset: usize, data: &[u8]) -> tessera::Result<()> {
        self.0.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> tessera::Result<()> {
        self.0.read(offset, out)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> tessera::Result<()> {
        self.0.fill(offset, len, value)
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::Any
    }
    fn set_usage(&self, _usage: BufferUsage) {}
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn small() -> Arc<dyn Buffer> {
    tessera_cpu::device()
        .buffer_type()
        .alloc_buffer(256)
        .unwrap()
}

#[test]
fn a_buffer_lying_about_its_size_cannot_move_the_cpu_out_of_bounds() {
    let liar: Arc<dyn Buffer> = Arc::new(Liar(small()));
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[1024]).unwrap();
    let out = g.scale(a, 2.0).unwrap();
    let mut p = Placement::new(&g);
    // Both far past the 256 bytes that really exist, inside the claimed GiB.
    for (id, offset) in [(a, 1 << 20), (out, 2 << 20)] {
        let buffer = liar.clone();
        p.set(&g, id, Place { buffer, offset }).unwrap();
    }
    let s = tessera_cpu::device()
        .new_stream(&tessera::StreamOptions::new().threads(2))
        .unwrap();
    match s.compute(&g, &p) {
        Err(Error::OutOfBounds(m)) => assert!(m.contains("liar"), "{m}"),
        other => panic!("expected OutOfBounds, got {other:?}"),
    }
}

#[test]
fn copies_check_the_region_not_the_claimed_size() {
    let liar = Liar(small());
    let host = small();
    for (what, r) in [
        ("from", copy_between(&liar, 4096, host.as_ref(), 0, 64)),
        ("into", copy_between(host.as_ref(), 0, &liar, 4096, 64)),
    ] {
        assert!(matches!(r, Err(Error::OutOfBounds(_))), "{what}: {r:?}");
    }
    // In bounds it works, both ways, and the bytes arrive.
    host.write(0, &[7u8; 64]).unwrap();
    copy_between(host.as_ref(), 0, &liar, 64, 64).unwrap();
    let mut back = [0u8; 64];
    liar.read(64, &mut back).unwrap();
    assert_eq!(back, [7u8; 64]);
}

#[test]
fn a_copy_within_one_buffer_handles_overlap() {
    let b = small();
    let bytes: Vec<u8> = (0..=255).collect();
    b.write(0, &bytes).unwrap();
    copy_between(b.as_ref(), 0, b.as_ref(), 16, 128).unwrap();
    let mut out = vec![0u8; 256];
    b.read(0, &mut out).unwrap();
    assert_eq!(&out[16..144], &bytes[0..128], "memmove semantics");
    assert_eq!(&out[..16], &bytes[..16]);
}

/// A read of a tensor that a compute on another thread is writing waits for
/// the compute (the buffer's lock), so it sees the finished result: before
/// issue 9 it read the bytes mid-compute (a data race, and here the old
/// values).
#[test]
fn a_read_during_a_compute_waits_for_it() {
    let dev = tessera_cpu::device();
    let n = 256;
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[n]).unwrap();
    let mut y = x;
    for _ in 0..64 {
        y = g.scale(y, 1.0).unwrap();
    }
    let out = g.add(y, x).unwrap();
    let bytes = 4 * n;
    let buffer = dev.buffer_type().alloc_buffer(bytes * g.len()).unwrap();
    let mut p = Placement::new(&g);
    for id in g.ids() {
        let b = buffer.clone();
        let offset = bytes * id.index();
        p.set(&g, id, Place { buffer: b, offset }).unwrap();
    }
    let t_out = Tensor::new(
        g.node(out).unwrap().layout,
        buffer.clone(),
        bytes * out.index(),
    )
    .unwrap();
    let t_x = Tensor::new(g.node(x).unwrap().layout, buffer.clone(), 0).unwrap();
    t_x.write(0, bytemuck::cast_slice(&vec![1.5f32; n]))
        .unwrap();
    t_out
        .write(0, bytemuck::cast_slice(&vec![-1.0f32; n]))
        .unwrap();

    let stream = dev
        .new_stream(&tessera::StreamOptions::new().threads(1))
        .unwrap();
    let started = Arc::new(Barrier::new(2));
    let once = Arc::new(AtomicBool::new(false));
    {
        let (started, once) = (started.clone(), once.clone());
        // Polled before each node while the compute holds the buffer: on the
        // first poll, let the reader go, then keep the compute busy.
        stream
            .set_abort_callback(Some(Arc::new(move || {
                if !once.swap(true, Ordering::SeqCst) {
                    started.wait();
                    std::thread::sleep(Duration::from_millis(300));
                }
                false
            })))
            .unwrap();
    }
    let reader = {
        let t_out = t_out.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            started.wait();
            let mut bytes = vec![0u8; 4 * n];
            t_out.read(0, &mut bytes).unwrap();
            bytemuck::cast_slice::<u8, f32>(&bytes).to_vec()
        })
    };
    stream.compute(&g, &p).unwrap();
    let seen = reader.join().unwrap();
    assert!(
        seen.iter().all(|&v| v == 3.0),
        "the read saw the tensor before the compute finished: {:?}",
        &seen[..4]
    );
}
