//! A device that computes with the reference: host buffers
//! ([`tessera::HostBufferType`]) and a stream that evaluates graphs with
//! [`crate::reference`] and writes the stored results back.
//!
//! It supports every op, so the whole catalogue must pass on it: that checks
//! the harness's own plumbing (placement, guards, encoding and decoding)
//! end to end. It is also a second, trivially correct device for tests of
//! multi-device machinery (the scheduler, graph copies). A post-compute hook
//! lets a test sabotage the results to check that the harness notices.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Weak};

use tessera::{
    BufferType, Device, DeviceCaps, DeviceType, Error, Graph, HostBufferType, MemoryInfo,
    Placement, Result, Stream, TensorId,
};

use crate::reference::{self, RefMemory};

/// Called after every compute with the graph and placement.
pub type ComputeHook = Arc<dyn Fn(&Graph, &Placement) -> Result<()> + Send + Sync>;

/// The reference device.
pub struct ReferenceDevice {
    buft: Arc<HostBufferType>,
    hook: Option<ComputeHook>,
    unsupported: Vec<&'static str>,
    me: Weak<ReferenceDevice>,
}

impl std::fmt::Debug for ReferenceDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceDevice")
            .field("hook", &self.hook.is_some())
            .field("unsupported", &self.unsupported)
            .finish()
    }
}

impl ReferenceDevice {
    /// A reference device supporting every op.
    pub fn new() -> Arc<Self> {
        Self::build(None, Vec::new())
    }

    /// A reference device that runs `hook` after each compute and reports
    /// the ops named in `unsupported` (display names: `MUL_MAT`, `SILU`) as
    /// not supported.
    pub fn with_hook(hook: Option<ComputeHook>, unsupported: Vec<&'static str>) -> Arc<Self> {
        Self::build(hook, unsupported)
    }

    fn build(hook: Option<ComputeHook>, unsupported: Vec<&'static str>) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<ReferenceDevice>| {
            let dev: Weak<dyn Device> = me.clone();
            ReferenceDevice {
                buft: HostBufferType::new("REF", usize::MAX, Some(dev)),
                hook,
                unsupported,
                me: me.clone(),
            }
        })
    }
}

impl Device for ReferenceDevice {
    fn name(&self) -> &str {
        "REF"
    }

    fn description(&self) -> &str {
        "Tessera f64 reference (testkit)"
    }

    fn memory(&self) -> MemoryInfo {
        MemoryInfo {
            free: 0,
            total: 0,
            estimated: true,
        }
    }

    fn device_type(&self) -> DeviceType {
        DeviceType::Cpu
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }

    fn family_name(&self) -> &str {
        "REF"
    }

    fn new_stream(&self, options: &tessera::StreamOptions) -> Result<Arc<dyn Stream>> {
        options.only("REF", &[])?;
        let device = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device("REF", "the device was dropped"))?;
        Ok(Arc::new(ReferenceStream { device }))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        graph
            .node(id)
            .is_ok_and(|n| !self.unsupported.contains(&n.op.display_name()))
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        buft.is_host()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The reference device's stream: computes synchronously.
#[derive(Debug)]
pub struct ReferenceStream {
    device: Arc<ReferenceDevice>,
}

impl Stream for ReferenceStream {
    fn name(&self) -> &str {
        "REF"
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        placement.check_complete(graph, range.clone())?;
        let mut mem = RefMemory::new(graph)?;
        let roots: Vec<TensorId> = graph
            .ids()
            .filter(|&id| !graph.nodes()[id.index()].is_view() && placement.get(id).is_some())
            .collect();
        for &id in &roots {
            let t = placement.tensor(graph, id)?;
            mem.set_bytes(id, &t.to_bytes()?)?;
        }
        reference::evaluate_range(graph, &mut mem, range.clone())?;
        // Write back every root an op in the range wrote.
        let end = range.end.min(graph.len());
        for id in graph
            .ids()
            .skip(range.start)
            .take(end.saturating_sub(range.start))
        {
            let node = &graph.nodes()[id.index()];
            if node.is_leaf() || node.op.is_view() {
                continue;
            }
            let (root, _) = graph.memory_root(id)?;
            placement.tensor(graph, root)?.write(0, &mem.bytes(root)?)?;
        }
        if let Some(hook) = &self.device.hook {
            hook(graph, placement)?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
