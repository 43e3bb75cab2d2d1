//! A device decorator for multi-device tests: [`Refusing`] presents another
//! device (e.g. the CPU) as a device of its own, with its own memory kind,
//! that refuses the ops a predicate names.
//!
//! It is the legitimate way to force splits on one machine: the scheduler
//! sees two devices whose memories the other cannot read (the decorator's
//! buffer type is not host memory, so the CPU asks for copies; the decorator
//! reads only its own), and ops move between them exactly where the
//! predicate says. Computation is forwarded to the wrapped device's streams,
//! so results are the wrapped device's.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Weak};

use tessera::buffer::Copied;
use tessera::{
    AbortCallback, Buffer, BufferType, BufferUsage, Device, DeviceCaps, DeviceType, Error, Event,
    Graph, HostRegion, Layout, MemoryInfo, PendingRead, Placement, Result, Stream, StreamOptions,
    Tensor, TensorId,
};

/// Which nodes the decorator refuses.
pub type RefuseFn = dyn Fn(&Graph, TensorId) -> bool + Send + Sync;

/// Another device under a new name, with its own memory kind, refusing
/// chosen ops.
pub struct Refusing {
    name: String,
    inner: Arc<dyn Device>,
    refuse: Box<RefuseFn>,
    buft: Arc<WrappedType>,
    /// Use the wrapped device's memory (an accelerator sharing host memory)
    /// instead of a memory kind of its own.
    shares_memory: bool,
}

impl std::fmt::Debug for Refusing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusing")
            .field("name", &self.name)
            .field("inner", &self.inner.name())
            .finish()
    }
}

impl Refusing {
    /// `inner` as a device named `name` that refuses the nodes `refuse` names.
    pub fn new(
        inner: Arc<dyn Device>,
        name: &str,
        refuse: impl Fn(&Graph, TensorId) -> bool + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::build(inner, name, Box::new(refuse), false)
    }

    /// `inner` as an accelerator named `name` that computes in `inner`'s own
    /// memory (like BLAS or AMX beside the CPU: same buffer type), refusing
    /// the nodes `refuse` names.
    pub fn sharing_memory(
        inner: Arc<dyn Device>,
        name: &str,
        refuse: impl Fn(&Graph, TensorId) -> bool + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::build(inner, name, Box::new(refuse), true)
    }

    fn build(
        inner: Arc<dyn Device>,
        name: &str,
        refuse: Box<RefuseFn>,
        shares_memory: bool,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<Refusing>| {
            let dev: Weak<dyn Device> = me.clone();
            Refusing {
                name: name.to_owned(),
                buft: Arc::new_cyclic(|bt| WrappedType {
                    name: name.to_owned(),
                    inner: inner.buffer_type(),
                    device: dev,
                    me: bt.clone(),
                }),
                inner,
                refuse,
                shares_memory,
            }
        })
    }
}

impl Device for Refusing {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "test decorator refusing chosen ops"
    }
    fn memory(&self) -> MemoryInfo {
        self.inner.memory()
    }
    fn device_type(&self) -> DeviceType {
        if self.shares_memory {
            DeviceType::Accel
        } else {
            DeviceType::Gpu
        }
    }
    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }
    fn family_name(&self) -> &str {
        "TEST"
    }
    fn new_stream(&self, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        let device = self
            .buft
            .device
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "dropped"))?;
        Ok(Arc::new(WrappedStream {
            inner: self.inner.new_stream(options)?,
            device,
        }))
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        if self.shares_memory {
            self.inner.buffer_type()
        } else {
            self.buft.clone()
        }
    }
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        !(self.refuse)(graph, id) && self.inner.supports_op(graph, id)
    }
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        if self.shares_memory {
            self.inner.supports_buffer_type(buft)
        } else {
            tessera::same_buffer_type(buft, self.buft.as_ref())
        }
    }
    fn offload_op(&self, graph: &Graph, id: TensorId) -> bool {
        // Like a GPU: take batches of 32 rows or more.
        graph.node(id).is_ok_and(|n| n.layout.ne[1] >= 32)
    }
    fn new_event(&self) -> Result<Arc<dyn Event>> {
        self.inner.new_event()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The decorator's memory kind: the wrapped device's memory, reported as
/// device memory (not host).
#[derive(Debug)]
struct WrappedType {
    name: String,
    inner: Arc<dyn BufferType>,
    device: Weak<dyn Device>,
    me: Weak<WrappedType>,
}

impl BufferType for WrappedType {
    fn name(&self) -> &str {
        &self.name
    }
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "dropped"))?;
        Ok(Arc::new(WrappedBuffer {
            inner: self.inner.alloc_buffer(size)?,
            buft: me,
        }))
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn max_size(&self) -> usize {
        self.inner.max_size()
    }
    fn alloc_size(&self, layout: &Layout) -> usize {
        self.inner.alloc_size(layout)
    }
    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.upgrade()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct WrappedBuffer {
    inner: Arc<dyn Buffer>,
    buft: Arc<WrappedType>,
}

impl Buffer for WrappedBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn name(&self) -> &str {
        &self.buft.name
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn host_region(&self) -> Option<HostRegion<'_>> {
        self.inner.host_region()
    }
    fn is_host(&self) -> bool {
        false
    }
    fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.inner.read(offset, out)
    }
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.inner.fill(offset, len, value)
    }
    fn copy_from(
        &self,
        dst_offset: usize,
        src: &dyn Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<Copied> {
        self.inner.copy_from(dst_offset, src, src_offset, len)
    }
    fn usage(&self) -> BufferUsage {
        self.inner.usage()
    }
    fn set_usage(&self, usage: BufferUsage) {
        self.inner.set_usage(usage)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug)]
struct WrappedStream {
    inner: Arc<dyn Stream>,
    device: Arc<dyn Device>,
}

impl Stream for WrappedStream {
    fn name(&self) -> &str {
        self.device.name()
    }
    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }
    fn set_async(&self, dst: &Tensor, offset: usize, data: Vec<u8>) -> Result<()> {
        self.inner.set_async(dst, offset, data)
    }
    fn get_async(&self, src: &Tensor, offset: usize, len: usize) -> Result<PendingRead> {
        self.inner.get_async(src, offset, len)
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        self.inner.compute_async(graph, placement, range)
    }
    fn record_event(&self, event: &dyn Event) -> Result<()> {
        self.inner.record_event(event)
    }
    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        self.inner.wait_event(event)
    }
    fn set_n_threads(&self, n: usize) -> Result<()> {
        self.inner.set_n_threads(n)
    }
    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        self.inner.set_abort_callback(callback)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
