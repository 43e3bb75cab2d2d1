//! Pipeline parallelism: `n_copies` slots for the tensors that cross a
//! compute boundary (ggml's `n_copies`, §2.10).
//!
//! With `n_copies > 1`, every split input copy (TRANSFER node) and every
//! graph input (a leaf flagged INPUT that the user did not bind) exists
//! `n_copies` times, in memory of its own outside the graph allocator's
//! plan (buffer id [`EXTERNAL`]). Each [`super::Scheduler::alloc_graph`]
//! moves to the next slot and gives the user the inputs of that slot, so
//! the inputs of the next compute can be written while the previous one is
//! still running on other devices; a compute uses the slot whose inputs the
//! caller's placement holds (so computing the same graph twice in a row
//! reads the inputs that were written, never another slot's). Before a
//! split copies into its slot, its stream waits for the event recorded
//! after the slot's previous use on that device.
//!
//! With `n_copies == 1` nothing here is used: the inputs are planned by the
//! graph allocator like any tensor (and freed after their last reader).

use std::sync::Arc;

use crate::alloc::{EXTERNAL, alloc_tensors, alloc_tensors_size};
use crate::buffer::{Buffer, BufferType, BufferUsage};
use crate::placement::{Place, Placement};
use crate::{Flags, Graph, Op, Result, TensorId};

use super::split::Rewrite;

/// The slot tensors of one plan and their memory.
#[derive(Debug, Default)]
pub(super) struct Copies {
    /// Rewritten-graph ids of the slot tensors, with their device.
    pub nodes: Vec<(TensorId, usize)>,
    /// Per copy: the place of each entry of `nodes`.
    slots: Vec<Vec<Place>>,
    /// Every buffer holding slots (to recognise the scheduler's memory).
    buffers: Vec<Arc<dyn Buffer>>,
    /// Bytes of slot memory per device.
    pub bytes: Vec<usize>,
}

impl Copies {
    /// The slot tensors of `rw` (with `user` the memory the user bound), and
    /// mark them [`EXTERNAL`] in its buffer ids.
    pub(super) fn mark(rw: &mut Rewrite, graph: &Graph, user: &Placement) -> Copies {
        let mut nodes = Vec::new();
        let mut is_input_leaf = vec![false; rw.graph.len()];
        for id in graph.ids() {
            let n = &graph.nodes()[id.index()];
            if n.op.is_leaf() && n.flags.contains(Flags::INPUT) && user.get(id).is_none() {
                is_input_leaf[rw.map[id.index()].index()] = true;
            }
        }
        for (i, n) in rw.graph.nodes().iter().enumerate() {
            if n.op == Op::Transfer || is_input_leaf[i] {
                let dev = rw.buffer_ids[i];
                nodes.push((TensorId::from_index(i as u32), dev));
                rw.buffer_ids[i] = EXTERNAL;
            }
        }
        Copies {
            nodes,
            ..Copies::default()
        }
    }

    /// Layouts of the slot tensors on device `d`.
    fn layouts(&self, rw: &Rewrite, d: usize) -> Vec<crate::Layout> {
        self.nodes
            .iter()
            .filter(|(_, dev)| *dev == d)
            .map(|(id, _)| rw.graph.nodes()[id.index()].layout)
            .collect()
    }

    /// Bytes per device that `n_copies` slots need.
    pub(super) fn sizes(
        &self,
        rw: &Rewrite,
        bufts: &[Arc<dyn BufferType>],
        n_copies: usize,
    ) -> Result<Vec<usize>> {
        bufts
            .iter()
            .enumerate()
            .map(|(d, b)| {
                let one = alloc_tensors_size(b, &self.layouts(rw, d))?;
                one.checked_mul(n_copies)
                    .ok_or_else(|| crate::Error::Overflow("slot memory".into()))
            })
            .collect()
    }

    /// Allocate the slots (once per plan).
    pub(super) fn allocate(
        &mut self,
        rw: &Rewrite,
        bufts: &[Arc<dyn BufferType>],
        n_copies: usize,
    ) -> Result<()> {
        if !self.slots.is_empty() || self.nodes.is_empty() {
            return Ok(());
        }
        let mut slots = vec![vec![None; self.nodes.len()]; n_copies];
        let mut bytes = vec![0usize; bufts.len()];
        for (d, buft) in bufts.iter().enumerate() {
            let idx: Vec<usize> = (0..self.nodes.len())
                .filter(|&k| self.nodes[k].1 == d)
                .collect();
            if idx.is_empty() {
                continue;
            }
            let layouts = self.layouts(rw, d);
            for slot in slots.iter_mut() {
                let set = alloc_tensors(buft, &layouts, BufferUsage::Compute)?;
                bytes[d] += set.buffer.size();
                for (&k, t) in idx.iter().zip(&set.tensors) {
                    self.buffers.push(t.buffer().clone());
                    slot[k] = Some(Place {
                        buffer: t.buffer().clone(),
                        offset: t.offset(),
                    });
                }
            }
        }
        self.slots = slots
            .into_iter()
            .map(|s| s.into_iter().flatten().collect())
            .collect();
        self.bytes = bytes;
        Ok(())
    }

    /// Is `buffer` slot memory?
    pub(super) fn owns(&self, buffer: &Arc<dyn Buffer>) -> bool {
        self.buffers.iter().any(|b| Arc::ptr_eq(b, buffer))
    }

    /// Point the slot tensors of `rp` at copy `c`.
    pub(super) fn apply(&self, rw: &Rewrite, rp: &mut Placement, c: usize) -> Result<()> {
        let Some(slot) = self.slots.get(c) else {
            return Ok(());
        };
        for ((id, _), place) in self.nodes.iter().zip(slot) {
            rp.set(&rw.graph, *id, place.clone())?;
        }
        Ok(())
    }

    /// The copy whose graph inputs `placement` (the user's) holds, if its
    /// inputs are slot memory; `None` if they match no copy.
    pub(super) fn copy_of(
        &self,
        rw: &Rewrite,
        graph: &Graph,
        placement: &Placement,
    ) -> Option<usize> {
        let inputs: Vec<(usize, TensorId)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(k, (id, _))| rw.origin.get(id.index()).copied().flatten().map(|u| (k, u)))
            .collect();
        if inputs.is_empty() {
            return Some(0);
        }
        (0..self.slots.len())
            .find(|&c| {
                inputs.iter().all(|&(k, u)| {
                    let (Some(have), Some(want)) = (placement.get(u), self.slots[c].get(k)) else {
                        return false;
                    };
                    Arc::ptr_eq(&have.buffer, &want.buffer) && have.offset == want.offset
                })
            })
            .filter(|_| graph.len() == rw.map.len())
    }
}
