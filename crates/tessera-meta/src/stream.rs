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
use tessera::{AbortCallback, BufferType, Device, Error, Graph, Placement, Result, Stream};

use crate::device::MetaOptions;
use crate::lower::{Lower, Lowered, Step, meta_buffer};
use crate::workers::Worker;

/// What the collectives of a stream moved, for benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaStats {
    /// Graph computes.
    pub computes: u64,
    /// Computes that lowered their graph anew (the others reused a plan).
    pub lowerings: u64,
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
    /// Per device: the memory of the tensors the copy steps move.
    arenas: Mutex<Vec<Option<Arc<dyn tessera::Buffer>>>>,
    plans: Mutex<Vec<Arc<Plan>>>,
    stats: Mutex<MetaStats>,
    /// Per device: its worker thread (none for the first device, which
    /// runs on the caller's thread).
    workers: Vec<Option<Worker>>,
    /// Computes on one stream run one after the other.
    running: Mutex<()>,
    /// A planning device's stream: plans, never runs.
    planning: bool,
}

/// Plans kept for reuse (prompt batch, decoding step, ...).
const PLAN_CACHE: usize = 4;

/// A lowered graph with its per-device memory, and what it was made for.
struct Plan {
    graph: Graph,
    /// Per tensor: its buffer (address) and offset.
    key: Vec<Option<(usize, usize)>>,
    range: Range<usize>,
    lowered: Lowered,
    places: Vec<Placement>,
}

/// Where every tensor of `graph` is, as comparable data.
fn placement_key(graph: &Graph, placement: &Placement) -> Vec<Option<(usize, usize)>> {
    graph
        .ids()
        .map(|id| {
            placement
                .get(id)
                .map(|p| (Arc::as_ptr(&p.buffer) as *const () as usize, p.offset))
        })
        .collect()
}

/// The inputs are still held as when the plan was made.
fn inputs_hold(
    inputs: &[(
        Arc<dyn tessera::Buffer>,
        usize,
        tessera::Layout,
        crate::SplitState,
    )],
) -> bool {
    inputs.iter().all(|(buf, offset, layout, state)| {
        meta_buffer(buf)
            .and_then(|m| m.peek(*offset, layout))
            .as_ref()
            == Some(state)
    })
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
        bufts: Vec<Arc<dyn BufferType>>,
        streams: Vec<Arc<dyn Stream>>,
        options: MetaOptions,
        planning: bool,
    ) -> Result<MetaStream> {
        let n_devices = devices.len();
        let allocs = bufts.into_iter().map(GraphAllocator::new).collect();
        let workers = (0..devices.len())
            .map(|j| {
                (j > 0)
                    .then(|| Worker::spawn(format!("{name} device {j}")))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MetaStream {
            name,
            device,
            devices,
            streams,
            options,
            arenas: Mutex::new(vec![None; n_devices]),
            allocs: Mutex::new(allocs),
            plans: Mutex::new(Vec::new()),
            stats: Mutex::new(MetaStats::default()),
            workers,
            running: Mutex::new(()),
            planning,
        })
    }

    /// What the collectives moved so far.
    pub fn stats(&self) -> MetaStats {
        *lock(&self.stats)
    }

    /// Lower nodes `range` of `graph` (placed by `placement`) and plan each
    /// device's own memory for them, without running anything — what the
    /// first compute of that graph does before its steps. With a planning
    /// device ([`crate::MetaDevice::planning`]) nothing is allocated and
    /// [`MetaStream::scratch_bytes`] then says what a real device would hold.
    pub fn prepare(&self, graph: &Graph, placement: &Placement, range: Range<usize>) -> Result<()> {
        let _running = lock(&self.running);
        self.plan_for(graph, placement, range).map(|_| ())
    }

    /// Bytes of each device's own compute memory (the slices, gathered
    /// operands, partial sums and received chunks of the lowered graphs),
    /// beyond the meta device's compute buffers, in device order.
    pub fn scratch_bytes(&self) -> Vec<usize> {
        let arenas = lock(&self.arenas);
        lock(&self.allocs)
            .iter()
            .zip(arenas.iter())
            .map(|(a, b)| a.buffer_size(0).unwrap_or(0) + b.as_ref().map_or(0, |b| b.size()))
            .collect()
    }

    /// The devices' streams, in device order.
    pub fn streams(&self) -> &[Arc<dyn Stream>] {
        &self.streams
    }

    /// The lowered plan of `graph` over `placement`: a cached one when the
    /// graph, the memory of every tensor and the states of the inputs are
    /// what they were (a decoding step reuses its plan: no lowering, no
    /// allocation), else a new one.
    fn plan_for(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<Arc<Plan>> {
        let key = placement_key(graph, placement);
        {
            let mut plans = lock(&self.plans);
            if let Some(i) = plans.iter().position(|p| {
                p.range == range
                    && p.key == key
                    && p.graph == *graph
                    && inputs_hold(&p.lowered.inputs)
            }) {
                let p = plans.remove(i);
                plans.push(p.clone());
                return Ok(p);
            }
        }
        let n = self.devices.len();
        lock(&self.stats).lowerings += 1;
        let lowered = Lower::new(
            graph,
            placement,
            range.clone(),
            &self.devices,
            &self.options,
        )
        .run()?;
        let mut places = Vec::with_capacity(n);
        {
            let mut allocs = lock(&self.allocs);
            let mut arenas = lock(&self.arenas);
            for j in 0..n {
                let g = &lowered.graphs[j];
                let mut p = Placement::new(g);
                for (id, place) in &lowered.preplaced[j] {
                    p.set(g, *id, place.clone())?;
                }
                // The tensors the copies move, in the device's arena (grown
                // when a graph needs more; plans run one at a time, and
                // what they keep there lives only around a copy step).
                let need = lowered.arena.sizes.get(j).copied().unwrap_or(0);
                if need > arenas[j].as_ref().map_or(0, |b| b.size()) {
                    let buft = allocs[j]
                        .buffer_types()
                        .first()
                        .cloned()
                        .ok_or_else(|| Error::NotFound("a device buffer type".into()))?;
                    let buf = buft.alloc_buffer(need)?;
                    buf.set_usage(tessera::BufferUsage::Compute);
                    arenas[j] = Some(buf);
                }
                if let Some(buf) = &arenas[j] {
                    for &(id, offset) in lowered.arena.offsets.get(j).map_or(&[][..], |v| v) {
                        buf.init_tensor(&g.layout(id)?, offset)?;
                        p.set(
                            g,
                            id,
                            tessera::Place {
                                buffer: buf.clone(),
                                offset,
                            },
                        )?;
                    }
                }
                allocs[j].alloc_graph(g, &mut p)?;
                places.push(p);
            }
        }
        let plan = Arc::new(Plan {
            graph: graph.clone(),
            key,
            range,
            lowered,
            places,
        });
        let mut plans = lock(&self.plans);
        if plans.len() >= PLAN_CACHE {
            plans.remove(0);
        }
        plans.push(plan.clone());
        Ok(plan)
    }

    fn run(&self, graph: &Graph, placement: &Placement, range: Range<usize>) -> Result<()> {
        if self.planning {
            return Err(Error::unsupported(
                &self.name,
                "computing on a planning device (it holds no memory)",
            ));
        }
        let _running = lock(&self.running);
        let plan = self.plan_for(graph, placement, range)?;
        let (lowered, places) = (&plan.lowered, &plan.places);
        let mut stats = MetaStats::default();
        for (i, step) in lowered.steps.iter().enumerate() {
            match step {
                Step::Compute(_) => self.compute_all(&plan, i)?,
                Step::Copy(copies, starts) => {
                    stats.reduces += u64::from(*starts);
                    for &(a, src, b, dst) in copies {
                        stats.reduce_bytes += copy(&plan, (a, src), (b, dst))?;
                    }
                }
                Step::Slice { whole, piece, runs } => {
                    for j in 0..whole.len() {
                        let (Some(w), Some(p)) = (whole[j], piece[j]) else {
                            continue;
                        };
                        let bytes = places[j].tensor(&lowered.graphs[j], w)?.to_bytes()?;
                        let r = runs[j];
                        let mut out = Vec::with_capacity(r.piece_bytes());
                        for row in 0..r.rows {
                            let a = r.whole_start + row * r.whole_stride;
                            out.extend_from_slice(bytes.get(a..a + r.piece).ok_or_else(|| {
                                Error::OutOfBounds("a slice past its whole tensor".into())
                            })?);
                        }
                        places[j].tensor(&lowered.graphs[j], p)?.write(0, &out)?;
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

    /// Every device computes its range of compute step `step`: the first
    /// busy device on this thread, the others on their workers, at once.
    fn compute_all(&self, plan: &Arc<Plan>, step: usize) -> Result<()> {
        let Some(Step::Compute(ranges)) = plan.lowered.steps.get(step) else {
            return Err(Error::device(&self.name, "not a compute step"));
        };
        let busy: Vec<usize> = (0..ranges.len())
            .filter(|&j| !ranges[j].is_empty())
            .collect();
        let Some((&first, rest)) = busy.split_first() else {
            return Ok(());
        };
        let mut started = Vec::with_capacity(rest.len());
        let mut result = Ok(());
        for &j in rest {
            let Some(Some(w)) = self.workers.get(j) else {
                result = Err(Error::device(
                    &self.name,
                    format!("no thread for device {j}"),
                ));
                break;
            };
            let (plan, stream) = (plan.clone(), self.streams[j].clone());
            let job = Box::new(move || run_range(&plan, &stream, step, j));
            match w.start(job) {
                Ok(()) => started.push(w),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = run_range(plan, &self.streams[first], step, first);
        }
        for w in started {
            let r = w.wait();
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}

/// Copy tensor `src.1` of device `src.0` into tensor `dst.1` of device
/// `dst.0` (same layout), buffer to buffer: a memcpy between host buffers,
/// the devices' copy paths otherwise. Returns the bytes copied.
fn copy(
    plan: &Plan,
    src: (usize, tessera::TensorId),
    dst: (usize, tessera::TensorId),
) -> Result<u64> {
    let g = &plan.lowered.graphs;
    let from = plan.places[src.0].tensor(&g[src.0], src.1)?;
    let to = plan.places[dst.0].tensor(&g[dst.0], dst.1)?;
    tessera::copy_between(
        from.buffer().as_ref(),
        from.offset(),
        to.buffer().as_ref(),
        to.offset(),
        from.nbytes(),
    )?;
    Ok(from.nbytes() as u64)
}

/// Device `j`'s range of compute step `step` of `plan`, on `stream`.
fn run_range(plan: &Plan, stream: &Arc<dyn Stream>, step: usize, j: usize) -> Result<()> {
    let Some(Step::Compute(ranges)) = plan.lowered.steps.get(step) else {
        return Err(Error::device("Meta", "not a compute step"));
    };
    let (Some(g), Some(p), Some(r)) = (
        plan.lowered.graphs.get(j),
        plan.places.get(j),
        ranges.get(j),
    ) else {
        return Err(Error::device("Meta", format!("no device {j} in the plan")));
    };
    stream.compute_async(g, p, r.clone())?;
    stream.synchronize()
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

    /// Every device stream that has threads gets `n`; an error only when
    /// none has threads (or one refuses `n` for another reason).
    fn set_n_threads(&self, n: usize) -> Result<()> {
        let mut any = false;
        for s in &self.streams {
            match s.set_n_threads(n) {
                Ok(()) => any = true,
                Err(Error::Unsupported { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if any {
            Ok(())
        } else {
            Err(Error::unsupported(&self.name, "a thread count"))
        }
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
