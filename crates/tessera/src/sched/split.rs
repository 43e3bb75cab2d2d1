//! Splitting an assigned graph into per-device runs, with the copies between
//! them, as one rewritten graph (ggml's pass 5 and graph build, §2.6–2.7).
//!
//! A *split* is a run of consecutive ops on one device. Where an op reads a
//! tensor whose memory its device cannot read, the rewritten graph gets a
//! TRANSFER node (same layout, on the op's device) at the start of the split
//! that first needs it, and every later op of that device reads the copy:
//! each tensor is copied once per device and reused. Because the copy is a
//! node reading its source, the graph allocator keeps the source alive until
//! the copy and allocates the copy at the start of its split (where the
//! scheduler makes it), freeing it after its last reader, exactly as for any
//! other tensor.
//!
//! A new split starts where the device changes, and also (as in ggml) where
//! an op needs a *weight* copied while the split already has inputs, so that
//! offloaded weights are copied, used and freed one at a time instead of all
//! living at once. There is no limit on splits or inputs per split.
//!
//! The user's graph is never modified: the rewritten graph is a new [`Graph`]
//! whose nodes are copies (`Graph::copy_node`, which re-checks that every
//! source has the layout the op was validated with).

use std::collections::HashMap;
use std::ops::Range;

use crate::buffer::BufferUsage;
use crate::placement::Placement;
use crate::{Graph, MAX_SRC, Result, TensorId};

use super::assign::{Assignment, Dev};

/// One copy into a split.
#[derive(Clone, Debug)]
pub struct SplitInput {
    /// The tensor copied, in the user's graph.
    pub source: TensorId,
    /// The tensor copied, in the rewritten graph.
    pub from: TensorId,
    /// The copy, in the rewritten graph.
    pub to: TensorId,
    /// Bytes copied.
    pub bytes: usize,
    /// The device the source lives on.
    pub from_device: usize,
}

/// A run of ops on one device.
#[derive(Clone, Debug)]
pub struct Split {
    /// Device index (scheduler order).
    pub device: usize,
    /// The nodes the device computes, in the rewritten graph; the TRANSFER
    /// nodes of its copies come first (devices skip them: the scheduler
    /// makes the copies before the compute).
    pub nodes: Range<usize>,
    /// The copies made before the split runs.
    pub inputs: Vec<SplitInput>,
    /// The split reads memory of another device directly (a device that can
    /// read another's buffer type): the next split of that device must wait
    /// for it.
    pub reads_foreign: bool,
}

/// The rewritten graph and what ties it to the user's.
#[derive(Clone, Debug)]
pub(super) struct Rewrite {
    pub graph: Graph,
    /// Per user tensor: its id in the rewritten graph.
    pub map: Vec<TensorId>,
    pub splits: Vec<Split>,
    /// Per rewritten tensor: the device (index) whose buffer type holds it.
    pub buffer_ids: Vec<usize>,
    /// Per rewritten tensor: the user tensor it is (`None` for copies).
    pub origin: Vec<Option<TensorId>>,
}

struct Ctx<'a> {
    graph: &'a Graph,
    placement: &'a Placement,
    devs: &'a [Dev<'a>],
    a: &'a Assignment,
}

impl Ctx<'_> {
    fn root(&self, i: usize) -> usize {
        self.graph.nodes()[i].view_src.map_or(i, |r| r.index())
    }

    /// The device whose memory holds tensor `i`.
    fn mem_dev(&self, i: usize) -> usize {
        self.a.dev[self.root(i)]
    }

    fn computes(&self, i: usize) -> bool {
        let op = self.graph.nodes()[i].op;
        !op.is_leaf() && !op.is_view()
    }

    /// Can device `d` read tensor `i` where its memory is?
    fn reads(&self, d: usize, i: usize) -> bool {
        let r = self.root(i);
        let id = TensorId::from_index(i as u32);
        let rid = TensorId::from_index(r as u32);
        let dev = self.devs[d].device;
        match self.placement.get(id).or_else(|| self.placement.get(rid)) {
            Some(p) => dev.supports_buffer_type(p.buffer.buffer_type().as_ref()),
            None => {
                let md = self.mem_dev(i);
                md == d || dev.supports_buffer_type(self.devs[md].buft.as_ref())
            }
        }
    }

    fn is_weight(&self, i: usize) -> bool {
        let id = TensorId::from_index(i as u32);
        let rid = TensorId::from_index(self.root(i) as u32);
        self.placement
            .get(id)
            .or_else(|| self.placement.get(rid))
            .is_some_and(|p| p.buffer.usage() == BufferUsage::Weights)
    }

    /// Sources of op `i` that device `d` needs copied.
    fn needs_copy(&self, d: usize, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.graph.nodes()[i]
            .src_ids()
            .map(|s| s.index())
            .filter(move |&s| self.mem_dev(s) != d && !self.reads(d, s))
    }
}

/// Split `graph` by `a` and build the rewritten graph.
pub(super) fn split(
    graph: &Graph,
    placement: &Placement,
    devs: &[Dev<'_>],
    a: &Assignment,
) -> Result<Rewrite> {
    let cx = Ctx {
        graph,
        placement,
        devs,
        a,
    };
    let n = graph.len();
    // 1. Where each split starts (user node index) and its device. Copies
    //    already made for a device are reused, so only new ones count.
    let mut starts: Vec<(usize, usize)> = Vec::new();
    let mut has_inputs = false;
    let mut copied: std::collections::HashSet<(usize, usize)> = Default::default();
    for i in (0..n).filter(|&i| cx.computes(i)) {
        let d = a.dev[i];
        let new: Vec<usize> = cx
            .needs_copy(d, i)
            .filter(|&s| !copied.contains(&(s, d)))
            .collect();
        let copies_weight = new.iter().any(|&s| cx.is_weight(s));
        let new_split = match starts.last() {
            None => true,
            Some(&(_, cur)) => cur != d || (copies_weight && has_inputs),
        };
        if new_split {
            starts.push((i, d));
            has_inputs = false;
        }
        has_inputs |= !new.is_empty();
        copied.extend(new.into_iter().map(|s| (s, d)));
    }
    // 2. The rewritten graph: leaves first, then per split its copies and
    //    its nodes (views and other non-computing nodes where they fall).
    let mut b = Builder {
        cx: &cx,
        out: Graph::new(),
        map: vec![None; n],
        buffer_ids: Vec::new(),
        copies: HashMap::new(),
    };
    for i in (0..n).filter(|&i| graph.nodes()[i].op.is_leaf()) {
        b.emit(i, None)?;
    }
    let mut splits: Vec<Split> = Vec::with_capacity(starts.len());
    for (k, &(first, d)) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(n, |s| s.0);
        // Nodes before the first split compute nothing; they go first.
        if k == 0 {
            for i in 0..first {
                b.emit(i, None)?;
            }
        }
        // The split's copies, made before it runs, so they come first: a
        // copy's source may be a view that falls inside the split's range,
        // which is then emitted early (views compute nothing).
        let start = b.out.len();
        let mut inputs = Vec::new();
        let mut reads_foreign = false;
        for i in (first..end).filter(|&i| cx.computes(i)) {
            for s in graph.nodes()[i].src_ids().map(|s| s.index()) {
                if cx.mem_dev(s) == d || b.copies.contains_key(&(s, d)) {
                    continue;
                }
                if cx.reads(d, s) {
                    reads_foreign = true;
                    continue;
                }
                let from = b.emit(s, None)?;
                let to = b.out.transfer(from)?;
                b.buffer_ids.push(d);
                b.copies.insert((s, d), to);
                inputs.push(SplitInput {
                    source: TensorId::from_index(s as u32),
                    from,
                    to,
                    bytes: graph.nodes()[s].layout.nbytes(),
                    from_device: cx.mem_dev(s),
                });
            }
        }
        for i in first..end {
            b.emit(i, Some(d))?;
        }
        splits.push(Split {
            device: d,
            nodes: start..b.out.len(),
            inputs,
            reads_foreign,
        });
    }
    if starts.is_empty() {
        for i in 0..n {
            b.emit(i, None)?;
        }
    }
    let Builder {
        mut out,
        map,
        buffer_ids,
        ..
    } = b;
    // Graph inputs keep their memory for the whole compute (flagged OUTPUT
    // in the rewritten graph, so nothing is planned over them): computing a
    // graph twice in a row reads the same inputs.
    for (i, m) in map.iter().enumerate() {
        let n = &graph.nodes()[i];
        if let Some(id) = m
            && n.op.is_leaf()
            && n.flags.contains(crate::Flags::INPUT)
        {
            out.set_output(*id)?;
        }
    }
    let map = map
        .into_iter()
        .map(|m| m.ok_or_else(|| internal("unmapped tensor")))
        .collect::<Result<Vec<_>>>()?;
    let mut origin = vec![None; out.len()];
    for (i, n) in map.iter().enumerate() {
        if let Some(slot) = origin.get_mut(n.index()) {
            *slot = Some(TensorId::from_index(i as u32));
        }
    }
    Ok(Rewrite {
        graph: out,
        map,
        splits,
        buffer_ids,
        origin,
    })
}

/// Emits user nodes into the rewritten graph, each once.
struct Builder<'a, 'c> {
    cx: &'c Ctx<'a>,
    out: Graph,
    map: Vec<Option<TensorId>>,
    buffer_ids: Vec<usize>,
    /// (user tensor, device) -> its copy on that device.
    copies: HashMap<(usize, usize), TensorId>,
}

impl Builder<'_, '_> {
    /// Emit user node `i` (and first, for a node that computes nothing, any
    /// source not emitted yet); a computing node of a split on `device`
    /// reads that device's copies. Returns its id in the rewritten graph.
    fn emit(&mut self, i: usize, device: Option<usize>) -> Result<TensorId> {
        if let Some(id) = self.map[i] {
            return Ok(id);
        }
        let graph = self.cx.graph;
        let node = &graph.nodes()[i];
        let computes = self.cx.computes(i);
        let mut srcs = [None; MAX_SRC];
        for (slot, s) in srcs.iter_mut().zip(node.srcs.iter()) {
            let Some(s) = s else { continue };
            let s = s.index();
            let copied = match device {
                Some(d) if computes => self.copies.get(&(s, d)).copied(),
                _ => None,
            };
            *slot = Some(match copied {
                Some(c) => c,
                None if !computes => self.emit(s, None)?,
                None => self.map[s].ok_or_else(|| internal("source before its node"))?,
            });
        }
        let view_src = match node.view_src {
            Some(r) => Some(match self.map[r.index()] {
                Some(id) => id,
                None => self.emit(r.index(), None)?,
            }),
            None => None,
        };
        let id = self
            .out
            .copy_node(graph, TensorId::from_index(i as u32), srcs, view_src)?;
        self.map[i] = Some(id);
        self.buffer_ids.push(self.cx.mem_dev(i));
        Ok(id)
    }
}

fn internal(what: &str) -> crate::Error {
    crate::Error::device("scheduler", format!("internal error: {what}"))
}
