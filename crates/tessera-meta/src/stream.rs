//! [`MetaStream`]: runs a meta graph as per-device graphs, concurrently,
//! with the collectives between them.
//!
//! Each compute lowers the graph (`crate::lower`), plans every device's
//! own intermediates (slices, gathered copies, partial sums) with a graph
//! allocator per device (kept from call to call, so the same graph reuses
//! its memory), then runs the steps: the devices' ranges at once on
//! threads of their own, the exchanges and gathers between them through
//! the devices' buffers. Results left split in mirror memory are recorded
//! so that reads gather them.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use tessera::alloc::GraphAllocator;
use tessera::{AbortCallback, Device, Error, Graph, Placement, Result, Stream};

use crate::device::MetaOptions;
use crate::lower::{Lower, Step, meta_buffer};

/// What the collectives of a stream moved, for benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaStats {
    /// Graph computes.
    pub computes: u64,
    /// All-reduces run.
    pub reduces: u64,
    /// Bytes the all-reduces copied between devices.
    pub reduce_bytes: u64,
    /// All-gathers run.
    pub gathers: u64,
    /// Bytes the all-gathers copied between devices.
    pub gather_bytes: u64,
}

/// A stream of the meta device: one stream per device underneath.
pub struct MetaStream {
    name: String,
    device: Arc<dyn Device>,
    devices: Vec<Arc<dyn Device>>,
    streams: Vec<Arc<dyn Stream>>,
    options: MetaOptions,
    allocs: Mutex<Vec<GraphAllocator>>,
    stats: Mutex<MetaStats>,
}

impl std::fmt::Debug for MetaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStream")
            .field("name", &self.name)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MetaStream {
    pub(crate) fn new(
        name: String,
        device: Arc<dyn Device>,
        devices: Vec<Arc<dyn Device>>,
        streams: Vec<Arc<dyn Stream>>,
        options: MetaOptions,
    ) -> MetaStream {
        let allocs = devices
            .iter()
            .map(|d| GraphAllocator::new(d.buffer_type()))
            .collect();
        MetaStream {
            name,
            device,
            devices,
            streams,
            options,
            allocs: Mutex::new(allocs),
            stats: Mutex::new(MetaStats::default()),
        }
    }

    /// What the collectives moved so far.
    pub fn stats(&self) -> MetaStats {
        *lock(&self.stats)
    }

    /// The devices' streams, in device order.
    pub fn streams(&self) -> &[Arc<dyn Stream>] {
        &self.streams
    }

    fn run(&self, graph: &Graph, placement: &Placement, range: Range<usize>) -> Result<()> {
        let n = self.devices.len();
        let lowered = Lower::new(graph, placement, range, n, self.options.split_inputs).run()?;
        let mut places = Vec::with_capacity(n);
        {
            let mut allocs = lock(&self.allocs);
            for j in 0..n {
                let g = &lowered.graphs[j];
                let mut p = Placement::new(g);
                for (id, place) in &lowered.preplaced[j] {
                    p.set(g, *id, place.clone())?;
                }
                allocs[j].alloc_graph(g, &mut p)?;
                places.push(p);
            }
        }
        let mut stats = MetaStats::default();
        for step in &lowered.steps {
            match step {
                Step::Compute(ranges) => self.compute_all(&lowered.graphs, &places, ranges)?,
                Step::Exchange { from, into } => {
                    stats.reduces += 1;
                    for (c, f) in from.iter().enumerate() {
                        let Some(f) = f else { continue };
                        let bytes = places[c].tensor(&lowered.graphs[c], *f)?.to_bytes()?;
                        for (j, row) in into.iter().enumerate() {
                            if let Some(r) = row[c] {
                                places[j].tensor(&lowered.graphs[j], r)?.write(0, &bytes)?;
                                stats.reduce_bytes += bytes.len() as u64;
                            }
                        }
                    }
                }
                Step::Gather {
                    pieces,
                    whole,
                    runs,
                } => {
                    stats.gathers += 1;
                    for (k, piece) in pieces.iter().enumerate() {
                        let Some(piece) = piece else { continue };
                        let bytes = places[k].tensor(&lowered.graphs[k], *piece)?.to_bytes()?;
                        let r = runs[k];
                        for (j, w) in whole.iter().enumerate() {
                            let t = places[j].tensor(&lowered.graphs[j], *w)?;
                            t.buffer().write_2d(
                                t.offset() + r.whole_start,
                                &bytes,
                                r.piece,
                                r.rows,
                                r.whole_stride,
                                r.piece,
                            )?;
                            if j != k {
                                stats.gather_bytes += bytes.len() as u64;
                            }
                        }
                    }
                }
            }
        }
        for (buf, offset, layout, state) in &lowered.records {
            if let Some(m) = meta_buffer(buf) {
                m.set_held(*offset, layout, state);
            }
        }
        let mut s = lock(&self.stats);
        s.computes += 1;
        s.reduces += stats.reduces;
        s.reduce_bytes += stats.reduce_bytes;
        s.gathers += stats.gathers;
        s.gather_bytes += stats.gather_bytes;
        Ok(())
    }

    /// Every device computes its range, each on a thread of its own.
    fn compute_all(
        &self,
        graphs: &[Graph],
        places: &[Placement],
        ranges: &[Range<usize>],
    ) -> Result<()> {
        let busy: Vec<usize> = (0..ranges.len())
            .filter(|&j| !ranges[j].is_empty())
            .collect();
        let one = |j: usize| -> Result<()> {
            let s = &self.streams[j];
            s.compute_async(&graphs[j], &places[j], ranges[j].clone())?;
            s.synchronize()
        };
        match busy.as_slice() {
            [] => Ok(()),
            [j] => one(*j),
            [first, rest @ ..] => std::thread::scope(|scope| {
                let handles: Vec<_> = rest.iter().map(|&j| scope.spawn(move || one(j))).collect();
                let mut result = one(*first);
                for h in handles {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err(Error::device("Meta", "a device thread panicked")));
                    if result.is_ok() {
                        result = r;
                    }
                }
                result
            }),
        }
    }
}

impl Stream for MetaStream {
    fn name(&self) -> &str {
        &self.name
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn synchronize(&self) -> Result<()> {
        for s in &self.streams {
            s.synchronize()?;
        }
        Ok(())
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        self.run(graph, placement, range)
    }

    fn set_n_threads(&self, n: usize) -> Result<()> {
        for s in &self.streams {
            s.set_n_threads(n)?;
        }
        Ok(())
    }

    fn set_abort_callback(&self, callback: Option<AbortCallback>) -> Result<()> {
        for s in &self.streams {
            s.set_abort_callback(callback.clone())?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
