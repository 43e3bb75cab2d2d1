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
//! ([`crate::q8_scratch`]): one region per distinct src1 of a compute
//! while products still read it, so the products that share an input (Q,
//! K and V; gate and up) quantize it once. Activations quantized to bytes are what the CPU's dot products use
//! too (ggml's `vec_dot_type`); the error bound is one half step of each
//! block's scale per value. Products of more columns take the tiled
//! integer kernel of [`crate::matmul_q8`] over the same quantizations,
//! where it is on.

use tessera::{DType, Layout, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;
use crate::q8_scratch::u32_of;
pub(crate) use crate::q8_scratch::{Compute, Quantized, Scratch, scratch_bytes};

const QUANT_ACT: &str = include_str!("shaders/quant_act.wgsl");
/// The kernels by `[subgroups][cols > 1]` ([`crate::subgroups`]).
const MATVEC_Q8: [[&str; 2]; 2] = [
    [
        matvec_q8_source!(1, "matvec_q8_tree.wgsl"),
        matvec_q8_source!(8, "matvec_q8_tree.wgsl"),
    ],
    [
        matvec_q8_source!(1, "matvec_q8_subgroup.wgsl"),
        matvec_q8_source!(8, "matvec_q8_subgroup.wgsl"),
    ],
];

/// Rows a workgroup of the tree kernel takes.
const TREE_ROWS: usize = 2;

/// The weight types the kernel decodes.
pub(crate) const TYPES: [DType; 12] = [
    DType::Q2K,
    DType::Q3K,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
];

/// Most columns the matrix-vector kernel takes (more: the tiled one).
pub(crate) const MAX_COLS: usize = 8;

env_switch!("TESSERA_WGPU_MV_Q8");

/// Whether the integer kernel is on (default; `TESSERA_WGPU_MV_Q8=0` is off).
fn enabled() -> bool {
    switch_on(|| true)
}

/// Whether the kernel takes `a` (weights) x `b` (activations): rows of
/// whole blocks of a type it decodes, no shorter than the encoder gives a
/// matrix-vector kernel ([`crate::encode::MATVEC_MIN_K`]), F32 columns
/// (at most [`MAX_COLS`] unless the tiled kernel is on), one matrix each
/// (no batches).
pub(crate) fn takes(a: &Layout, b: &Layout) -> bool {
    takes_weights(a)
        && b.dtype == DType::F32
        && b.nb[0] == 4
        && (b.ne[1] <= MAX_COLS || crate::matmul_q8::enabled())
        && a.ne[2] * a.ne[3] == 1
        && b.ne[2] * b.ne[3] == 1
}

/// Whether the integer kernels take weights `a`: rows of whole blocks of
/// a type they decode, no shorter than the encoder gives a matrix-vector
/// kernel ([`crate::encode::MATVEC_MIN_K`]); the kernel on.
pub(crate) fn takes_weights(a: &Layout) -> bool {
    let k = a.ne[0];
    enabled()
        && TYPES.contains(&a.dtype)
        && a.nb[0] == a.dtype.type_size()
        && k.is_multiple_of(a.dtype.block_size())
        && k >= crate::encode::MATVEC_MIN_K
}

/// Record `dst = a^T b` (b = tensor `b_id`, its memory `b_root`'s): b's
/// quantization unless this compute already made it, then the product.
/// `false` (nothing recorded) where the quantization has no room in the
/// scratch: the float kernels take the product.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Core,
    state: &mut Compute,
    b: (TensorId, TensorId, &Operand),
    dst: &Operand,
    a: &Operand,
) -> Result<bool> {
    encode_merged(batch, core, state, b, &[(dst, a)])
}

/// Where the quantization of `b` (tensor `b_id`, its memory `b_root`'s)
/// is in the scratch, `(bytes, pairs, the scratch)`: made now (a dispatch
/// of its own) unless this compute made it already; `None` where it has
/// no room.
pub(crate) fn quantized_input(
    batch: &mut Batch<'_>,
    core: &Core,
    state: &mut Compute,
    (b_id, b_root, b): (TensorId, TensorId, &Operand),
) -> Result<Option<(usize, usize, Operand)>> {
    let (k, cols) = (b.layout.ne[0], b.layout.ne[1]);
    let Some((base, pairs, fresh)) = state.locate((b_id, b_root), k, cols) else {
        return Ok(None);
    };
    let scratch = state.operand()?;
    if fresh {
        let mut call = Call::new(&scratch, &[Some(b)])?;
        call.params.iu = [u32_of(base)?, u32_of(pairs)?, 0, 0];
        call.items(batch, core, "quant_act", QUANT_ACT, k / 32 * cols)?;
    }
    Ok(Some((base, pairs, scratch)))
}

/// Most products of one input that one dispatch computes
/// ([`encode_merged`]): the kernel's parameter block has room for three.
pub(crate) const MAX_MERGED: usize = 3;

/// Record `dst_i = a_i^T b` for each `(dst_i, a_i)` of `products` (1 to
/// [`MAX_MERGED`]; one where b has more than [`MAX_COLS`] columns) as one
/// dispatch: b quantized once (unless this compute already did), then
/// every product's rows, workgroup after workgroup. `false` (nothing
/// recorded) where the quantization has no room in the scratch.
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
) -> Result<bool> {
    let cols = b.layout.ne[1];
    let most = if cols > MAX_COLS { 1 } else { MAX_MERGED };
    let (Some(&(dst, a)), true) = (products.first(), products.len() <= most) else {
        return Err(tessera::Error::device(
            &core.name,
            format!(
                "{} products of {cols} columns in one dispatch",
                products.len()
            ),
        ));
    };
    let Some((base, pairs, scratch)) = quantized_input(batch, core, state, (b_id, b_root, b))?
    else {
        return Ok(false);
    };
    let mut call = Call::new(dst, &[Some(a), Some(&scratch)])?;
    call.bindings[2] = call.bindings[2].as_vec4();
    let merged = u32_of(products.len() - 1)?;
    call.params.iu = [u32_of(base)?, u32_of(pairs)?, u32_of(cols)?, merged];
    if cols > MAX_COLS {
        return crate::matmul_q8::record(batch, core, call, (a, dst)).map(|()| true);
    }
    // Rows a workgroup: the tree kernel's two, or one per subgroup at the
    // device's smallest; products 1 and 2 start at their first workgroup
    // (`ne_2`/`nb_2`, `ne_3`/`nb_3`: see the kernel's `mq_product`).
    let subgroups = crate::subgroups::on(core);
    let rows = if subgroups {
        crate::subgroups::rows_per_group(core, 128) as usize
    } else {
        TREE_ROWS
    };
    let mut groups = a.layout.ne[1].div_ceil(rows);
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
        groups = groups.saturating_add(w.layout.ne[1].div_ceil(rows));
    }
    call.params.iu2[0] = u32_of(rows)?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    let body = MATVEC_Q8[usize::from(subgroups)][usize::from(cols > 1)];
    call.record(batch, core, "mul_mat_vec_q8", body, params, groups)?;
    Ok(true)
}

#[cfg(test)]
#[path = "matvec_q8_tests.rs"]
pub(crate) mod tests;
