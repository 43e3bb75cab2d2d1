//! The wgpu device: one logical `wgpu::Device` on an adapter, as a Tessera
//! [`Device`].
//!
//! `Core` is what buffers, streams and events share: the wgpu device and
//! its one queue, the limits, the error sink and the pipeline caches.
//! [`WgpuDevice`] adds the Tessera face: props, buffer types, `supports_op`.
//! Several `WgpuDevice`s may be opened on one adapter (logical devices); they
//! do not share memory, so tensors move between them through the host.

use std::any::Any;
use std::sync::{Arc, Weak};

use tessera::{
    BufferType, Device, DeviceCaps, DeviceType, Error, Event, Graph, HostBufferType, MemoryInfo,
    Result, Stream, TensorId,
};

use crate::adapter::AdapterSummary;
use crate::binds::Binds;
use crate::buffer::WgpuBufferType;
use crate::errors::ErrorSink;
use crate::event::WgpuEvent;
use crate::pipelines::Pipelines;
use crate::stream::WgpuStream;
use crate::support;

/// Options for opening a device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceOptions {
    /// Device name; default `WGPU<adapter index>`.
    pub name: Option<String>,
    /// Cap on the size of one buffer (and so of one binding), below the
    /// adapter's storage binding limit; tests use it to exercise chunking
    /// with small graphs.
    pub max_buffer_size: Option<usize>,
}

/// What buffers, streams and events of one device share.
#[derive(Debug)]
pub(crate) struct Core {
    pub name: String,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub errors: Arc<ErrorSink>,
    pub pipelines: Pipelines,
    /// Bind groups and the parameter buffer, kept between computes.
    pub binds: Binds,
    /// Largest buffer (= largest binding): every buffer is bound whole.
    pub max_buffer: usize,
    /// Nanoseconds per GPU timestamp tick, when the device can time its
    /// compute passes (profiling).
    pub timestamp_period: Option<f32>,
    /// The adapter's smallest subgroup, when the device was opened with
    /// subgroup operations ([`crate::subgroups`]).
    pub smallest_subgroup: Option<u32>,
    /// The adapter's largest subgroup, likewise.
    pub largest_subgroup: Option<u32>,
    /// The side of the cooperative matrices the many-column products take,
    /// when the device was opened with them ([`crate::coopmat`]).
    pub coop_side: Option<u32>,
    /// The cooperative-matrix kernels the device refused to compile (a bit
    /// per [`crate::coopmat::Kind`]): their products go back to the
    /// integer tiles.
    pub coop_refused: std::sync::atomic::AtomicU8,
    /// Staging buffers kept for the next reads.
    pub staging: crate::staging::StagingPool,
}

impl Core {
    /// Run `f` inside error scopes (see [`ErrorSink::scoped`]).
    pub(crate) fn scoped<T>(&self, what: &str, bytes: usize, f: impl FnOnce() -> T) -> Result<T> {
        self.errors.scoped(&self.device, what, bytes, f)
    }

    /// Block until submission `index` (or everything, if `None`) has completed.
    pub(crate) fn wait(&self, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
        let r = self.device.poll(wgpu::PollType::Wait {
            submission_index: index,
            timeout: None,
        });
        if let Err(e) = r {
            return Err(Error::device(
                &self.name,
                format!("waiting for the queue: {e}"),
            ));
        }
        self.errors.check()
    }

    /// Process finished work (and run its callbacks) without blocking.
    pub(crate) fn poll_now(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Poll)
            .map(|_| ())
            .map_err(|e| Error::device(&self.name, format!("polling the queue: {e}")))
    }

    /// Submit `commands` and return the submission's index.
    pub(crate) fn submit(
        &self,
        what: &str,
        commands: Vec<wgpu::CommandBuffer>,
    ) -> Result<wgpu::SubmissionIndex> {
        #[cfg(test)]
        crate::batch::counts::SUBMISSIONS.with(|c| c.set(c.get() + 1));
        self.scoped(what, 0, || self.queue.submit(commands))
    }

    /// Flush pending queue writes with an empty submission; its index is
    /// reached once everything submitted so far has completed.
    pub(crate) fn mark(&self) -> Result<wgpu::SubmissionIndex> {
        self.submit("submitting to the queue", Vec::new())
    }
}

/// A Tessera device on a wgpu adapter.
#[derive(Debug)]
pub struct WgpuDevice {
    core: Arc<Core>,
    summary: AdapterSummary,
    description: String,
    buft: Arc<WgpuBufferType>,
    host_buft: Arc<HostBufferType>,
    me: Weak<WgpuDevice>,
}

impl WgpuDevice {
    /// Open a new logical device on `adapter`, named `default_name` unless
    /// `options` says otherwise.
    pub fn open(
        adapter: &wgpu::Adapter,
        default_name: &str,
        options: &DeviceOptions,
    ) -> Result<Arc<Self>> {
        let name = options
            .name
            .clone()
            .unwrap_or_else(|| default_name.to_owned());
        let summary = AdapterSummary::of(adapter);
        let limits = adapter.limits();
        // Timestamps only time compute passes for profiling, subgroup
        // operations speed reductions up: an adapter without them still
        // opens, and so does one that refuses a device with subgroups.
        let features = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
        let open =
            |features: wgpu::Features| crate::coopmat::request(adapter, features, limits.clone());
        // Cooperative matrices need subgroups (the kernel names its
        // subgroups): TESSERA_WGPU_SUBGROUPS=0 turns both off.
        let coop_side = crate::subgroups::wanted(adapter)
            .then(|| crate::coopmat::side(adapter))
            .flatten();
        let with_coop = coop_side
            .and_then(|_| open(features | crate::coopmat::FEATURES).ok())
            .map(|opened| (opened, coop_side));
        let with_subgroups = with_coop.or_else(|| {
            crate::subgroups::wanted(adapter)
                .then(|| open(features | wgpu::Features::SUBGROUP).ok())
                .flatten()
                .map(|opened| (opened, None))
        });
        let info = adapter.get_info();
        let (smallest_subgroup, largest_subgroup) = match with_subgroups {
            Some(_) => (Some(info.subgroup_min_size), Some(info.subgroup_max_size)),
            None => (None, None),
        };
        let ((device, queue), coop_side) = match with_subgroups {
            Some(opened) => opened,
            None => (
                open(features)
                    .map_err(|e| Error::device(&name, format!("opening {}: {e}", summary.name)))?,
                None,
            ),
        };
        let errors = ErrorSink::new(&name);
        errors.install(&device);
        let binding = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        // Shaders address bytes with u32; keep every binding below 4 GiB.
        let mut max_buffer =
            usize::try_from(binding.min(u64::from(u32::MAX))).unwrap_or(usize::MAX) & !3;
        if let Some(cap) = options.max_buffer_size {
            max_buffer = max_buffer.min(cap & !3);
        }
        let alignment = (limits.min_storage_buffer_offset_alignment as usize).max(16);
        let description = summary.description();
        let timestamp_period = features
            .contains(wgpu::Features::TIMESTAMP_QUERY)
            .then(|| queue.get_timestamp_period());
        let core = Arc::new(Core {
            name: name.clone(),
            device,
            queue,
            limits,
            errors,
            pipelines: Pipelines::default(),
            binds: Binds::default(),
            max_buffer,
            timestamp_period,
            smallest_subgroup,
            largest_subgroup,
            coop_side,
            coop_refused: Default::default(),
            staging: Default::default(),
        });
        Ok(Arc::new_cyclic(|me: &Weak<WgpuDevice>| {
            let as_dyn: Weak<dyn Device> = me.clone();
            WgpuDevice {
                buft: WgpuBufferType::new(core.clone(), alignment, as_dyn.clone()),
                host_buft: HostBufferType::new(&format!("{name}_Host"), usize::MAX, Some(as_dyn)),
                core,
                summary,
                description,
                me: me.clone(),
            }
        }))
    }

    /// The adapter this device runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.summary
    }

    /// The device-local buffer type, concretely typed.
    pub fn wgpu_buffer_type(&self) -> Arc<WgpuBufferType> {
        self.buft.clone()
    }

    /// The wgpu limits the device was opened with.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.core.limits
    }

    /// The adapter's smallest subgroup, where the device was opened with
    /// subgroup operations and its reductions use them (the adapter has
    /// them and `TESSERA_WGPU_SUBGROUPS` is not `0`); `None`: the kernels
    /// reduce by trees in workgroup memory.
    pub fn subgroup_size(&self) -> Option<u32> {
        self.core.smallest_subgroup
    }

    /// The side of the cooperative matrices (f16, summed in f32) that
    /// products of many columns by quantized weights take, where the
    /// device was opened with them (the adapter has them and
    /// `TESSERA_WGPU_COOPMAT` is not `0`).
    pub fn cooperative_matrix_side(&self) -> Option<u32> {
        self.core.coop_side
    }

    /// Largest buffer, which is also the largest binding.
    pub fn max_buffer_size(&self) -> usize {
        self.core.max_buffer
    }

    /// Number of kernels compiled so far (pipelines are cached per device).
    pub fn compiled_kernels(&self) -> usize {
        self.core.pipelines.compiled()
    }

    /// A new stream, concretely typed.
    pub fn new_wgpu_stream(&self) -> Result<Arc<WgpuStream>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(&self.core.name, "the device is being dropped"))?;
        Ok(Arc::new(WgpuStream::new(me)))
    }

    /// Destroy the wgpu device now (for example to give its memory back
    /// before the last handle goes). The device counts as lost: every later
    /// call on it, its buffers, streams and events returns [`Error::Device`].
    pub fn destroy(&self) {
        self.core.device.destroy();
        // wgpu reports the loss on the next poll; make it visible at once.
        let _ = self.core.device.poll(wgpu::PollType::Poll);
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

impl Device for WgpuDevice {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn memory(&self) -> MemoryInfo {
        self.summary.memory(self.core.limits.max_buffer_size)
    }

    fn device_type(&self) -> DeviceType {
        self.summary.device_type
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: true,
            buffer_from_host_memory: false,
            events: true,
        }
    }

    fn device_id(&self) -> Option<String> {
        self.summary.pci_bus_id.clone()
    }

    fn family_name(&self) -> &str {
        "wgpu"
    }

    fn new_stream(&self, options: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        if *options != tessera::StreamOptions::new() {
            return Err(Error::unsupported(
                &self.core.name,
                format!("stream options '{options}' (wgpu streams take none)"),
            ));
        }
        Ok(self.new_wgpu_stream()?)
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn host_buffer_type(&self) -> Option<Arc<dyn BufferType>> {
        Some(self.host_buft.clone())
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        support::supports_op(graph, id)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.as_any()
            .downcast_ref::<WgpuBufferType>()
            .is_some_and(|b| Arc::ptr_eq(b.core(), &self.core))
    }

    fn new_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(WgpuEvent::new(self.core.clone())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
