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
//! 8) summed in f32, `shaders/matmul_coop.wgsl` takes those products,
//! and `shaders/matmul_coop_id.wgsl` a prompt's expert products where
//! [`crate::matmul_q8_id`] takes them (each expert's pairs gathered as
//! for its integer tiles): weights decoded as for the integer kernels,
//! activations as quantized for them, both staged as f16, both kernels by
//! the tile of `shaders/matmul_coop_tile.wgsl`.
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
//! Tessera's only code with them (the tile both kernels share) loads and
//! stores workgroup arrays only, at offsets [`in_bounds`] checks for every
//! tile position before the source is made.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use tessera::Result;

use crate::batch::Batch;
use crate::call::{Call, Operand};
use crate::device::Core;
use crate::pipelines::KernelKey;

env_switch!("TESSERA_WGPU_COOPMAT");

/// The side of the matrices the kernel takes on `adapter` (16 or 8: f16
/// inputs, f32 sums), where it has cooperative matrices, f16 shaders and
/// subgroups (the kernel names its subgroups): by default on hardware
/// adapters only (a software adapter emulates the matrices: lavapipe's
/// prompts ran 3x slower with them), `TESSERA_WGPU_COOPMAT=1` on any,
/// `TESSERA_WGPU_COOPMAT=0` on none (`big`: on any, with 128 x 128
/// tiles).
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
        // wgpu's contract for experimental features is that they are used
        // correctly; for cooperative matrices that means loads and stores in
        // bounds, which wgpu does not check. The only code using them is
        // `shaders/matmul_coop_tile.wgsl` (in both cooperative kernels),
        // which loads and stores workgroup
        // arrays of fixed size only, and `source` makes it only for tile
        // shapes and matrix sides whose every load and store `in_bounds`
        // has checked, position by position, lies inside those arrays.
        #[allow(unsafe_code)]
        // SAFETY: every cooperative load and store in bounds (above).
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

/// A workgroup's share of a product: a `tile` x `tile` block of dst,
/// `parts` subgroups computing `part_rows` x `part_cols` of it each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    tile: u32,
    parts: u32,
    part_rows: u32,
    part_cols: u32,
}

/// 64 x 64, four parts of 32 x 32 (the default).
pub(crate) const SMALL: Shape = Shape {
    tile: 64,
    parts: 4,
    part_rows: 32,
    part_cols: 32,
};

/// 128 x 128, eight parts of 64 x 32: each staged value feeds twice the
/// products (`TESSERA_WGPU_COOPMAT=big`; a quarter of the workgroups, so
/// fewer than a large GPU's multiprocessors for a 1B model's smaller
/// products: off until a GPU times it).
pub(crate) const BIG: Shape = Shape {
    tile: 128,
    parts: 8,
    part_rows: 64,
    part_cols: 32,
};

/// The staged arrays' row stride in vectors of 4 halves (the shader's
/// `LDV`): 32 values and 8 of padding, 80 bytes.
const LDV: u32 = 10;

impl Shape {
    /// Bytes of workgroup memory the kernel declares: two staged arrays
    /// of f16, one result matrix per part and a scale per column, f32;
    /// for MUL_MAT_ID also the gathering's (`gather_ids.wgsl`: a pair per
    /// column, a count per invocation of `wg`, the total).
    fn workgroup_bytes(self, side: u32, kind: Kind, wg: u32) -> u32 {
        let tile = 2 * 8 * self.tile * LDV + 4 * self.parts * side * side + 4 * self.tile;
        match kind {
            Kind::Products => tile,
            Kind::Experts => tile + 4 * self.tile + 4 * wg + 4,
        }
    }
}

/// What the kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// MUL_MAT (`shaders/matmul_coop.wgsl`).
    Products,
    /// MUL_MAT_ID, each expert's pairs gathered
    /// (`shaders/matmul_coop_id.wgsl`, [`crate::matmul_q8_id`]).
    Experts,
}

impl Kind {
    /// Its bit in [`Core::coop_refused`].
    fn bit(self) -> u8 {
        match self {
            Kind::Products => 1,
            Kind::Experts => 2,
        }
    }

    fn op(self) -> &'static str {
        match self {
            Kind::Products => "MUL_MAT",
            Kind::Experts => "MUL_MAT_ID",
        }
    }
}

/// Whether every cooperative load and store of the kernel in `shape` with
/// matrices of `side` stays inside its workgroup array, checked position
/// by position as the shader computes them: the A (B) matrices of part s
/// at rows (columns) `part_rows (s % (tile / part_rows)) + side i` and
/// value `kk` (a multiple of `side` below 32), `side` rows (columns) of
/// `side / 4` vectors of 4 halves at stride LDV from vector `row LDV + kk
/// / 4`, in arrays of `tile * LDV` vectors; the results at `s * side *
/// side`, `side * side` floats of `parts * side * side`.
fn in_bounds(shape: Shape, side: u32) -> bool {
    let Shape {
        tile,
        parts,
        part_rows,
        part_cols,
    } = shape;
    if !matches!(side, 8 | 16)
        || part_rows % side != 0
        || part_cols % side != 0
        || tile % part_rows != 0
        || (tile / part_rows) * (tile / part_cols) != parts
    {
        return false;
    }
    let staged = tile * LDV;
    let fits = |first: u32, kk: u32| {
        kk.is_multiple_of(4) && first * LDV + kk / 4 + (side - 1) * LDV + (side / 4 - 1) < staged
    };
    (0..parts).all(|s| {
        let (qr, qc) = (
            part_rows * (s % (tile / part_rows)),
            part_cols * (s / (tile / part_rows)),
        );
        (0..32 / side).all(|step| {
            let kk = side * step;
            (0..part_rows / side).all(|i| fits(qr + side * i, kk))
                && (0..part_cols / side).all(|i| fits(qc + side * i, kk))
        }) && (s + 1) * side * side <= parts * side * side
    })
}

/// The kernel `core`'s many-column integer products (of `kind`) take, and
/// its shape: where it was opened with cooperative matrices (unless a test
/// turned them off on this thread) and has a variant for them (the shape's
/// parts as subgroups of its largest size in a workgroup it allows, with
/// the workgroup memory it allows); the 64 tile where the 128 one does not
/// fit, and always for MUL_MAT_ID.
pub(crate) fn kernel(core: &Core, kind: Kind) -> Option<(&'static str, Shape)> {
    let (side, largest) = (core.coop_side?, core.largest_subgroup?);
    #[cfg(test)]
    let largest = tests::LARGEST.with(std::cell::Cell::get).unwrap_or(largest);
    #[cfg(test)]
    let side = tests::SIDE.with(std::cell::Cell::get).unwrap_or(side);
    let refused = core.coop_refused.load(Ordering::Relaxed) & kind.bit() != 0;
    if !switch_on(|| true) || largest == 0 || refused {
        return None;
    }
    #[cfg(test)]
    if tests::BROKEN.with(std::cell::Cell::get) == Some(kind) {
        return Some((tests::BROKEN_SOURCE, SMALL));
    }
    let fits = |shape: Shape| {
        let wg = shape.parts.checked_mul(largest)?;
        (wg <= core.limits.max_compute_invocations_per_workgroup
            && wg <= core.limits.max_compute_workgroup_size_x
            && shape.workgroup_bytes(side, kind, wg)
                <= core.limits.max_compute_workgroup_storage_size)
            .then_some(wg)
    };
    [BIG, SMALL]
        .into_iter()
        .filter(|&shape| shape == SMALL || (big_tiles() && kind == Kind::Products))
        .find_map(|shape| Some((source(shape, side, fits(shape)?, kind)?, shape)))
}

/// Whether the 128 x 128 tiles are taken (`TESSERA_WGPU_COOPMAT=big`, or
/// a test's choice on its thread).
fn big_tiles() -> bool {
    #[cfg(test)]
    if let Some(on) = tests::BIG_TILES.with(std::cell::Cell::get) {
        return on;
    }
    static BIG_ENV: OnceLock<bool> = OnceLock::new();
    *BIG_ENV.get_or_init(|| std::env::var("TESSERA_WGPU_COOPMAT").is_ok_and(|v| v.trim() == "big"))
}

/// The kernel's source of `kind` in `shape` for matrices of `side` and
/// workgroups of `wg` invocations: made once for each (a handful per
/// process) and kept, as the pipeline cache keys kernels by their
/// `'static` source; `None` where [`in_bounds`] does not hold.
fn source(shape: Shape, side: u32, wg: u32, kind: Kind) -> Option<&'static str> {
    type Sources = HashMap<(Shape, u32, u32, Kind), &'static str>;
    static SOURCES: OnceLock<Mutex<Sources>> = OnceLock::new();
    if !in_bounds(shape, side) {
        return None;
    }
    let mut sources = SOURCES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let made = sources.entry((shape, side, wg, kind)).or_insert_with(|| {
        let (main, gather) = match kind {
            Kind::Products => (include_str!("shaders/matmul_coop.wgsl"), String::new()),
            Kind::Experts => (
                include_str!("shaders/matmul_coop_id.wgsl"),
                format!(
                    "const GT: u32 = {wg}u;\nconst GMAX: u32 = {}u;\n{}",
                    shape.tile,
                    include_str!("shaders/gather_ids.wgsl")
                ),
            ),
        };
        let body = [include_str!("shaders/matmul_coop_tile.wgsl"), &gather, main]
            .concat()
            .replace("coop_mat_CSxCS", &format!("coop_mat{side}x{side}"));
        let Shape {
            tile,
            parts,
            part_rows,
            part_cols,
        } = shape;
        let text = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst CS: u32 = {side}u;\n\
             const BT: u32 = {tile}u;\nconst NSG: u32 = {parts}u;\nconst PR: u32 = {part_rows}u;\n\
             const PC: u32 = {part_cols}u;\nconst TR: u32 = {}u;\nconst TC: u32 = {}u;\n\
             const WG: u32 = {wg}u;\n{}{}{body}",
            part_rows / side,
            part_cols / side,
            include_str!("shaders/matmul_common.wgsl"),
            include_str!("shaders/mq_unit.wgsl"),
        );
        Box::leak(text.into_boxed_str())
    });
    Some(*made)
}

/// Record the product `dst = a^T b` whose `call` [`crate::matvec_q8`] set
/// up (as for [`crate::matmul_q8::record`]) with `kernel`, from
/// [`kernel`]; the call back (nothing recorded) where the device refuses
/// to compile the kernel (an experimental feature: a driver may fail where
/// no test ran), which also sends the device's later products to the
/// integer tiles, with one line on stderr.
pub(crate) fn record(
    batch: &mut Batch<'_>,
    core: &Core,
    call: Call,
    (body, shape): (&'static str, Shape),
    (a, dst): (&Operand, &Operand),
) -> Result<Option<Call>> {
    let Some(compiled) = compiled(core, &call, Kind::Products, body) else {
        return Ok(Some(call));
    };
    let (m, n) = (a.layout.ne[1], dst.layout.ne[1]);
    let tile = shape.tile as usize;
    let groups = m
        .div_ceil(tile)
        .checked_mul(n.div_ceil(tile))
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    #[cfg(test)]
    tests::RECORDED.with(|r| r.set(r.get() + 1));
    batch.dispatch(compiled, call.buffers, params, groups)?;
    Ok(None)
}

/// Record MUL_MAT_ID whose `call` [`crate::matmul_q8_id`] set up (as for
/// its integer kernel: `iu` = bytes, pairs, `ne11`) with `kernel`, from
/// [`kernel`] of [`Kind::Experts`]: a workgroup for each tile of rows of
/// each expert. The call back where the device refuses the kernel, as
/// [`record`].
pub(crate) fn record_experts(
    batch: &mut Batch<'_>,
    core: &Core,
    call: Call,
    (body, shape): (&'static str, Shape),
    a: &Operand,
) -> Result<Option<Call>> {
    let Some(compiled) = compiled(core, &call, Kind::Experts, body) else {
        return Ok(Some(call));
    };
    let row_tiles = a.layout.ne[1].div_ceil(shape.tile as usize);
    let groups = row_tiles
        .checked_mul(a.layout.ne[2])
        .ok_or_else(|| tessera::Error::Overflow("MUL_MAT_ID workgroups".into()))?;
    let mut params = call.params.items(groups)?;
    params.off2[2] = 0;
    params.iu[3] = 0;
    params.iu2[1] = crate::q8_scratch::u32_of(row_tiles)?;
    #[cfg(test)]
    tests::RECORDED.with(|r| r.set(r.get() + 1));
    batch.dispatch(compiled, call.buffers, params, groups)?;
    Ok(None)
}

/// The compiled kernel `body` of `kind` for `call`'s bindings; `None`
/// where the device refuses it, which also sends the device's later
/// products of that kind to the integer tiles, with one line on stderr.
fn compiled(
    core: &Core,
    call: &Call,
    kind: Kind,
    body: &'static str,
) -> Option<std::sync::Arc<crate::pipelines::Kernel>> {
    let key = KernelKey {
        name: match kind {
            Kind::Products => "mul_mat_coop",
            Kind::Experts => "mul_mat_id_coop",
        },
        body,
        bindings: call.bindings.clone(),
    };
    match core.pipelines.kernel(&core.device, &core.errors, &key) {
        Ok(k) => Some(k),
        Err(e) => {
            if core.coop_refused.fetch_or(kind.bit(), Ordering::Relaxed) & kind.bit() == 0 {
                eprintln!(
                    "tessera-wgpu: {}: the cooperative-matrix {} kernel did not compile ({e}); \
                     the integer kernels take its products",
                    core.name,
                    kind.op()
                );
            }
            None
        }
    }
}

#[cfg(test)]
#[path = "coopmat_tests.rs"]
mod tests;
