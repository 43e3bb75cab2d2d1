//! A batch of GPU work recorded into one command buffer: kernel dispatches
//! (each with its parameter block) and buffer copies, in order.
//!
//! All parameter blocks of a batch go into one uniform buffer, each dispatch
//! binding its own 256-byte window; consecutive dispatches share one compute
//! pass (wgpu inserts the barriers between dependent dispatches), a copy
//! ends the pass. A graph compute is one batch, hence one submission.

use std::sync::Arc;

use tessera::{Error, Result};

use crate::device::Core;
use crate::params::{PARAMS_SIZE, Params};
use crate::pipelines::Kernel;

/// Workgroup width of element kernels (`@workgroup_size(256)`).
pub(crate) const WG: usize = 256;

enum Step {
    Dispatch {
        kernel: Arc<Kernel>,
        buffers: Vec<wgpu::Buffer>,
        params: usize,
        groups: [u32; 2],
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

/// GPU work being recorded.
pub(crate) struct Batch<'a> {
    core: &'a Core,
    params: Vec<Params>,
    steps: Vec<Step>,
}

impl<'a> Batch<'a> {
    /// An empty batch on `core`.
    pub(crate) fn new(core: &'a Core) -> Self {
        Batch {
            core,
            params: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// The 2-D grid of `groups` workgroups (each dimension within the limit).
    pub(crate) fn grid(&self, groups: usize) -> Result<[u32; 2]> {
        let max = (self.core.limits.max_compute_workgroups_per_dimension as usize).max(1);
        let groups = groups.max(1);
        let x = groups.min(max);
        let y = groups.div_ceil(x);
        if y > max {
            return Err(Error::unsupported(
                &self.core.name,
                format!("a dispatch of {groups} workgroups (at most {max} x {max})"),
            ));
        }
        Ok([x as u32, y as u32])
    }

    /// Record a dispatch of `kernel` over `groups` workgroups (a 2-D grid),
    /// with `buffers` bound at 1.. and `params` at 0.
    pub(crate) fn dispatch(
        &mut self,
        kernel: Arc<Kernel>,
        buffers: Vec<wgpu::Buffer>,
        params: Params,
        groups: usize,
    ) -> Result<()> {
        let groups = self.grid(groups)?;
        self.params.push(params);
        self.steps.push(Step::Dispatch {
            kernel,
            buffers,
            params: self.params.len() - 1,
            groups,
        });
        Ok(())
    }

    /// Record a buffer-to-buffer copy (offsets and size multiples of 4,
    /// different buffers).
    pub(crate) fn copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: usize,
        dst: &wgpu::Buffer,
        dst_offset: usize,
        size: usize,
    ) {
        self.steps.push(Step::Copy {
            src: src.clone(),
            src_offset: src_offset as u64,
            dst: dst.clone(),
            dst_offset: dst_offset as u64,
            size: size as u64,
        });
    }

    /// The recorded work as one command buffer (`None` if empty).
    pub(crate) fn finish(self, what: &str) -> Result<Option<wgpu::CommandBuffer>> {
        if self.steps.is_empty() {
            return Ok(None);
        }
        let core = self.core;
        let param_bytes = self.params.len() * PARAMS_SIZE;
        let made = core.scoped(what, param_bytes, || -> Result<wgpu::CommandBuffer> {
            let uniform = if self.params.is_empty() {
                None
            } else {
                let buf = core.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tessera-params"),
                    size: param_bytes as u64,
                    usage: wgpu::BufferUsages::UNIFORM,
                    mapped_at_creation: true,
                });
                {
                    let mut view = buf.get_mapped_range_mut(..).map_err(|e| {
                        Error::device(
                            &core.name,
                            format!("{what}: mapping the parameter buffer: {e}"),
                        )
                    })?;
                    view.copy_from_slice(bytemuck::cast_slice(&self.params));
                }
                buf.unmap();
                Some(buf)
            };
            let mut encoder = core
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(what) });
            let mut i = 0;
            while i < self.steps.len() {
                if let Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } = &self.steps[i]
                {
                    encoder.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size);
                    i += 1;
                    continue;
                }
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(what),
                    timestamp_writes: None,
                });
                while let Some(Step::Dispatch {
                    kernel,
                    buffers,
                    params,
                    groups,
                }) = self.steps.get(i)
                {
                    if let Some(uniform) = &uniform {
                        let mut entries = vec![wgpu::BindGroupEntry {
                            binding: 0,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: uniform,
                                offset: (*params * PARAMS_SIZE) as u64,
                                size: wgpu::BufferSize::new(PARAMS_SIZE as u64),
                            }),
                        }];
                        for (k, b) in buffers.iter().enumerate() {
                            entries.push(wgpu::BindGroupEntry {
                                binding: k as u32 + 1,
                                resource: b.as_entire_binding(),
                            });
                        }
                        let group = core.device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: None,
                            layout: &kernel.layout,
                            entries: &entries,
                        });
                        pass.set_pipeline(&kernel.pipeline);
                        pass.set_bind_group(0, &group, &[]);
                        pass.dispatch_workgroups(groups[0], groups[1], 1);
                    }
                    i += 1;
                }
            }
            Ok(encoder.finish())
        })?;
        made.map(Some)
    }

    /// Record nothing more: submit the batch (if not empty) and return the
    /// submission index.
    pub(crate) fn submit(self, what: &str) -> Result<Option<wgpu::SubmissionIndex>> {
        let core = self.core;
        match self.finish(what)? {
            Some(cb) => core.submit(what, vec![cb]).map(Some),
            None => Ok(None),
        }
    }
}
