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
//! **On by default** (`TESSERA_WGPU_MMQ=0` turns it off, for measuring;
//! `TESSERA_WGPU_MMQ=big` takes tiles of 128 x 128 instead of 64 x 64).
//! Not yet timed on a GPU; on lavapipe (Mesa's CPU Vulkan driver, where CI
//! runs, 2 Intel cores) it took the prompts of Gemma 3 270M Q4_K_M from
//! 10.0 / 10.5 to 20.3 / 19.8 t/s (pp128, alternated) and a 1B Q4_0's
//! from 1.41 to 3.93 t/s (pp64). The error is the matrix-vector kernel's:
//! half a step of each 32 activations' scale per value (ggml's prompt
//! kernels quantize the activations the same way).

use tessera::Result;

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;

/// The kernel for tiles of `$qt` rows and columns (`$qr` = `$qt` / 16
/// of each an invocation).
macro_rules! matmul_q8 {
    ($qt:literal, $qr:literal) => {
        concat!(
            "const QT: u32 = ",
            $qt,
            "u;\nconst QR: u32 = ",
            $qr,
            "u;\n",
            include_str!("shaders/matmul_common.wgsl"),
            include_str!("shaders/mq_unit.wgsl"),
            include_str!("shaders/matmul_q8_tile.wgsl"),
            include_str!("shaders/matmul_q8.wgsl")
        )
    };
}

/// The kernels by tile: 64 x 64 (4 x 4 outputs an invocation), and
/// 128 x 128 (8 x 8: twice the products per value read from workgroup
/// memory; `TESSERA_WGPU_MMQ=big`, not yet timed on a GPU, so off).
const MATMUL_Q8: [(&str, usize); 2] = [(matmul_q8!(64, 4), 64), (matmul_q8!(128, 8), 128)];

/// Whether the 128 x 128 tiles are taken (`TESSERA_WGPU_MMQ=big`, or a
/// test's choice on its thread).
fn big_tiles() -> bool {
    #[cfg(test)]
    if let Some(on) = BIG.with(std::cell::Cell::get) {
        return on;
    }
    static BIG_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BIG_ENV.get_or_init(|| std::env::var("TESSERA_WGPU_MMQ").is_ok_and(|v| v.trim() == "big"))
}

#[cfg(test)]
thread_local! {
    /// Tests choose the tile for their own thread.
    pub(crate) static BIG: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

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
    let call = match crate::coopmat::kernel(core, crate::coopmat::Kind::Products) {
        Some(kernel) => match crate::coopmat::record(batch, core, call, kernel, (a, dst))? {
            Some(refused) => refused,
            None => return Ok(()),
        },
        None => call,
    };
    let (m, n) = (a.layout.ne[1], dst.layout.ne[1]);
    let (body, tile) = MATMUL_Q8[usize::from(big_tiles())];
    let groups = m
        .div_ceil(tile)
        .checked_mul(n.div_ceil(tile))
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    call.record(batch, core, "mul_mat_q8", body, params, groups)
}

#[cfg(test)]
#[path = "matmul_q8_tests.rs"]
mod tests;
