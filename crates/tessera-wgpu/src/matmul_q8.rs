//! Many-column products of quantized weights (prompts, batches) by integer
//! dot products: the tiled kernel of `shaders/matmul_q8.wgsl` over the
//! activations quantized as for [`crate::matvec_q8`] (the same scratch, the
//! same quantizations, shared by the products of one input).
//!
//! Why: the float tiled kernels (`matmul_tiled.wgsl`) dequantize every
//! weight value one at a time as they stage it (a byte load, shifts and a
//! scale per value) and do a float product per value; a 1B Q4_0 prompt ran
//! at 0.25x of ggml's Vulkan backend on an NVIDIA H200. Here a row's 32
//! values are decoded once per tile as eight packed words (the matrix-vector
//! kernel's `mq_unit`), and each `dot4I8Packed` does four products with an
//! exact sum, scaled once per 32 values: about a third of the instructions
//! per product, and a quarter of the workgroup-memory reads.
//!
//! **On by default** (`TESSERA_WGPU_MMQ=0` turns it off, for measuring).
//! Not yet timed on a GPU; on lavapipe (Mesa's CPU Vulkan driver, where CI
//! runs, 2 Intel cores) it took the prompts of Gemma 3 270M Q4_K_M from
//! 10.0 / 10.5 to 20.3 / 19.8 t/s (pp128, alternated) and a 1B Q4_0's
//! from 1.41 to 3.93 t/s (pp64). The error is the matrix-vector kernel's:
//! half a step of each 32 activations' scale per value (ggml's prompt
//! kernels quantize the activations the same way).

use tessera::Result;

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Call, Operand};

const MATMUL_Q8: &str = concat!(
    include_str!("shaders/matmul_common.wgsl"),
    include_str!("shaders/mq_unit.wgsl"),
    include_str!("shaders/matmul_q8.wgsl")
);

/// Rows and columns of a workgroup's tile (`QT` in the kernel).
const TILE: usize = 64;

env_switch!("TESSERA_WGPU_MMQ");

/// Whether products of more than [`crate::matvec_q8::MAX_COLS`] columns
/// take the integer kernel (default; `TESSERA_WGPU_MMQ=0` is off, and so
/// is the matrix-vector kernel's `TESSERA_WGPU_MV_Q8=0`, which
/// [`crate::matvec_q8::takes`] asks first).
pub(crate) fn enabled() -> bool {
    switch_on(|| true)
}

/// Record the product `dst = a^T b` whose `call` [`crate::matvec_q8`] set
/// up (destination, weights, the scratch as vectors; `iu` = bytes, pairs,
/// columns).
pub(crate) fn record(
    batch: &mut Batch<'_>,
    core: &Core,
    call: Call,
    (a, dst): (&Operand, &Operand),
) -> Result<()> {
    let (m, n) = (a.layout.ne[1], dst.layout.ne[1]);
    let groups = m
        .div_ceil(TILE)
        .checked_mul(n.div_ceil(TILE))
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    call.record(batch, core, "mul_mat_q8", MATMUL_Q8, params, groups)
}

#[cfg(test)]
#[path = "matmul_q8_tests.rs"]
mod tests;
