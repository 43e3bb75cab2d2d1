//! Sabotaged devices: wrappers that forward everything to a real device but
//! break one guarantee, so that a test can prove a check notices.
//!
//! [`skip_events`] wraps a device so that its streams' `record_event` and/or
//! `wait_event` return `Ok(())` and do nothing. Events are still created by
//! the wrapped device, so a skipped recording leaves the event "never
//! recorded" (signalled) and a skipped wait lets the stream run ahead. On a
//! synchronous device that is harmless (there is nothing to order); on an
//! asynchronous one, [`crate::contract::check_events`] must fail, and on the
//! [`crate::gated::GatedDevice`] it fails every time.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Weak};

use tessera::{
    AbortCallback, Buffer, BufferType, Device, DeviceCaps, DeviceType, Error, Event, Graph,
    HostMemory, MemoryInfo, PendingRead, Placement, Result, Stream, Tensor, TensorId,
};

/// Which event operations the wrapper turns into no-ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipEvents {
    /// `record_event` does nothing.
    pub record: bool,
    /// `wait_event` does nothing.
    pub wait: bool,
}

/// `inner`, with the event operations named by `skip` doing nothing.
pub fn skip_events(inner: Arc<dyn Device>, skip: SkipEvents) -> Arc<dyn Device> {
    Arc::new_cyclic(|me| Saboteur {
        inner,
        skip,
        me: me.clone(),
    })
}

/// The wrapping device.
#[derive(Debug)]
struct Saboteur {
    inner: Arc<dyn Device>,
    skip: SkipEvents,
    me: Weak<Saboteur>,
}

impl Device for Saboteur {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn memory(&self) -> MemoryInfo {
        self.inner.memory()
    }

    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }

    fn caps(&self) -> DeviceCaps {
        self.inner.caps()
    }

    fn device_id(&self) -> Option<String> {
        self.inner.device_id()
    }

    fn family_name(&self) -> &str {
        self.inner.family_name()
    }

    fn new_stream(&self, params: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        let device = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(self.inner.name(), "the device was dropped"))?;
        Ok(Arc::new(SaboteurStream {
            inner: self.inner.new_stream(params)?,
            device,
        }))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.inner.buffer_type()
    }

    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        self.inner.host_buffer_type()
    }

    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        self.inner.extra_buffer_types()
    }

    fn buffer_from_host_memory(
        &self,
        memory: HostMemory,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        self.inner.buffer_from_host_memory(memory, max_tensor_size)
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        self.inner.supports_op(graph, id)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        self.inner.supports_buffer_type(buft)
    }

    fn offload_op(&self, graph: &Graph, id: TensorId) -> bool {
        self.inner.offload_op(graph, id)
    }

    fn new_event(&self) -> Result<Arc<dyn Event>> {
        self.inner.new_event()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream that forwards everything but the skipped event operations.
#[derive(Debug)]
struct SaboteurStream {
    inner: Arc<dyn Stream>,
    device: Arc<Saboteur>,
}

impl Stream for SaboteurStream {
    fn name(&self) -> &str {
        self.inner.name()
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

    fn copy_from_async(
        &self,
        src_stream: &dyn Stream,
        src: &Tensor,
        dst: &Tensor,
    ) -> Result<tessera::Copied> {
        self.inner.copy_from_async(src_stream, src, dst)
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

    fn compute(&self, graph: &Graph, placement: &Placement) -> Result<()> {
        self.inner.compute(graph, placement)
    }

    fn record_event(&self, event: &dyn Event) -> Result<()> {
        if self.device.skip.record {
            return Ok(());
        }
        self.inner.record_event(event)
    }

    fn wait_event(&self, event: &dyn Event) -> Result<()> {
        if self.device.skip.wait {
            return Ok(());
        }
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
