//! The row-group matrix-vector kernel (`shaders/matvec_rows.wgsl`): which
//! MUL_MAT nodes it takes and its compile-time shape.
//!
//! One-column products (decoding) are bound by how often the activations
//! are read, not by the weights: this kernel reads them as 16-byte vectors
//! once per unit and uses them for several rows. It needs src1's columns
//! contiguous F32 at 16-byte offsets (16-byte loads) and rows of whole
//! 16-value units of a type it decodes; anything else goes to the general
//! matrix-vector kernel.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tessera::{DType, Layout, Result};

use crate::device::Core;
use crate::params::{Params, u32_of};

/// Invocations per group of rows and rows per group, for one or more
/// columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    /// Up to 8 columns (else exactly one).
    many: bool,
    lanes: u32,
    rows: u32,
    /// 16-byte loads of the weights (F32; F16 and BF16 rows at multiples
    /// of 16 bytes) and of the activations.
    pub(crate) a4: bool,
    pub(crate) y4: bool,
    /// Every word of the weights' rows at a multiple of 4 bytes (one load
    /// a word).
    w4: bool,
    /// Sums by subgroups ([`crate::subgroups`]; `lanes` unused) or by
    /// trees.
    subgroups: bool,
}

/// Invocations per workgroup (`@workgroup_size(128)`).
const WORKGROUP: u32 = 128;

impl Variant {
    /// Output rows one workgroup computes: the trees' groups of `lanes`,
    /// or one group a subgroup at the device's smallest (the kernel reads
    /// it from `iu2.x`: [`Variant::params`]).
    pub(crate) fn rows_per_workgroup(&self, core: &Core) -> usize {
        let groups = if self.subgroups {
            crate::subgroups::rows_per_group(core, WORKGROUP)
        } else {
            WORKGROUP / self.lanes
        };
        (groups * self.rows) as usize
    }

    /// Set what the kernel reads of its shape in `params`.
    pub(crate) fn params(&self, core: &Core, params: &mut Params) -> Result<()> {
        params.iu2[0] = u32_of(self.rows_per_workgroup(core), "rows a workgroup")?;
        Ok(())
    }

    /// The kernel's source (made once per variant).
    pub(crate) fn body(&self) -> &'static str {
        // The text depends on these; the vector loads only on the bindings.
        type Text = (bool, u32, u32, bool, bool);
        static BODIES: OnceLock<Mutex<HashMap<Text, &'static str>>> = OnceLock::new();
        let mut bodies = BODIES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let key = (self.many, self.lanes, self.rows, self.w4, self.subgroups);
        bodies.entry(key).or_insert_with(|| {
            let src = format!(
                "const MV_COLS: u32 = {}u;\nconst MV_LANES: u32 = {}u;\nconst MV_R: u32 = {}u;\n\
                 const MV_W4: bool = {};\n{}{}{}",
                if self.many { 8 } else { 1 },
                self.lanes,
                self.rows,
                self.w4,
                include_str!("shaders/matmul_common.wgsl"),
                include_str!("shaders/matvec_rows.wgsl"),
                if self.subgroups {
                    include_str!("shaders/matvec_rows_subgroup.wgsl")
                } else {
                    include_str!("shaders/matvec_rows_tree.wgsl")
                },
            );
            // A few dozen variants (lanes x rows x columns x alignment x
            // reductions) at most.
            Box::leak(src.into_boxed_str())
        })
    }
}

/// The variant for a product of `a` (weights at byte `a_off`) and `cols`
/// columns of `b` (at byte `b_off`) on `core`, if this kernel takes it.
pub(crate) fn variant(
    core: &Core,
    a: &Layout,
    a_off: usize,
    b: &Layout,
    b_off: usize,
    cols: usize,
) -> Option<Variant> {
    let (lanes, rows) = shape(cols);
    if lanes == 0 {
        return None;
    }
    // One column of Q4_K/Q5_K: the general kernel's integer sums, scaled
    // once a sub-block, beat dequantizing every value (H100, 4096 x 14336:
    // 89 vs 105 us and 103 vs 120 us).
    if cols == 1 && !shape_set() && matches!(a.dtype, DType::Q4K | DType::Q5K) {
        return None;
    }
    let k = a.ne[0];
    let a16 = |x: usize| x.is_multiple_of(16);
    let b_ok = b.dtype == DType::F32
        && b.nb[0] == 4
        && a16(b_off)
        && (cols == 1 || a16(b.nb[1]))
        && a16(b.nb[2])
        && a16(b.nb[3]);
    let a_ok = k.is_multiple_of(16)
        && match a.dtype {
            // 16-byte loads of the rows themselves.
            DType::F32 => a.nb[0] == 4 && a16(a_off) && a.nb[1..].iter().all(|&s| a16(s)),
            DType::F16 | DType::BF16 => a.nb[0] == 2 && a_off.is_multiple_of(2),
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::IQ4NL
            | DType::Q2K
            | DType::Q3K
            | DType::Q4K
            | DType::Q5K
            | DType::Q6K
            | DType::IQ4XS => a.nb[0] == a.dtype.type_size(),
            _ => false,
        };
    let (a4, y4) = vector_loads();
    let a4b = |x: usize| x.is_multiple_of(4);
    // Words at multiples of 4 everywhere: rows and batches at multiples of
    // 4 bytes, and blocks whose size is one (element rows are whole units).
    let elements = matches!(a.dtype, DType::F32 | DType::F16 | DType::BF16);
    let w4 =
        a4b(a_off) && a.nb[1..].iter().all(|&s| a4b(s)) && (elements || a4b(a.dtype.type_size()));
    (a_ok && b_ok).then_some(Variant {
        many: cols > 1,
        lanes,
        rows,
        // F32 rows are 16-byte aligned (a_ok); F16/BF16 rows where they are.
        a4: a4
            && (a.dtype == DType::F32
                || (matches!(a.dtype, DType::F16 | DType::BF16)
                    && a16(a_off)
                    && a.nb[1..].iter().all(|&s| a16(s)))),
        y4,
        w4,
        subgroups: crate::subgroups::on(core),
    })
}

/// Whether F32 weights (and F16/BF16 rows at multiples of 16 bytes) and
/// the activations are read as 16-byte vectors
/// (the default), or only the activations (`TESSERA_WGPU_MV_V4=y`), or
/// neither (`none`), for measuring one against another.
fn vector_loads() -> (bool, bool) {
    static SET: OnceLock<(bool, bool)> = OnceLock::new();
    *SET.get_or_init(|| {
        match std::env::var("TESSERA_WGPU_MV_V4")
            .as_deref()
            .map(str::trim)
        {
            Ok("none") => (false, false),
            Ok("y") => (false, true),
            _ => (true, true),
        }
    })
}

/// (invocations per group, rows per group) for `cols` columns; (0, 0): not
/// this kernel. `TESSERA_WGPU_MV=lanes,rows` overrides the defaults (`off`:
/// the general kernel), for measuring one against another.
///
/// The defaults, measured on an NVIDIA H100 (4096 x 14336, every weight
/// type, GPU time per product): one column, 64 invocations on one row
/// (Q4_0 82 us, Q8_0 84, F16 85, IQ4_NL 103; two rows a group 86, 90, 86,
/// 159; the general kernel 129, 139, 219, 132); up to 8 columns, 64
/// invocations on two rows (Q4_0 307 us, F16 329 against the general
/// kernel's 943 and 1072).
fn shape(cols: usize) -> (u32, u32) {
    let (lanes, rows) =
        SET.get_or_init(read_shape)
            .unwrap_or(if cols > 1 { (64, 2) } else { (64, 1) });
    // The shared partials hold at most 16 (row, column) pairs a group.
    let max_rows = if cols > 1 { 2 } else { 4 };
    (lanes, rows.min(max_rows))
}

static SET: OnceLock<Option<(u32, u32)>> = OnceLock::new();

/// `TESSERA_WGPU_MV`, if set and well-formed.
fn read_shape() -> Option<(u32, u32)> {
    let v = std::env::var("TESSERA_WGPU_MV").ok()?;
    if v.trim() == "off" {
        return Some((0, 0));
    }
    let (l, r) = v.split_once(',')?;
    let l: u32 = l.trim().parse().ok()?;
    let r: u32 = r.trim().parse().ok()?;
    ([32, 64, 128].contains(&l) && [1, 2, 4].contains(&r)).then_some((l, r))
}

/// Whether `TESSERA_WGPU_MV` chose the shape.
fn shape_set() -> bool {
    SET.get_or_init(read_shape).is_some()
}

#[cfg(test)]
#[path = "matvec_rows_tests.rs"]
mod tests;
