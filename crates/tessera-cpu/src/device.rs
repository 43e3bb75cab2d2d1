//! The CPU device and its family (ggml's `ggml_backend_cpu_device` and
//! `ggml_backend_cpu_reg`).
//!
//! One device, named `CPU`, reads and writes host memory directly: its
//! buffer type is the standard [`HostBufferType`] named "CPU", it can wrap
//! host memory it does not own (a memory-mapped model file) and it reads any
//! host buffer type. Its streams are synchronous ([`CpuStream`]), so its
//! events are always signalled ([`CpuEvent`]).

use std::any::Any;
use std::sync::{Arc, Weak};

use tessera::{
    Buffer, BufferType, Device, DeviceCaps, DeviceFamily, DeviceType, Error, Event, Graph,
    HostBuffer, HostBufferType, HostMemory, MemoryInfo, Result, Stream, TensorId,
};

use crate::event::CpuEvent;
use crate::stream::CpuStream;
use crate::{support, sysinfo};

/// The CPU device.
#[derive(Debug)]
pub struct CpuDevice {
    description: String,
    buft: Arc<HostBufferType>,
    me: Weak<CpuDevice>,
}

impl CpuDevice {
    /// A new CPU device (most programs use the process-wide
    /// [`crate::device()`]).
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<CpuDevice>| {
            let as_dyn: Weak<dyn Device> = me.clone();
            CpuDevice {
                description: sysinfo::cpu_description(),
                buft: HostBufferType::new("CPU", usize::MAX, Some(as_dyn)),
                me: me.clone(),
            }
        })
    }

    /// The device's buffer type, concretely typed.
    pub fn host_buffer_type(&self) -> Arc<HostBufferType> {
        self.buft.clone()
    }

    /// A new stream, concretely typed; `params` as for [`Device::new_stream`]:
    /// comma-separated `threads=N` (1 <= N <= [`crate::pool::MAX_THREADS`])
    /// and `isa=scalar|avx2`.
    pub fn new_cpu_stream(&self, params: &str) -> Result<Arc<CpuStream>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device("CPU", "the device is being dropped"))?;
        Ok(Arc::new(CpuStream::with_params(me, params)?))
    }
}

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "CPU"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn memory(&self) -> MemoryInfo {
        sysinfo::memory()
    }

    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: false,
            host_buffer: false,
            buffer_from_host_ptr: true,
            events: true,
        }
    }

    fn family_name(&self) -> &str {
        "CPU"
    }

    fn new_stream(&self, params: &str) -> Result<Arc<dyn Stream>> {
        Ok(self.new_cpu_stream(params)?)
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn buffer_from_host_memory(
        &self,
        memory: HostMemory,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        // Host memory needs no per-tensor limit: the CPU addresses it all.
        let _ = max_tensor_size;
        Ok(Arc::new(HostBuffer::from_memory(memory, self.buft.clone())))
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        support::supports_op(graph, id)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.is_host()
    }

    fn new_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(CpuEvent::new()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The CPU device family: one device.
#[derive(Debug)]
pub struct CpuFamily {
    device: Arc<CpuDevice>,
}

impl CpuFamily {
    /// The family of `device`.
    pub fn new(device: Arc<CpuDevice>) -> Self {
        CpuFamily { device }
    }

    /// The device, concretely typed.
    pub fn cpu_device(&self) -> Arc<CpuDevice> {
        self.device.clone()
    }
}

impl DeviceFamily for CpuFamily {
    fn name(&self) -> &str {
        "CPU"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        vec![self.device.clone()]
    }

    fn features(&self) -> Vec<(String, String)> {
        sysinfo::features()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
