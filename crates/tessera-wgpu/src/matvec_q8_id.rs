//! MUL_MAT_ID (a mixture-of-experts layer's products: each token's
//! activations times the weights of the experts its router picked) by the
//! integer matrix-vector kernel of [`crate::matvec_q8`]: the activations
//! quantized once into the same scratch (every column of a token's
//! activations, `e % ne11`), each output column's rows summed by
//! subgroups from its expert's weights (`shaders/matvec_q8_id.wgsl`).
//!
//! Why: MUL_MAT_ID took `matmul_id.wgsl`, one invocation per output
//! dequantizing every weight value by itself, the way of a reference
//! kernel; a Qwen3 MoE model's decoding step is dozens of such products.
//! On lavapipe (2 Intel cores), a synthetic Qwen3 MoE file (`synth
//! qwen3moe q4_K … moe-1024`: 32 experts of 256 x 1,024, 4 used a token)
//! spent 62.3 ms a token in them before and 11.3 after (`bench model
//! --profile 4`); decoding 5.66 / 5.68 -> 7.44 / 8.03 t/s, alternated.
//!
//! Devices with subgroup operations (the others keep `matmul_id.wgsl`,
//! but for the tiled kernel's prompts, which need none);
//! `TESSERA_WGPU_MOE_Q8=0` is off (both kernels), for measuring. Each output column reads
//! its expert's rows by itself: right for decoding (a token's experts are
//! distinct). Products of many tokens (prompts) take the tiled
//! kernel instead ([`crate::matmul_q8_id`]): each expert's
//! tokens gathered, its rows read once a tile of 64 of them, as llama.cpp
//! groups them.

use tessera::{DType, Layout, Result, TensorId};

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;
use crate::matvec_q8::{Compute, quantized_input};
use crate::q8_scratch::u32_of;

const MATVEC_Q8_ID: &str = matvec_q8_source!(1, "matvec_q8_id.wgsl");

env_switch!("TESSERA_WGPU_MOE_Q8");

/// Whether the kernel takes weights `a` (`k` x rows x experts) with
/// activations `b` (`k` x `ne11` x tokens): weights the integer kernels
/// take ([`crate::matvec_q8::takes_weights`]), contiguous F32 activations
/// (their columns quantized as one matrix of `ne11` x tokens columns),
/// no fourth dimension.
pub(crate) fn takes(a: &Layout, b: &Layout) -> bool {
    switch_on(|| true)
        && crate::matvec_q8::takes_weights(a)
        && a.ne[3] == 1
        && b.dtype == DType::F32
        && b.is_contiguous()
        && b.ne[3] == 1
        && b.ne[0] == a.ne[0]
}

/// `b` as the matrix its quantization is: `k` x (every other dimension's
/// extent) columns.
pub(crate) fn columns(b: &Layout) -> Result<Layout> {
    let cols = b.ne[1..]
        .iter()
        .try_fold(1usize, |n, &e| n.checked_mul(e))
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT_ID columns".into()))?;
    Layout::contiguous(b.dtype, &[b.ne[0], cols])
}

/// What a dispatch of the kernel computes (its `P.iu.w`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode<'a> {
    /// `dst = MUL_MAT_ID(a, b, ids)`.
    Products,
    /// The sum over each token's slots of the products times these
    /// weights (`[1, used, tokens]`): `dst` is `[rows, tokens]`
    /// ([`crate::fuse_moe`]).
    WeightedSum(&'a Operand),
    /// `act(a's products) * (these weights' products)`, `act` a
    /// `unary_fn` code; these weights in `a`'s buffer, with its strides
    /// ([`crate::fuse_moe`]).
    Glu(&'a Operand, u32),
}

/// Record the kernel in `mode` over `a` (weights), `ids` and `b` (tensor
/// `b_id`, its memory `b_root`'s): b's quantization unless this compute
/// already made it, then the dispatch. `false` (nothing recorded) where
/// the device has no subgroup operations or the quantization no room in
/// the scratch: the nodes take the other kernels.
pub(crate) fn encode(
    batch: &mut Batch<'_>,
    core: &Core,
    state: &mut Compute,
    (b_id, b_root, b): (TensorId, TensorId, &Operand),
    dst: &Operand,
    (a, ids, mode): (&Operand, &Operand, Mode<'_>),
) -> Result<bool> {
    let tiled = matches!(mode, Mode::Products)
        && crate::matmul_q8_id::takes(ids.layout.ne[1], ids.layout.ne[0], a.layout.ne[2]);
    if !(tiled || crate::subgroups::on(core)) {
        return Ok(false);
    }
    let flat = Operand {
        layout: columns(&b.layout)?,
        buffer: b.buffer.clone(),
        offset: b.offset,
    };
    let Some((base, pairs, scratch)) = quantized_input(batch, core, state, (b_id, b_root, &flat))?
    else {
        return Ok(false);
    };
    let weights = match mode {
        Mode::WeightedSum(w) => Some(w),
        _ => None,
    };
    let mut call = Call::new(dst, &[Some(a), Some(&scratch), Some(ids), weights])?;
    call.bindings[2] = call.bindings[2].as_vec4();
    if tiled {
        call.params.iu = [u32_of(base)?, u32_of(pairs)?, u32_of(b.layout.ne[1])?, 0];
        crate::matmul_q8_id::record(batch, core, call, a)?;
        return Ok(true);
    }
    let rows = crate::subgroups::rows_per_group(core, 128) as usize;
    let row_groups = a.layout.ne[1].div_ceil(rows);
    // Workgroups: a row group of each (slot, token), or of each token.
    let (used, tokens) = (ids.layout.ne[0], ids.layout.ne[1]);
    let columns = if weights.is_some() {
        tokens
    } else {
        used.saturating_mul(tokens)
    };
    let groups = row_groups
        .checked_mul(columns)
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT_ID workgroups".into()))?;
    let code = match mode {
        Mode::Products => 0,
        Mode::WeightedSum(_) => 1,
        Mode::Glu(..) => 2,
    };
    call.params.iu = [u32_of(base)?, u32_of(pairs)?, u32_of(b.layout.ne[1])?, code];
    call.params.iu2[0] = u32_of(rows)?;
    call.params.iu2[1] = u32_of(row_groups)?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    if let Mode::Glu(second, act) = mode {
        params.iu2[3] = u32_of(second.offset)?;
        params.off2[3] = act;
    }
    call.record(batch, core, "mul_mat_id_q8", MATVEC_Q8_ID, params, groups)?;
    Ok(true)
}

#[cfg(test)]
#[path = "matvec_q8_id_tests.rs"]
pub(crate) mod tests;
