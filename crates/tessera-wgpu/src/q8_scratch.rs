//! Where a compute's quantized activations live: a stream's scratch buffer
//! ([`Scratch`]) and, per compute, which input's quantization is where
//! ([`Compute`]), for the integer products ([`crate::matvec_q8`]).
//!
//! One region per distinct input of the compute's integer products, so the
//! products that share an input (Q, K and V; gate and up) quantize it once;
//! a write into an input's memory makes its quantization stale (the next
//! product quantizes again). A region is given back once the last product
//! that reads it is recorded ([`crate::q8_regions`]), so the scratch holds
//! what is live at once, not every input of the compute.

use std::collections::HashMap;
use std::sync::Arc;

use tessera::{DType, Graph, Layout, Op, Result, TensorId};

use crate::call::{Call, Operand};
use crate::device::Core;
use crate::matvec_q8::takes;
use crate::q8_regions::{Regions, peak_bytes};
use crate::wgsl::Binding;

/// Bytes of one quantized src1 (`k` x `cols`): the bytes, then the pairs,
/// each at a multiple of 16.
pub(crate) fn region_bytes(k: usize, cols: usize) -> (usize, usize) {
    let q = (k * cols).next_multiple_of(16);
    let pairs = (k / 32 * cols * 8).next_multiple_of(16);
    (q, q + pairs)
}

/// The integer products of `range` (MUL_MAT and MUL_MAT_ID): (node
/// index, activations, their layout as the matrix their quantization is).
fn products(
    graph: &Graph,
    range: std::ops::Range<usize>,
) -> impl Iterator<Item = (usize, TensorId, Layout)> + '_ {
    let start = range.start;
    graph
        .nodes()
        .get(range)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter_map(move |(i, n)| {
            let (Some(a), Some(b)) = (n.src(0), n.src(1)) else {
                return None;
            };
            let (Ok(la), Ok(lb)) = (graph.layout(a), graph.layout(b)) else {
                return None;
            };
            match n.op {
                Op::MulMat if takes(&la, &lb) => Some((start + i, b, lb)),
                Op::MulMatId if crate::matvec_q8_id::takes(&la, &lb) => {
                    Some((start + i, b, crate::matvec_q8_id::columns(&lb).ok()?))
                }
                _ => None,
            }
        })
}

/// Scratch bytes the MUL_MAT nodes of `range` need (0: none takes the
/// integer kernels, or they are off): the most that is live at once, each
/// input's region from the node that computes it (or its first product)
/// to its last product, again after each write into its memory, with room
/// for gaps ([`peak_bytes`]); never more than every region apart.
pub(crate) fn scratch_bytes(graph: &Graph, range: std::ops::Range<usize>) -> usize {
    let start = range.start;
    let writes = |i: usize| -> Option<TensorId> {
        let n = graph.nodes().get(i)?;
        n.view_src.filter(|_| !n.op.is_view())
    };
    // Each region: (bytes, from, to); `current` maps an input to its
    // region until a write into its memory.
    let mut lives: Vec<(usize, usize, usize)> = Vec::new();
    let mut current: HashMap<TensorId, usize> = HashMap::new();
    let mut last_write = start;
    for (i, b, lb) in products(graph, range.clone()) {
        for w in last_write..i {
            if let Some(root) = writes(w) {
                current.retain(|t, _| !matches!(graph.memory_root(*t), Ok((r, _)) if r == root));
            }
        }
        last_write = i;
        if let Some(&j) = current.get(&b) {
            lives[j].2 = i;
            continue;
        }
        // From the node that computes the input where it is in the range
        // (it may quantize what it writes): its memory's root.
        let from = match graph.memory_root(b) {
            Ok((root, _))
                if (start..i).contains(&root.index())
                    && graph.node(root).is_ok_and(|n| !n.is_leaf()) =>
            {
                root.index()
            }
            _ => i,
        };
        lives.push((region_bytes(lb.ne[0], lb.ne[1]).1, from, i));
        current.insert(b, lives.len() - 1);
    }
    let apart = lives
        .iter()
        .fold(0usize, |s, l| s.saturating_add(l.0.next_multiple_of(16)));
    peak_bytes(&lives).min(apart)
}

/// A stream's scratch buffer for quantized activations, grown as needed
/// (its bind groups are dropped with it).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    buffer: Option<(wgpu::Buffer, Arc<Core>)>,
}

impl Scratch {
    /// A buffer of at least `bytes` bytes.
    fn ensure(&mut self, core: &Arc<Core>, bytes: usize) -> Result<wgpu::Buffer> {
        if let Some((b, _)) = &self.buffer
            && b.size() >= bytes as u64
        {
            return Ok(b.clone());
        }
        self.release();
        // Room to grow, within what one binding can hold (the caller
        // checked `bytes` against it).
        let size = bytes
            .next_power_of_two()
            .max(1 << 16)
            .min(core.max_buffer)
            .max(bytes);
        let b = core.scoped("allocating the activation scratch", size, || {
            core.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tessera-q8-activations"),
                size: size as u64,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        })?;
        self.buffer = Some((b.clone(), core.clone()));
        Ok(b)
    }

    fn release(&mut self) {
        if let Some((b, core)) = self.buffer.take() {
            core.binds.forget(&b);
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.release();
    }
}

/// A region in use: its bytes and the last node that reads it.
#[derive(Clone, Copy, Debug)]
struct Live {
    at: usize,
    bytes: usize,
    until: usize,
}

/// One compute's use of the scratch: where each quantized src1 is (and the
/// root of its memory), and which regions are in use until when.
pub(crate) struct Compute {
    buffer: wgpu::Buffer,
    size: usize,
    at: HashMap<TensorId, (usize, TensorId)>,
    regions: Regions,
    live: Vec<Live>,
    /// The last integer product (node index) that reads each input.
    last_read: HashMap<TensorId, usize>,
    /// The inputs of the range's integer products, by the tensor whose
    /// memory they are at its first byte (themselves, or the tensor a view
    /// of them starts): where a node that computes a tensor finds the
    /// products that could read its quantization ([`Compute::plan_for`]),
    /// without scanning the graph for each.
    readers: HashMap<TensorId, Vec<TensorId>>,
    /// The regions in use (tests check they are disjoint and start at
    /// multiples of 16).
    #[cfg(test)]
    claimed: Vec<std::ops::Range<usize>>,
}

impl Compute {
    /// Record region `at..at + bytes` as in use (tests only: it must not
    /// overlap another and must start at a multiple of 16).
    #[cfg(test)]
    fn claim(&mut self, at: usize, bytes: usize) {
        let r = at..at + bytes;
        assert!(at.is_multiple_of(16), "scratch region {r:?} is not aligned");
        for c in &self.claimed {
            assert!(
                r.end <= c.start || c.end <= r.start,
                "scratch regions {r:?} and {c:?} overlap"
            );
        }
        self.claimed.push(r);
    }

    #[cfg(not(test))]
    fn claim(&mut self, _at: usize, _bytes: usize) {}

    #[cfg(test)]
    fn unclaim(&mut self, at: usize) {
        self.claimed.retain(|c| c.start != at);
    }

    #[cfg(not(test))]
    fn unclaim(&mut self, _at: usize) {}

    /// The state for a compute that needs `bytes` of `scratch` (`None` if
    /// none), at most what one binding can hold: the products whose
    /// quantization finds no room take the float kernels, and all of them
    /// do where the device has no memory left for the scratch.
    pub(crate) fn new(
        scratch: &mut Scratch,
        core: &Arc<Core>,
        bytes: usize,
        graph: &Graph,
        range: std::ops::Range<usize>,
    ) -> Result<Option<Self>> {
        if bytes == 0 {
            return Ok(None);
        }
        let buffer = match scratch.ensure(core, bytes.min(core.max_buffer)) {
            Ok(b) => b,
            Err(tessera::Error::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut readers: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
        let mut last_read = HashMap::new();
        for (i, b, _) in products(graph, range) {
            last_read.insert(b, i);
            let key = match graph.memory_root(b) {
                Ok((root, 0)) if graph.node(b).is_ok_and(|v| v.op.is_view()) => root,
                _ => b,
            };
            let list = readers.entry(key).or_default();
            if !list.contains(&b) {
                list.push(b);
            }
        }
        let size = buffer.size() as usize;
        Ok(Some(Compute {
            size,
            buffer,
            at: HashMap::new(),
            regions: Regions::new(size),
            live: Vec::new(),
            last_read,
            readers,
            #[cfg(test)]
            claimed: Vec::new(),
        }))
    }

    /// Node `index` is next: give back the regions no later node reads.
    pub(crate) fn retire(&mut self, index: usize) {
        self.give_back(|l| l.until < index);
    }

    /// `bytes` of the scratch, in use until node `until`: their offset, or
    /// `None` where they do not fit.
    fn place(&mut self, bytes: usize, until: usize) -> Option<usize> {
        let at = self.regions.find(bytes)?;
        if !self.regions.take(at, bytes) {
            return None;
        }
        self.claim(at, bytes);
        self.live.push(Live { at, bytes, until });
        Some(at)
    }

    /// The last product that reads any of `inputs`.
    fn until(&self, inputs: &[TensorId]) -> usize {
        inputs
            .iter()
            .filter_map(|t| self.last_read.get(t))
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// A node writes into the memory of `root` (a view's write, e.g.
    /// SET_ROWS or CPY into part of a tensor): quantizations read from it
    /// are stale; a later product quantizes again.
    /// Their regions are given back (the products that read them are
    /// recorded already; later ones find no quantization there).
    pub(crate) fn written(&mut self, root: TensorId) {
        let mut stale = Vec::new();
        self.at.retain(|_, &mut (base, r)| {
            if r == root {
                stale.push(base);
            }
            r != root
        });
        stale.retain(|b| !self.at.values().any(|(base, _)| base == b));
        if !stale.is_empty() {
            self.give_back(|l| stale.contains(&l.at));
        }
    }

    /// Give back the regions in use that `done` says are.
    fn give_back(&mut self, done: impl Fn(&Live) -> bool) {
        let mut k = 0;
        while k < self.live.len() {
            let l = self.live[k];
            if done(&l) {
                self.live.swap_remove(k);
                self.regions.give(l.at, l.bytes);
                self.unclaim(l.at);
                self.at.retain(|_, (base, _)| *base != l.at);
            } else {
                k += 1;
            }
        }
    }

    /// Where the quantization of `b` (`k` x `cols`) is: its bytes' and its
    /// pairs' byte offsets, and whether it still has to be made (a region
    /// placed now). `None` where it is not made and does not fit.
    pub(crate) fn locate(
        &mut self,
        (b, root): (TensorId, TensorId),
        k: usize,
        cols: usize,
    ) -> Option<(usize, usize, bool)> {
        let (pairs_at, bytes) = region_bytes(k, cols);
        if let Some(&(base, _)) = self.at.get(&b) {
            return Some((base, base + pairs_at, false));
        }
        let base = self.place(bytes, self.until(&[b]))?;
        self.at.insert(b, (base, root));
        Some((base, base + pairs_at, true))
    }

    /// Where the quantization of `t` goes if the node that computes it
    /// writes it too ([`crate::fuse`]'s norms, GLU, FLASH_ATTN_EXT),
    /// placed now (until the last product that reads it): `None` unless a
    /// product of the compute's nodes (all after `t`'s, the graph being in
    /// order) takes as its activations `t` or a view of all of it as it
    /// lies (contiguous, from byte 0), `t` is contiguous F32, not
    /// quantized yet, and its region fits. The quantization is then by
    /// blocks of 32 values in `t`'s order (block j's bytes at byte
    /// `base + 32 j`, its pair at `pairs + 8 j`), which is what every such
    /// product reads. The products find it once [`Compute::commit`]ted.
    pub(crate) fn plan_for(&mut self, graph: &Graph, t: TensorId) -> Option<Quantized> {
        if !fuse_enabled() || self.at.contains_key(&t) {
            return None;
        }
        let lt = graph.layout(t).ok()?;
        if lt.dtype != DType::F32 || !lt.is_contiguous() {
            return None;
        }
        // `t` itself, or views of all of it as it lies.
        let whole = |v: &TensorId| {
            *v == t
                || graph
                    .layout(*v)
                    .is_ok_and(|lv| lv.is_contiguous() && lv.nelements() == lt.nelements())
        };
        let readers: Vec<TensorId> = self
            .readers
            .get(&t)?
            .iter()
            .copied()
            .filter(whole)
            .collect();
        // All of `t`, as the columns of its first dimension (a MUL_MAT_ID's
        // activations have three).
        let k = graph.layout(*readers.first()?).ok()?.ne[0];
        let (pairs_at, bytes) = region_bytes(k, lt.nelements().checked_div(k)?);
        let base = self.place(bytes, self.until(&readers))?;
        Some(Quantized {
            scratch: self.buffer.clone(),
            base,
            pairs: base + pairs_at,
            readers,
        })
    }

    /// `t` (memory root `root`) was quantized as `q` says, by the node
    /// that computed it: its products find it.
    pub(crate) fn commit(&mut self, root: TensorId, q: &Quantized) {
        for &r in &q.readers {
            self.at.insert(r, (q.base, root));
        }
    }

    /// `q` (from [`Compute::plan_for`], not committed) will not be
    /// written: its region is free again.
    pub(crate) fn cancel(&mut self, q: &Quantized) {
        self.give_back(|l| l.at == q.base);
    }

    /// `bytes` of the scratch for another kernel's own use in this compute
    /// (planned into [`scratch_bytes`]'s total by the caller), until node
    /// `until`: their byte offset, or `None` where they do not fit.
    pub(crate) fn reserve(&mut self, bytes: usize, until: usize) -> Option<usize> {
        self.place(bytes, until)
    }

    /// The whole scratch buffer as an operand (I32 words).
    pub(crate) fn operand(&self) -> Result<Operand> {
        Ok(Operand {
            layout: Layout::contiguous(DType::I32, &[self.size / 4])?,
            buffer: self.buffer.clone(),
            offset: 0,
        })
    }
}

/// A region of the scratch that a fused norm writes a quantization into
/// ([`Compute::plan_for`]).
pub(crate) struct Quantized {
    pub(crate) scratch: wgpu::Buffer,
    /// Byte offsets of the bytes and of the pairs.
    pub(crate) base: usize,
    pub(crate) pairs: usize,
    /// The products' inputs that are these bytes (the tensor, its views).
    readers: Vec<TensorId>,
}

impl Quantized {
    /// Bind the scratch as source `slot` (a plain binding: written) and
    /// set the kernel's (base, pairs, 1) parameter words `at..at + 3` of
    /// `iu2`.
    pub(crate) fn bind(&self, call: &mut Call, slot: usize, at: usize) -> Result<()> {
        call.pad_sources(slot);
        call.bindings
            .push(Binding::plain(crate::call::SRC_NAMES[slot], DType::F32));
        call.buffers.push(self.scratch.clone());
        call.params.iu2[at] = u32_of(self.base)?;
        call.params.iu2[at + 1] = u32_of(self.pairs)?;
        call.params.iu2[at + 2] = 1;
        Ok(())
    }
}

/// Whether the node that computes a product's input also quantizes it
/// (default; `TESSERA_WGPU_FUSE_Q8=0`, or `TESSERA_WGPU_FUSE=0` for every
/// fusion, leaves it to a dispatch of its own, for measuring).
fn fuse_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    crate::fuse::enabled()
        && *ON.get_or_init(|| !std::env::var("TESSERA_WGPU_FUSE_Q8").is_ok_and(|v| v.trim() == "0"))
}

pub(crate) fn u32_of(v: usize) -> Result<u32> {
    crate::params::u32_of(v, "a scratch offset")
}
