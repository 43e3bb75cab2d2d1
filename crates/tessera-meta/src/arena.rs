//! Memory for what the collectives move between devices: the chunks a
//! device sends and the buffers it receives into.
//!
//! Those tensors live across a copy step, outside any node's reach: a
//! received buffer is written by the copy, a sent chunk is read only by it.
//! Left to the graph allocator, which knows nothing of the steps, a
//! received buffer (a leaf) would hold memory from the start of the graph
//! and a sent chunk (a node nothing reads) to its end — one of each per
//! all-reduce, so a device's memory would grow with the layers (24 MiB on
//! Gemma 3 270M at 256 tokens, hundreds on larger models).
//!
//! Here each such tensor lives from the compute step before its copy to
//! the compute step after it, and tensors whose lives do not meet share
//! memory: every device needs a few chunks' worth, whatever the depth.

use tessera::{Layout, Result, TensorId};

use crate::lower::Step;

/// One tensor tied to a copy step.
#[derive(Clone, Copy, Debug)]
struct Item {
    id: TensorId,
    bytes: usize,
    /// The index of its copy step (`None`: not pushed yet).
    step: Option<usize>,
}

/// The arena tensors of every device.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    items: Vec<Vec<Item>>,
}

/// Where the arena tensors go: per device, `(tensor, offset)`, and the
/// bytes each device's arena needs.
#[derive(Debug, Default)]
pub(crate) struct ArenaPlan {
    pub offsets: Vec<Vec<(TensorId, usize)>>,
    pub sizes: Vec<usize>,
}

impl Arena {
    pub fn new(n: usize) -> Arena {
        Arena {
            items: vec![Vec::new(); n],
        }
    }

    /// Device `j`'s tensor `id` of `layout` moves in the next copy step.
    pub fn add(&mut self, j: usize, id: TensorId, layout: &Layout, alloc_size: usize) {
        if let Some(items) = self.items.get_mut(j) {
            items.push(Item {
                id,
                bytes: alloc_size.max(layout.nbytes()),
                step: None,
            });
        }
    }

    /// The copy step that is `step` is pushed: it moves every tensor added
    /// since the last one.
    pub fn pushed(&mut self, step: usize) {
        for it in self.items.iter_mut().flatten() {
            if it.step.is_none() {
                it.step = Some(step);
            }
        }
    }

    /// Offsets (aligned to `align[j]`) such that tensors whose lives meet
    /// never share bytes. A life is the steps from the compute step before
    /// the copy to the compute step after it.
    pub fn plan(&self, steps: &[Step], align: &[usize]) -> Result<ArenaPlan> {
        let life = |s: usize| {
            let before = (0..s)
                .rev()
                .find(|&i| matches!(steps[i], Step::Compute(_)))
                .unwrap_or(s);
            let after = (s + 1..steps.len())
                .find(|&i| matches!(steps[i], Step::Compute(_)))
                .unwrap_or(s);
            (before, after)
        };
        let mut out = ArenaPlan::default();
        for (j, items) in self.items.iter().enumerate() {
            let a = align.get(j).copied().unwrap_or(1).max(1);
            // (start, end, first step, last step) of each placed tensor.
            let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new();
            let mut offsets = Vec::with_capacity(items.len());
            let mut size = 0;
            for it in items {
                let (lo, hi) = life(it.step.unwrap_or(steps.len()));
                let bytes = it.bytes.next_multiple_of(a);
                // The lowest aligned offset clear of every tensor alive at
                // the same time (candidates: 0 and the ends of those).
                let mut live: Vec<(usize, usize)> = placed
                    .iter()
                    .filter(|p| p.2 <= hi && lo <= p.3)
                    .map(|p| (p.0, p.1))
                    .collect();
                live.sort_unstable();
                let mut at = 0;
                for (s, e) in live {
                    if at + bytes <= s {
                        break;
                    }
                    at = at.max(e.next_multiple_of(a));
                }
                placed.push((at, at + bytes, lo, hi));
                offsets.push((it.id, at));
                size = size.max(at + bytes);
            }
            out.offsets.push(offsets);
            out.sizes.push(size);
        }
        Ok(out)
    }
}
