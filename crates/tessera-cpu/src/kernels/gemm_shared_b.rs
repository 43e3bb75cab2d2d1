//! Packed activations that consecutive GEMMs of one compute share.
//!
//! A transformer layer multiplies one input by Q, K and V, and another by
//! gate and up. On the GEMM path every product packs (and, on the integer
//! path, quantizes) its activations into B panels first; products of the
//! same activations on the same path pack the very same bytes. The
//! executor (`exec::tables`) groups such nodes by [`PackKey`]: the first
//! packs into a table of the compute's scratch, the others read it
//! instead of packing their own. Only products whose packed
//! B is one block (at most `BP_CAP` bytes) and whose weights are one 2-D
//! matrix are grouped.

use tessera::Layout;

use super::gemm::{Path, Sizes, applies};
use super::gemm_sb::Sb;
use crate::isa::Isa;
use crate::repack::Packing;

/// What makes two products' packed B the same bytes, the activations'
/// memory aside (the executor keys on that too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackKey {
    /// 0: f32 panels; 1: per-32 integer records; 2: super-block records;
    /// 3: the repacked weights' per-32 records.
    kind: u8,
    nr: usize,
    s: usize,
    sb: Option<Sb>,
    sym: Option<i32>,
    k: usize,
    ncol: usize,
}

/// The key and the bytes of the packed B of MUL_MAT `a x b` (weights
/// stored as `packing`) on `nth` threads running `isa`'s kernels, where
/// the product takes the GEMM path with one packed block; `None` where it
/// does not, or its B could not be shared.
pub(crate) fn pack_key(
    a: &Layout,
    packing: Packing,
    b: &Layout,
    nth: usize,
    isa: Isa,
) -> Option<(PackKey, usize)> {
    // The same choice as `matmul::mul_mat`'s.
    let gemm = packing != Packing::Standard || applies(a, b, isa);
    if !gemm || a.ne[2] * a.ne[3] != 1 || b.ne[2] * b.ne[3] != 1 {
        return None;
    }
    let ncol = b.ne[1];
    let path = Path::choose(a.dtype, ncol, isa, packing);
    let sizes = Sizes::new(a, b, nth, &path)?;
    if sizes.nblocks != 1 {
        return None;
    }
    let (kind, s, sb, sym) = match path {
        Path::F32 { .. } => (0, 0, None, None),
        Path::Q8 {
            s, sb: None, sym, ..
        } => (1, s, None, sym),
        Path::Q8 { s, sb: Some(k), .. } => (2, s, Some(k), None),
        Path::Packed { .. } => (3, 0, None, None),
    };
    let key = PackKey {
        kind,
        nr: path.nr(),
        s,
        sb,
        sym,
        k: a.ne[0],
        ncol,
    };
    Some((key, sizes.groups.checked_mul(sizes.group_bytes)?))
}
