//! A dispatch being assembled ([`Call`]: bindings, buffers, the parameter
//! block) from tensors resolved to device memory ([`Operand`], [`operand`]):
//! what every kernel's encoder ([`crate::encode`], the fusions, the
//! integer products, attention) builds on.

use std::sync::Arc;

use tessera::{DType, Error, Graph, Layout, Placement, Result, TensorId};

use crate::batch::{Batch, WG};
use crate::buffer::WgpuBuffer;
use crate::device::Core;
use crate::params::Params;
use crate::pipelines::KernelKey;
use crate::support::elem_align;
use crate::wgsl::Binding;

/// Whether sources in a buffer the dispatch does not write are bound
/// read-only (the default) or read-write like the destination
/// (`TESSERA_WGPU_READ_ONLY=0`, for measuring one against the other).
fn read_only_sources() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TESSERA_WGPU_READ_ONLY").map_or(true, |v| v.trim() != "0"))
}

pub(crate) const SRC_NAMES: [&str; 6] = ["s0", "s1", "s2", "s3", "s4", "s5"];

/// A tensor resolved to device memory.
#[derive(Clone, Debug)]
pub(crate) struct Operand {
    pub(crate) layout: Layout,
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) offset: usize,
}

pub(crate) fn operand(
    core: &Arc<Core>,
    graph: &Graph,
    placement: &Placement,
    id: TensorId,
) -> Result<Option<Operand>> {
    let node = graph.node(id)?;
    let layout = node.layout;
    let place = placement.get(id).ok_or_else(|| Error::Unallocated {
        tensor: node.name.clone(),
        id: id.index(),
    })?;
    let buf = place
        .buffer
        .as_any()
        .downcast_ref::<WgpuBuffer>()
        .filter(|b| Arc::ptr_eq(b.core(), core))
        .ok_or_else(|| {
            Error::unsupported(
                &core.name,
                format!(
                    "tensor {} in buffer '{}' (its kernels read only {}'s own buffers)",
                    node.label(id),
                    place.buffer.name(),
                    core.name
                ),
            )
        })?;
    let bytes = layout.checked_nbytes()?;
    let raw = buf.range(place.offset, bytes)?;
    if place.offset % elem_align(layout.dtype) != 0 {
        return Err(Error::InvalidLayout(format!(
            "tensor {} ({layout}) at byte offset {} is not aligned to {} bytes",
            node.label(id),
            place.offset,
            elem_align(layout.dtype)
        )));
    }
    Ok(raw.map(|b| Operand {
        layout,
        buffer: b.clone(),
        offset: place.offset,
    }))
}

/// A dispatch being assembled: bindings, buffers and parameter block.
pub(crate) struct Call {
    pub(crate) bindings: Vec<Binding>,
    pub(crate) buffers: Vec<wgpu::Buffer>,
    pub(crate) params: Params,
}

impl Call {
    /// `dst` written (an output binding) and `srcs` read, in order; a missing
    /// source binds the destination's buffer as an unused placeholder.
    pub(crate) fn new(dst: &Operand, srcs: &[Option<&Operand>]) -> Result<Self> {
        let mut bindings = vec![Binding::output("d", dst.layout.dtype)];
        let mut buffers = vec![dst.buffer.clone()];
        let mut layouts = Vec::new();
        for (i, s) in srcs.iter().enumerate() {
            let (dtype, buffer, layout, offset) = match s {
                Some(o) => (o.layout.dtype, o.buffer.clone(), o.layout, o.offset),
                None => (DType::F32, dst.buffer.clone(), dst.layout, 0),
            };
            // Read-only where the dispatch writes nothing of its buffer.
            bindings.push(if buffer != dst.buffer && read_only_sources() {
                Binding::source(SRC_NAMES[i], dtype)
            } else {
                Binding::plain(SRC_NAMES[i], dtype)
            });
            buffers.push(buffer);
            layouts.push((layout, offset));
        }
        let refs: Vec<(&Layout, usize)> = layouts.iter().map(|(l, o)| (l, *o)).collect();
        let params = Params::new((&dst.layout, dst.offset), &refs)?;
        Ok(Call {
            bindings,
            buffers,
            params,
        })
    }

    /// Bind the destination's buffer, unused, for each source binding
    /// missing up to `n` (kernels that name more sources than a call uses).
    pub(crate) fn pad_sources(&mut self, n: usize) {
        while self.bindings.len() < n + 1 {
            let k = self.bindings.len() - 1;
            self.bindings.push(Binding::plain(SRC_NAMES[k], DType::F32));
            self.buffers.push(self.buffers[0].clone());
        }
    }

    /// Record it: `items` work items of an element kernel (256 per group).
    pub(crate) fn items(
        self,
        batch: &mut Batch<'_>,
        core: &Core,
        name: &'static str,
        body: &'static str,
        items: usize,
    ) -> Result<()> {
        let mut params = self.params.items(items)?;
        params.off2[2] = 0;
        self.record(batch, core, name, body, params, items.div_ceil(WG))
    }

    /// Record it with `groups` workgroups.
    pub(crate) fn record(
        self,
        batch: &mut Batch<'_>,
        core: &Core,
        name: &'static str,
        body: &'static str,
        params: Params,
        groups: usize,
    ) -> Result<()> {
        let key = KernelKey {
            name,
            body,
            bindings: self.bindings,
        };
        let kernel = core.pipelines.kernel(&core.device, &core.errors, &key)?;
        batch.dispatch(kernel, self.buffers, params, groups)
    }
}
