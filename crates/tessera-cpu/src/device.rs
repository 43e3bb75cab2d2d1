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
    HostBuffer, HostBufferType, HostMemory, MemoryInfo, Result, Stream, StreamOptions, TensorId,
};

use crate::event::CpuEvent;
use crate::repack::RepackBufferType;
use crate::stream::CpuStream;
use crate::{support, sysinfo};

/// The CPU device.
#[derive(Debug)]
pub struct CpuDevice {
    description: String,
    buft: Arc<HostBufferType>,
    repack: Arc<RepackBufferType>,
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
                buft: HostBufferType::new("CPU", usize::MAX, Some(as_dyn.clone())),
                repack: RepackBufferType::new(Some(as_dyn)),
                me: me.clone(),
            }
        })
    }

    /// The device's buffer type (host memory), concretely typed. (The
    /// trait's [`Device::host_buffer_type`] means *pinned* host memory of a
    /// device with memory of its own; the CPU has none and says `None`.)
    pub fn cpu_buffer_type(&self) -> Arc<HostBufferType> {
        self.buft.clone()
    }

    /// A new stream, concretely typed; options as for [`Device::new_stream`]
    /// (see [`CpuStream::with_options`]).
    pub fn new_cpu_stream(&self, options: &StreamOptions) -> Result<Arc<CpuStream>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device("CPU", "the device is being dropped"))?;
        Ok(Arc::new(CpuStream::with_options(me, options)?))
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
            buffer_from_host_memory: true,
            events: true,
        }
    }

    fn family_name(&self) -> &str {
        "CPU"
    }

    fn new_stream(&self, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        Ok(self.new_cpu_stream(options)?)
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    /// `CPU_REPACK` ([`crate::repack`]): weights stored in the layout of
    /// the matrix kernels, on CPUs whose kernels read that layout fast
    /// (AVX-512 VNNI; elsewhere only portable kernels would, so weights
    /// keep the file's layout). A process limited to AVX2 by
    /// `TESSERA_CPU_ISA` gets none either.
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        if crate::isa::Isa::from_env().has_avx512() {
            vec![self.repack.clone()]
        } else {
            Vec::new()
        }
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
        buft.is_host() || buft.as_any().is::<RepackBufferType>()
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
