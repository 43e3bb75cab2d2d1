//! MUL_MAT_ID (a mixture-of-experts layer's products) of many tokens —
//! prompts, batches — by the integer tiles of [`crate::matmul_q8`]: each
//! workgroup gathers the (slot, token) pairs that picked its expert and
//! multiplies their quantized columns 64 at a time by 64 of the expert's
//! rows (`shaders/matmul_q8_id.wgsl`, over `matmul_q8_tile.wgsl`).
//!
//! Why: the matrix-vector kernel of [`crate::matvec_q8_id`] reads an
//! expert's rows once for each pair that picked it; a prompt of 512
//! tokens with 8 of 128 experts each reads every expert's rows ~32 times.
//! Here once a tile of 64 pairs, as llama.cpp's Vulkan and CUDA backends
//! group them. An expert no token picked costs its workgroups one scan of
//! the ids.
//!
//! A tile's absent columns cost as much as present ones, so the kernel
//! pays where the experts get enough pairs each: measured on lavapipe (2
//! Intel cores) with a synthetic Qwen3 MoE (`synth qwen3moe q4_K …
//! moe-1024`: 32 experts, 4 a token), prompts of 64 tokens (8 pairs an
//! expert on average) ran 27.4-27.8 t/s with it against 32.8-33.3
//! without, 128 tokens (16) 39.6 against 34.5, 256 (32) 45.4 against
//! 32.8, 512 (64) 43.3 against 31.0. Taken from [`MIN_PAIRS`] an expert
//! on average (and more than [`crate::matvec_q8::MAX_COLS`] tokens),
//! where the integer tiles are on (`TESSERA_WGPU_MMQ`) and
//! `TESSERA_WGPU_MOE_TILES` is not `0` (off, for measuring: the
//! matrix-vector kernel then takes them, with the fusions of
//! [`crate::fuse_moe`]; `always`: from 9 tokens whatever the pairs an
//! expert).

use tessera::Result;

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;
use crate::q8_scratch::u32_of;

/// The kernel: 64 x 64 tiles.
const MATMUL_Q8_ID: &str = concat!(
    "const QT: u32 = 64u;\nconst QR: u32 = 4u;\nconst GT: u32 = 256u;\nconst GMAX: u32 = 64u;\n",
    include_str!("shaders/matmul_common.wgsl"),
    include_str!("shaders/mq_unit.wgsl"),
    include_str!("shaders/matmul_q8_tile.wgsl"),
    include_str!("shaders/gather_ids.wgsl"),
    include_str!("shaders/matmul_q8_id.wgsl")
);

env_switch!("TESSERA_WGPU_MOE_TILES");

#[cfg(test)]
thread_local! {
    /// Dispatches of the kernel on this thread (integer or cooperative).
    pub(crate) static RECORDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Pairs an expert on average from which the kernel is taken (a GPU,
/// whose matrix-vector kernel waits for memory where lavapipe computes,
/// likely gains from fewer; not yet timed on one).
pub(crate) const MIN_PAIRS: usize = 12;

/// Whether a MUL_MAT_ID of `tokens` tokens, `used` of `experts` experts
/// a token, takes the kernel (`TESSERA_WGPU_MOE_TILES=always`: whatever
/// the pairs an expert, for measuring where a GPU's crossing lies).
pub(crate) fn takes(tokens: usize, used: usize, experts: usize) -> bool {
    let min_pairs = if always() { 0 } else { MIN_PAIRS };
    tokens > crate::matvec_q8::MAX_COLS
        && tokens.saturating_mul(used) >= min_pairs.saturating_mul(experts)
        && switch_on(crate::matmul_q8::enabled)
}

/// `TESSERA_WGPU_MOE_TILES=always`.
fn always() -> bool {
    static ALWAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALWAYS
        .get_or_init(|| std::env::var("TESSERA_WGPU_MOE_TILES").is_ok_and(|v| v.trim() == "always"))
}

/// Record `dst = MUL_MAT_ID(a, b, ids)` whose `call`
/// [`crate::matvec_q8_id`] set up (destination, weights, the scratch as
/// vectors, ids; `iu` = bytes, pairs, `ne11`): a workgroup for each 64
/// rows of each expert; on cooperative matrices where the device takes
/// them for prompts ([`crate::coopmat`], the same gathering).
pub(crate) fn record(batch: &mut Batch<'_>, core: &Core, call: Call, a: &Operand) -> Result<()> {
    use crate::coopmat::{Kind, kernel, record_experts};
    #[cfg(test)]
    RECORDED.with(|r| r.set(r.get() + 1));
    let call = match kernel(core, Kind::Experts) {
        Some(k) => match record_experts(batch, core, call, k, a)? {
            Some(refused) => refused,
            None => return Ok(()),
        },
        None => call,
    };
    let (m, experts) = (a.layout.ne[1], a.layout.ne[2]);
    let row_tiles = m.div_ceil(64);
    let groups = row_tiles
        .checked_mul(experts)
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT_ID workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    params.iu[3] = 0;
    params.iu2[1] = u32_of(row_tiles)?;
    call.record(
        batch,
        core,
        "mul_mat_id_q8_tiled",
        MATMUL_Q8_ID,
        params,
        groups,
    )
}
