//! Devices: one physical or logical compute device (ggml's `ggml_backend_dev`).
//!
//! A device reports what it is (props, caps, memory), decides what it can run
//! ([`Device::supports_op`], the only placement oracle, which must be honest
//! and cheap) and what memory it can read ([`Device::supports_buffer_type`]),
//! and creates streams, buffers and events.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use crate::buffer::{Buffer, BufferType};
use crate::event::Event;
use crate::host::HostMemory;
use crate::stream::Stream;
use crate::stream_options::StreamOptions;
use crate::{Error, Graph, Result, TensorId};

/// Kind of device (ggml's `ggml_backend_dev_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// A CPU using system memory.
    Cpu,
    /// A GPU with its own memory.
    Gpu,
    /// An integrated GPU using host memory.
    IGpu,
    /// An accelerator used together with the CPU (BLAS, AMX).
    Accel,
    /// Several devices presented as one (tensor parallelism).
    Meta,
}

impl DeviceType {
    /// Upper-case name as ggml prints it.
    pub const fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Gpu => "GPU",
            DeviceType::IGpu => "IGPU",
            DeviceType::Accel => "ACCEL",
            DeviceType::Meta => "META",
        }
    }
}

/// What a device can do beyond the basics (ggml's `ggml_backend_dev_caps`),
/// answered without creating anything. Only what no method answers cheaply
/// is here: whether a device has a pinned host buffer type is
/// `host_buffer_type().is_some()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Stream operations may return before they complete.
    pub async_ops: bool,
    /// [`Device::buffer_from_host_memory`] works (the default refuses).
    pub buffer_from_host_memory: bool,
    /// [`Device::new_event`] works (the default refuses).
    pub events: bool,
}

/// Free and total memory in bytes, and whether the figures are measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes free.
    pub free: usize,
    /// Bytes in total.
    pub total: usize,
    /// The figures are an estimate, not a measurement.
    pub estimated: bool,
}

/// Everything a device reports about itself (ggml's `ggml_backend_dev_props`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Short unique name, e.g. `CPU`.
    pub name: String,
    /// Human description, e.g. the CPU model.
    pub description: String,
    /// Memory.
    pub memory: MemoryInfo,
    /// Kind.
    pub device_type: DeviceType,
    /// PCI bus id or similar, lower case, when known.
    pub device_id: Option<String>,
    /// Capabilities.
    pub caps: DeviceCaps,
}

/// One compute device.
pub trait Device: Send + Sync + Debug {
    /// Short unique name, e.g. `CPU`, `Vulkan0`.
    fn name(&self) -> &str;

    /// Human description.
    fn description(&self) -> &str;

    /// Free and total memory.
    fn memory(&self) -> MemoryInfo;

    /// Kind of device.
    fn device_type(&self) -> DeviceType;

    /// Capabilities.
    fn caps(&self) -> DeviceCaps;

    /// Bus id, when known (used to drop duplicate devices).
    fn device_id(&self) -> Option<String> {
        None
    }

    /// All properties at once.
    fn props(&self) -> DeviceProps {
        DeviceProps {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            memory: self.memory(),
            device_type: self.device_type(),
            device_id: self.device_id(),
            caps: self.caps(),
        }
    }

    /// Name of the family (registry entry) that enumerates this device
    /// (ggml's `ggml_backend_dev_backend_reg`).
    fn family_name(&self) -> &str;

    /// A new stream (execution queue) on this device (ggml's
    /// `ggml_backend_dev_init`). A thread count the device cannot honour, or
    /// a setting it does not know, is an error.
    fn new_stream(&self, options: &StreamOptions) -> Result<Arc<dyn Stream>>;

    /// The preferred buffer type: device memory.
    fn buffer_type(&self) -> Arc<dyn BufferType>;

    /// A pinned host buffer type for fast transfers, if the device has one.
    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        None
    }

    /// More buffer types the device offers (e.g. repacked weight layouts).
    fn extra_buffer_types(&self) -> Vec<Arc<dyn BufferType>> {
        Vec::new()
    }

    /// Wrap host memory the device does not own (e.g. a memory-mapped file)
    /// in a buffer, with tensors up to `max_tensor_size` bytes. Only when
    /// `caps().buffer_from_host_memory`; the default says it is unsupported.
    fn buffer_from_host_memory(
        &self,
        memory: HostMemory,
        max_tensor_size: usize,
    ) -> Result<Arc<dyn Buffer>> {
        let _ = (memory, max_tensor_size);
        Err(Error::unsupported(self.name(), "buffers over host memory"))
    }

    /// Can this device compute node `id` of `graph`, with its operands' types
    /// and layouts? Must be honest: the scheduler falls back on `false`.
    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool;

    /// Can this device's kernels read tensors in buffers of `buft`?
    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool;

    /// Should node `id` run here even though its weights live in host memory
    /// (worth the copy)? Default: no.
    fn offload_op(&self, graph: &Graph, id: TensorId) -> bool {
        let _ = (graph, id);
        false
    }

    /// A new event, if the device has events.
    fn new_event(&self) -> Result<Arc<dyn Event>> {
        Err(Error::unsupported(self.name(), "events"))
    }

    /// For downcasting to the concrete type (device-specific functions).
    fn as_any(&self) -> &dyn Any;
}

/// `true` if every op node of `graph` is supported by `device`.
pub fn supports_graph(device: &dyn Device, graph: &Graph) -> bool {
    graph
        .op_ids()
        .all(|id| graph.nodes()[id.index()].op.is_view() || device.supports_op(graph, id))
}
