//! Lowering: one graph of the meta device becomes one graph per device
//! and the steps that run them.
//!
//! Each tensor gets a split state ([`SplitState`]) and, per device, the id
//! of its piece in that device's graph. Inputs take their state from the
//! meta memory that holds them; each op derives its result's state from
//! its operands' (`crate::rules`), converting operands where it must:
//! mirrored → split is a local slice (a view and a copy on each device);
//! split → mirrored is an all-gather; a partial sum is all-reduced right
//! after the product that made it. The collectives cut the per-device
//! graphs into [`Step::Compute`] ranges.

// Loops over device indices walk several per-device vectors at once.
#![allow(clippy::needless_range_loop)]

use std::ops::Range;
use std::sync::Arc;

use tessera::{Buffer, Device, Error, Graph, Layout, Op, Place, Placement, Result, TensorId};

use crate::arena::{Arena, ArenaPlan};
use crate::buffer::MetaBuffer;
use crate::rebuild::rebuild;
use crate::state::{Runs, Split, SplitState};
use crate::views;

/// A tensor of the meta graph as the devices hold it.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub state: SplitState,
    /// The logical (whole) layout.
    pub layout: Layout,
    /// Per device: its piece's id in that device's graph (`None`: empty).
    pub ids: Vec<Option<TensorId>>,
}

/// What the stream runs, in order.
#[derive(Debug)]
pub(crate) enum Step {
    /// Each device computes this node range of its graph.
    Compute(Vec<Range<usize>>),
    /// Slices by copy: each device's piece of its whole (contiguous) copy
    /// `whole[j]` copied into `piece[j]`, for devices that cannot slice
    /// with a view and a copy kernel.
    Slice {
        whole: Vec<Option<TensorId>>,
        piece: Vec<Option<TensorId>>,
        runs: Vec<Runs>,
    },
    /// Copies between devices: `(from device, tensor, to device, tensor)`,
    /// whole tensors of the same layout; `true` when it starts an
    /// all-reduce (for the statistics).
    Copy(Vec<(usize, TensorId, usize, TensorId)>, bool),
    /// All-gather: every device's piece (`pieces[k]`, compact) is copied
    /// into its place in `whole[j]` on every device `j`.
    Gather {
        pieces: Vec<Option<TensorId>>,
        whole: Vec<TensorId>,
        runs: Vec<Runs>,
    },
}

/// The lowered graph.
#[derive(Debug)]
pub(crate) struct Lowered {
    pub graphs: Vec<Graph>,
    /// Per device: tensors with meta memory, placed before planning.
    pub preplaced: Vec<Vec<(TensorId, Place)>>,
    pub steps: Vec<Step>,
    /// The states results leave in mirror memory: buffer, offset, layout.
    pub records: Vec<(Arc<dyn Buffer>, usize, Layout, SplitState)>,
    /// The inputs read from meta memory and the states they were found in
    /// (the lowering holds while they are found so again).
    pub inputs: Vec<(Arc<dyn Buffer>, usize, Layout, SplitState)>,
    /// Where the tensors the copy steps move live (`crate::arena`).
    pub arena: ArenaPlan,
}

pub(crate) struct Lower<'a> {
    pub(crate) devices: &'a [Arc<dyn Device>],
    pub graph: &'a Graph,
    pub placement: &'a Placement,
    pub range: Range<usize>,
    pub n: usize,
    pub split_inputs: Option<u64>,
    pub all_reduce: crate::AllReduce,
    pub gs: Vec<Graph>,
    pub(crate) pre: Vec<Vec<(TensorId, Place)>>,
    pub(crate) steps: Vec<Step>,
    cut: Vec<usize>,
    pub(crate) map: Vec<Option<Held>>,
    /// Memory roots that CPY or SET_ROWS write into (never sliced into
    /// copies: the writes must reach them).
    written: Vec<bool>,
    inputs: Vec<(Arc<dyn Buffer>, usize, Layout, SplitState)>,
    arena: Arena,
    /// Partial sums not yet all-reduced, with the mirror memory their
    /// (reduced) value goes to once they are: the reduction waits for the
    /// first consumer that needs the sum (see [`Lower::get`]).
    pub(crate) pending: Vec<Option<(Arc<dyn Buffer>, usize)>>,
    /// The results (mirror memory, layout, state) the host or later
    /// graphs may read.
    pub(crate) records: Vec<(Arc<dyn Buffer>, usize, Layout, SplitState)>,
}

impl<'a> Lower<'a> {
    pub fn new(
        graph: &'a Graph,
        placement: &'a Placement,
        range: Range<usize>,
        devices: &'a [Arc<dyn Device>],
        options: &crate::MetaOptions,
    ) -> Self {
        let split_inputs = options.split_inputs;
        let n = devices.len();
        Lower {
            devices,
            graph,
            placement,
            range,
            n,
            split_inputs,
            all_reduce: options.all_reduce,
            gs: (0..n).map(|_| Graph::new()).collect(),
            pre: vec![Vec::new(); n],
            steps: Vec::new(),
            cut: vec![0; n],
            map: vec![None; graph.len()],
            written: written_roots(graph),
            inputs: Vec::new(),
            arena: Arena::new(n),
            pending: vec![None; graph.len()],
            records: Vec::new(),
        }
    }

    /// Lower every op node of the range.
    pub fn run(mut self) -> Result<Lowered> {
        let end = self.range.end.min(self.graph.len());
        let ids: Vec<TensorId> = self
            .graph
            .ids()
            .skip(self.range.start)
            .take(end.saturating_sub(self.range.start))
            .collect();
        for id in ids {
            let i = id.index();
            let node = &self.graph.nodes()[i];
            if node.is_leaf() || node.op.is_view() || node.op == Op::Transfer {
                continue;
            }
            let held =
                crate::rules::lower_op(&mut self, id).map_err(|e| name_node(self.graph, id, e))?;
            if let Some((buf, offset)) = self.mirror_place(id)? {
                if held.state == SplitState::Partial {
                    // Placed once reduced (a partial sum is not the value).
                    self.pending[i] = Some((buf, offset));
                } else {
                    self.place_result(id, &held, buf, offset)?;
                }
            }
            self.map[i] = Some(held);
        }
        // Partial sums that the host or a later graph may read are reduced
        // now (the others were consumed as partial sums, or not at all).
        let later = crate::partial::read_after(self.graph, end);
        for i in 0..self.pending.len() {
            let output = self.graph.nodes()[i].flags.contains(tessera::Flags::OUTPUT);
            if self.pending[i].is_some() && (output || later[i]) {
                self.get(TensorId::from_index(i as u32))?;
            }
        }
        self.flush();
        let records = std::mem::take(&mut self.records);
        let align: Vec<usize> = self
            .devices
            .iter()
            .map(|d| d.buffer_type().alignment())
            .collect();
        let arena = self.arena.plan(&self.steps, &align)?;
        Ok(Lowered {
            graphs: self.gs,
            preplaced: self.pre,
            steps: self.steps,
            records,
            inputs: self.inputs,
            arena,
        })
    }

    /// A buffer on device `j` that the next copy step writes (its memory
    /// lives only around that step: `crate::arena`).
    pub(crate) fn receive_leaf(&mut self, j: usize, layout: Layout) -> Result<TensorId> {
        let id = self.gs[j].new_leaf(layout)?;
        self.keep_for_copy(j, id)?;
        Ok(id)
    }

    /// Node `id` of device `j` is read only by the next copy step: its
    /// memory lives only around that step.
    pub(crate) fn keep_for_copy(&mut self, j: usize, id: TensorId) -> Result<()> {
        let layout = self.gs[j].layout(id)?;
        let size = self.devices[j].buffer_type().alloc_size(&layout);
        self.arena.add(j, id, &layout, size);
        Ok(())
    }

    /// Push a copy step (`starts`: it starts an all-reduce).
    pub(crate) fn push_copy(
        &mut self,
        copies: Vec<(usize, TensorId, usize, TensorId)>,
        starts: bool,
    ) {
        self.arena.pushed(self.steps.len());
        self.steps.push(Step::Copy(copies, starts));
    }

    /// The mirror buffer and offset of node `id`'s memory, if it has meta
    /// memory of the mirror kind.
    fn mirror_place(&self, id: TensorId) -> Result<Option<(Arc<dyn Buffer>, usize)>> {
        let Some(place) = self.placement.get(id) else {
            return Err(Error::Unallocated {
                tensor: self.graph.nodes()[id.index()].name.clone(),
                id: id.index(),
            });
        };
        let Some(mb) = meta_buffer(&place.buffer) else {
            return Err(Error::unsupported(
                "Meta",
                format!(
                    "memory of buffer '{}' (not the meta device's)",
                    place.buffer.name()
                ),
            ));
        };
        Ok(mb
            .mirror_parts()
            .is_some()
            .then(|| (place.buffer.clone(), place.offset)))
    }

    /// Close the current compute step.
    pub fn flush(&mut self) {
        let ranges: Vec<Range<usize>> =
            (0..self.n).map(|j| self.cut[j]..self.gs[j].len()).collect();
        if ranges.iter().any(|r| !r.is_empty()) {
            self.steps.push(Step::Compute(ranges));
        }
        for j in 0..self.n {
            self.cut[j] = self.gs[j].len();
        }
    }

    /// The tensor `id` as the devices hold it, a partial sum left as one
    /// (for the ops that carry partial sums: sums, products by a mirrored
    /// factor, scalings, views).
    pub fn get_partial(&mut self, id: TensorId) -> Result<Held> {
        if let Some(h) = &self.map[id.index()] {
            return Ok(h.clone());
        }
        let node = self.graph.node(id)?.clone();
        let h = if node.op.is_view() {
            let src = node
                .src(0)
                .ok_or_else(|| Error::op(node.op.name(), "a view without a source"))?;
            let s = self.get_partial(src)?;
            self.lower_view(id, &s)?
        } else {
            let in_range = self.range.contains(&id.index());
            if in_range && !node.is_leaf() && node.op != Op::Transfer {
                return Err(Error::op(node.op.name(), "used before it is computed"));
            }
            self.input(id)?
        };
        self.map[id.index()] = Some(h.clone());
        Ok(h)
    }

    /// A tensor computed before this range (or a leaf), from meta memory.
    fn input(&mut self, id: TensorId) -> Result<Held> {
        let node = self.graph.node(id)?.clone();
        let place = self.placement.get(id).ok_or_else(|| Error::Unallocated {
            tensor: node.name.clone(),
            id: id.index(),
        })?;
        let buffer = place.buffer.clone();
        let mb = meta_buffer(&buffer).ok_or_else(|| {
            Error::unsupported(
                "Meta",
                format!(
                    "tensor {} in buffer '{}' (not the meta device's memory)",
                    node.label(id),
                    place.buffer.name()
                ),
            )
        })?;
        let held = mb.held(place.offset, &node.layout)?;
        self.inputs.push((
            buffer.clone(),
            place.offset,
            node.layout,
            held.state.clone(),
        ));
        let mut ids = Vec::with_capacity(self.n);
        for j in 0..self.n {
            ids.push(match &held.places[j] {
                Some((p, l)) => {
                    let leaf = self.gs[j].new_leaf(*l)?;
                    if !node.name.is_empty() {
                        self.gs[j].set_name(leaf, &node.name)?;
                    }
                    self.pre[j].push((leaf, p.clone()));
                    Some(leaf)
                }
                None => None,
            });
        }
        let h = Held {
            state: held.state,
            layout: node.layout,
            ids,
        };
        let is_input = (node.is_leaf() || node.op == Op::Transfer) && !self.written[id.index()];
        match self.split_inputs {
            Some(seed) if is_input && mb.mirror_parts().is_some() => {
                self.random_split(h, seed ^ (id.index() as u64).wrapping_mul(0x9E37_79B9))
            }
            _ => Ok(h),
        }
    }

    /// Tests: a mirrored contiguous input cut along a pseudo-random axis.
    fn random_split(&mut self, h: Held, seed: u64) -> Result<Held> {
        if h.state != SplitState::Mirrored || !h.layout.is_contiguous() || h.layout.nelements() == 0
        {
            return Ok(h);
        }
        let mut rng = seed | 1;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let bs = h.layout.dtype.block_size();
        let axes: Vec<usize> = (0..4)
            .filter(|&a| {
                let units = if a == 0 {
                    h.layout.ne[0] / bs
                } else {
                    h.layout.ne[a]
                };
                units > 1
            })
            .collect();
        if axes.is_empty() || next() % 5 == 0 {
            return Ok(h);
        }
        let axis = axes[(next() % axes.len() as u64) as usize];
        let unit = if axis == 0 { bs } else { 1 };
        let units = h.layout.ne[axis] / unit;
        let mut cuts: Vec<usize> = (0..self.n - 1)
            .map(|_| (next() % (units as u64 + 1)) as usize)
            .collect();
        cuts.sort_unstable();
        let mut sizes = Vec::with_capacity(self.n);
        let mut prev = 0;
        for c in cuts.into_iter().chain([units]) {
            sizes.push((c - prev) * unit);
            prev = c;
        }
        let split = Split::new(&h.layout, axis, sizes)?;
        self.sliced(&h, &split)
    }

    /// A view node over `s`.
    fn lower_view(&mut self, id: TensorId, s: &Held) -> Result<Held> {
        let node = self.graph.node(id)?.clone();
        let src = node
            .src(0)
            .ok_or_else(|| Error::op(node.op.name(), "no source"))?;
        let src_layout = self.graph.node(src)?.layout;
        let (_, src_offs) = self.graph.memory_root(src)?;
        let rel = node
            .view_offs
            .checked_sub(src_offs)
            .ok_or_else(|| Error::op(node.op.name(), "a view that starts before its source"))?;
        let split = match &s.state {
            SplitState::Split(sp) => Some(sp.clone()),
            _ => None,
        };
        let mut ids = vec![None; self.n];
        let state = match (&node.op, split) {
            (_, None) => {
                for j in 0..self.n {
                    if let Some(sid) = s.ids[j] {
                        ids[j] = Some(self.view_like(j, &node.op, sid, &node.layout, rel)?);
                    }
                }
                s.state.clone()
            }
            (Op::Reshape, Some(sp)) => match views::reshape(&src_layout, &sp, &node.layout) {
                Some(out) => {
                    for j in 0..self.n {
                        if let (Some(sid), Some(l)) = (s.ids[j], out.piece_layout(&node.layout, j)?)
                        {
                            ids[j] = Some(self.gs[j].reshape(sid, &l.ne)?);
                        }
                    }
                    SplitState::Split(out)
                }
                None => return self.view_of_gathered(id, s, rel),
            },
            (Op::Permute(axes), Some(sp)) => {
                for j in 0..self.n {
                    if let Some(sid) = s.ids[j] {
                        ids[j] = Some(self.gs[j].permute(sid, axes.map(|a| a as usize))?);
                    }
                }
                SplitState::Split(views::permute(&sp, *axes))
            }
            (Op::Transpose, Some(sp)) => {
                for j in 0..self.n {
                    if let Some(sid) = s.ids[j] {
                        ids[j] = Some(self.gs[j].transpose(sid)?);
                    }
                }
                SplitState::Split(views::permute(&sp, [1, 0, 2, 3]))
            }
            (_, Some(sp)) => match views::view(&src_layout, &sp, &node.layout, rel) {
                Some(map) => {
                    for j in 0..self.n {
                        if let Some(sid) = s.ids[j] {
                            if map.split.sizes[j] == 0 {
                                continue;
                            }
                            let piece = self.gs[j].layout(sid)?;
                            let (ne, nb, off) = map.piece(&node.layout, &piece, j);
                            ids[j] = Some(self.gs[j].view(sid, ne, nb, off)?);
                        }
                    }
                    SplitState::Split(map.split)
                }
                None => return self.view_of_gathered(id, s, rel),
            },
        };
        Ok(Held {
            state,
            layout: node.layout,
            ids,
        })
    }

    /// The same view op on device `j`'s whole copy `sid`.
    fn view_like(
        &mut self,
        j: usize,
        op: &Op,
        sid: TensorId,
        out: &Layout,
        rel: usize,
    ) -> Result<TensorId> {
        let g = &mut self.gs[j];
        match op {
            Op::Reshape => g.reshape(sid, &out.ne),
            Op::Permute(axes) => g.permute(sid, axes.map(|a| a as usize)),
            Op::Transpose => g.transpose(sid),
            _ => g.view(sid, out.ne, [out.nb[1], out.nb[2], out.nb[3]], rel),
        }
    }

    /// A view no device can take of its piece: gather the source (whole
    /// and contiguous on every device), then view that.
    fn view_of_gathered(&mut self, id: TensorId, s: &Held, rel: usize) -> Result<Held> {
        let node = self.graph.node(id)?.clone();
        if !s.layout.is_contiguous() {
            return Err(Error::unsupported(
                "Meta",
                format!("{} of a split, strided tensor", node.op.name()),
            ));
        }
        let m = self.mirrored(s)?;
        let mut ids = vec![None; self.n];
        for (j, slot) in ids.iter_mut().enumerate() {
            if let Some(sid) = m.ids[j] {
                *slot = Some(self.view_like(j, &node.op, sid, &node.layout, rel)?);
            }
        }
        Ok(Held {
            state: SplitState::Mirrored,
            layout: node.layout,
            ids,
        })
    }

    /// Build `node`'s op on every device over `srcs`, giving a result held
    /// as `state` (a partial result is all-reduced at once).
    pub fn emit(&mut self, id: TensorId, srcs: &[Option<Held>], state: SplitState) -> Result<Held> {
        let node = self.graph.node(id)?.clone();
        let mut ids = vec![None; self.n];
        for j in 0..self.n {
            let expect = match &state {
                SplitState::Split(s) => s.piece_layout(&node.layout, j)?,
                _ => Some(node.layout),
            };
            let Some(expect) = expect else { continue };
            let per: Vec<Option<TensorId>> = srcs
                .iter()
                .map(|s| s.as_ref().and_then(|s| s.ids[j]))
                .collect();
            let missing = srcs
                .iter()
                .zip(&per)
                .any(|(s, p)| s.is_some() && p.is_none());
            if missing {
                if state == SplitState::Partial {
                    continue; // an empty share of the sum: contributes nothing
                }
                return Err(Error::op(
                    node.op.name(),
                    format!("device {j} lacks an operand of a non-empty result"),
                ));
            }
            let out = rebuild(&mut self.gs[j], &node, &per, expect.ne)?;
            let got = self.gs[j].layout(out)?;
            if got.ne != expect.ne {
                return Err(Error::op(
                    node.op.name(),
                    format!("device {j}'s result is {got}, its share should be {expect}"),
                ));
            }
            ids[j] = Some(out);
        }
        Ok(Held {
            state,
            layout: node.layout,
            ids,
        })
    }
}

/// Per tensor: whether a CPY or SET_ROWS of `graph` writes into its memory.
fn written_roots(graph: &Graph) -> Vec<bool> {
    let mut w = vec![false; graph.len()];
    for node in graph.nodes() {
        if node.op.writes_into_src()
            && let Some(root) = node.view_src
            && let Some(slot) = w.get_mut(root.index())
        {
            *slot = true;
        }
    }
    w
}

/// The meta buffer behind `buffer`, if it is one.
pub(crate) fn meta_buffer(buffer: &Arc<dyn Buffer>) -> Option<&MetaBuffer> {
    buffer.as_any().downcast_ref::<MetaBuffer>()
}

pub(crate) fn name_node(graph: &Graph, id: TensorId, e: Error) -> Error {
    let node = &graph.nodes()[id.index()];
    match e {
        Error::Unsupported { device, what } => Error::Unsupported {
            device,
            what: format!("{what} (node {} {})", node.label(id), node.op.name()),
        },
        other => other,
    }
}
