//! [`MetaDevice`]: N devices presented as one (ggml's meta backend).
//!
//! To the scheduler and to users it is one [`Device`]: one buffer type,
//! memory the sum of the devices', an op supported when every device runs
//! it. Weights and caches are allocated split with
//! [`MetaDevice::alloc_split`]; compute memory is planned by the graph
//! allocator as for any device; the stream ([`crate::MetaStream`]) runs each
//! graph as per-device graphs with the collectives between them.

use std::any::Any;
use std::sync::{Arc, Weak};

use tessera::alloc::{PlanningType, alloc_tensors};
use tessera::{
    BufferType, BufferUsage, Device, DeviceCaps, DeviceType, Error, Graph, Layout, MemoryInfo,
    Result, Stream, StreamOptions, Tensor, TensorId,
};

use crate::buffer::{MetaBuffer, MetaBufferType, StaticTensor};
use crate::policy::SplitPolicy;
use crate::state::SplitState;

/// Options of a meta device.
#[derive(Clone, Debug, Default)]
pub struct MetaOptions {
    /// For tests: split every contiguous graph input in mirror memory along
    /// a pseudo-random axis with pseudo-random (possibly empty) slices from
    /// this seed, so that every op's split rules run on plain graphs.
    pub split_inputs: Option<u64>,
    /// How partial sums are all-reduced.
    pub all_reduce: AllReduce,
}

/// How a partial sum is all-reduced (the collectives of `crate::collective`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllReduce {
    /// Exchange for two devices or small tensors, reduce-scatter +
    /// all-gather otherwise.
    #[default]
    Auto,
    /// Every device copies its partial sum to every other device and each
    /// adds them all: one copy step, `(n-1) S` bytes into each device.
    Exchange,
    /// Reduce-scatter then all-gather: each device sums one chunk, then
    /// everyone collects the chunks: `2 (n-1)/n S` bytes into each device.
    ReduceScatter,
}

/// Several devices as one.
pub struct MetaDevice {
    name: String,
    description: String,
    devices: Vec<Arc<dyn Device>>,
    buft: Arc<MetaBufferType>,
    policy: SplitPolicy,
    options: MetaOptions,
    planning: bool,
}

impl std::fmt::Debug for MetaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaDevice")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .finish()
    }
}

impl MetaDevice {
    /// `devices` (any families, the same device more than once is fine:
    /// each gets streams of its own) as one device that splits tensors in
    /// the proportions of `policy`.
    pub fn new(
        devices: Vec<Arc<dyn Device>>,
        policy: SplitPolicy,
        options: MetaOptions,
    ) -> Result<Arc<MetaDevice>> {
        let bufts = devices.iter().map(|d| d.buffer_type()).collect();
        MetaDevice::with_buffer_types(devices, bufts, policy, options, false)
    }

    /// A twin of this device that splits as `policy` says and allocates
    /// nothing: its devices' buffer types are planning types
    /// ([`PlanningType`]), so weights, caches, compute buffers and its
    /// streams' per-device memory are laid out exactly as on a real one,
    /// and their sizes can be read, without memory. For fitting a model
    /// before loading it; its streams plan graphs ([`crate::MetaStream::prepare`])
    /// but cannot run them.
    pub fn planning(&self, policy: SplitPolicy) -> Result<Arc<MetaDevice>> {
        let bufts = self
            .devices
            .iter()
            .map(|d| PlanningType::wrap(d.buffer_type()))
            .collect();
        MetaDevice::with_buffer_types(
            self.devices.clone(),
            bufts,
            policy,
            self.options.clone(),
            true,
        )
    }

    /// Whether this is a planning twin (see [`MetaDevice::planning`]).
    pub fn is_planning(&self) -> bool {
        self.planning
    }

    fn with_buffer_types(
        devices: Vec<Arc<dyn Device>>,
        bufts: Vec<Arc<dyn BufferType>>,
        policy: SplitPolicy,
        options: MetaOptions,
        planning: bool,
    ) -> Result<Arc<MetaDevice>> {
        if devices.is_empty() {
            return Err(Error::device(
                "Meta",
                "a meta device needs at least one device",
            ));
        }
        if policy.ratios().len() != devices.len() {
            return Err(Error::InvalidLayout(format!(
                "{} split ratios for {} devices",
                policy.ratios().len(),
                devices.len()
            )));
        }
        let names: Vec<String> = devices.iter().map(|d| d.name().to_owned()).collect();
        let name = format!(
            "Meta({}){}",
            names.join(","),
            if planning { " (planning)" } else { "" }
        );
        Ok(Arc::new_cyclic(|me: &Weak<MetaDevice>| {
            let dev: Weak<dyn Device> = me.clone();
            MetaDevice {
                description: format!("tensor parallelism over {}", names.join(", ")),
                buft: Arc::new_cyclic(|bt| MetaBufferType {
                    name: name.clone(),
                    bufts,
                    device: dev,
                    meta: me.clone(),
                    me: bt.clone(),
                }),
                name,
                devices,
                policy,
                options,
                planning,
            }
        }))
    }

    /// The devices, in order.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The split policy.
    pub fn policy(&self) -> &SplitPolicy {
        &self.policy
    }

    /// The options.
    pub fn options(&self) -> &MetaOptions {
        &self.options
    }

    /// The meta buffer type (concrete).
    pub fn meta_buffer_type(&self) -> &Arc<MetaBufferType> {
        &self.buft
    }

    /// Allocate tensors held as `states` say (weights, caches): each
    /// device's pieces packed in buffers of its own buffer type. The
    /// tensors live in one static [`MetaBuffer`]; host writes scatter and
    /// reads gather. A [`SplitState::Partial`] tensor cannot be allocated.
    pub fn alloc_split(
        &self,
        tensors: &[(Layout, SplitState)],
        usage: BufferUsage,
    ) -> Result<(Arc<MetaBuffer>, Vec<Tensor>)> {
        let n = self.devices.len();
        let mut per_device: Vec<Vec<Layout>> = vec![Vec::new(); n];
        let mut which: Vec<Vec<Option<usize>>> = Vec::with_capacity(tensors.len());
        for (layout, state) in tensors {
            let mut w = vec![None; n];
            for (j, slot) in w.iter_mut().enumerate() {
                let piece = share_layout(layout, state, j)?;
                if let Some(l) = piece {
                    *slot = Some(per_device[j].len());
                    per_device[j].push(l);
                }
            }
            which.push(w);
        }
        let sets = per_device
            .iter()
            .enumerate()
            .map(|(j, layouts)| {
                if layouts.is_empty() {
                    Ok(None)
                } else {
                    alloc_tensors(&self.buft.bufts[j], layouts, usage).map(Some)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let pieces = which
            .iter()
            .map(|w| {
                w.iter()
                    .enumerate()
                    .map(|(j, k)| k.and_then(|k| sets[j].as_ref().map(|s| s.tensors[k].clone())))
                    .collect()
            })
            .collect();
        self.static_buffer(tensors, pieces, usage)
    }

    /// Tensors held as `states` say over memory that already exists: for
    /// each tensor, each device's piece (`None` where its share is empty),
    /// e.g. views of a memory-mapped file that every device can read (zero
    /// copy). Each piece must have the layout its share needs and live in
    /// memory its device reads.
    pub fn bind_split(
        &self,
        tensors: &[(Layout, SplitState)],
        pieces: Vec<Vec<Option<Tensor>>>,
        usage: BufferUsage,
    ) -> Result<(Arc<MetaBuffer>, Vec<Tensor>)> {
        if pieces.len() != tensors.len() {
            return Err(Error::InvalidLayout(format!(
                "{} tensors but pieces for {}",
                tensors.len(),
                pieces.len()
            )));
        }
        for ((layout, state), ps) in tensors.iter().zip(&pieces) {
            if ps.len() != self.devices.len() {
                return Err(Error::InvalidLayout(format!(
                    "{} pieces of {layout} for {} devices",
                    ps.len(),
                    self.devices.len()
                )));
            }
            for (j, p) in ps.iter().enumerate() {
                let want = share_layout(layout, state, j)?;
                match (want, p) {
                    (None, None) => {}
                    (Some(w), Some(p)) if *p.layout() == w => {
                        let bt = p.buffer().buffer_type();
                        if !self.devices[j].supports_buffer_type(bt.as_ref()) {
                            return Err(Error::unsupported(
                                self.devices[j].name(),
                                format!("reading a piece in buffer '{}'", p.buffer().name()),
                            ));
                        }
                    }
                    _ => {
                        return Err(Error::InvalidLayout(format!(
                            "device {j}'s piece of {layout} ({state:?}) does not have the layout of its share"
                        )));
                    }
                }
            }
        }
        self.static_buffer(tensors, pieces, usage)
    }

    fn static_buffer(
        &self,
        tensors: &[(Layout, SplitState)],
        pieces: Vec<Vec<Option<Tensor>>>,
        usage: BufferUsage,
    ) -> Result<(Arc<MetaBuffer>, Vec<Tensor>)> {
        let align = self.buft.alignment().max(1);
        let mut offset = 0usize;
        let mut statics = Vec::with_capacity(tensors.len());
        for ((layout, state), pieces) in tensors.iter().zip(pieces) {
            statics.push(StaticTensor {
                offset,
                layout: *layout,
                state: state.clone(),
                pieces,
            });
            let bytes = layout.checked_nbytes()?;
            offset = offset
                .checked_add(bytes)
                .and_then(|o| o.checked_next_multiple_of(align))
                .ok_or_else(|| Error::Overflow("split buffer size".into()))?;
        }
        let buffer = Arc::new(MetaBuffer::new_static(
            self.buft.clone(),
            offset,
            statics.clone(),
            usage,
        ));
        let dynbuf: Arc<dyn tessera::Buffer> = buffer.clone();
        let out = statics
            .iter()
            .map(|t| Tensor::new(t.layout, dynbuf.clone(), t.offset))
            .collect::<Result<Vec<_>>>()?;
        Ok((buffer, out))
    }
}

/// Device `j`'s share of a tensor of `layout` held as `state` (checked):
/// the whole layout when mirrored, its piece when split (`None`: empty).
fn share_layout(layout: &Layout, state: &SplitState, j: usize) -> Result<Option<Layout>> {
    match state {
        SplitState::Mirrored => Ok(Some(*layout)),
        SplitState::Split(s) => {
            crate::state::Split::new(layout, s.axis, s.sizes.clone())?;
            s.piece_layout(layout, j)
        }
        SplitState::Partial => Err(Error::InvalidLayout(format!(
            "a partial tensor ({layout}) cannot be allocated or bound"
        ))),
    }
}

impl Device for MetaDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn memory(&self) -> MemoryInfo {
        let mut m = MemoryInfo::default();
        for d in &self.devices {
            let dm = d.memory();
            m.free = m.free.saturating_add(dm.free);
            m.total = m.total.saturating_add(dm.total);
            m.estimated |= dm.estimated;
        }
        m
    }

    fn device_type(&self) -> DeviceType {
        DeviceType::Meta
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }

    fn family_name(&self) -> &str {
        "Meta"
    }

    fn new_stream(&self, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        // A thread count is for the devices that have threads: the others
        // get the same options without it.
        let mut unthreaded = StreamOptions::new();
        for (k, v) in options.settings() {
            unthreaded = unthreaded.set(k, v);
        }
        let streams = self
            .devices
            .iter()
            .map(|d| match d.new_stream(options) {
                Err(Error::Unsupported { .. })
                    if options.thread_count().ok().flatten().is_some() =>
                {
                    d.new_stream(&unthreaded)
                }
                other => other,
            })
            .collect::<Result<Vec<_>>>()?;
        let device = self
            .buft
            .device
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "dropped"))?;
        Ok(Arc::new(crate::stream::MetaStream::new(
            self.name.clone(),
            device,
            self.devices.clone(),
            self.buft.bufts.clone(),
            streams,
            self.options.clone(),
            self.planning,
        )?))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        self.devices.iter().all(|d| d.supports_op(graph, id))
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        tessera::same_buffer_type(buft, self.buft.as_ref())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
