//! Cooperative matrices (tensor cores: NVIDIA, AMD RDNA3, Intel Arc; under
//! Vulkan `VK_KHR_cooperative_matrix`) for the many-column products of
//! quantized weights: prompts.
//!
//! Why: a prompt's products are matrix-matrix products, which GPUs with
//! matrix units run several times faster through them than through
//! per-invocation dot products; llama.cpp's Vulkan backend takes them
//! there, and its prompts ran 4x ours on an NVIDIA H200 with the integer
//! tiles of [`crate::matmul_q8`]. Where the adapter has wgpu's
//! `EXPERIMENTAL_COOPERATIVE_MATRIX` with f16 matrices of 16 x 16 (or 8 x
//! 8) summed in f32, `shaders/matmul_coop.wgsl` takes those products:
//! weights decoded as for the integer kernels, activations as quantized
//! for them, both staged as f16.
//!
//! **On by default where a GPU has it** (`TESSERA_WGPU_COOPMAT=0` opens
//! the device without it, for measuring; a software adapter, which
//! emulates the matrices, takes it only with `TESSERA_WGPU_COOPMAT=1`).
//! Tested on lavapipe from Mesa 26 (8 x 8 matrices;
//! `scripts/coopmat-check/`); CI's Mesa 22 has no cooperative matrices,
//! so there the integer tiles run.
//!
//! wgpu marks the feature experimental: a device with it is opened with
//! `ExperimentalFeatures::enabled()`, whose contract is that the shaders'
//! cooperative loads and stores stay in bounds (wgpu does not check them).
//! Tessera's only shader with them loads and stores workgroup arrays only,
//! at offsets [`in_bounds`] checks for every tile position before the
//! source is made.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tessera::Result;

use crate::batch::Batch;
use crate::device::Core;
use crate::encode::{Call, Operand};

env_switch!("TESSERA_WGPU_COOPMAT");

/// The side of the matrices the kernel takes on `adapter` (16 or 8: f16
/// inputs, f32 sums), where it has cooperative matrices, f16 shaders and
/// subgroups (the kernel names its subgroups): by default on hardware
/// adapters only (a software adapter emulates the matrices: lavapipe's
/// prompts ran 3x slower with them), `TESSERA_WGPU_COOPMAT=1` on any,
/// `TESSERA_WGPU_COOPMAT=0` on none.
pub(crate) fn side(adapter: &wgpu::Adapter) -> Option<u32> {
    let wanted = match std::env::var("TESSERA_WGPU_COOPMAT")
        .as_deref()
        .map(str::trim)
    {
        Ok("0") => false,
        Ok("1") => true,
        _ => adapter.get_info().device_type != wgpu::DeviceType::Cpu,
    };
    wanted.then(|| capable(adapter)).flatten()
}

/// The side the kernel would take on `adapter`, whatever the environment
/// says (reported in [`crate::AdapterSummary`]).
pub(crate) fn capable(adapter: &wgpu::Adapter) -> Option<u32> {
    if !adapter.features().contains(FEATURES) {
        return None;
    }
    pick(&adapter.cooperative_matrix_properties())
}

/// The largest square f16 x f16 -> f32 configuration of `props` the kernel
/// has a variant for.
fn pick(props: &[wgpu::wgt::CooperativeMatrixProperties]) -> Option<u32> {
    use wgpu::wgt::CooperativeScalarType as T;
    [16, 8].into_iter().find(|&s| {
        props.iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (s, s, s)
                && p.ab_type == T::F16
                && p.cr_type == T::F32
        })
    })
}

/// The features a device taking the kernel is opened with.
pub(crate) const FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);

/// Open a device on `adapter` with `features` and `limits`; with wgpu's
/// consent to experimental features where `features` has cooperative
/// matrices (the only experimental feature Tessera asks for).
pub(crate) fn request(
    adapter: &wgpu::Adapter,
    features: wgpu::Features,
    limits: wgpu::Limits,
) -> std::result::Result<(wgpu::Device, wgpu::Queue), wgpu::RequestDeviceError> {
    let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        #[allow(unsafe_code)]
        // SAFETY: wgpu's contract for experimental features is that they are
        // used correctly; for cooperative matrices that means loads and
        // stores in bounds, which wgpu does not check. The only shader using
        // them is `shaders/matmul_coop.wgsl`, which loads and stores
        // workgroup arrays of fixed size only, and `source` makes it only
        // for matrix sides whose every load and store `in_bounds` has
        // checked lies inside those arrays.
        unsafe {
            wgpu::ExperimentalFeatures::enabled()
        }
    } else {
        wgpu::ExperimentalFeatures::disabled()
    };
    let desc = wgpu::DeviceDescriptor {
        label: Some("tessera"),
        required_features: features,
        required_limits: limits,
        experimental_features: experimental,
        ..Default::default()
    };
    pollster::block_on(adapter.request_device(&desc))
}

/// The kernel `core`'s many-column integer products take, where it was
/// opened with cooperative matrices (unless a test turned them off on
/// this thread) and has a variant for them: four subgroups of its largest
/// size in a workgroup of at most 256.
pub(crate) fn kernel(core: &Core) -> Option<&'static str> {
    let (side, largest) = (core.coop_side?, core.largest_subgroup?);
    #[cfg(test)]
    let largest = tests::LARGEST.with(std::cell::Cell::get).unwrap_or(largest);
    #[cfg(test)]
    let side = tests::SIDE.with(std::cell::Cell::get).unwrap_or(side);
    if !switch_on(|| true) || largest > 64 {
        return None;
    }
    source(side, 4 * largest.max(1))
}

/// Rows and columns of a workgroup's tile.
const TILE: usize = 64;
/// The staged arrays' row stride, in halves (the shader's `LDK`).
const LDK: u32 = 40;
/// Halves in each staged array (`sa`, `sb`).
const STAGED: u32 = 2560;
/// Floats in the results' array (`sc`).
const RESULTS: u32 = 1024;

/// Whether every cooperative load and store of the kernel with matrices
/// of `side` stays inside its workgroup array: loads from rows `32 q + side
/// i` (q < 2, i < 32 / side) at `kk` (a multiple of `side` below 32), each
/// `side` rows of `side` halves at stride LDK; stores of `side * side`
/// floats at `s * side * side` (s < 4).
fn in_bounds(side: u32) -> bool {
    let tiles = 32 / side;
    let last_row = 32 + side * (tiles - 1) + (side - 1);
    let last_k = (32 - side) + (side - 1);
    side.is_power_of_two()
        && (8..=16).contains(&side)
        && last_row * LDK + last_k < STAGED
        && 4 * side * side <= RESULTS
}

/// The kernel's source for matrices of `side` and workgroups of `wg`
/// invocations: made once per pair (a handful per process) and kept, as
/// the pipeline cache keys kernels by their `'static` source.
fn source(side: u32, wg: u32) -> Option<&'static str> {
    static SOURCES: OnceLock<Mutex<HashMap<(u32, u32), &'static str>>> = OnceLock::new();
    if !in_bounds(side) {
        return None;
    }
    let mut sources = SOURCES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let made = sources.entry((side, wg)).or_insert_with(|| {
        let body = include_str!("shaders/matmul_coop.wgsl")
            .replace("coop_mat_CSxCS", &format!("coop_mat{side}x{side}"));
        let text = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst CS: u32 = {side}u;\n\
             const TI: u32 = {}u;\nconst WG: u32 = {wg}u;\n{}{}{body}",
            32 / side,
            include_str!("shaders/matmul_common.wgsl"),
            include_str!("shaders/mq_unit.wgsl"),
        );
        Box::leak(text.into_boxed_str())
    });
    Some(*made)
}

/// Record the product `dst = a^T b` whose `call` [`crate::matvec_q8`] set
/// up (as for [`crate::matmul_q8::record`]) with `body`, from [`kernel`].
pub(crate) fn record(
    batch: &mut Batch<'_>,
    core: &Core,
    call: Call,
    body: &'static str,
    (a, dst): (&Operand, &Operand),
) -> Result<()> {
    let (m, n) = (a.layout.ne[1], dst.layout.ne[1]);
    let groups = m
        .div_ceil(TILE)
        .checked_mul(n.div_ceil(TILE))
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    #[cfg(test)]
    tests::RECORDED.with(|r| r.set(r.get() + 1));
    call.record(batch, core, "mul_mat_coop", body, params, groups)
}

#[cfg(test)]
#[path = "coopmat_tests.rs"]
mod tests;
