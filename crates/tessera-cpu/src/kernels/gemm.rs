//! MUL_MAT with many columns: a cache-blocked, packed GEMM. Weight panels
//! are converted while packing, once per weight and shared by every column:
//!
//! - **f32 path** (every weight type, every ISA): panels are dequantized to
//!   f32 and a register-tiled FMA micro-kernel (`gemm_avx2`, `gemm_avx512`,
//!   `gemm_portable`) multiplies them with f32 activations. Precision: the
//!   weights are ggml's `to_float` values, activations stay f32, sums are
//!   f32 — tighter than ggml, which quantizes the activations.
//! - **integer path** (`gemm_q8`; every quantized type with AVX-512 VNNI
//!   in `gemm_vnni`, all but Q8_0, IQ4_NL and IQ4_XS with plain AVX2 in
//!   `gemm_q8_avx2`):
//!   weights stay 8-bit codes, activations are quantized to 8 bits per 32
//!   values (like ggml's Q8_0), and `vpdpbusd` (64 multiply-adds per
//!   instruction) or `vpmaddubsw` sums byte products exactly per sub-block.
//!   Same error class as ggml's quantized path.
//!
//! `dst[i, j, i12, i13] = sum_l a[l, i, i12 / r2, i13 / r3] * b[l, j, i12, i13]`,
//! viewed per weight matrix `p = (i02, i03)` as `C = A B` with `A` its `m x k`
//! rows and `B` the `ncol = n * r2 * r3` columns (`b` rows) that use it.
//!
//! **Blocking** (BLIS-style, [`KC`] x `MC`, see `gemm_driver`): B columns
//! are packed into `NR`-wide panels over all of `k` in shared scratch (all
//! threads pack; one barrier), in blocks of at most `BP_CAP` bytes. Then the
//! threads take *units* — (matrix, up to `MC` rows, a range of column
//! panels) — from a shared counter, so a descheduled thread does not hold
//! the others back. For each `KC` slice of `k` a unit packs its rows into
//! per-thread `MR`-row A panels (L2-resident), prefetching the next slice's
//! weights, and runs the micro-kernel on every (B panel, A panel) pair: the
//! B panel stays in L1 while the A panels stream from L2. Output tiles are
//! written on the first slice and accumulated on the others; each output
//! element belongs to one unit.
//!
//! [`applies`] says when this path is used instead of the per-row dot
//! products of [`super::matmul`]: valid operands with enough columns per
//! weight matrix for the packing to pay (measured, see `min_cols`).

use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{DType, Error, Layout, MUL_MAT_WEIGHT_TYPES, Result};

use super::NodeCtx;
use super::gemm_driver::Plan;
use super::gemm_pack::{KernelFn, Kernels, MR_MAX};
use super::gemm_q8::{Q8Kernels, QB, QKernelFn, b_group_bytes, sub_size, sym_offset};
use super::gemm_sb::{Sb, sb_kind};
use crate::isa::Isa;
use crate::repack::Packing;

/// Values of `k` per slice (a multiple of every block size: 256).
pub(crate) const KC: usize = 256;
/// Values of `k` per slice on the integer paths (codes are one byte a
/// value, so a unit's A panels take a quarter of the f32 path's bytes per
/// value): each output tile is loaded and stored once per slice, and with
/// `m` a power of two its columns are 4-16 KiB apart, all in one set of an
/// 8-way L1 (Zen 4's 32 KiB): at 256 those loads and stores took 16 % of a
/// Q4_K `n = 512` product there, at 512 half as many. Fits the A buffer
/// (codes in its first half, scales in its second, see `gemm_driver`), the
/// conversion rows and the zero row (checked below).
pub(crate) const KC_Q: usize = 512;
const _: () = {
    assert!(KC_Q.is_multiple_of(KC));
    assert!(MC * KC_Q <= AP_BYTES / 2);
    // Scales: two f32 per row and sub-block of at least 16 values.
    assert!(MC * (KC_Q / 16) * 2 * 4 <= AP_BYTES / 2);
    // Byte codes of a row in a conversion row (`KC` f32) and the zero row.
    assert!(KC_Q <= KC * 4);
};
/// Most weight rows per unit (a multiple of every `MR`): the A panels of a
/// unit, `MC * KC * 4` bytes, stay in L2.
pub(crate) const MC: usize = 256;
/// Most bytes of packed B at a time; larger products pack B in blocks (the
/// unit tests use a small cap to cover the block loop).
const BP_CAP: usize = if cfg!(test) { 64 << 10 } else { 64 << 20 };
/// A cache line.
pub(crate) const LINE: usize = 64;

/// Should MUL_MAT of weights `a` by activations `b` use the GEMM on a
/// stream running `isa`'s kernels?
pub fn applies(a: &Layout, b: &Layout, isa: Isa) -> bool {
    check(a, b).is_ok() && cols_per_matrix(a, b) >= min_cols(a.dtype, isa)
}

/// Scratch bytes the GEMM needs for `a x b` on `nth` threads (enough for
/// every path and kernel set), `usize::MAX` on overflow.
pub fn scratch_size(a: &Layout, b: &Layout, nth: usize) -> usize {
    all_paths(a.dtype)
        .into_iter()
        .map(|p| Sizes::new(a, b, nth, &p).map_or(usize::MAX, |s| s.total))
        .max()
        .unwrap_or(usize::MAX)
}

/// Scratch bytes for `a x b` on `nth` threads when `a` is repacked
/// ([`crate::repack`]: every width of every packed kernel set),
/// `usize::MAX` on overflow.
pub fn packed_scratch_size(a: &Layout, b: &Layout, nth: usize) -> usize {
    let direct = super::gemm_packed::all()
        .flat_map(|ks| ks.nr.iter().zip(ks.kernel))
        .map(|(&nr, kernel)| Path::Packed {
            kernel,
            nr,
            quad: None,
        });
    let vnni = super::gemm_vnni::kernels(Isa::best()).into_iter();
    let panels = vnni.flat_map(|qk| {
        qk.nr
            .iter()
            .zip(qk.kernel[0])
            .map(|(&nr, kernel)| Path::Q8 {
                qk,
                kernel,
                nr,
                s: QB,
                sb: None,
                sym: None,
            })
    });
    direct
        .chain(panels)
        .map(|p| Sizes::new(a, b, nth, &p).map_or(usize::MAX, |s| s.total))
        .max()
        .unwrap_or(usize::MAX)
}

/// Compute this thread's share of `dst = a^T b` (every thread of the node
/// calls it; threads wait on the same barriers whatever happens).
pub fn mul_mat(ctx: &NodeCtx) -> Result<()> {
    // Validation depends only on the node, never on `ith`: every thread gets
    // the same answer, so on failure no thread waits on a barrier.
    let plan = Plan::new(ctx)?;
    plan.run(ctx);
    Ok(())
}

/// [`set_min_cols_override`]'s value plus one (0: none).
static MIN_COLS_OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Process-wide: use the GEMM from `cols` columns per weight matrix on
/// (`None`: the measured per-type default). For benchmarks that compare the
/// GEMM with the dot-product path on the same shapes; change it only while
/// no graph is planned or computed (scratch sizing and the kernel must
/// agree).
#[doc(hidden)]
pub fn set_min_cols_override(cols: Option<usize>) {
    let v = cols.map_or(0, |c| c.saturating_add(1));
    MIN_COLS_OVERRIDE.store(v, Ordering::Relaxed);
}

/// Columns per weight matrix from which the GEMM beats the dot products
/// (measured with `benches/gemm.rs` at m = 4096, k = 14336, 2 threads, on
/// a Xeon with AVX-512 VNNI, and with `TESSERA_CPU_ISA=avx2`). The integer
/// path packs cheaply (byte codes, 4 per transposed lane) and wins from 8
/// (VNNI) or 8-10 (AVX2) columns; f32 panels pay a dequantize-and-transpose
/// per weight, which the dot products (no packing) beat up to about 20
/// columns for the float types and 24-40 for quantized types without an
/// integer kernel. Depends on the dot-product path too: re-measure when
/// either changes.
pub(crate) fn min_cols(t: DType, isa: Isa) -> usize {
    if let Some(v) = MIN_COLS_OVERRIDE.load(Ordering::Relaxed).checked_sub(1) {
        return v;
    }
    if let Some(v) = crate::tuning::gemm_from(t) {
        return v;
    }
    // The kernels the stream's family and the tuning allow decide (scratch
    // sizing and dispatch are both given the stream's family, so they
    // agree): an AVX2 stream on an AVX-512 CPU measures what an AVX2 CPU
    // runs.
    let best = crate::tuning::gemm_isa(t, isa.at_most_available());
    let int_ok = crate::tuning::gemm_int(t);
    let vnni = int_ok && super::gemm_vnni::kernels(best).is_some_and(|k| k.types.contains(&t));
    let int = int_ok && int_kernels(t, best).is_some();
    match t {
        // Q8_0's VNNI dot-product tile matches the GEMM up to 8 columns.
        DType::Q8_0 if vnni => 9,
        // The AVX2 dot products of Q2_K and Q3_K (16-value sub-blocks)
        // beat the VNNI GEMM up to 8 and 12 columns (`tessera bench tune`,
        // Xeon with AVX-512 VNNI, 2 threads).
        DType::Q2K if vnni => 12,
        DType::Q3K if vnni => 16,
        _ if vnni => 8,
        DType::Q6K if int => 8,
        _ if int => 10,
        DType::F32 | DType::F16 | DType::BF16 => 20,
        DType::Q8_0 => 24,
        _ => 40,
    }
}

/// Columns (rows of `b`) multiplied by each weight matrix.
pub(crate) fn cols_per_matrix(a: &Layout, b: &Layout) -> usize {
    let r2 = b.ne[2].checked_div(a.ne[2]).unwrap_or(0);
    let r3 = b.ne[3].checked_div(a.ne[3]).unwrap_or(0);
    b.ne[1].saturating_mul(r2).saturating_mul(r3)
}

/// Operand checks (the same as the dot-product path's).
pub(crate) fn check(a: &Layout, b: &Layout) -> Result<()> {
    let bad = |why: String| Err(Error::op("MUL_MAT", why));
    if !MUL_MAT_WEIGHT_TYPES.contains(&a.dtype) || a.dtype == DType::Q8K || a.dtype.is_int() {
        return bad(format!("weights of type {} are not supported", a.dtype));
    }
    if b.dtype != DType::F32 {
        return bad(format!("activations must be f32, not {}", b.dtype));
    }
    if a.ne[0] != b.ne[0] {
        return bad(format!("a {a} and b {b} differ in row length"));
    }
    if !a.ne[0].is_multiple_of(a.dtype.block_size()) {
        return bad(format!("a {a}: rows are not whole {} blocks", a.dtype));
    }
    if a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
    {
        return bad(format!("a {a} cannot be broadcast over b {b}"));
    }
    if !a.is_contiguous_rows() {
        return bad(format!("a {a} must have contiguous rows"));
    }
    a.checked_nbytes()?;
    b.checked_nbytes()?;
    Ok(())
}

/// Which panels and micro-kernel a product uses.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Path {
    /// Weights dequantized to f32 panels, f32 activations.
    F32 {
        ks: &'static Kernels,
        kernel: KernelFn,
        nr: usize,
    },
    /// Weights as 8-bit codes, activations quantized; sub-blocks of `s`;
    /// activations per 256 values where `sb` says how ([`super::gemm_sb`]),
    /// else per 32, with B records of `c * sum q` where `sym` is `Some(c)`
    /// ([`super::gemm_q8`]'s constant offsets).
    Q8 {
        qk: &'static Q8Kernels,
        kernel: QKernelFn,
        nr: usize,
        s: usize,
        sb: Option<Sb>,
        sym: Option<i32>,
    },
    /// Repacked Q4_0 weights ([`crate::repack`]), read where they lie;
    /// activations as on the integer path (sub-blocks of 32).
    Packed {
        kernel: QKernelFn,
        nr: usize,
        /// One column over four panels at once (`nr == 1` only).
        quad: Option<super::gemm_packed::QuadFn>,
    },
}

impl Path {
    /// The path for weights of type `t` with `ncol` columns per matrix on
    /// `isa`: the integer one where the CPU has VNNI and `t` a sub-block
    /// layout, else f32 with AVX-512, AVX2 or portable kernels.
    pub(crate) fn choose(t: DType, ncol: usize, isa: Isa, packing: Packing) -> Path {
        if packing != Packing::Standard {
            // Many columns: panels unpacked from the weights for the VNNI
            // kernels (see `gemm_packed`).
            if ncol > super::gemm_packed::DIRECT_MAX_COLS
                && let Some(qk) = super::gemm_vnni::kernels(isa)
            {
                return Path::per_block(qk, t, QB, narrow(qk.nr, ncol));
            }
            let ks = super::gemm_packed::kernels(isa);
            let i = super::gemm_packed::width(ks, ncol);
            return Path::Packed {
                kernel: ks.kernel[i],
                nr: ks.nr[i],
                quad: ks.quad.filter(|_| ks.nr[i] == 1),
            };
        }
        // `Avx512`: VNNI or AVX-512F kernels; `Avx2`: AVX2 ones; `Scalar`
        // (or a family the CPU lacks): the portable ones. The machine's
        // tuning may cap the family and keep the integer path off.
        let isa = crate::tuning::gemm_isa(t, isa);
        let int = crate::tuning::gemm_int(t)
            .then(|| int_kernels(t, isa))
            .flatten();
        if let Some((qk, s)) = int.and_then(|qk| Some((qk, (qk.sub)(t)?))) {
            if let Some(p) = Path::super_block(qk, t, s).filter(|_| crate::tuning::gemm_sb(t)) {
                return p;
            }
            return Path::per_block(qk, t, s, narrow(qk.nr, ncol));
        }
        let ks = f32_kernels(isa);
        let i = narrow(ks.nr, ncol);
        Path::F32 {
            ks,
            kernel: ks.kernel[i],
            nr: ks.nr[i],
        }
    }

    /// The integer path of `qk` with activations per 32 values for weights
    /// `t` (sub-blocks of `s`), at width `i`: the constant-offset kernels
    /// where `t` has one.
    fn per_block(qk: &'static Q8Kernels, t: DType, s: usize, i: usize) -> Path {
        let si = usize::from(s == 16);
        let sym = sym_offset(t);
        let kernels = if sym.is_some() {
            qk.kernel_sym
        } else {
            qk.kernel
        };
        Path::Q8 {
            qk,
            kernel: kernels[si][i],
            nr: qk.nr[i],
            s,
            sb: None,
            sym,
        }
    }

    /// The integer path of `qk` with activations per 256 values for weights
    /// `t` (sub-blocks of `s`), where `t` and the kernel set have it.
    fn super_block(qk: &'static Q8Kernels, t: DType, s: usize) -> Option<Path> {
        let (kind, (sk, nr)) = (sb_kind(t)?, qk.sb?);
        Some(Path::Q8 {
            qk,
            kernel: sk(kind, s),
            nr,
            s,
            sb: Some(kind),
            sym: None,
        })
    }

    /// Rows per A panel.
    pub(crate) fn mr(&self) -> usize {
        match self {
            Path::F32 { ks, .. } => ks.mr,
            Path::Q8 { qk, .. } => qk.mr,
            Path::Packed { .. } => super::gemm_packed::MR,
        }
    }

    /// Columns per B panel.
    pub(crate) fn nr(&self) -> usize {
        match *self {
            Path::F32 { nr, .. } | Path::Q8 { nr, .. } | Path::Packed { nr, .. } => nr,
        }
    }

    /// Bytes of one packed B group over `k` values.
    fn group_bytes(&self, k: usize) -> Option<usize> {
        match *self {
            Path::F32 { nr, .. } => nr.checked_mul(k)?.checked_mul(4),
            Path::Q8 {
                nr, s, sb: None, ..
            } => b_group_bytes(k, nr, s),
            Path::Q8 {
                nr, s, sb: Some(_), ..
            } => super::gemm_sb::b_group_bytes(k, nr, s),
            Path::Packed { nr, .. } => b_group_bytes(k, nr, QB),
        }
    }
}

/// The f32 micro-kernels for `isa`: AVX-512, AVX2 or portable (the best
/// family both `isa` and the CPU have).
pub(crate) fn f32_kernels(isa: Isa) -> &'static Kernels {
    match (
        super::gemm_avx512::kernels(isa),
        super::gemm_avx2::kernels(),
    ) {
        (Some(k), _) => k,
        (_, Some(k)) if isa.has_avx2() => k,
        _ => &super::gemm_portable::KERNELS,
    }
}

/// Every path (each width of each kernel set) weights of type `t` may take
/// on this CPU, for scratch sizing.
fn all_paths(t: DType) -> Vec<Path> {
    let mut v = Vec::new();
    let mut sets = vec![&super::gemm_portable::KERNELS];
    sets.extend(super::gemm_avx2::kernels());
    sets.extend(super::gemm_avx512::kernels(Isa::best()));
    for ks in sets {
        for (i, &nr) in ks.nr.iter().enumerate() {
            v.push(Path::F32 {
                ks,
                kernel: ks.kernel[i],
                nr,
            });
        }
    }
    let int = [
        super::gemm_vnni::kernels(Isa::best()),
        super::gemm_q8_avx2::kernels(),
    ];
    for qk in int.into_iter().flatten().filter(|k| k.types.contains(&t)) {
        let Some(s) = (qk.sub)(t) else { break };
        for i in 0..qk.nr.len() {
            v.push(Path::per_block(qk, t, s, i));
        }
        v.extend(Path::super_block(qk, t, s));
    }
    v
}

/// The integer kernel set for weights of type `t` on `isa`, if any: VNNI on
/// [`Isa::Avx512`], else the AVX2 one for the types it can take.
pub(crate) fn int_kernels(t: DType, isa: Isa) -> Option<&'static Q8Kernels> {
    sub_size(t)?;
    if !isa.has_avx2() {
        return None;
    }
    let sets = [
        super::gemm_vnni::kernels(isa),
        super::gemm_q8_avx2::kernels(),
    ];
    sets.into_iter().flatten().find(|k| k.types.contains(&t))
}

/// Which of two panel widths wastes the least work on `ncol` columns (the
/// narrow kernel is assumed 10 % slower per column).
fn narrow(nr: [usize; 2], ncol: usize) -> usize {
    let cost = |i: usize| ncol.div_ceil(nr[i]) * nr[i] * if i == 0 { 10 } else { 11 };
    usize::from(cost(1) < cost(0))
}

/// Sizes and scratch offsets of one product on one path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// B panels per weight matrix, in all, per packed block; blocks.
    pub gpm: usize,
    pub groups: usize,
    pub block_groups: usize,
    pub nblocks: usize,
    /// Bytes of one B panel group.
    pub group_bytes: usize,
    /// Offset of the packed B block (after one counter line per block).
    pub bp_off: usize,
    /// Offset of thread 0's buffers, and bytes per thread.
    pub thread_off: usize,
    pub per_thread: usize,
    /// Scratch bytes in all.
    pub total: usize,
}

/// Bytes of each thread's buffers: A panels, converted rows, zeros.
pub(crate) const AP_BYTES: usize = MC * KC * 4;
pub(crate) const TMP_BYTES: usize = MR_MAX * KC * 4;
pub(crate) const ZERO_BYTES: usize = KC * 4;

impl Sizes {
    pub(crate) fn new(a: &Layout, b: &Layout, nth: usize, path: &Path) -> Option<Sizes> {
        let k = a.ne[0];
        let nr = path.nr().max(1);
        let ncol = cols_per_matrix(a, b);
        let nmat = a.ne[2].checked_mul(a.ne[3])?;
        let gpm = ncol.div_ceil(nr);
        let groups = gpm.checked_mul(nmat)?;
        let group_bytes = path.group_bytes(k)?.checked_add(LINE - 1)? / LINE * LINE;
        let block_groups = BP_CAP
            .checked_div(group_bytes)
            .unwrap_or(groups)
            .clamp(1, groups.max(1));
        let nblocks = groups.div_ceil(block_groups);
        let bp_off = nblocks.checked_mul(LINE)?;
        let bp_bytes = block_groups.checked_mul(group_bytes)?;
        let per_thread = AP_BYTES + TMP_BYTES + ZERO_BYTES;
        let thread_off = bp_off.checked_add(bp_bytes)?;
        let total = thread_off.checked_add(per_thread.checked_mul(nth.max(1))?)?;
        Some(Sizes {
            gpm,
            groups,
            block_groups,
            nblocks,
            group_bytes,
            bp_off,
            thread_off,
            per_thread,
            total,
        })
    }
}
