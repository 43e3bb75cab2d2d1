//! Which device runs each node: ggml's assignment passes, pass by pass, each
//! decision recorded with its [`Reason`].
//!
//! Devices are in priority order (index 0 first); the last is the fallback
//! (normally the CPU). The passes, as in ggml's `ggml_backend_sched_split_graph`
//! (see `shared/reference/ggml-backend-notes.md` §2.2–2.5):
//!
//! 1. **Seeds.** A user pin; a tensor whose memory already exists (placed,
//!    or a view of placed memory) goes to the first device that can read
//!    that buffer type and run the op; a graph input to the last device; an
//!    op follows its weights (a source in a [`BufferUsage::Weights`] buffer;
//!    ROPE and FLASH_ATTN_EXT excepted, whose small side tensors must not
//!    decide), unless op offload moves it to a higher-priority device.
//! 2. **Expansion.** Assignments of non-fallback devices spread down then up
//!    to unassigned neighbours the device supports (the fallback never
//!    spreads here); then every assignment spreads the same way.
//! 3. **Upgrades and leftovers.** An assigned op moves to a higher-priority
//!    device with the same buffer type that runs it and reads all its
//!    sources; an unassigned op goes to the device that reads most of its
//!    sources.
//! 4. **The rest.** Views follow their source's memory; unassigned sources
//!    follow their view source or their consumer; anything left goes to the
//!    first device that supports it.
//!
//! `supports_op` is the only gate: a node no device supports is an error
//! naming it (the scheduler never aborts).

use std::sync::Arc;

use crate::buffer::{BufferType, BufferUsage, same_buffer_type};
use crate::device::Device;
use crate::placement::Placement;
use crate::{Error, Graph, Op, Result, TensorId};

/// Why a node went to its device (printed with `TESSERA_SCHED_DEBUG=2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Pinned by the user ([`super::Scheduler::pin`]).
    Pin,
    /// Its memory already exists in a buffer this device reads.
    Buffer,
    /// A graph input (flag INPUT): the fallback device.
    Input,
    /// Follows a weight it reads.
    Weights,
    /// Weights in host memory, but a faster device takes the op (op offload).
    Offload,
    /// Spread from a neighbour on a non-fallback device.
    ExpandGpu,
    /// Spread from any neighbour.
    Expand,
    /// Moved to a higher-priority device with the same buffer type.
    Upgrade,
    /// The device that reads most of its sources.
    BestInputs,
    /// A view: where its source's memory is.
    ViewSource,
    /// A source without a device: where its consumer runs.
    Consumer,
    /// The first device that supports it.
    Fallback,
}

impl Reason {
    /// Lower-case name for listings.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Pin => "pin",
            Reason::Buffer => "buffer",
            Reason::Input => "input",
            Reason::Weights => "weights",
            Reason::Offload => "offload",
            Reason::ExpandGpu => "expand-gpu",
            Reason::Expand => "expand",
            Reason::Upgrade => "upgrade",
            Reason::BestInputs => "best-inputs",
            Reason::ViewSource => "view-source",
            Reason::Consumer => "consumer",
            Reason::Fallback => "fallback",
        }
    }
}

/// When an op whose weights are in host memory runs on a faster device
/// instead of the fallback (ggml's `op_offload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OpOffload {
    /// Never (llama.cpp's `--no-op-offload`).
    Off,
    /// When the faster device's [`Device::offload_op`] says so (ggml's rule).
    #[default]
    Device,
    /// When the op processes at least this many rows (`ne[1]` of its
    /// result: tokens of a batch), whatever the device says.
    MinBatch(usize),
}

/// One device as the passes see it.
pub(super) struct Dev<'a> {
    pub device: &'a dyn Device,
    pub buft: &'a Arc<dyn BufferType>,
}

/// The outcome: a device and a reason per node.
#[derive(Clone, Debug)]
pub(super) struct Assignment {
    pub dev: Vec<usize>,
    pub why: Vec<Reason>,
}

struct Passes<'a> {
    graph: &'a Graph,
    placement: &'a Placement,
    devs: &'a [Dev<'a>],
    offload: OpOffload,
    dev: Vec<Option<usize>>,
    why: Vec<Reason>,
}

/// Run the passes over `graph` (its placed tensors in `placement`), with
/// `pins` (node index → device).
pub(super) fn assign(
    graph: &Graph,
    placement: &Placement,
    devs: &[Dev<'_>],
    offload: OpOffload,
    pins: &[(usize, usize)],
) -> Result<Assignment> {
    if devs.is_empty() {
        return Err(Error::NotFound("a device for the scheduler".into()));
    }
    let mut p = Passes {
        graph,
        placement,
        devs,
        offload,
        dev: vec![None; graph.len()],
        why: vec![Reason::Fallback; graph.len()],
    };
    for &(i, d) in pins {
        if i < graph.len() && d < devs.len() {
            p.set(i, d, Reason::Pin);
        }
    }
    p.seed()?;
    p.expand(true);
    p.expand(false);
    p.upgrade_and_best_inputs();
    p.rest()?;
    p.check_memory()?;
    let dev = p
        .dev
        .iter()
        .enumerate()
        .map(|(i, d)| d.ok_or_else(|| Error::unsupported("scheduler", p.node_desc(i))))
        .collect::<Result<Vec<_>>>()?;
    Ok(Assignment { dev, why: p.why })
}

impl Passes<'_> {
    fn last(&self) -> usize {
        self.devs.len() - 1
    }

    fn set(&mut self, i: usize, d: usize, why: Reason) {
        self.dev[i] = Some(d);
        self.why[i] = why;
    }

    fn node_desc(&self, i: usize) -> String {
        format!(
            "{} on any of its devices",
            self.graph.describe_node(TensorId::from_index(i as u32))
        )
    }

    fn computes(&self, i: usize) -> bool {
        let op = self.graph.nodes()[i].op;
        !op.is_leaf() && !op.is_view()
    }

    fn supports(&self, d: usize, i: usize) -> bool {
        !self.computes(i)
            || self.devs.get(d).is_some_and(|dv| {
                dv.device
                    .supports_op(self.graph, TensorId::from_index(i as u32))
            })
    }

    /// The buffer type of `i`'s memory, if it already has memory (placed, or
    /// a view of placed memory).
    fn placed_buft(&self, i: usize) -> Option<Arc<dyn BufferType>> {
        let id = TensorId::from_index(i as u32);
        let root = self.graph.nodes()[i].view_src.unwrap_or(id);
        self.placement
            .get(id)
            .or_else(|| self.placement.get(root))
            .map(|p| p.buffer.buffer_type())
    }

    fn weights_buffer(&self, i: usize) -> Option<(Arc<dyn BufferType>, bool)> {
        let id = TensorId::from_index(i as u32);
        let root = self.graph.nodes()[i].view_src.unwrap_or(id);
        let place = self
            .placement
            .get(id)
            .or_else(|| self.placement.get(root))?;
        (place.buffer.usage() == BufferUsage::Weights)
            .then(|| (place.buffer.buffer_type(), place.buffer.is_host()))
    }

    /// Can device `d` read tensor `s` where it is (its placed memory, or the
    /// buffer type of the device it is assigned to)?
    fn reads(&self, d: usize, s: usize) -> bool {
        let Some(dv) = self.devs.get(d) else {
            return false;
        };
        if let Some(b) = self.placed_buft(s) {
            return dv.device.supports_buffer_type(b.as_ref());
        }
        match self.dev[s] {
            Some(sd) => self
                .devs
                .get(sd)
                .is_some_and(|o| dv.device.supports_buffer_type(o.buft.as_ref())),
            None => false,
        }
    }

    fn seed(&mut self) -> Result<()> {
        let graph = self.graph;
        for i in 0..graph.len() {
            if self.dev[i].is_some() {
                continue;
            }
            let node = &graph.nodes()[i];
            // 1. Memory that already exists.
            if let Some(b) = self.placed_buft(i) {
                let d = (0..self.devs.len()).find(|&d| {
                    self.devs[d].device.supports_buffer_type(b.as_ref()) && self.supports(d, i)
                });
                match d {
                    Some(d) => self.set(i, d, Reason::Buffer),
                    None if self.computes(i)
                        && (0..self.devs.len())
                            .any(|d| self.devs[d].device.supports_buffer_type(b.as_ref())) =>
                    {
                        return Err(Error::unsupported(
                            "scheduler",
                            format!(
                                "{}: its memory is in buffer type '{}', and no device that reads it runs the op",
                                graph.describe_node(TensorId::from_index(i as u32)),
                                b.name()
                            ),
                        ));
                    }
                    None => {
                        return Err(Error::unsupported(
                            "scheduler",
                            format!(
                                "{}: its memory is in buffer type '{}', which none of the scheduler's devices reads",
                                graph.describe_node(TensorId::from_index(i as u32)),
                                b.name()
                            ),
                        ));
                    }
                }
                continue;
            }
            // 2. Graph inputs.
            if node.flags.contains(crate::Flags::INPUT) {
                self.set(i, self.last(), Reason::Input);
                continue;
            }
            // 3. Ops follow their weights, unless offloaded.
            if !self.computes(i) || matches!(node.op, Op::Rope(_) | Op::FlashAttnExt { .. }) {
                continue;
            }
            let weights = node.src_ids().find_map(|s| self.weights_buffer(s.index()));
            let Some((buft, host)) = weights else {
                continue;
            };
            let Some(w) = (0..self.devs.len()).find(|&d| {
                self.devs[d].device.supports_buffer_type(buft.as_ref()) && self.supports(d, i)
            }) else {
                continue;
            };
            if host
                && w == self.last()
                && let Some(d) = self.offload_target(i)
            {
                self.set(i, d, Reason::Offload);
                continue;
            }
            self.set(i, w, Reason::Weights);
        }
        Ok(())
    }

    fn offload_target(&self, i: usize) -> Option<usize> {
        let id = TensorId::from_index(i as u32);
        let node = &self.graph.nodes()[i];
        // The batch is dim 1 of the result, dim 2 for MUL_MAT_ID (its dim
        // 1 is the experts used), as ggml's `get_op_batch_size`.
        let rows = if node.op == Op::MulMatId {
            node.layout.ne[2]
        } else {
            node.layout.ne[1]
        };
        (0..self.last()).find(|&d| {
            self.supports(d, i)
                && match self.offload {
                    OpOffload::Off => false,
                    OpOffload::Device => self.devs[d].device.offload_op(self.graph, id),
                    OpOffload::MinBatch(n) => rows >= n,
                }
        })
    }

    /// One expansion round: down then up; `gpu_only` leaves the fallback
    /// device out of the spreading.
    fn expand(&mut self, gpu_only: bool) {
        let n = self.graph.len();
        let why = if gpu_only {
            Reason::ExpandGpu
        } else {
            Reason::Expand
        };
        for down in [true, false] {
            let mut carry: Option<usize> = None;
            for k in 0..n {
                let i = if down { k } else { n - 1 - k };
                if !self.computes(i) {
                    continue;
                }
                match self.dev[i] {
                    Some(d) if gpu_only && d == self.last() => carry = None,
                    Some(d) => carry = Some(d),
                    None => {
                        if let Some(c) = carry
                            && self.supports(c, i)
                        {
                            self.set(i, c, why);
                        }
                    }
                }
            }
        }
    }

    fn upgrade_and_best_inputs(&mut self) {
        let graph = self.graph;
        for i in 0..graph.len() {
            if !self.computes(i) {
                continue;
            }
            let srcs: Vec<usize> = graph.nodes()[i].src_ids().map(|s| s.index()).collect();
            match self.dev[i] {
                None => {
                    let best = (0..self.devs.len())
                        .filter(|&d| self.supports(d, i))
                        .max_by_key(|&d| {
                            // Most sources readable; ties to the higher priority.
                            let n = srcs.iter().filter(|&&s| self.reads(d, s)).count();
                            (n, usize::MAX - d)
                        });
                    if let Some(d) = best {
                        self.set(i, d, Reason::BestInputs);
                    }
                }
                Some(cur) => {
                    if self.why[i] == Reason::Pin {
                        continue;
                    }
                    let up = (0..cur).find(|&d| {
                        same_buffer_type(self.devs[d].buft.as_ref(), self.devs[cur].buft.as_ref())
                            && self.supports(d, i)
                            && srcs.iter().all(|&s| self.reads(d, s))
                    });
                    if let Some(d) = up {
                        self.set(i, d, Reason::Upgrade);
                    }
                }
            }
        }
    }

    /// Every op whose memory already exists runs on a device that can
    /// reach that memory (a pin can ask otherwise: that is an error).
    fn check_memory(&self) -> Result<()> {
        for i in 0..self.graph.len() {
            if !self.computes(i) {
                continue;
            }
            let (Some(b), Some(d)) = (self.placed_buft(i), self.dev[i]) else {
                continue;
            };
            if !self.devs[d].device.supports_buffer_type(b.as_ref()) {
                return Err(Error::unsupported(
                    self.devs[d].device.name(),
                    format!(
                        "{} (pinned here?): its result's memory is in buffer type '{}', which this device cannot write",
                        self.graph.describe_node(TensorId::from_index(i as u32)),
                        b.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn root(&self, i: usize) -> usize {
        self.graph.nodes()[i].view_src.map_or(i, |r| r.index())
    }

    fn rest(&mut self) -> Result<()> {
        let graph = self.graph;
        let n = graph.len();
        // Sources without a device: their memory goes where their consumer runs.
        for i in 0..n {
            if !self.computes(i) {
                continue;
            }
            let Some(d) = self.dev[i] else { continue };
            for s in graph.nodes()[i].src_ids() {
                let r = self.root(s.index());
                // Only memory that nothing computes (leaves): an op without
                // a device is one no device has taken yet, decided below.
                if self.dev[r].is_none() && !self.computes(r) {
                    self.set(r, d, Reason::Consumer);
                }
            }
        }
        // Anything left: ops to the first device that runs them, memory
        // (leaves) to the fallback device.
        for i in 0..n {
            if self.dev[i].is_some() || graph.nodes()[i].op.is_view() {
                continue;
            }
            if self.computes(i) {
                match (0..self.devs.len()).find(|&d| self.supports(d, i)) {
                    Some(d) => self.set(i, d, Reason::Fallback),
                    None => return Err(Error::unsupported("scheduler", self.node_desc(i))),
                }
            } else {
                self.set(i, self.last(), Reason::Fallback);
            }
        }
        // Ops that write into a source's memory (CPY, SET_ROWS) run where
        // that memory is; views are where their memory is.
        for i in 0..n {
            let r = self.root(i);
            if r == i {
                continue;
            }
            let Some(rd) = self.dev[r] else { continue };
            if self.computes(i) {
                if self.dev[i] != Some(rd) {
                    if !self.supports(rd, i) {
                        return Err(Error::unsupported(
                            "scheduler",
                            format!(
                                "{}: it writes into memory on {}, which cannot run it",
                                graph.describe_node(TensorId::from_index(i as u32)),
                                self.devs[rd].device.name()
                            ),
                        ));
                    }
                    self.set(i, rd, Reason::ViewSource);
                }
            } else {
                self.set(i, rd, Reason::ViewSource);
            }
        }
        Ok(())
    }
}
