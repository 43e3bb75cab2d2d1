//! A batch of GPU work recorded into one command buffer: kernel dispatches
//! (each with its parameter block) and buffer copies, in order.
//!
//! All parameter blocks of a batch go into the device's parameter buffer,
//! each dispatch binding its own 256-byte window by a dynamic offset, with
//! a bind group kept from compute to compute ([`crate::binds`]);
//! consecutive dispatches share one compute pass (wgpu inserts the barriers
//! between dependent dispatches), a copy ends the pass. A graph compute is
//! one batch, submitted in parts ([`Batch::submit_part`]) so that the GPU
//! runs the first dispatches while the host records the next ones.
//!
//! A timed batch ([`Batch::timed`], for profiles) labels its dispatches and,
//! where the device has timestamps, gives each dispatch a pass of its own
//! with a GPU timestamp at its start and end ([`Timing`]).

use std::sync::Arc;

use tessera::profile::OpTotals;
use tessera::{Error, Result};

use crate::binds::Cache;
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

/// Most dispatches a timed batch times (two timestamps each, within
/// WebGPU's 4096 queries per set); later ones run untimed.
const MAX_TIMED: usize = 2048;

/// GPU work being recorded.
pub(crate) struct Batch<'a> {
    core: &'a Core,
    params: Vec<Params>,
    steps: Vec<Step>,
    /// The label of every dispatch so far, when timed.
    labels: Option<Vec<String>>,
    /// The label of the dispatches recorded next.
    label: String,
}

/// The timestamps of a submitted timed batch, to be read once it completed.
pub(crate) struct Timing {
    readback: wgpu::Buffer,
    labels: Vec<String>,
    period: f32,
}

impl Timing {
    /// Record the copy of the `2 labels.len()` timestamps of `queries` into
    /// a buffer the host can read.
    fn resolve(
        core: &Core,
        encoder: &mut wgpu::CommandEncoder,
        queries: &wgpu::QuerySet,
        labels: Vec<String>,
        period: f32,
    ) -> Timing {
        let count = 2 * labels.len() as u32;
        let bytes = u64::from(count) * 8;
        let buffer = |label, usage| {
            core.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolve = buffer(
            "tessera-timestamps",
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        );
        let readback = buffer(
            "tessera-timestamps-read",
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        encoder.resolve_query_set(queries, 0..count, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &readback, 0, bytes);
        Timing {
            readback,
            labels,
            period,
        }
    }

    /// Wait for the batch, read its timestamps and add each dispatch's GPU
    /// time to `totals` under its label.
    pub(crate) fn fold(self, core: &Core, totals: &mut OpTotals) -> Result<()> {
        let slot = Arc::new(std::sync::Mutex::new(None));
        let done = slot.clone();
        self.readback
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                *done.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        core.wait(None)?;
        let mapped = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if !matches!(mapped, Some(Ok(()))) {
            return Err(Error::device(
                &core.name,
                "mapping the GPU timestamps failed",
            ));
        }
        let ticks: Vec<u64> = {
            let view = self.readback.get_mapped_range(..).map_err(|e| {
                Error::device(&core.name, format!("reading the GPU timestamps: {e}"))
            })?;
            view.chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()
        };
        self.readback.unmap();
        for (what, t) in self.labels.iter().zip(ticks.chunks_exact(2)) {
            let ns = t[1].saturating_sub(t[0]) as f64 * f64::from(self.period);
            totals.add(what, ns as u64, 0);
        }
        Ok(())
    }
}

impl<'a> Batch<'a> {
    /// An empty batch on `core`.
    pub(crate) fn new(core: &'a Core) -> Self {
        Batch {
            core,
            params: Vec::new(),
            steps: Vec::new(),
            labels: None,
            label: String::new(),
        }
    }

    /// An empty batch whose dispatches are labelled (and timed where the
    /// device has timestamps).
    pub(crate) fn timed(core: &'a Core) -> Self {
        Batch {
            labels: Some(Vec::new()),
            ..Batch::new(core)
        }
    }

    /// Label the dispatches recorded from now on (timed batches).
    pub(crate) fn set_label(&mut self, what: String) {
        if self.labels.is_some() {
            self.label = what;
        }
    }

    /// Add `suffix` to the label of the dispatches recorded from now on
    /// (timed batches): a fused recording that took in one more node.
    pub(crate) fn extend_label(&mut self, suffix: &str) {
        if self.labels.is_some() {
            self.label.push_str(suffix);
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
        #[cfg(test)]
        counts::DISPATCHES.with(|c| c.set(c.get() + 1));
        if let Some(labels) = &mut self.labels {
            labels.push(self.label.clone());
        }
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

    /// The recorded work as one command buffer (`None` if empty), with the
    /// timestamps of a timed batch.
    fn finish(
        self,
        what: &str,
        binds: &mut Cache,
    ) -> Result<(Option<wgpu::CommandBuffer>, Option<Timing>)> {
        if self.steps.is_empty() {
            return Ok((None, None));
        }
        let core = self.core;
        // Timestamps for the first MAX_TIMED dispatches of a timed batch.
        let timed = match (&self.labels, core.timestamp_period) {
            (Some(l), Some(period)) if !l.is_empty() => {
                let n = l.len().min(MAX_TIMED);
                Some((n, period))
            }
            _ => None,
        };
        let param_bytes = self.params.len() * PARAMS_SIZE;
        let made = core.scoped(
            what,
            param_bytes,
            || -> Result<(wgpu::CommandBuffer, Option<Timing>)> {
                binds.write_params(&core.device, &core.queue, &self.params)?;
                let mut encoder = core
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(what) });
                let queries = timed.map(|(n, _)| {
                    core.device.create_query_set(&wgpu::QuerySetDescriptor {
                        label: Some("tessera-timestamps"),
                        ty: wgpu::QueryType::Timestamp,
                        count: 2 * n as u32,
                    })
                });
                let mut d = 0usize;
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
                    // A timed dispatch has a pass of its own, stamped at both ends.
                    let stamp = queries.as_ref().filter(|_| d < timed.map_or(0, |t| t.0));
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(what),
                        timestamp_writes: stamp.map(|q| wgpu::ComputePassTimestampWrites {
                            query_set: q,
                            beginning_of_pass_write_index: Some(2 * d as u32),
                            end_of_pass_write_index: Some(2 * d as u32 + 1),
                        }),
                    });
                    while let Some(Step::Dispatch {
                        kernel,
                        buffers,
                        params,
                        groups,
                    }) = self.steps.get(i)
                    {
                        if let Some(group) = binds.group(&core.device, &kernel.layout, buffers) {
                            pass.set_pipeline(&kernel.pipeline);
                            pass.set_bind_group(0, &group, &[(*params * PARAMS_SIZE) as u32]);
                            pass.dispatch_workgroups(groups[0], groups[1], 1);
                        }
                        i += 1;
                        d += 1;
                        if stamp.is_some() {
                            break;
                        }
                    }
                }
                let timing = match (queries, timed) {
                    (Some(q), Some((n, period))) => {
                        let mut labels = self.labels.unwrap_or_default();
                        labels.truncate(n);
                        Some(Timing::resolve(core, &mut encoder, &q, labels, period))
                    }
                    _ => None,
                };
                Ok((encoder.finish(), timing))
            },
        )?;
        made.map(|(cb, t)| (Some(cb), t))
    }

    /// Dispatches recorded since the last submission.
    pub(crate) fn pending(&self) -> usize {
        self.params.len()
    }

    /// Submit what is recorded so far and go on recording into an empty
    /// batch. Each part's parameter blocks are written right before its own
    /// submission, under the same lock as [`Batch::submit`]'s, so parts of
    /// one compute and other streams' submissions cannot mix them up. A
    /// timed batch is never cut (one submission carries its timestamps).
    pub(crate) fn submit_part(&mut self, what: &str) -> Result<()> {
        if self.labels.is_some() || self.steps.is_empty() {
            return Ok(());
        }
        let part = Batch {
            core: self.core,
            params: std::mem::take(&mut self.params),
            steps: std::mem::take(&mut self.steps),
            labels: None,
            label: String::new(),
        };
        part.submit(what).map(|_| ())
    }

    /// Record nothing more: submit the batch (if not empty) and return the
    /// submission index.
    pub(crate) fn submit(self, what: &str) -> Result<Option<wgpu::SubmissionIndex>> {
        self.submit_timed(what).map(|(index, _)| index)
    }

    /// [`Batch::submit`], with the timestamps of a timed batch.
    pub(crate) fn submit_timed(
        self,
        what: &str,
    ) -> Result<(Option<wgpu::SubmissionIndex>, Option<Timing>)> {
        let core = self.core;
        // The parameter blocks written by `finish` must reach this
        // submission, not another stream's: one lock from write to submit.
        let mut binds = core.binds.lock();
        match self.finish(what, &mut binds)? {
            (Some(cb), timing) => Ok((Some(core.submit(what, vec![cb])?), timing)),
            (None, _) => Ok((None, None)),
        }
    }
}

/// What this thread has recorded and submitted, for tests of how work is
/// cut and fused (per thread: tests run side by side on one device).
#[cfg(test)]
pub(crate) mod counts {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static DISPATCHES: Cell<u64> = const { Cell::new(0) };
        pub(crate) static SUBMISSIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// (dispatches, submissions) so far on this thread.
    pub(crate) fn now() -> (u64, u64) {
        (DISPATCHES.with(Cell::get), SUBMISSIONS.with(Cell::get))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {

    use tessera::{DType, Graph, Stream};

    /// A compute of more dispatches than one part, each reading the one
    /// before: submitted in parts, every part with its own parameter
    /// blocks, and the result exact (the host does the same f32 steps).
    #[test]
    fn a_long_compute_goes_in_parts_that_keep_their_parameters() {
        let Some(dev) = crate::test_device() else {
            return;
        };
        let stream = dev.new_wgpu_stream().unwrap();
        let (n, steps) = (50, 200);
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[n]).unwrap();
        let b = g.input("b", DType::F32, &[n]).unwrap();
        let c = g.input("c", DType::F32, &[n]).unwrap();
        let mut t = a;
        for k in 0..steps {
            t = match k % 3 {
                0 => g.add(t, b).unwrap(),
                1 => g.mul(t, c).unwrap(),
                _ => g.sub(t, a).unwrap(),
            };
        }
        g.set_output(t).unwrap();
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        let y: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.01).collect();
        let z: Vec<f32> = (0..n).map(|i| 0.99 - (i % 7) as f32 * 0.002).collect();
        pl.tensor(&g, a).unwrap().write_f32(&x).unwrap();
        pl.tensor(&g, b).unwrap().write_f32(&y).unwrap();
        pl.tensor(&g, c).unwrap().write_f32(&z).unwrap();
        let before = super::counts::now().1;
        stream.compute(&g, &pl).unwrap();
        let parts = super::counts::now().1 - before;
        let got = pl.tensor(&g, t).unwrap().read_f32().unwrap();
        let want_parts =
            1 + (steps - crate::compute::part_size(0)).div_ceil(crate::compute::part_size(1));
        assert!(
            parts >= want_parts as u64,
            "{steps} dispatches in {parts} submissions"
        );
        for i in 0..n {
            let mut v = x[i];
            for k in 0..steps {
                v = match k % 3 {
                    0 => v + y[i],
                    1 => v * z[i],
                    _ => v - x[i],
                };
            }
            assert_eq!(got[i], v, "element {i}");
        }
    }
}
