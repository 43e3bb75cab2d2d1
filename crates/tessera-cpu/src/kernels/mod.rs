//! CPU kernels: one module per op family, all with the same shape.
//!
//! A kernel is `fn(&NodeCtx) -> Result<()>`. Every thread of the compute
//! calls it with its own `ith` (0..`nth`) and computes its share of the node
//! (usually a range of rows). The executor guarantees that each [`TensorRef`]
//! points at memory valid for the tensor's whole layout (`layout.nbytes()`
//! bytes from `ptr`) for the duration of the call, and that `dst` may alias
//! `src[0]` only for ops with [`tessera::Op::can_inplace`].
//!
//! Rules for kernel authors:
//! - never panic: data-dependent problems (an index out of range) return an
//!   `Error` naming the op and the value;
//! - a kernel that waits on `barrier` must call it the same number of times
//!   on every thread, even when it fails, or the others would wait forever;
//! - `scratch` is shared by the threads of one node; its size is what the
//!   op's `scratch_size` asked for.
//!
//! What else the executor (`crate::exec`) guarantees before a kernel runs:
//! - the node passed [`crate::support::supports_op`], so types, shapes and
//!   the strides the kernel relies on were checked (a graph may come from a
//!   file or a peer; the builder's checks are not trusted);
//! - every pointer, and the stride of every dimension with more than one
//!   element, is a multiple of [`elem::elem_align`] of the tensor's type;
//! - `dst` does not overlap itself (no two elements share bytes);
//! - `dst` overlaps no operand, except: an operand of an in-place op
//!   ([`tessera::Op::can_inplace`]) with exactly `dst`'s pointer and layout,
//!   and the operand a CPY (`src[1]`) or SET_ROWS (`src[0]`) writes into,
//!   which those kernels never read.

use tessera::{Layout, MAX_SRC, Op};

use crate::isa::Isa;
use crate::pool::Barrier;
use crate::repack::Packing;

/// A tensor's memory as a kernel sees it.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef {
    /// First byte of the tensor.
    pub ptr: *mut u8,
    /// Type, extents and strides.
    pub layout: Layout,
    /// How the bytes are laid out (repacked weights: MUL_MAT's operand 0
    /// only, which the executor checks).
    pub packing: Packing,
}

// SAFETY: a TensorRef is a view of buffer memory shared by the threads of one
// compute; the executor's contract (module docs) makes concurrent use sound:
// threads write disjoint parts of `dst`, separated by barriers.
unsafe impl Send for TensorRef {}
// SAFETY: see `Send`.
unsafe impl Sync for TensorRef {}

impl TensorRef {
    /// Extent of dimension `i`.
    #[inline]
    pub fn ne(&self, i: usize) -> usize {
        self.layout.ne[i]
    }

    /// Byte stride of dimension `i`.
    #[inline]
    pub fn nb(&self, i: usize) -> usize {
        self.layout.nb[i]
    }

    /// Pointer to element `(i0, i1, i2, i3)` (`i0` a block start for
    /// quantized types).
    ///
    /// # Safety
    /// Each index must be below its extent.
    #[inline]
    pub unsafe fn at(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        let off = self.layout.offset_of([i0, i1, i2, i3]);
        // SAFETY: in-range indices give an offset below `layout.nbytes()`,
        // inside the memory the executor guarantees.
        unsafe { self.ptr.add(off) }
    }

    /// Pointer to the start of row `(i1, i2, i3)`.
    ///
    /// # Safety
    /// Each index must be below its extent.
    #[inline]
    pub unsafe fn row(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // SAFETY: forwarded precondition.
        unsafe { self.at(0, i1, i2, i3) }
    }
}

/// Shared scratch memory of one node.
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    /// First byte, aligned to 64.
    pub ptr: *mut u8,
    /// Bytes available.
    pub len: usize,
}

// SAFETY: as for TensorRef: threads use disjoint parts or are ordered by barriers.
unsafe impl Send for Scratch {}
// SAFETY: see `Send`.
unsafe impl Sync for Scratch {}

/// Memory one node shares with later nodes of the same compute: a ROPE
/// angle table, or a MUL_MAT's packed activations ([`gemm_shared_b`]),
/// computed by the first node of a group (`fill`) and read by the others
/// (see `exec::tables`).
///
/// What the executor guarantees: `ptr` is 64-byte aligned and valid for
/// `len` bytes for the whole compute; no node's [`Scratch`] and no tensor
/// overlaps it; every node given the same table computes it from the same
/// inputs alike (ROPE: the same op, positions and factors; MUL_MAT: the
/// same activations, packed to the same [`PackKey`]), unchanged since the
/// filling node ran; and a barrier separates the filling node from every
/// reader. Inside the filling node, threads must write disjoint parts and
/// meet at the node's barrier before reading.
#[derive(Clone, Copy, Debug)]
pub struct SharedTable {
    /// First byte, aligned to 64.
    pub ptr: *mut u8,
    /// Bytes of the table.
    pub len: usize,
    /// This node computes the table; the others only read it.
    pub fill: bool,
}

// SAFETY: as for Scratch: threads write disjoint parts, ordered by barriers
// before anyone reads.
unsafe impl Send for SharedTable {}
// SAFETY: see `Send`.
unsafe impl Sync for SharedTable {}

/// Everything a kernel needs for one node on one thread.
#[derive(Clone, Copy, Debug)]
pub struct NodeCtx<'a> {
    /// The op and its parameters.
    pub op: Op,
    /// The result.
    pub dst: TensorRef,
    /// The operands, in the op's order.
    pub src: [Option<TensorRef>; MAX_SRC],
    /// This thread's index.
    pub ith: usize,
    /// Threads computing the node.
    pub nth: usize,
    /// Shared scratch of `scratch_size` bytes.
    pub scratch: Scratch,
    /// A table this node shares with other nodes of the compute (ROPE's
    /// angles; see [`SharedTable`]), planned by the executor.
    pub table: Option<SharedTable>,
    /// Barrier of the `nth` threads.
    pub barrier: &'a Barrier,
    /// Instruction set to use.
    pub isa: Isa,
}

impl NodeCtx<'_> {
    /// Operand `i`, or an error if the executor did not provide it (it
    /// always does for nodes the builder made).
    #[inline]
    pub fn src(&self, i: usize) -> tessera::Result<TensorRef> {
        self.src[i]
            .ok_or_else(|| tessera::Error::op(self.op.name(), format!("operand {i} is missing")))
    }

    /// The range of `n` items this thread handles (contiguous chunks).
    #[inline]
    pub fn split(&self, n: usize) -> std::ops::Range<usize> {
        let per = n.div_ceil(self.nth.max(1));
        let start = (per * self.ith).min(n);
        let end = (start + per).min(n);
        start..end
    }
}

pub mod act_quant;
mod act_quant_avx2;
pub mod attention;
mod attention_gemm;
mod attention_group;
mod attention_scale;
mod attention_vec;
mod attention_vec512;
pub mod binary;
pub mod concat;
pub mod copy;
#[cfg(target_arch = "x86_64")]
mod cvt_avx2;
pub mod dot;
mod dot_avx2;
mod dot_iq4;
mod dot_kquant;
mod dot_quant;
mod dot_quant5;
pub mod elem;
#[cfg(target_arch = "x86_64")]
mod exp_avx2;
#[cfg(target_arch = "x86_64")]
mod exp_avx512;
pub mod gemm;
pub(crate) use gemm_shared_b::{PackKey, pack_key};
mod gemm_avx2;
mod gemm_avx512;
mod gemm_driver;
mod gemm_pack;
mod gemm_packed;
mod gemm_portable;
mod gemm_q8;
mod gemm_q8_avx2;
#[cfg(test)]
mod gemm_q8_tests;
mod gemm_q8_unpack;
mod gemm_sb;
#[cfg(test)]
mod gemm_sb_tests;
mod gemm_shared_b;
#[cfg(test)]
mod gemm_tests;
mod gemm_vnni;
mod gemv_avx2;
mod gemv_avx2_float;
mod gemv_avx2_iq4;
mod gemv_avx2_k;
mod gemv_avx2_q4_0;
mod gemv_avx2_q5;
mod gemv_avx2_q8;
mod gemv_avx2_tiled;
mod gemv_avx512;
mod gemv_avx512_iq4xs;
mod gemv_avx512_k;
mod gemv_avx512_q4k;
mod gemv_avx512_q5;
mod gemv_avx512_q6k;
mod gemv_avx512_q8;
pub mod glu;
pub mod math;
pub mod matmul;
pub mod norm;
pub(crate) mod q8_tiled;
pub mod reduce;
pub mod rope;
#[cfg(target_arch = "x86_64")]
mod rope_avx2;
mod row_ahead;
pub mod rows;
pub mod simd;
#[cfg(target_arch = "x86_64")]
mod simd_avx2;
#[cfg(target_arch = "x86_64")]
mod simd_avx512;
pub mod softmax;
pub mod sort;
pub mod tile;
pub mod unary;

/// A kernel: computes thread `ctx.ith`'s share of one node.
pub type KernelFn = fn(&NodeCtx) -> tessera::Result<()>;

/// The kernel of `op`, or `None` for ops that compute nothing (leaves and
/// views).
pub fn kernel_for(op: &Op) -> Option<KernelFn> {
    Some(match op {
        Op::None | Op::Transfer | Op::Reshape | Op::View | Op::Permute(_) | Op::Transpose => {
            return None;
        }
        Op::Dup | Op::Cont | Op::Cpy => copy::copy,
        Op::GetRows => rows::get_rows,
        Op::SetRows => rows::set_rows,
        Op::Add | Op::Mul | Op::Div | Op::Sub => binary::binary,
        Op::Sqr | Op::Sqrt | Op::Clamp { .. } => unary::elementwise,
        Op::L2Norm { .. } => norm::l2_norm,
        Op::Repeat => tile::repeat,
        Op::Pad { .. } => tile::pad,
        Op::Argsort { .. } | Op::TopK => sort::sort,
        Op::Scale { .. } => unary::scale,
        Op::Unary(_) => unary::unary,
        Op::Glu { .. } => glu::glu,
        Op::SwiGluOai { .. } => glu::swiglu_oai,
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::norm,
        Op::SoftMax { .. } => softmax::soft_max,
        Op::Rope(_) => rope::rope,
        Op::Concat { .. } => concat::concat,
        Op::Argmax => reduce::argmax,
        Op::SumRows => reduce::sum_rows,
        Op::MulMat => matmul::mul_mat,
        Op::MulMatId => matmul::id::mul_mat_id,
        Op::AddId => binary::add_id,
        Op::FlashAttnExt { .. } => attention::flash_attn_ext,
    })
}

/// Scratch bytes node `op` needs when `nth` threads compute it; `dst` and
/// `src` are the layouts of its result and operands, `packing` how operand
/// 0 is stored (repacked MUL_MAT weights always take the packed GEMM).
pub fn scratch_size(
    op: &Op,
    dst: &Layout,
    src: &[Option<&Layout>; MAX_SRC],
    packing: Packing,
    nth: usize,
    isa: Isa,
) -> usize {
    let _ = dst;
    match (op, src[0], src[1], src[2]) {
        (Op::MulMat, Some(a), Some(b), _) if packing != Packing::Standard => {
            gemm::packed_scratch_size(a, b, nth)
        }
        (Op::MulMat, Some(a), Some(b), _) => matmul::mul_mat_scratch_size(a, b, nth, isa),
        (Op::MulMatId, Some(a), Some(b), Some(ids)) => {
            matmul::id::mul_mat_id_scratch_size(a, b, ids, nth, isa)
        }
        (Op::FlashAttnExt { .. }, Some(q), Some(k), Some(v)) => {
            attention::flash_attn_scratch_size(q, k, v, nth)
        }
        (Op::TopK, Some(a), _, _) => sort::top_k_scratch_size(a.ne[0], nth),
        (Op::Rope(p), _, _, _) => {
            nth.saturating_mul(per_thread_bytes(p.n_pairs().saturating_mul(4), 4))
        }
        _ => 0,
    }
}

/// Bytes of one thread's share of a scratch holding `n` items of `size`
/// bytes, rounded up to a cache line so threads never share one.
pub const fn per_thread_bytes(n: usize, size: usize) -> usize {
    n.saturating_mul(size).saturating_add(63) / 64 * 64
}

impl NodeCtx<'_> {
    /// This thread's part of the scratch: `n` f32 values at offset
    /// `ith * per_thread_bytes(n, 4)`, or an error if the scratch is smaller
    /// than [`scratch_size`] promised.
    pub fn thread_scratch_f32(&self, n: usize) -> tessera::Result<*mut f32> {
        let per = per_thread_bytes(n, 4);
        let start = per.saturating_mul(self.ith);
        if start.saturating_add(per) > self.scratch.len {
            return Err(tessera::Error::device(
                "CPU",
                format!(
                    "{}: scratch of {} bytes is too small for thread {} ({per} bytes each)",
                    self.op.name(),
                    self.scratch.len,
                    self.ith
                ),
            ));
        }
        // SAFETY: `start + per <= len`, inside the scratch allocation, which
        // is 64-byte aligned, so the f32 pointer is aligned.
        Ok(unsafe { self.scratch.ptr.add(start) } as *mut f32)
    }
}
