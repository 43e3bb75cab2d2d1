//! Tessera's GPU device on [`wgpu`]: Vulkan, Metal and DX12 (never GL), with
//! WGSL compute kernels for every op of the conformance harness.
//!
//! - [`WgpuFamily`] enumerates adapters, [`register`] adds it to
//!   [`tessera::Registry::global`] and [`family()`] is the process-wide one;
//! - [`WgpuDevice`]: one logical device (props, buffer types,
//!   `supports_op`), [`WgpuBufferType`] / [`WgpuBuffer`] its device memory;
//! - [`WgpuStream`]: async transfers and graph compute on the device queue,
//!   [`WgpuEvent`]: queue submission indices;
//! - private: `errors` (every wgpu error becomes a [`tessera::Error`]),
//!   `staging` (byte-exact transfers), `batch`, `pipelines` (cached kernels),
//!   `wgsl` (typed accessors), `params`, `compute` (a graph range, in
//!   parts), `encode` (node to kernel), `fuse` (two nodes as one dispatch),
//!   `matvec_rows` / `matvec_q8` (few-column products) and
//!   `shaders/*.wgsl`;
//! - [`support`]: the exact `supports_op` oracle.
//!
//! See the crate's README for what runs and how it is tested.

// One unsafe block: the consent to wgpu's experimental cooperative
// matrices (`coopmat::request`, its promise written there).
#![deny(unsafe_code)]

#[macro_use]
mod switch;
#[macro_use]
mod kernel_source;

pub mod adapter;
mod attention;
mod attention_tiles;
mod batch;
mod binds;
pub mod buffer;
mod call;
mod compute;
mod coopmat;
pub mod device;
mod encode;
mod errors;
pub mod event;
pub mod family;
mod fuse;
mod fuse_moe;
mod fuse_pair;
mod fuse_rope;
mod fuse_router;
mod fuse_sandwich;
#[cfg(test)]
mod fused_quant_tests;
mod glu_products;
mod matmul_q8;
mod matmul_q8_id;
mod matvec_q8;
mod matvec_q8_id;
mod matvec_rows;
mod merge_products;
mod params;
mod pipelines;
mod q8_regions;
mod q8_scratch;
#[cfg(test)]
mod rounding_tests;
mod staging;
pub mod stream;
mod subgroups;
pub mod support;
#[cfg(test)]
mod tile_tests;
mod wgsl;

use std::sync::{Arc, OnceLock};

pub use adapter::AdapterSummary;
pub use buffer::{WgpuBuffer, WgpuBufferType};
pub use device::{DeviceOptions, WgpuDevice};
pub use event::WgpuEvent;
pub use family::WgpuFamily;
pub use stream::{HOST_PROFILE_LABEL, WgpuStream};

/// The process-wide family (adapters enumerated on first call).
pub fn family() -> Arc<WgpuFamily> {
    static FAMILY: OnceLock<Arc<WgpuFamily>> = OnceLock::new();
    FAMILY.get_or_init(|| Arc::new(WgpuFamily::new())).clone()
}

/// The first adapter's device for a unit test, or `None` (the test skips,
/// saying so) where there is none, unless `TESSERA_REQUIRE_GPU=1`.
#[cfg(test)]
pub(crate) fn test_device() -> Option<Arc<WgpuDevice>> {
    let d = family().wgpu_devices().into_iter().next();
    if d.is_none() {
        assert!(
            std::env::var("TESSERA_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "TESSERA_REQUIRE_GPU=1 but no adapter"
        );
        eprintln!("skipped: no wgpu adapter");
    }
    d
}

/// Whether a unit test runs the subgroup kernels ([`subgroups`]) on
/// `dev` as well as the trees: `[false, true]` where the device has
/// subgroup operations, else `[false]`. A software adapter (lavapipe, what
/// CI runs) must have them under `TESSERA_REQUIRE_GPU=1` (unless
/// `TESSERA_WGPU_SUBGROUPS=0`), so that CI tests both.
#[cfg(test)]
pub(crate) fn test_subgroup_variants(dev: &WgpuDevice) -> Vec<bool> {
    let has = dev.core().smallest_subgroup.is_some();
    if !has && dev.adapter().software {
        let off = std::env::var("TESSERA_WGPU_SUBGROUPS").is_ok_and(|v| v.trim() == "0");
        assert!(
            off || std::env::var("TESSERA_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "TESSERA_REQUIRE_GPU=1 and the software adapter has no subgroup operations"
        );
    }
    if has { vec![false, true] } else { vec![false] }
}

/// The kernel shapes a unit test runs on `dev`, as `(subgroups, rows a
/// workgroup)` ([`subgroups::force`], [`subgroups::force_rows`]): the
/// trees; and where the device has subgroups, its own rows, one row a
/// workgroup (as a device of 128-wide subgroups: the other subgroups
/// idle) and 32 (as one of 4-wide subgroups: each subgroup takes several
/// rows).
#[cfg(test)]
pub(crate) fn test_reduction_shapes(dev: &WgpuDevice) -> Vec<(bool, Option<u32>)> {
    let mut shapes = vec![(false, None)];
    if test_subgroup_variants(dev).contains(&true) {
        shapes.extend([(true, None), (true, Some(1)), (true, Some(32))]);
    }
    shapes
}

/// Run `f` with [`subgroups`] forced to `shape` on this thread.
#[cfg(test)]
pub(crate) fn with_reduction_shape<T>(shape: (bool, Option<u32>), f: impl FnOnce() -> T) -> T {
    subgroups::force(Some(shape.0));
    subgroups::force_rows(shape.1);
    let out = f();
    subgroups::force(None);
    subgroups::force_rows(None);
    out
}

/// Compute `g` (placed by `pl`) on `stream`, for unit tests: the
/// dispatches recorded.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_compute_counted(
    stream: &stream::WgpuStream,
    g: &tessera::Graph,
    pl: &tessera::Placement,
) -> u64 {
    use tessera::Stream as _;
    let before = batch::counts::now().0;
    stream.compute(g, pl).unwrap();
    batch::counts::now().0 - before
}

/// The F32 values of each of `outs` as their bits, for unit tests that
/// compare results bit for bit.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_bits(
    g: &tessera::Graph,
    pl: &tessera::Placement,
    outs: &[tessera::TensorId],
) -> Vec<Vec<u32>> {
    outs.iter()
        .map(|&t| {
            let v = pl.tensor(g, t).unwrap().read_f32().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

/// Values in [-1, 1) from `seed`, without end (a linear congruential
/// generator), for unit tests.
#[cfg(test)]
pub(crate) fn test_values(seed: u64) -> impl Iterator<Item = f32> {
    std::iter::successors(Some(seed), |s| {
        Some(
            s.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    })
    .skip(1)
    .map(|s| ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0)
}

/// `g` placed in `dev`'s memory, for unit tests (the allocator owns the
/// buffers: keep it while the placement is used).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_placement(
    dev: &WgpuDevice,
    g: &tessera::Graph,
) -> (tessera::Placement, tessera::GraphAllocator) {
    let mut pl = tessera::Placement::new(g);
    let mut galloc = tessera::GraphAllocator::new(tessera::Device::buffer_type(dev));
    galloc.alloc_graph(g, &mut pl).unwrap();
    (pl, galloc)
}

/// Add the process-wide [`family()`] to [`tessera::Registry::global`].
/// Calling it again does nothing.
pub fn register() {
    tessera::Registry::global().register(family());
}
