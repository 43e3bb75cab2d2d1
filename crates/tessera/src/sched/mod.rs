//! The scheduler: one graph over several devices (ggml's `ggml_backend_sched`).
//!
//! Give it streams in priority order (the last one is the fallback, normally
//! the CPU, which runs every op). For each graph it decides which device runs
//! each node ([`assign`], with the reason for each decision), cuts the graph
//! into per-device *splits* with the copies between them ([`Split`]), plans
//! the compute memory of every device at once with the [`GraphAllocator`]
//! (so [`Scheduler::reserve_size`] is exactly what is then allocated), and
//! runs the splits on their streams, copying inputs with [`crate::copy_async`].
//!
//! The user's graph is never modified: splitting builds a new, rewritten
//! graph (with TRANSFER nodes for the copies), so a graph can be reserved,
//! sized and allocated any number of times. A graph of the same structure
//! as the last one (same nodes, same user memory, same pins; see `key`)
//! reuses the plan without assigning or splitting again.
//!
//! # Usage
//!
//! `alloc_graph(&graph, &mut placement)` gives every tensor of the graph
//! that has no memory yet its place (on the device that produces it), so the
//! caller can write the inputs; `compute(&graph, &placement)` runs it.
//! `compute` on a graph not allocated yet allocates it first.
//!
//! # Pipelining
//!
//! With [`SchedulerOptions::n_copies`] above 1, graph inputs and split
//! input copies get that many slots (see `copies`): each `alloc_graph`
//! hands out the next slot's inputs, and a compute uses the slot whose
//! inputs the caller's placement holds.
//!
//! # Seeing the plan
//!
//! `TESSERA_SCHED_DEBUG=1` prints each new plan's splits with their inputs
//! and sizes to stderr, `=2` also every node with its device and why it went
//! there; [`Scheduler::describe`] returns the same text and
//! [`Scheduler::to_dot`] a Graphviz picture.
//!
//! # Errors
//!
//! A node no device runs, memory a device cannot provide, a device failing
//! during compute: each is an [`Error`] naming the node or device. After an
//! error, [`Scheduler::reset`] (or simply the next call) starts clean.

pub mod assign;
mod copies;
mod debug;
mod key;
mod run;
mod split;

use std::sync::Arc;

pub use assign::{OpOffload, Reason};
pub use run::EvalCallback;
pub use split::{Split, SplitInput};

use crate::alloc::GraphAllocator;
use crate::buffer::BufferType;
use crate::device::Device;
use crate::placement::Placement;
use crate::stream::Stream;
use crate::{Error, Graph, Result, TensorId};

use assign::{Assignment, Dev};
use copies::Copies;
use key::GraphKey;
use split::Rewrite;

/// Most copies of the inputs a scheduler keeps.
pub const MAX_COPIES: usize = 8;

/// How a [`Scheduler`] works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// Copies of the split inputs and graph inputs, for pipelining
    /// consecutive computes across devices (1: off, the default; at most
    /// [`MAX_COPIES`]).
    pub n_copies: usize,
    /// When ops whose weights are in host memory go to a faster device.
    pub op_offload: OpOffload,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            n_copies: 1,
            op_offload: OpOffload::Device,
        }
    }
}

/// A plan for one graph structure.
#[derive(Debug)]
struct Plan {
    key: GraphKey,
    assignment: Assignment,
    rewrite: Rewrite,
    /// The allocator holds this plan (reserve_with ran for it).
    reserved: bool,
    /// Slots of the inputs, with `n_copies > 1`.
    copies: Copies,
}

/// One graph over several devices.
pub struct Scheduler {
    devices: Vec<Arc<dyn Device>>,
    streams: Vec<Arc<dyn Stream>>,
    bufts: Vec<Arc<dyn BufferType>>,
    options: SchedulerOptions,
    allocator: GraphAllocator,
    pins: Vec<(usize, usize)>,
    plan: Option<Plan>,
    /// The rewritten graph's placement from the last `alloc_graph`.
    placed: Option<Placement>,
    /// Per user tensor: the user memory (buffer, offset) that allocation used.
    last_user: Vec<Option<(usize, usize)>>,
    /// The input copy the last `alloc_graph` handed out, and the next one.
    cur: usize,
    next: usize,
    /// Per device and copy: the event recorded after the copy's last use.
    events: Vec<Vec<Option<Arc<dyn crate::Event>>>>,
    eval: Option<EvalCallback>,
    debug: u8,
    plans: usize,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field(
                "devices",
                &self.devices.iter().map(|d| d.name()).collect::<Vec<_>>(),
            )
            .field("options", &self.options)
            .field("n_splits", &self.n_splits())
            .field("plans", &self.plans)
            .finish()
    }
}

impl Scheduler {
    /// A scheduler over `streams` in priority order (the last is the
    /// fallback), each device using its default buffer type.
    pub fn new(streams: Vec<Arc<dyn Stream>>, options: SchedulerOptions) -> Result<Self> {
        let bufts = streams.iter().map(|s| s.device().buffer_type()).collect();
        Self::with_buffer_types(streams, bufts, options)
    }

    /// As [`Scheduler::new`], with the buffer type of each device's compute
    /// memory given (each device must be able to read its own).
    pub fn with_buffer_types(
        streams: Vec<Arc<dyn Stream>>,
        bufts: Vec<Arc<dyn BufferType>>,
        options: SchedulerOptions,
    ) -> Result<Self> {
        if streams.is_empty() {
            return Err(Error::NotFound("a stream for the scheduler".into()));
        }
        if bufts.len() != streams.len() {
            return Err(Error::InvalidLayout(format!(
                "{} buffer types for {} streams",
                bufts.len(),
                streams.len()
            )));
        }
        if options.n_copies == 0 || options.n_copies > MAX_COPIES {
            return Err(Error::unsupported(
                "scheduler",
                format!(
                    "{} copies of the inputs (1 to {MAX_COPIES})",
                    options.n_copies
                ),
            ));
        }
        let devices: Vec<Arc<dyn Device>> = streams.iter().map(|s| s.device()).collect();
        for (d, b) in devices.iter().zip(&bufts) {
            if !d.supports_buffer_type(b.as_ref()) {
                return Err(Error::unsupported(
                    d.name(),
                    format!("its compute memory in buffer type '{}'", b.name()),
                ));
            }
        }
        let debug = std::env::var("TESSERA_SCHED_DEBUG")
            .ok()
            .and_then(|v| v.trim().parse::<u8>().ok())
            .unwrap_or(0);
        Ok(Scheduler {
            allocator: GraphAllocator::with_buffer_types(bufts.clone()),
            devices,
            streams,
            bufts,
            options,
            pins: Vec::new(),
            plan: None,
            placed: None,
            last_user: Vec::new(),
            cur: 0,
            next: 0,
            events: Vec::new(),
            eval: None,
            debug,
            plans: 0,
        })
    }

    /// The devices, in priority order.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The streams, one per device, in priority order.
    pub fn streams(&self) -> &[Arc<dyn Stream>] {
        &self.streams
    }

    /// The options it was made with.
    pub fn options(&self) -> SchedulerOptions {
        self.options
    }

    /// Run node `id` of the next graphs on device `device` (an index into
    /// [`Scheduler::devices`]), whatever the passes would choose (ggml's
    /// `set_tensor_backend`). Pins hold until [`Scheduler::reset`]. The
    /// device must support the op, or planning fails naming the node.
    pub fn pin(&mut self, id: TensorId, device: usize) -> Result<()> {
        if device >= self.devices.len() {
            return Err(Error::NotFound(format!(
                "device {device}: the scheduler has {}",
                self.devices.len()
            )));
        }
        self.pins.retain(|&(i, _)| i != id.index());
        self.pins.push((id.index(), device));
        self.pins.sort_unstable();
        Ok(())
    }

    /// The device (index) and reason of node `id` in the last planned graph.
    pub fn device_of(&self, id: TensorId) -> Option<(usize, Reason)> {
        let a = &self.plan.as_ref()?.assignment;
        Some((*a.dev.get(id.index())?, *a.why.get(id.index())?))
    }

    /// Splits of the last planned graph.
    pub fn splits(&self) -> &[Split] {
        self.plan.as_ref().map_or(&[], |p| &p.rewrite.splits)
    }

    /// Number of splits of the last planned graph.
    pub fn n_splits(&self) -> usize {
        self.splits().len()
    }

    /// Number of tensor copies between devices per compute of the last
    /// planned graph.
    pub fn n_copies_made(&self) -> usize {
        self.splits().iter().map(|s| s.inputs.len()).sum()
    }

    /// The structural hash of the last planned graph (nodes, user memory
    /// kinds, pins): equal hashes are a quick sign that a graph can reuse
    /// the plan (the scheduler compares the whole key).
    pub fn structural_hash(&self) -> Option<u64> {
        self.plan.as_ref().map(|p| p.key.hash)
    }

    /// How many times a graph was planned (assigned and split) so far; a
    /// graph that reuses the last plan does not count.
    pub fn plan_count(&self) -> usize {
        self.plans
    }

    /// Compute memory held for device `device`, in bytes.
    pub fn buffer_size(&self, device: usize) -> Result<usize> {
        let slots = self
            .plan
            .as_ref()
            .and_then(|p| p.copies.bytes.get(device).copied())
            .unwrap_or(0);
        Ok(self.allocator.buffer_size(device)? + slots)
    }

    /// The rewritten graph of the last plan (the user's nodes, in split
    /// order, with TRANSFER nodes for the copies).
    pub fn split_graph(&self) -> Option<&Graph> {
        self.plan.as_ref().map(|p| &p.rewrite.graph)
    }

    /// Where every tensor of [`Scheduler::split_graph`] lives, after
    /// [`Scheduler::alloc_graph`] (`None` before): what each split's stream
    /// gets with its node range.
    pub fn split_placement(&self) -> Option<&Placement> {
        self.placed.as_ref()
    }

    /// Observe chosen nodes during compute (see [`EvalCallback`]); `None`
    /// removes it.
    pub fn set_eval_callback(&mut self, callback: Option<EvalCallback>) {
        self.eval = callback;
    }

    /// Forget the plan, the allocation and the pins (ggml's `reset`); the
    /// compute memory stays reserved for the next graph.
    pub fn reset(&mut self) {
        self.plan = None;
        self.placed = None;
        self.pins.clear();
        self.cur = 0;
        self.next = 0;
    }

    /// Wait for every stream.
    pub fn synchronize(&self) -> Result<()> {
        let mut first = Ok(());
        for s in &self.streams {
            if let Err(e) = s.synchronize()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Plan `graph` and allocate the compute memory it needs on every
    /// device (buffers only grow), without placing anything (ggml's
    /// `reserve`, for a worst-case graph).
    pub fn reserve(&mut self, graph: &Graph, placement: &Placement) -> Result<()> {
        self.ensure_plan(graph, placement)?;
        let user = self.user_placement(graph, placement)?;
        let plan = self.plan.as_mut().ok_or_else(|| internal("no plan"))?;
        let rp = map_placement(&plan.rewrite, graph, &user)?;
        self.allocator
            .reserve_with(&plan.rewrite.graph, &rp, &plan.rewrite.buffer_ids)?;
        plan.copies
            .allocate(&plan.rewrite, &self.bufts, self.options.n_copies)?;
        plan.reserved = true;
        self.placed = None;
        Ok(())
    }

    /// The compute bytes per device that [`Scheduler::reserve`] would need
    /// for `graph`, without allocating (ggml's `reserve_size`): on a fresh
    /// scheduler, `reserve` then allocates exactly these sizes.
    pub fn reserve_size(&mut self, graph: &Graph, placement: &Placement) -> Result<Vec<usize>> {
        self.ensure_plan(graph, placement)?;
        let user = self.user_placement(graph, placement)?;
        let plan = self.plan.as_ref().ok_or_else(|| internal("no plan"))?;
        let rp = map_placement(&plan.rewrite, graph, &user)?;
        let mut sizes = self.allocator.reserve_size(
            &plan.rewrite.graph,
            &rp,
            Some(&plan.rewrite.buffer_ids),
        )?;
        if self.options.n_copies > 1 {
            let slots = plan
                .copies
                .sizes(&plan.rewrite, &self.bufts, self.options.n_copies)?;
            for (s, extra) in sizes.iter_mut().zip(slots) {
                *s += extra;
            }
        }
        Ok(sizes)
    }

    /// Plan `graph` if needed and give every tensor without memory its place
    /// in the devices' compute memory, writing the places into `placement`
    /// (so the caller can fill inputs and read outputs).
    ///
    /// The same graph structure with the same user memory as the last call
    /// (a decode loop) takes the reuse path: no planning and no allocation,
    /// only the places written back where `placement` lacks them.
    pub fn alloc_graph(&mut self, graph: &Graph, placement: &mut Placement) -> Result<()> {
        self.ensure_plan(graph, placement)?;
        // The next input copy (always 0 without pipelining).
        self.cur = self.next;
        self.next = (self.next + 1) % self.options.n_copies;
        if self.placed.is_none() || !self.same_user_memory(graph, placement) {
            let user = self.user_placement(graph, placement)?;
            let plan = self.plan.as_mut().ok_or_else(|| internal("no plan"))?;
            let mut rp = map_placement(&plan.rewrite, graph, &user)?;
            if !plan.reserved {
                self.allocator
                    .reserve_with(&plan.rewrite.graph, &rp, &plan.rewrite.buffer_ids)?;
                plan.reserved = true;
            }
            plan.copies
                .allocate(&plan.rewrite, &self.bufts, self.options.n_copies)?;
            plan.copies.apply(&plan.rewrite, &mut rp, self.cur)?;
            self.allocator.alloc_graph(&plan.rewrite.graph, &mut rp)?;
            self.last_user = graph.ids().map(|id| user.get(id).map(place_key)).collect();
            self.placed = Some(rp);
        } else if let (Some(plan), Some(rp)) = (&self.plan, self.placed.as_mut()) {
            plan.copies.apply(&plan.rewrite, rp, self.cur)?;
        }
        let plan = self.plan.as_ref().ok_or_else(|| internal("no plan"))?;
        let rp = self
            .placed
            .as_ref()
            .ok_or_else(|| internal("not allocated"))?;
        placement.fit(graph);
        for id in graph.ids() {
            let have = placement.get(id);
            if have.is_some_and(|p| !self.is_ours(&p.buffer)) {
                continue;
            }
            let want = rp.get(plan.rewrite.map[id.index()]);
            if have.map(place_key) == want.map(place_key) {
                continue;
            }
            match want {
                Some(p) => placement.set(graph, id, p.clone())?,
                None => placement.clear(id),
            }
        }
        Ok(())
    }

    /// Is `buffer` memory of this scheduler (compute memory or input slots)?
    fn is_ours(&self, buffer: &Arc<dyn crate::Buffer>) -> bool {
        self.allocator.owns(buffer) || self.plan.as_ref().is_some_and(|p| p.copies.owns(buffer))
    }

    /// Compute `graph` and wait for it (ggml's `graph_compute`).
    pub fn compute(&mut self, graph: &Graph, placement: &Placement) -> Result<()> {
        let queued = self.compute_async(graph, placement);
        // Wait for whatever was queued, also when queueing stopped early.
        let done = self.synchronize();
        queued.and(done)
    }

    /// Queue the computation of `graph` on the streams (ggml's
    /// `graph_compute_async`); [`Scheduler::synchronize`] waits for it.
    /// Allocates the graph first unless `placement` is the one the last
    /// [`Scheduler::alloc_graph`] filled for this graph.
    pub fn compute_async(&mut self, graph: &Graph, placement: &Placement) -> Result<()> {
        let mut allocated = self.placed.is_some()
            && self.plan_matches(graph, placement)
            && self.same_user_memory(graph, placement);
        if allocated && self.options.n_copies > 1 {
            // The copy whose inputs the caller holds (and wrote).
            let slot = match &self.plan {
                Some(p) => p.copies.copy_of(&p.rewrite, graph, placement),
                None => None,
            };
            match (slot, &self.plan, self.placed.as_mut()) {
                (Some(c), Some(p), Some(rp)) => {
                    p.copies.apply(&p.rewrite, rp, c)?;
                    self.cur = c;
                }
                _ => allocated = false,
            }
        }
        if !(allocated && self.same_compute_memory(graph, placement)) {
            let mut p = placement.clone();
            self.alloc_graph(graph, &mut p)?;
        }
        if self.options.n_copies > 1 {
            self.ensure_events();
        }
        let plan = self.plan.as_ref().ok_or_else(|| internal("no plan"))?;
        let rp = self
            .placed
            .as_ref()
            .ok_or_else(|| internal("not allocated"))?;
        let slot_events: Vec<Option<Arc<dyn crate::Event>>> = self
            .events
            .iter()
            .map(|per_copy| per_copy.get(self.cur).cloned().flatten())
            .collect();
        run::run_splits(
            &self.streams,
            &plan.rewrite,
            rp,
            graph,
            &slot_events,
            self.eval.as_mut(),
        )
    }

    /// One event per device and copy, where the device has events.
    fn ensure_events(&mut self) {
        if !self.events.is_empty() {
            return;
        }
        self.events = self
            .devices
            .iter()
            .map(|d| {
                (0..self.options.n_copies)
                    .map(|_| {
                        if d.caps().events {
                            d.new_event().ok()
                        } else {
                            None
                        }
                    })
                    .collect()
            })
            .collect();
    }

    /// Does the current plan fit `graph` with the user memory of `placement`?
    fn plan_matches(&self, graph: &Graph, placement: &Placement) -> bool {
        self.plan.as_ref().is_some_and(|p| {
            p.key.matches(
                graph,
                placement,
                |id, pl| !self.is_ours(&pl.buffer) && !is_view(graph, id),
                &self.pins,
            )
        })
    }

    /// Is the user memory of `placement` what the last allocation used?
    fn same_user_memory(&self, graph: &Graph, placement: &Placement) -> bool {
        self.last_user.len() == graph.len()
            && graph.ids().all(|id| {
                let user = placement
                    .get(id)
                    .filter(|p| !self.is_ours(&p.buffer) && !is_view(graph, id))
                    .map(place_key);
                user == self.last_user[id.index()]
            })
    }

    /// Does `placement` hold, for every tensor, either user memory or the
    /// place the last allocation gave it?
    fn same_compute_memory(&self, graph: &Graph, placement: &Placement) -> bool {
        let (Some(plan), Some(rp)) = (&self.plan, &self.placed) else {
            return false;
        };
        placement.len() == graph.len()
            && graph.ids().all(|id| match placement.get(id) {
                None => false,
                Some(p) if !self.is_ours(&p.buffer) => true,
                Some(p) => {
                    rp.get(plan.rewrite.map[id.index()]).map(place_key) == Some(place_key(p))
                }
            })
    }

    /// The user's placement without the scheduler's own compute memory.
    fn user_placement(&self, graph: &Graph, placement: &Placement) -> Result<Placement> {
        let mut user = Placement::new(graph);
        for id in graph.ids() {
            // A view's memory is its source's: a view placed over user memory
            // (by an earlier `alloc_graph`) is not memory the user provided.
            if let Some(p) = placement.get(id)
                && !self.is_ours(&p.buffer)
                && !is_view(graph, id)
            {
                user.set(graph, id, p.clone())?;
            }
        }
        Ok(user)
    }

    /// Make sure the plan is for `graph` with the user memory of `placement`.
    fn ensure_plan(&mut self, graph: &Graph, placement: &Placement) -> Result<()> {
        if self.plan_matches(graph, placement) {
            return Ok(());
        }
        self.plan = None;
        self.placed = None;
        let user = self.user_placement(graph, placement)?;
        let key = GraphKey::of(graph, &user, |_, _| true, &self.pins);
        let devs: Vec<Dev<'_>> = self
            .devices
            .iter()
            .zip(&self.bufts)
            .map(|(d, b)| Dev {
                device: d.as_ref(),
                buft: b,
            })
            .collect();
        let assignment = assign::assign(graph, &user, &devs, self.options.op_offload, &self.pins)?;
        let mut rewrite = split::split(graph, &user, &devs, &assignment)?;
        let copies = if self.options.n_copies > 1 {
            Copies::mark(&mut rewrite, graph, &user)
        } else {
            Copies::default()
        };
        self.plans += 1;
        let plan = Plan {
            key,
            assignment,
            rewrite,
            reserved: false,
            copies,
        };
        if self.debug > 0 {
            eprint!(
                "{}",
                debug::describe(
                    &plan.rewrite,
                    &plan.assignment,
                    graph,
                    &self.devices,
                    self.debug >= 2
                )
            );
        }
        self.plan = Some(plan);
        Ok(())
    }

    /// The last plan as text: the splits with their inputs and sizes, and,
    /// with `nodes`, every node with its device and reason (what
    /// `TESSERA_SCHED_DEBUG` prints).
    pub fn describe(&self, graph: &Graph, nodes: bool) -> String {
        match &self.plan {
            Some(p) => debug::describe(&p.rewrite, &p.assignment, graph, &self.devices, nodes),
            None => "no plan\n".into(),
        }
    }

    /// The last plan as a Graphviz DOT picture: one cluster per split,
    /// nodes coloured by device, copies as dashed edges.
    pub fn to_dot(&self, graph: &Graph) -> String {
        match &self.plan {
            Some(p) => debug::to_dot(&p.rewrite, &p.assignment, graph, &self.devices),
            None => "digraph sched {}\n".into(),
        }
    }
}

/// A place's identity: buffer and offset.
fn place_key(p: &crate::placement::Place) -> (usize, usize) {
    (Arc::as_ptr(&p.buffer) as *const u8 as usize, p.offset)
}

/// The user's placement carried over to the rewritten graph.
fn map_placement(rw: &Rewrite, graph: &Graph, user: &Placement) -> Result<Placement> {
    let mut rp = Placement::new(&rw.graph);
    for id in graph.ids() {
        if let Some(p) = user.get(id) {
            rp.set(&rw.graph, rw.map[id.index()], p.clone())?;
        }
    }
    Ok(rp)
}

fn internal(what: &str) -> Error {
    Error::device("scheduler", format!("internal error: {what}"))
}

/// Is `id` a view (its memory is its source's)?
fn is_view(graph: &Graph, id: crate::TensorId) -> bool {
    graph.nodes()[id.index()].view_src.is_some()
}
