//! Tessera: one tensor compute graph, run on any mix of devices.
//!
//! This crate is the object model of the ggml backend system, in Rust:
//!
//! | ggml | Tessera |
//! |---|---|
//! | `ggml_backend_reg` | [`DeviceFamily`], [`Registry`] |
//! | `ggml_backend_dev` | [`Device`] |
//! | `ggml_backend_buffer_type` | [`BufferType`] |
//! | `ggml_backend_buffer` | [`Buffer`] ([`MultiBuffer`]) |
//! | `ggml_backend` | [`Stream`] |
//! | `ggml_backend_event` | [`Event`] |
//! | allocated `ggml_tensor` | [`Tensor`], [`Placement`] |
//! | `ggml_tallocr`, `ggml_gallocr` | [`alloc`] |
//! | `ggml_backend_graph_copy`, `_compare_graph_backend` | [`graph_copy()`] |
//! | `ggml_backend_sched` | [`Scheduler`] ([`sched`]) |
//!
//! It re-exports the device-free core ([`tessera_core`]): types, layouts,
//! ops and the validating graph builder. Every fallible call returns
//! [`Result`]; nothing a user, a file or a peer controls can abort.

pub mod alloc;
pub mod buffer;
mod cache_dir;
pub mod device;
pub mod element;
pub mod event;
pub mod graph_copy;
pub mod host;
pub mod host_region;
pub mod multi_buffer;
pub mod placement;
pub mod profile;
pub mod registry;
pub mod sched;
pub mod stream;
pub mod stream_options;
pub mod tensor;

pub use tessera_core::{
    DType, Error, Flags, GluOp, Graph, Layout, MAX_DIMS, MAX_SRC, MUL_MAT_WEIGHT_TYPES, Node, Op,
    Result, RopeMode, RopeParams, SortOrder, TensorId, UnaryOp, cpy_supported, dtype, error, graph,
    layout, op, quant,
};

pub use alloc::{GraphAllocator, LinearAllocator, TensorSet, alloc_tensors, alloc_tensors_size};
pub use buffer::{Buffer, BufferType, BufferUsage, Copied, copy_between, same_buffer_type};
pub use cache_dir::cache_dir;
pub use device::{Device, DeviceCaps, DeviceProps, DeviceType, MemoryInfo, supports_graph};
pub use element::Element;
pub use event::Event;
pub use graph_copy::{GraphCopy, compare_graph, compare_graph_nodes, graph_copy};
pub use host::{HostBuffer, HostBufferType, HostMemory};
pub use host_region::{HostAccessLock, HostGuard, HostRegion};
pub use multi_buffer::MultiBuffer;
pub use placement::{Place, Placement};
pub use registry::{DeviceFamily, Registry};
pub use sched::{EvalCallback, OpOffload, Reason, Scheduler, SchedulerOptions, Split, SplitInput};
pub use stream::{AbortCallback, PendingRead, Stream, copy_async};
pub use stream_options::StreamOptions;
pub use tensor::Tensor;
