//! FLASH_ATTN_EXT of prompts by blocks of query rows
//! (`shaders/attention_tiles.wgsl`).
//!
//! Why: the other kernels ([`crate::attention`]) give each query row a
//! workgroup that reads the whole cache, so a prompt of n tokens reads
//! every K and V row n times (Gemma 3 270M, 512 tokens: ~9 GB a prompt,
//! mostly from the GPU's caches). Here a workgroup takes 2048 / dv consecutive queries of
//! one head (8 for dv = 256, 16 for 128, 32 for 64) and reads each K and V
//! row once for all of them, as llama.cpp's Vulkan and CUDA kernels tile
//! their prompts.
//!
//! Taken for F16 caches of contiguous rows (as `attention_rows.wgsl`),
//! `dk` a multiple of 8 no larger than `dv`, `dv` 64, 128 or 256, at least
//! [`MIN_QUERIES`] queries, and 16 KiB of workgroup memory, except where
//! the row kernel splits a long cache over workgroups (fewer than 128
//! query rows over more than 768 keys: [`crate::attention`]);
//! `TESSERA_WGPU_FA_TILES=0` leaves prompts to the row kernels, for
//! measuring.

use tessera::{DType, Layout};

/// The kernel for dv = 64, 128 and 256 (the block's rows, 2048 / dv, and
/// the threads of a row, dv / 8, follow from it).
const TILES: [&str; 3] = [
    concat!(
        "const AT_DV: u32 = 64u;\n",
        include_str!("shaders/attention_common.wgsl"),
        include_str!("shaders/attention_tiles.wgsl")
    ),
    concat!(
        "const AT_DV: u32 = 128u;\n",
        include_str!("shaders/attention_common.wgsl"),
        include_str!("shaders/attention_tiles.wgsl")
    ),
    concat!(
        "const AT_DV: u32 = 256u;\n",
        include_str!("shaders/attention_common.wgsl"),
        include_str!("shaders/attention_tiles.wgsl")
    ),
];

/// Workgroup memory the kernel declares: the block's queries and a
/// round's scores, 2048 f32 each.
const WORKGROUP_BYTES: u32 = 2 * 2048 * 4;

/// Fewest queries (of a head) a prompt's attention takes the kernel from.
pub(crate) const MIN_QUERIES: usize = 8;

env_switch!("TESSERA_WGPU_FA_TILES");

/// The kernel for attention over caches `k`, `v` (at byte offsets `k_off`,
/// `v_off`) with queries `q`, and its workgroups; `None` where the row
/// kernels take it.
pub(crate) fn body_for(
    limits: &wgpu::Limits,
    q: &Layout,
    (k, k_off): (&Layout, usize),
    (v, v_off): (&Layout, usize),
) -> Option<(&'static str, usize)> {
    let words = |l: &Layout, off: usize| {
        l.dtype == DType::F16
            && l.nb[0] == 2
            && off.is_multiple_of(4)
            && l.nb[1..].iter().all(|b| b.is_multiple_of(4))
    };
    let (dk, dv) = (k.ne[0], v.ne[0]);
    let body = match dv {
        64 => TILES[0],
        128 => TILES[1],
        256 => TILES[2],
        _ => return None,
    };
    let fits = words(k, k_off)
        && words(v, v_off)
        && dk.is_multiple_of(8)
        && dk <= dv
        && q.ne[1] >= MIN_QUERIES
        && limits.max_compute_workgroup_storage_size >= WORKGROUP_BYTES
        && limits.max_compute_invocations_per_workgroup >= 256;
    if !fits || !switch_on(|| true) {
        return None;
    }
    let block = 2048 / dv;
    let groups = q.ne[1]
        .div_ceil(block)
        .saturating_mul(q.ne[2])
        .saturating_mul(q.ne[3]);
    Some((body, groups))
}

#[cfg(test)]
thread_local! {
    /// Dispatches of the kernel on this thread.
    pub(crate) static RECORDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
#[path = "attention_tiles_tests.rs"]
mod tests;
