//! Placements: where every tensor of a graph lives.
//!
//! A graph is plain data; a [`Placement`] maps each of its tensor ids to a
//! buffer and an offset. The user binds tensors that live outside the graph
//! (weights, caches, inputs they allocated) with [`Placement::bind`]; the
//! graph allocator places the rest; views are placed at their root's memory
//! plus their offset. One graph can have many placements (one per device).

use std::ops::Range;
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::tensor::Tensor;
use crate::{Error, Graph, Result, TensorId};

/// A buffer and a byte offset in it.
#[derive(Clone, Debug)]
pub struct Place {
    /// The buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Byte offset of the tensor's first byte.
    pub offset: usize,
}

/// The memory of each tensor of one graph.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    places: Vec<Option<Place>>,
}

impl Placement {
    /// Nothing placed yet, sized for `graph`.
    pub fn new(graph: &Graph) -> Self {
        Placement {
            places: vec![None; graph.len()],
        }
    }

    /// Number of entries (the graph's tensor count).
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Grow to cover a graph that gained tensors since.
    pub fn fit(&mut self, graph: &Graph) {
        if self.places.len() < graph.len() {
            self.places.resize(graph.len(), None);
        }
    }

    /// Where `id` lives, if placed.
    pub fn get(&self, id: TensorId) -> Option<&Place> {
        self.places.get(id.index()).and_then(Option::as_ref)
    }

    /// Place `id` (used by allocators). Checks the bytes fit in the buffer.
    pub fn set(&mut self, graph: &Graph, id: TensorId, place: Place) -> Result<()> {
        let n = graph.node(id)?.layout.checked_nbytes()?;
        crate::buffer::check_range(place.buffer.name(), place.buffer.size(), place.offset, n)?;
        self.fit(graph);
        self.places[id.index()] = Some(place);
        Ok(())
    }

    /// Forget where `id` lives.
    pub fn clear(&mut self, id: TensorId) {
        if let Some(p) = self.places.get_mut(id.index()) {
            *p = None;
        }
    }

    /// Bind tensor `id` of `graph` to the memory of `tensor`, which must
    /// have the same layout. Views cannot be bound (bind their root).
    pub fn bind(&mut self, graph: &Graph, id: TensorId, tensor: &Tensor) -> Result<()> {
        let node = graph.node(id)?;
        if node.is_view() {
            return Err(Error::InvalidLayout(format!(
                "tensor {} is a view: bind its source instead",
                node.label(id)
            )));
        }
        if node.layout != *tensor.layout() {
            return Err(Error::InvalidLayout(format!(
                "tensor {} is {} but the bound memory holds {}",
                node.label(id),
                node.layout,
                tensor.layout()
            )));
        }
        self.set(
            graph,
            id,
            Place {
                buffer: tensor.buffer().clone(),
                offset: tensor.offset(),
            },
        )
    }

    /// Place every view at its root's memory plus its offset. Views of
    /// unplaced roots stay unplaced.
    pub fn place_views(&mut self, graph: &Graph) -> Result<()> {
        self.fit(graph);
        for id in graph.ids() {
            let node = &graph.nodes()[id.index()];
            if let Some(rp) = node.view_src.and_then(|root| self.get(root).cloned()) {
                let offset = rp
                    .offset
                    .checked_add(node.view_offs)
                    .ok_or_else(|| Error::Overflow("view offset".into()))?;
                self.set(
                    graph,
                    id,
                    Place {
                        buffer: rp.buffer,
                        offset,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// The tensor `id` with its memory, e.g. to read a result.
    pub fn tensor(&self, graph: &Graph, id: TensorId) -> Result<Tensor> {
        let node = graph.node(id)?;
        let place = self.get(id).ok_or_else(|| Error::Unallocated {
            tensor: node.name.clone(),
            id: id.index(),
        })?;
        Tensor::new(node.layout, place.buffer.clone(), place.offset)
    }

    /// `Err(Unallocated)` naming the first tensor that an op in `range` (of
    /// tensor indices) reads or writes and that has no memory.
    pub fn check_complete(&self, graph: &Graph, range: Range<usize>) -> Result<()> {
        let end = range.end.min(graph.len());
        for node_id in graph
            .ids()
            .skip(range.start)
            .take(end.saturating_sub(range.start))
        {
            let node = &graph.nodes()[node_id.index()];
            if node.is_leaf() {
                continue;
            }
            for id in std::iter::once(node_id).chain(node.src_ids()) {
                if self.get(id).is_none() {
                    return Err(Error::Unallocated {
                        tensor: graph.nodes()[id.index()].name.clone(),
                        id: id.index(),
                    });
                }
            }
        }
        Ok(())
    }
}
