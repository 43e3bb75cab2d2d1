//! Bind groups kept from one compute to the next, and the parameter buffer
//! they share.
//!
//! A decoding step records the same few hundred dispatches over the same
//! buffers token after token; creating a bind group for each, and a fresh
//! uniform buffer for their parameter blocks, was a large share of the
//! host's time per token. Here every dispatch's bind group names the
//! device's one persistent parameter buffer with a dynamic offset (its
//! block's slot), so a bind group depends only on the kernel's layout and
//! the storage buffers: it is made once and found again in a map.
//!
//! The parameter buffer is rewritten by `queue.write_buffer` for each
//! submission (wgpu orders that copy after the work already submitted that
//! reads it). A submission holds [`Binds`]'s lock from that write to its
//! `queue.submit`, so two streams of one device cannot interleave their
//! parameter blocks. A buffer's entries are dropped with it
//! ([`Binds::forget`]), so the cache keeps no memory alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tessera::{Error, Result};

use crate::params::{PARAMS_SIZE, Params};

/// Most bind groups kept; past that the map starts over (a workload with
/// that many distinct buffer sets gains little from keeping them).
const MAX_GROUPS: usize = 16384;

/// A bind group's identity: its layout and storage buffers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    layout: usize,
    buffers: Vec<wgpu::Buffer>,
}

/// The per-device cache (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Binds {
    inner: Mutex<Cache>,
}

#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// The parameter buffer and its size in blocks.
    uniform: Option<(wgpu::Buffer, usize)>,
    groups: HashMap<Key, wgpu::BindGroup>,
}

impl Binds {
    /// The cache, for one submission: hold it until `queue.submit`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Cache> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drop every bind group that names `buffer` (it is being freed).
    pub(crate) fn forget(&self, buffer: &wgpu::Buffer) {
        self.lock()
            .groups
            .retain(|k, _| !k.buffers.iter().any(|b| b == buffer));
    }
}

impl Cache {
    /// Write `params` to the parameter buffer (block i at byte 256 i),
    /// growing it first where needed (a new buffer: the bind groups naming
    /// the old one are dropped).
    pub(crate) fn write_params(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        params: &[Params],
    ) -> Result<()> {
        if params.is_empty() {
            return Ok(());
        }
        let fits = self.uniform.as_ref().is_some_and(|u| u.1 >= params.len());
        if !fits {
            let blocks = params.len().next_power_of_two().max(64);
            let bytes = blocks
                .checked_mul(PARAMS_SIZE)
                .ok_or_else(|| Error::Overflow("the parameter buffer".into()))?;
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera-params"),
                size: bytes as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.uniform = Some((buffer, blocks));
            self.groups.clear();
        }
        if let Some((buffer, _)) = &self.uniform {
            queue.write_buffer(buffer, 0, bytemuck::cast_slice(params));
        }
        Ok(())
    }

    /// The bind group of a kernel with bind-group layout `layout` over
    /// `buffers` (bindings 1..), its parameter block bound by a dynamic
    /// offset: made on first use. Call after [`Cache::write_params`].
    pub(crate) fn group(
        &mut self,
        device: &wgpu::Device,
        layout: &Arc<wgpu::BindGroupLayout>,
        buffers: &[wgpu::Buffer],
    ) -> Option<wgpu::BindGroup> {
        let (uniform, _) = self.uniform.as_ref()?;
        let key = Key {
            layout: Arc::as_ptr(layout) as usize,
            buffers: buffers.to_vec(),
        };
        if let Some(g) = self.groups.get(&key) {
            return Some(g.clone());
        }
        if self.groups.len() >= MAX_GROUPS {
            self.groups.clear();
        }
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: uniform,
                offset: 0,
                size: wgpu::BufferSize::new(PARAMS_SIZE as u64),
            }),
        }];
        for (k, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: k as u32 + 1,
                resource: b.as_entire_binding(),
            });
        }
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        });
        self.groups.insert(key, group.clone());
        Some(group)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tessera::{DType, Graph, Stream};

    use crate::WgpuBuffer;

    #[test]
    fn kept_bind_groups_give_each_dispatch_its_parameters_and_go_with_their_buffers() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let stream = dev.new_wgpu_stream().unwrap();
        let n = 300;
        // Three dispatches over one compute buffer: the same storage
        // buffers and layout, so one kept bind group, three parameter blocks.
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[n]).unwrap();
        let b = g.input("b", DType::F32, &[n]).unwrap();
        let s = g.add(a, b).unwrap();
        let p = g.mul(s, b).unwrap();
        let q = g.sub(p, a).unwrap();
        g.set_output(q).unwrap();
        let (pl, galloc) = crate::test_placement(&dev, &g);
        let raw = pl
            .tensor(&g, q)
            .unwrap()
            .buffer()
            .as_any()
            .downcast_ref::<WgpuBuffer>()
            .and_then(|w| w.raw().cloned())
            .unwrap();
        for round in 0..3 {
            let x: Vec<f32> = (0..n).map(|i| (i + round) as f32 * 0.25).collect();
            let y: Vec<f32> = (0..n).map(|i| 3.0 - (i * round) as f32 * 0.125).collect();
            pl.tensor(&g, a).unwrap().write_f32(&x).unwrap();
            pl.tensor(&g, b).unwrap().write_f32(&y).unwrap();
            stream.compute(&g, &pl).unwrap();
            let got = pl.tensor(&g, q).unwrap().read_f32().unwrap();
            for i in 0..n {
                let want = (x[i] + y[i]) * y[i] - x[i];
                assert_eq!(got[i], want, "round {round}, element {i}");
            }
        }
        let held = |b: &wgpu::Buffer| {
            dev.core()
                .binds
                .lock()
                .groups
                .keys()
                .any(|k| k.buffers.contains(b))
        };
        assert!(held(&raw), "the compute's bind group is kept");
        drop(pl);
        drop(galloc);
        assert!(!held(&raw), "freeing the buffer drops its bind groups");
    }
}
