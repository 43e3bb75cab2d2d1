//! Which nodes the CPU device can compute: [`supports_op`].
//!
//! This is the placement oracle the scheduler trusts, and the executor's
//! gate before any kernel runs, so it is exact: it says yes to precisely the
//! type, shape and stride combinations the kernels handle. A node may come
//! from a deserialized graph rather than the validating builder, so nothing
//! is assumed: operand ids, extents, strides (element-aligned, and a result
//! that does not overlap itself) and the op's own shape rules are checked.
//! MUL_MAT and FLASH_ATTN_EXT defer to their kernels' own predicates.

use tessera::{DType, Graph, Layout, MAX_SRC, Op, TensorId};

use crate::kernels::elem::elem_align;
use crate::kernels::{attention, matmul, rope};

/// Can the CPU compute node `id` of `graph`? Leaves and views (RESHAPE,
/// VIEW, PERMUTE, TRANSPOSE) need no compute and are supported.
pub fn supports_op(graph: &Graph, id: TensorId) -> bool {
    supports_op_memo(graph, id, &mut NoMemo)
}

/// Remembers which tensors' layouts passed the per-layout checks, so that a
/// compute checks each tensor once rather than once per use.
pub(crate) trait SaneMemo {
    /// The per-layout checks of tensor `id` (layout `l`) passed.
    fn sane(&mut self, id: TensorId, l: &Layout) -> bool;
}

/// No memory: check every time.
struct NoMemo;

impl SaneMemo for NoMemo {
    #[inline]
    fn sane(&mut self, _: TensorId, l: &Layout) -> bool {
        sane(l)
    }
}

/// [`supports_op`] with a memo of checked layouts.
pub(crate) fn supports_op_memo(graph: &Graph, id: TensorId, memo: &mut impl SaneMemo) -> bool {
    let Some(node) = graph.nodes().get(id.index()) else {
        return false;
    };
    if node.op.is_leaf() || node.op.is_view() {
        return true;
    }
    let mut src: [Option<&Layout>; MAX_SRC] = [None; MAX_SRC];
    for (slot, s) in src.iter_mut().zip(node.srcs.iter()) {
        if let Some(s) = s {
            match graph.nodes().get(s.index()) {
                Some(n) if memo.sane(*s, &n.layout) => *slot = Some(&n.layout),
                _ => return false,
            }
        }
    }
    let dst = &node.layout;
    memo.sane(id, dst) && dst.is_self_disjoint() && op_supported(&node.op, dst, &src)
}

/// `supports_op` on layouts: the op's rules for these operand layouts.
pub fn op_supported(op: &Op, d: &Layout, src: &[Option<&Layout>; MAX_SRC]) -> bool {
    let floats = |t: DType| t.is_float();
    match (op, src[0], src[1], src[2]) {
        (Op::Dup | Op::Cont, Some(a), _, _) => copy_ok(a, d),
        (Op::Cpy, Some(a), Some(b), _) => b == d && copy_ok(a, d),
        (Op::GetRows, Some(a), Some(ids), _) => get_rows_ok(a, ids, d),
        (Op::SetRows, Some(base), Some(rows), Some(ids)) => base == d && set_rows_ok(d, rows, ids),
        (Op::Add | Op::Mul | Op::Div | Op::Sub, Some(a), Some(b), _) => {
            floats(a.dtype)
                && d.dtype == a.dtype
                && (b.dtype == DType::F32 || b.dtype == a.dtype)
                && d.ne == a.ne
                && b.ne
                    .iter()
                    .zip(a.ne.iter())
                    .all(|(&nb, &na)| repeats(nb, na))
        }
        (Op::Scale { .. }, Some(a), _, _) => {
            a.dtype == DType::F32 && d.dtype == DType::F32 && a.ne == d.ne
        }
        (Op::Unary(_) | Op::Sqr | Op::Sqrt | Op::Clamp { .. }, Some(a), _, _) => {
            floats(a.dtype) && d.dtype == a.dtype && a.ne == d.ne
        }
        (Op::L2Norm { .. }, Some(a), _, _) => {
            a.dtype == DType::F32 && d.dtype == DType::F32 && a.ne == d.ne
        }
        (Op::Repeat, Some(a), _, _) => {
            tile_type(a.dtype)
                && d.dtype == a.dtype
                && a.ne.iter().zip(d.ne.iter()).all(|(&s, &t)| {
                    if s == 0 {
                        a.ne.contains(&0) && d.ne.contains(&0)
                    } else {
                        t.is_multiple_of(s)
                    }
                })
        }
        (Op::Pad { lp, rp }, Some(a), _, _) => {
            tile_type(a.dtype)
                && d.dtype == a.dtype
                && (0..4).all(|i| {
                    a.ne[i]
                        .checked_add(lp[i] as usize)
                        .and_then(|n| n.checked_add(rp[i] as usize))
                        == Some(d.ne[i])
                })
        }
        (Op::Argsort { .. } | Op::TopK, Some(a), _, _) => {
            a.dtype == DType::F32
                && d.dtype == DType::I32
                && (a.ne[0] <= 1 || a.nb[0] == 4)
                && (d.ne[0] <= 1 || d.nb[0] == 4)
                && d.ne[1..] == a.ne[1..]
                && i32::try_from(a.ne[0]).is_ok()
                && if matches!(op, Op::TopK) {
                    d.ne[0] >= 1 && d.ne[0] <= a.ne[0]
                } else {
                    d.ne[0] == a.ne[0]
                }
        }
        (Op::SwiGluOai { .. }, Some(a), Some(b), _) => {
            [a.dtype, b.dtype, d.dtype] == [DType::F32; 3] && a.ne == d.ne && b.ne == d.ne
        }
        (Op::Glu { .. }, Some(a), b, _) => {
            let same_type = floats(a.dtype) && d.dtype == a.dtype;
            match b {
                Some(b) => same_type && b.dtype == a.dtype && b.ne == a.ne && d.ne == a.ne,
                None => {
                    let mut half = a.ne;
                    half[0] /= 2;
                    same_type && a.ne[0].is_multiple_of(2) && d.ne == half
                }
            }
        }
        (Op::RmsNorm { .. } | Op::Norm { .. }, Some(a), _, _) => {
            a.dtype == DType::F32 && d.dtype == DType::F32 && a.ne == d.ne
        }
        (Op::SoftMax { .. }, Some(a), mask, sinks) => {
            a.dtype == DType::F32
                && d.dtype == DType::F32
                && a.ne == d.ne
                && sinks.is_none_or(|s| sinks_ok(s, a.ne[2]))
                && mask.is_none_or(|m| {
                    matches!(m.dtype, DType::F16 | DType::F32)
                        && m.ne[0] == a.ne[0]
                        && m.ne[1] >= a.ne[1]
                        && m.ne[2] > 0
                        && m.ne[3] > 0
                        && a.ne[2].is_multiple_of(m.ne[2])
                        && a.ne[3].is_multiple_of(m.ne[3])
                })
        }
        (Op::Rope(p), Some(a), Some(pos), ff) => {
            matches!(a.dtype, DType::F32 | DType::F16)
                && d.dtype == a.dtype
                && d.ne == a.ne
                && a.nb[0] == a.dtype.type_size()
                && d.nb[0] == d.dtype.type_size()
                && pos.dtype == DType::I32
                && rope::multi_fits(p, a.ne, pos.ne[0])
                && ff.is_none_or(|f| f.dtype == DType::F32 && f.ne[0] >= p.n_pairs())
        }
        (Op::Concat { dim }, Some(a), Some(b), _) => {
            let dim = usize::from(*dim);
            dim < 4
                && !d.dtype.is_quantized()
                && a.dtype == d.dtype
                && b.dtype == d.dtype
                && (0..4).all(|i| {
                    if i == dim {
                        a.ne[i].checked_add(b.ne[i]) == Some(d.ne[i])
                    } else {
                        a.ne[i] == d.ne[i] && b.ne[i] == d.ne[i]
                    }
                })
        }
        (Op::Argmax, Some(a), _, _) => {
            a.dtype == DType::F32
                && d.dtype == DType::I32
                && a.ne[2] == 1
                && a.ne[3] == 1
                && d.ne == [a.ne[1], 1, 1, 1]
                && i32::try_from(a.ne[0]).is_ok()
        }
        (Op::SumRows, Some(a), _, _) => {
            a.dtype == DType::F32 && d.dtype == DType::F32 && d.ne == [1, a.ne[1], a.ne[2], a.ne[3]]
        }
        (Op::MulMat, Some(a), Some(b), _) => {
            d.dtype == DType::F32
                && d.ne == [a.ne[1], b.ne[1], b.ne[2], b.ne[3]]
                && matmul::mul_mat_supported(a, b)
        }
        (Op::MulMatId, Some(a), Some(b), Some(ids)) => {
            d.dtype == DType::F32
                && d.ne == [a.ne[1], ids.ne[0], b.ne[2], 1]
                && matmul::id::mul_mat_id_supported(a, b, ids)
        }
        (Op::AddId, Some(a), Some(b), Some(ids)) => {
            a.dtype == DType::F32
                && b.dtype == DType::F32
                && ids.dtype == DType::I32
                && d.dtype == DType::F32
                && d.ne == a.ne
                && a.ne[0] == b.ne[0]
                && a.ne[1] == ids.ne[0]
                && a.ne[2] == ids.ne[1]
                && a.ne[3] == 1
                && b.ne[2] == 1
                && b.ne[3] == 1
                && ids.ne[2] == 1
                && ids.ne[3] == 1
                && (a.ne[0] <= 1 || (a.nb[0] == 4 && b.nb[0] == 4))
                && i32::try_from(b.ne[1]).is_ok()
        }
        (Op::FlashAttnExt { .. }, Some(q), Some(k), Some(v)) => {
            d.dtype == DType::F32
                && d.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]
                && attention::flash_attn_supported(q, k, v, src[3])
                && src[4].is_none_or(|s| sinks_ok(s, q.ne[2]))
        }
        _ => false,
    }
}

/// Attention sinks: a contiguous F32 vector of one logit per head.
fn sinks_ok(s: &Layout, n_head: usize) -> bool {
    s.dtype == DType::F32 && s.ne == [n_head, 1, 1, 1] && s.is_contiguous()
}

/// An extent `nb` repeats a whole number of times in `na` (no division in
/// the common cases: equal, or broadcast from 1).
fn repeats(nb: usize, na: usize) -> bool {
    nb == na || nb == 1 || (nb != 0 && na.is_multiple_of(nb))
}

/// Types REPEAT and PAD copy (2- and 4-byte elements).
fn tile_type(t: DType) -> bool {
    matches!(t, DType::F32 | DType::F16 | DType::BF16 | DType::I32)
}

/// Quantized types the kernels convert to and from F32.
const QUANT: [DType; 12] = [
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
];

/// Rows of whole blocks, elements adjacent within a row.
fn rows_ok(l: &Layout) -> bool {
    l.is_contiguous_rows() && l.dtype.row_size(l.ne[0]).is_ok()
}

fn copy_ok(a: &Layout, d: &Layout) -> bool {
    let (s, t) = (a.dtype, d.dtype);
    if a.checked_nelements().ok() != d.checked_nelements().ok() || a.checked_nelements().is_err() {
        return false;
    }
    if s.is_quantized() || t.is_quantized() {
        let convertible = s == t
            || s == DType::F32 && QUANT.contains(&t)
            || QUANT.contains(&s) && t == DType::F32;
        return convertible && a.ne[0] == d.ne[0] && rows_ok(a) && rows_ok(d);
    }
    s == t || s.is_float() && t.is_float()
}

fn get_rows_ok(a: &Layout, ids: &Layout, d: &Layout) -> bool {
    let st = a.dtype;
    let typed = match st {
        DType::I32 => d.dtype == DType::I32 && rows_ok(a) && rows_ok(d),
        t if QUANT.contains(&t) => d.dtype == DType::F32 && rows_ok(a) && rows_ok(d),
        t => t.is_float() && d.dtype == DType::F32,
    };
    typed
        && ids.dtype == DType::I32
        && ids.ne[3] == 1
        && d.ne == [a.ne[0], ids.ne[0], ids.ne[1], ids.ne[2]]
        && a.ne[2] == ids.ne[1]
        && a.ne[3] == ids.ne[2]
}

fn set_rows_ok(d: &Layout, rows: &Layout, ids: &Layout) -> bool {
    let t = d.dtype;
    let typed = t.is_float() || QUANT.contains(&t) && rows_ok(d) && rows_ok(rows);
    typed
        && rows.dtype == DType::F32
        && matches!(ids.dtype, DType::I32 | DType::I64)
        && d.ne[0] == rows.ne[0]
        && d.ne[2] == rows.ne[2]
        && d.ne[3] == rows.ne[3]
        && ids.ne[0] == rows.ne[1]
        && ids.ne[1] > 0
        && ids.ne[2] > 0
        && ids.ne[3] == 1
        && rows.ne[2].is_multiple_of(ids.ne[1])
        && rows.ne[3].is_multiple_of(ids.ne[2])
}

/// Size computable, rows of whole blocks, strides of every dimension with
/// more than one element aligned for the element type.
#[inline]
pub(crate) fn sane(l: &Layout) -> bool {
    // A power of two: the stride test needs no division.
    let mask = elem_align(l.dtype) - 1;
    // `span_bytes` also checks that rows are whole blocks.
    span_bytes(l).is_some()
        && l.ne[0]
            .checked_mul(l.ne[1])
            .and_then(|n| n.checked_mul(l.ne[2]))
            .and_then(|n| n.checked_mul(l.ne[3]))
            .is_some()
        && (l.ne[0] <= 1 || l.nb[0] & mask == 0)
        && (l.ne[1] <= 1 || l.nb[1] & mask == 0)
        && (l.ne[2] <= 1 || l.nb[2] & mask == 0)
        && (l.ne[3] <= 1 || l.nb[3] & mask == 0)
        && (!l.dtype.is_quantized()
            || l.ne[0] <= l.dtype.block_size()
            || l.nb[0] == l.dtype.type_size())
}

/// [`Layout::checked_nbytes`] without its error value and, for plain types,
/// without a division (this runs for every tensor of every compute): the
/// bytes from the first element to one past the last, `None` on overflow or
/// rows of partial blocks.
#[inline]
pub fn span_bytes(l: &Layout) -> Option<usize> {
    if l.ne.contains(&0) {
        return Some(0);
    }
    let bs = l.dtype.block_size();
    let (mut bytes, first) = if bs == 1 {
        (l.dtype.type_size(), 0)
    } else if l.ne[0].is_multiple_of(bs) {
        // The last block of a row ends a block after its start (see
        // `Layout::checked_nbytes`); `ne[0] >= bs` here.
        let last = (l.ne[0] / bs - 1).checked_mul(l.nb[0])?;
        (last.checked_add(l.dtype.type_size())?, 1)
    } else {
        return None;
    };
    for i in first..4 {
        bytes = bytes.checked_add((l.ne[i] - 1).checked_mul(l.nb[i])?)?;
    }
    Some(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn span_bytes_is_checked_nbytes() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as usize
        };
        for t in tessera::dtype::ALL_DTYPES {
            for _ in 0..2000 {
                let big = next(4) == 0;
                let m = if big { u64::MAX } else { 600 };
                let ne = [next(m), next(5), next(4), next(3)];
                let nb = [next(m), next(m), next(1 << 20), next(m)];
                let l = Layout { dtype: t, ne, nb };
                assert_eq!(span_bytes(&l), l.checked_nbytes().ok(), "{l:?}");
            }
        }
    }

    #[test]
    fn misaligned_strides_are_not_sane() {
        let c = Layout::contiguous(DType::F32, &[3, 4]).unwrap();
        assert!(sane(&c));
        assert!(!sane(&Layout {
            nb: [4, 13, 52, 52],
            ..c
        }));
        // A stride of a single-element dimension does not matter.
        assert!(sane(&Layout {
            nb: [4, 12, 7, 7],
            ..c
        }));
    }
}
