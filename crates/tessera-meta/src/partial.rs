//! Delayed all-reduce: a partial sum stays one until a consumer needs the
//! sum. The ops that carry partial sums (`crate::rules`) lower on
//! [`Lower::get_partial`]; every other consumer asks [`Lower::get`], which
//! all-reduces at that point — after the nodes lowered since the product,
//! which thus run before the cut — keeps the sum for the other consumers,
//! and gives it the node's mirror memory. Partial results the host or a
//! later graph may read are reduced at the end of the lowering
//! ([`read_after`]).

use std::sync::Arc;

use tessera::{Buffer, Error, Graph, Place, Result, TensorId};

use crate::lower::{Held, Lower, meta_buffer, name_node};
use crate::state::SplitState;

impl Lower<'_> {
    /// The tensor `id` as the devices hold it (lowering views and reading
    /// inputs from meta memory on first use).
    pub fn get(&mut self, id: TensorId) -> Result<Held> {
        let h = self.get_partial(id)?;
        if h.state != SplitState::Partial {
            return Ok(h);
        }
        // The first consumer that needs the sum: all-reduce it now (the
        // nodes lowered since the product ran before this cut), keep the
        // sum for the other consumers, and give it the node's memory.
        let sum = self.reduce(&h)?;
        if let Some((buf, offset)) = self.pending[id.index()].take() {
            self.place_result(id, &sum, buf, offset)?;
        }
        self.map[id.index()] = Some(sum.clone());
        Ok(sum)
    }

    /// Each device's piece of `id`'s result in its mirror memory, and the
    /// record of how the result is held there.
    pub(crate) fn place_result(
        &mut self,
        id: TensorId,
        held: &Held,
        buf: Arc<dyn Buffer>,
        offset: usize,
    ) -> Result<()> {
        let node = self.graph.node(id)?.clone();
        let parts = meta_buffer(&buf)
            .and_then(|m| m.mirror_parts())
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        if !node.is_view() {
            for j in 0..self.n {
                if let (Some(pid), Some(part)) = (held.ids[j], parts.get(j)) {
                    self.pre[j].push((
                        pid,
                        Place {
                            buffer: part.clone(),
                            offset,
                        },
                    ));
                }
            }
        }
        if !matches!(held.state, SplitState::Split(_)) || node.layout.is_contiguous() {
            self.records
                .push((buf, offset, node.layout, held.state.clone()));
            Ok(())
        } else {
            Err(name_node(
                self.graph,
                id,
                Error::unsupported(
                    "Meta",
                    "a split result written through a strided view of mirror memory",
                ),
            ))
        }
    }
}

/// Per tensor: whether a node from `end` on reads it (as a source or as
/// the memory of a view).
pub(crate) fn read_after(graph: &Graph, end: usize) -> Vec<bool> {
    let mut r = vec![false; graph.len()];
    for node in graph.nodes().iter().skip(end) {
        for s in node.src_ids().chain(node.view_src) {
            let root = graph.memory_root(s).map_or(s, |(root, _)| root);
            for t in [s, root] {
                if let Some(slot) = r.get_mut(t.index()) {
                    *slot = true;
                }
            }
        }
    }
    r
}
