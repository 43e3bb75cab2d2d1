//! Few-column products of quantized weights by integer dot products
//! (`shaders/quant_act.wgsl`, `shaders/matvec_q8.wgsl`), as ggml's GPU
//! backends do them: the activations are quantized to signed bytes per 32
//! values once (ggml's Q8_1), and each block of weights meets them in
//! `dot4I8Packed` (four products a instruction, exact 32-bit sums), scaled
//! once per block.
//!
//! Why: on an NVIDIA H100 the float kernels (`matvec_rows`) took about the
//! same time for every weight type (85 us for 4096 x 14336, Q4_0's 33 MB as
//! F16's 117 MB), where ggml's integer kernels take 23 us for Q4_0: the
//! cost per value (dequantizing, float products, 16 bytes of activations
//! per 4 values), not the weights, set the speed.
//!
//! **On by default** (`TESSERA_WGPU_MV_Q8=0` turns it off, for measuring):
//! on an NVIDIA H200 it took 4096 x 14336 Q4_0 from 76 to 23 us (ggml's
//! Vulkan backend: 22), Q8_0 80 -> 30, Q4_K 92 -> 30, Q5_0 87 -> 27, and a
//! 1B Q4_0 token from 4.98 to 4.03 ms. The float kernels still take these
//! types with the kernel off; `tests/conformance_float_matvec.rs` keeps
//! them tested.
//!
//! The quantized activations live in a scratch buffer of the stream
//! ([`Scratch`]): one region per distinct src1 of a compute, so the
//! products that share an input (Q, K and V; gate and up) quantize it once.
//! Activations quantized to bytes are what the CPU's dot products use too
//! (ggml's `vec_dot_type`); the error bound is one half step of each
//! block's scale per value.

use std::collections::HashMap;
use std::sync::Arc;

use tessera::{DType, Graph, Layout, Op, Result, TensorId};

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Call, Operand};
use crate::wgsl::Binding;

const QUANT_ACT: &str = include_str!("shaders/quant_act.wgsl");
const MATVEC_Q8: [&str; 2] = [
    concat!(
        "const MQ_COLS: u32 = 1u;\n",
        include_str!("shaders/matmul_common.wgsl"),
        include_str!("shaders/matvec_q8.wgsl")
    ),
    concat!(
        "const MQ_COLS: u32 = 8u;\n",
        include_str!("shaders/matmul_common.wgsl"),
        include_str!("shaders/matvec_q8.wgsl")
    ),
];

/// The weight types the kernel decodes.
pub(crate) const TYPES: [DType; 7] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q6K,
];

/// Most columns the kernel takes.
const MAX_COLS: usize = 8;

env_switch!("TESSERA_WGPU_MV_Q8");

/// Whether the integer kernel is on (default; `TESSERA_WGPU_MV_Q8=0` is off).
fn enabled() -> bool {
    switch_on(|| true)
}

/// Whether the kernel takes `a` (weights) x `b` (activations): rows of
/// whole blocks of a type it decodes, no shorter than the encoder gives a
/// matrix-vector kernel ([`crate::encode::MATVEC_MIN_K`]), at most
/// [`MAX_COLS`] F32 columns, one matrix each (no batches).
pub(crate) fn takes(a: &Layout, b: &Layout) -> bool {
    let k = a.ne[0];
    enabled()
        && TYPES.contains(&a.dtype)
        && a.nb[0] == a.dtype.type_size()
        && k.is_multiple_of(a.dtype.block_size())
        && k >= crate::encode::MATVEC_MIN_K
        && b.dtype == DType::F32
        && b.nb[0] == 4
        && b.ne[1] <= MAX_COLS
        && a.ne[2] * a.ne[3] == 1
        && b.ne[2] * b.ne[3] == 1
}

/// Bytes of one quantized src1 (`k` x `cols`): the bytes, then the pairs,
/// each at a multiple of 16.
fn region_bytes(k: usize, cols: usize) -> (usize, usize) {
    let q = (k * cols).next_multiple_of(16);
    let pairs = (k / 32 * cols * 8).next_multiple_of(16);
    (q, q + pairs)
}

/// Scratch bytes the MUL_MAT nodes of `range` need (0: none takes the
/// kernel, or it is off).
pub(crate) fn scratch_bytes(graph: &Graph, range: std::ops::Range<usize>) -> usize {
    if !enabled() {
        return 0;
    }
    let nodes = &graph.nodes()[range];
    // Nodes writing into another tensor's memory, per memory: each makes
    // the quantizations read from it stale ([`Compute::written`]), and the
    // next product quantizes again into a region of its own.
    let mut writes: HashMap<TensorId, usize> = HashMap::new();
    for node in nodes.iter().filter(|n| !n.op.is_view()) {
        if let Some(root) = node.view_src {
            *writes.entry(root).or_default() += 1;
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut total = 0usize;
    for node in nodes {
        let (Some(a), Some(b)) = (node.src(0), node.src(1)) else {
            continue;
        };
        if node.op != Op::MulMat || seen.contains(&b) {
            continue;
        }
        // One region per input that some product taken here reads (an input
        // also read by products of other types counts once it is taken),
        // and one more for each write into its memory.
        if let (Ok(la), Ok(lb)) = (graph.layout(a), graph.layout(b))
            && takes(&la, &lb)
        {
            seen.insert(b);
            let again = graph
                .memory_root(b)
                .map_or(0, |(root, _)| writes.get(&root).copied().unwrap_or(0));
            let region = region_bytes(lb.ne[0], lb.ne[1]).1;
            total = total.saturating_add(region.saturating_mul(1 + again));
        }
    }
    total
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

/// One compute's use of the scratch: where each quantized src1 is (and the
/// root of its memory).
pub(crate) struct Compute {
    buffer: wgpu::Buffer,
    size: usize,
    at: HashMap<TensorId, (usize, TensorId)>,
    next: usize,
    /// The inputs of the range's integer products, by the tensor whose
    /// memory they are at its first byte (themselves, or the tensor a view
    /// of them starts): where a node that computes a tensor finds the
    /// products that could read its quantization ([`Compute::plan_for`]),
    /// without scanning the graph for each.
    readers: HashMap<TensorId, Vec<TensorId>>,
    /// Every region handed out so far (tests check they are disjoint and
    /// start at multiples of 16).
    #[cfg(test)]
    claimed: Vec<std::ops::Range<usize>>,
}

impl Compute {
    /// Record region `at..at + bytes` as handed out (tests only: it must
    /// not overlap another and must start at a multiple of 16).
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

    /// The state for a compute that needs `bytes` of `scratch` (`None` if
    /// none, or more than one binding can hold: the float kernels then).
    pub(crate) fn new(
        scratch: &mut Scratch,
        core: &Arc<Core>,
        bytes: usize,
        graph: &Graph,
        range: std::ops::Range<usize>,
    ) -> Result<Option<Self>> {
        if bytes == 0 || bytes > core.max_buffer {
            return Ok(None);
        }
        let buffer = scratch.ensure(core, bytes)?;
        let mut readers: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
        for n in graph.nodes().get(range).unwrap_or_default() {
            let (Some(a), Some(b)) = (n.src(0), n.src(1)) else {
                continue;
            };
            let (Ok(la), Ok(lb)) = (graph.layout(a), graph.layout(b)) else {
                continue;
            };
            if n.op != Op::MulMat || !takes(&la, &lb) {
                continue;
            }
            let key = match graph.memory_root(b) {
                Ok((root, 0)) if graph.node(b).is_ok_and(|v| v.op.is_view()) => root,
                _ => b,
            };
            let list = readers.entry(key).or_default();
            if !list.contains(&b) {
                list.push(b);
            }
        }
        Ok(Some(Compute {
            size: buffer.size() as usize,
            buffer,
            at: HashMap::new(),
            next: 0,
            readers,
            #[cfg(test)]
            claimed: Vec::new(),
        }))
    }

    /// A node writes into the memory of `root` (a view's write, e.g.
    /// SET_ROWS or CPY into part of a tensor): quantizations read from it
    /// are stale; a later product quantizes again.
    pub(crate) fn written(&mut self, root: TensorId) {
        self.at.retain(|_, (_, r)| *r != root);
    }

    /// Where the quantization of `t` would go if the node that computes it
    /// writes it too ([`crate::fuse`]'s norms, GLU, FLASH_ATTN_EXT): `None`
    /// unless a product of the compute's nodes (all after `t`'s, the graph
    /// being in order) takes as its activations `t` or a view of all of it as it lies (contiguous,
    /// from byte 0), `t` is contiguous F32, not quantized yet, and its
    /// region fits. The quantization is then by blocks of 32 values in
    /// `t`'s order (block j's bytes at byte `base + 32 j`, its pair at
    /// `pairs + 8 j`), which is what every such product reads.
    pub(crate) fn plan_for(&self, graph: &Graph, t: TensorId) -> Option<Quantized> {
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
        let b = *readers.first()?;
        let lb = graph.layout(b).ok()?;
        let (pairs_at, bytes) = region_bytes(lb.ne[0], lb.ne[1]);
        // Regions start at multiples of 16 (the products read by vectors).
        let base = self.next.next_multiple_of(16);
        let fits = base.saturating_add(bytes) <= self.size;
        fits.then(|| Quantized {
            scratch: self.buffer.clone(),
            base,
            pairs: base + pairs_at,
            bytes,
            readers,
        })
    }

    /// `t` (memory root `root`) was quantized as `q` says, by the node
    /// that computed it: its products find it.
    pub(crate) fn commit(&mut self, root: TensorId, q: &Quantized) {
        for &r in &q.readers {
            self.at.insert(r, (q.base, root));
        }
        self.claim(q.base, q.bytes);
        self.next = self.next.max(q.base + q.bytes);
    }

    /// `bytes` of the scratch for another kernel's own use in this compute
    /// (planned into [`scratch_bytes`]'s total by the caller): their byte
    /// offset, or `None` where they do not fit.
    pub(crate) fn reserve(&mut self, bytes: usize) -> Option<usize> {
        let at = self.next.next_multiple_of(16);
        let end = at.checked_add(bytes)?.next_multiple_of(16);
        (end <= self.size).then(|| {
            self.claim(at, bytes);
            self.next = end;
            at
        })
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
    bytes: usize,
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
            .push(Binding::plain(crate::encode::SRC_NAMES[slot], DType::F32));
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

/// Record `dst = a^T b` (b = tensor `b_id`, its memory `b_root`'s): b's
/// quantization unless this compute already made it, then the product.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Core,
    state: &mut Compute,
    b: (TensorId, TensorId, &Operand),
    dst: &Operand,
    a: &Operand,
) -> Result<()> {
    encode_merged(batch, core, state, b, &[(dst, a)])
}

/// Most products of one input that one dispatch computes
/// ([`encode_merged`]): the kernel's parameter block has room for three.
pub(crate) const MAX_MERGED: usize = 3;

/// Record `dst_i = a_i^T b` for each `(dst_i, a_i)` of `products` (1 to
/// [`MAX_MERGED`]) as one dispatch: b quantized once (unless this compute
/// already did), then every product's rows, workgroup after workgroup.
/// The caller ([`crate::merge_products`]) checked what sharing a dispatch
/// needs: weights of one type, each taken by the kernel, in one buffer,
/// destinations in one buffer, no destination overlapping another's or
/// any operand.
pub(crate) fn encode_merged(
    batch: &mut Batch<'_>,
    core: &Core,
    state: &mut Compute,
    (b_id, b_root, b): (TensorId, TensorId, &Operand),
    products: &[(&Operand, &Operand)],
) -> Result<()> {
    let (Some(&(dst, a)), true) = (products.first(), products.len() <= MAX_MERGED) else {
        return Err(tessera::Error::device(
            &core.name,
            format!("{} products in one dispatch", products.len()),
        ));
    };
    let (k, cols) = (b.layout.ne[0], b.layout.ne[1]);
    let (pairs_at, bytes) = region_bytes(k, cols);
    let scratch = state.operand()?;
    let base = match state.at.get(&b_id) {
        Some(&(base, _)) => base,
        None => {
            // Regions start at multiples of 16 (read by vectors).
            let base = state.next.next_multiple_of(16);
            if base.saturating_add(bytes) > state.size {
                return Err(tessera::Error::device(
                    &core.name,
                    "the activation scratch is smaller than its plan",
                ));
            }
            state.claim(base, bytes);
            state.next = base + bytes;
            let mut call = Call::new(&scratch, &[Some(b)])?;
            call.params.iu = [u32_of(base)?, u32_of(base + pairs_at)?, 0, 0];
            call.items(batch, core, "quant_act", QUANT_ACT, k / 32 * cols)?;
            state.at.insert(b_id, (base, b_root));
            base
        }
    };
    let mut call = Call::new(dst, &[Some(a), Some(&scratch)])?;
    call.bindings[2] = call.bindings[2].as_vec4();
    let merged = u32_of(products.len() - 1)?;
    call.params.iu = [u32_of(base)?, u32_of(base + pairs_at)?, cols as u32, merged];
    // Two rows a workgroup; products 1 and 2 start at their first
    // workgroup (`ne_2`/`nb_2`, `ne_3`/`nb_3`: see the kernel's header).
    let mut groups = a.layout.ne[1].div_ceil(2);
    for (s, &(d, w)) in products.iter().enumerate().skip(1) {
        let [ne, nb] = &mut call.params.src[s + 1];
        *ne = [
            u32_of(groups)?,
            u32_of(w.layout.ne[1])?,
            u32_of(w.offset)?,
            u32_of(d.offset)?,
        ];
        *nb = [
            u32_of(w.layout.nb[1])?,
            u32_of(d.layout.nb[0])?,
            u32_of(d.layout.nb[1])?,
            0,
        ];
        groups = groups.saturating_add(w.layout.ne[1].div_ceil(2));
    }
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    let body = MATVEC_Q8[usize::from(cols > 1)];
    call.record(batch, core, "mul_mat_vec_q8", body, params, groups)
}

fn u32_of(v: usize) -> Result<u32> {
    crate::params::u32_of(v, "a scratch offset")
}

#[cfg(test)]
#[path = "matvec_q8_tests.rs"]
mod tests;
