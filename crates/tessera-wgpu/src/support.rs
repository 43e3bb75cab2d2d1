//! Which nodes the wgpu device computes: [`supports_op`], exactly what the
//! kernels of `encode` handle.
//!
//! It is the scheduler's placement oracle and the stream's gate before
//! encoding, so it checks everything a kernel relies on, for graphs that did
//! not come from the validating builder too: operand ids, sizes that fit the
//! kernels' 32-bit byte addressing, strides and view offsets aligned for the
//! element type (4-byte types on words, 2-byte types and quantized blocks on
//! half-words), a result that does not overlap itself, and the op's type and
//! shape rules.
//!
//! Not supported (the scheduler falls back to another device): I64 tensors
//! other than SET_ROWS ids (read as their low 32 bits), Q8_K, FLASH_ATTN_EXT with V rows longer than 512.

use tessera::{DType, Graph, Layout, MAX_SRC, Op, TensorId};

/// Quantized types the kernels read.
pub const QUANT_READ: [DType; 12] = [
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

/// Quantized types the kernels write (CPY and SET_ROWS from F32).
pub const QUANT_WRITE: [DType; 12] = QUANT_READ;

/// Longest V row of FLASH_ATTN_EXT (64 threads x 8 columns).
pub const FLASH_ATTN_MAX_DV: usize = 512;

/// Types REPEAT and PAD copy (raw 2- and 4-byte elements).
fn tile_type(t: DType) -> bool {
    matches!(t, DType::F32 | DType::F16 | DType::BF16 | DType::I32)
}

/// Can the wgpu device compute node `id` of `graph`? Leaves and views need
/// no kernel and are supported.
pub fn supports_op(graph: &Graph, id: TensorId) -> bool {
    let Ok(node) = graph.node(id) else {
        return false;
    };
    if node.op.is_leaf() || node.op.is_view() {
        return true;
    }
    let mut src: [Option<Layout>; MAX_SRC] = [None; MAX_SRC];
    for (slot, s) in src.iter_mut().zip(node.srcs.iter()) {
        if let Some(s) = s {
            match graph.node(*s) {
                Ok(n) if view_aligned(n.layout.dtype, n.view_offs) => *slot = Some(n.layout),
                _ => return false,
            }
        }
    }
    let dst = node.layout;
    if !view_aligned(dst.dtype, node.view_offs)
        || !sane(&dst)
        || !dst.is_self_disjoint()
        || !src.iter().flatten().all(sane)
    {
        return false;
    }
    op_supported(&node.op, &dst, &src)
}

/// The op's rules for these operand layouts.
pub fn op_supported(op: &Op, d: &Layout, src: &[Option<Layout>; MAX_SRC]) -> bool {
    let floats = |t: DType| t.is_float();
    match (op, src[0].as_ref(), src[1].as_ref(), src[2].as_ref()) {
        (Op::Dup | Op::Cont, Some(a), _, _) => copy_ok(a, d),
        (Op::Cpy, Some(a), Some(b), _) => b == d && copy_ok(a, d),
        (Op::GetRows, Some(a), Some(ids), _) => get_rows_ok(a, ids, d),
        (Op::SetRows, Some(base), Some(rows), Some(ids)) => base == d && set_rows_ok(d, rows, ids),
        (Op::Add | Op::Mul | Op::Div | Op::Sub, Some(a), Some(b), _) => {
            floats(a.dtype)
                && d.dtype == a.dtype
                && (b.dtype == DType::F32 || b.dtype == a.dtype)
                && d.ne == a.ne
                && (0..4).all(|i| {
                    if b.ne[i] == 0 {
                        a.ne[i] == 0
                    } else {
                        a.ne[i] % b.ne[i] == 0
                    }
                })
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
                && (0..4).all(|i| {
                    if a.ne[i] == 0 {
                        d.ne.contains(&0)
                    } else {
                        d.ne[i].is_multiple_of(a.ne[i])
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
                && d.ne[1..] == a.ne[1..]
                && i32::try_from(a.ne[0]).is_ok()
                && if matches!(op, Op::TopK) {
                    d.ne[0] >= 1 && d.ne[0] <= a.ne[0]
                } else {
                    d.ne[0] == a.ne[0]
                }
        }
        (Op::Glu { .. }, Some(a), b, _) => {
            let same_type = floats(a.dtype) && d.dtype == a.dtype;
            match b {
                Some(b) => same_type && b.dtype == a.dtype && b.ne == a.ne && d.ne == a.ne,
                None => {
                    let mut half = a.ne;
                    half[0] /= 2;
                    same_type && a.ne[0] % 2 == 0 && d.ne == half
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
                        && a.ne[2] % m.ne[2] == 0
                        && a.ne[3] % m.ne[3] == 0
                })
        }
        (Op::Rope(p), Some(a), Some(pos), ff) => {
            matches!(a.dtype, DType::F32 | DType::F16)
                && d.dtype == a.dtype
                && d.ne == a.ne
                && pos.dtype == DType::I32
                && rope_fits(p, a.ne, pos.ne[0])
                && ff.is_none_or(|f| f.dtype == DType::F32 && f.ne[0] >= p.n_pairs())
        }
        (Op::Concat { dim }, Some(a), Some(b), _) => {
            let dim = usize::from(*dim);
            dim < 4
                && matches!(d.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I32)
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
                && mul_mat_ok(a, b)
        }
        (Op::SwiGluOai { .. }, Some(a), Some(b), _) => {
            [a.dtype, b.dtype, d.dtype] == [DType::F32; 3] && a.ne == d.ne && b.ne == d.ne
        }
        (Op::MulMatId, Some(a), Some(b), Some(ids)) => {
            let mut one = *a;
            one.ne[2] = 1;
            d.dtype == DType::F32
                && d.ne == [a.ne[1], ids.ne[0], b.ne[2], 1]
                && mul_mat_ok(&one, b)
                && a.ne[3] == 1
                && b.ne[3] == 1
                && ids.dtype == DType::I32
                && ids.ne[1] == b.ne[2]
                && ids.ne[2] == 1
                && ids.ne[3] == 1
                && b.ne[1] > 0
                && ids.ne[0].is_multiple_of(b.ne[1])
                && i32::try_from(a.ne[2]).is_ok()
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
                && i32::try_from(b.ne[1]).is_ok()
        }
        (Op::FlashAttnExt { .. }, Some(q), Some(k), Some(v)) => {
            d.dtype == DType::F32
                && d.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]
                && flash_attn_ok(q, k, v, src[3].as_ref())
                && src[4].is_none_or(|s| sinks_ok(&s, q.ne[2]))
        }
        _ => false,
    }
}

/// Attention sinks: a contiguous F32 vector of one logit per head (read as
/// `s4`/`s2` at `4 * head` bytes).
fn sinks_ok(s: &Layout, n_head: usize) -> bool {
    s.dtype == DType::F32 && s.ne == [n_head, 1, 1, 1] && s.is_contiguous()
}

/// ROPE's `n_dims`, positions (four per token in the multi-section modes)
/// and sections, as the builder checks them.
fn rope_fits(p: &tessera::RopeParams, ne: [usize; 4], n_pos: usize) -> bool {
    let streams = if p.mode.is_multi() { 4 } else { 1 };
    let s = p.sections.map(u64::from);
    p.n_dims > 0
        && p.n_dims.is_multiple_of(2)
        && p.n_dims <= ne[0]
        && ne[2].checked_mul(streams).is_some_and(|n| n_pos >= n)
        && (!p.mode.is_multi() || (s[0] + s[1] + s[2] > 0 && s.iter().sum::<u64>() <= ne[0] as u64))
        && (p.mode != tessera::RopeMode::Vision || 2 * p.n_dims == ne[0])
}

/// Rows of whole blocks, elements adjacent within a row.
fn rows_ok(l: &Layout) -> bool {
    l.is_contiguous_rows() && l.dtype.row_size(l.ne[0]).is_ok()
}

/// The copy kernels' conversions.
fn copy_ok(a: &Layout, d: &Layout) -> bool {
    let (s, t) = (a.dtype, d.dtype);
    if a.checked_nelements().ok() != d.checked_nelements().ok() {
        return false;
    }
    if s.is_quantized() || t.is_quantized() {
        let rows = a.ne[0] == d.ne[0] && rows_ok(a) && rows_ok(d);
        let convert = s == t && QUANT_READ.contains(&s)
            || QUANT_READ.contains(&s) && t == DType::F32
            || s == DType::F32 && QUANT_WRITE.contains(&t);
        return rows && convert;
    }
    s == t && matches!(s, DType::I32) || s.is_float() && t.is_float()
}

fn get_rows_ok(a: &Layout, ids: &Layout, d: &Layout) -> bool {
    let typed = match a.dtype {
        DType::I32 => d.dtype == DType::I32,
        t if QUANT_READ.contains(&t) => d.dtype == DType::F32 && rows_ok(a),
        t => t.is_float() && d.dtype == DType::F32,
    };
    typed
        && ids.dtype == DType::I32
        && ids.ne[3] == 1
        && d.ne == [a.ne[0], ids.ne[0], ids.ne[1], ids.ne[2]]
        && a.ne[2] == ids.ne[1]
        && a.ne[3] == ids.ne[2]
        && i32::try_from(a.ne[1]).is_ok()
}

fn set_rows_ok(d: &Layout, rows: &Layout, ids: &Layout) -> bool {
    let typed =
        d.dtype.is_float() || QUANT_WRITE.contains(&d.dtype) && rows_ok(d) && rows.nb[0] == 4;
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
        && i32::try_from(d.ne[1]).is_ok()
}

fn mul_mat_ok(a: &Layout, b: &Layout) -> bool {
    tessera::MUL_MAT_WEIGHT_TYPES.contains(&a.dtype)
        && b.dtype == DType::F32
        && a.ne[0] == b.ne[0]
        && rows_ok(a)
        && a.ne[2] > 0
        && a.ne[3] > 0
        && b.ne[2].is_multiple_of(a.ne[2])
        && b.ne[3].is_multiple_of(a.ne[3])
}

fn flash_attn_ok(q: &Layout, k: &Layout, v: &Layout, mask: Option<&Layout>) -> bool {
    // A Q8_0 cache is read by whole blocks along each row.
    let kv = |t: &Layout| match t.dtype {
        DType::F16 | DType::F32 => true,
        DType::Q8_0 => t.ne[0].is_multiple_of(32) && t.nb[0] == DType::Q8_0.type_size(),
        _ => false,
    };
    q.dtype == DType::F32
        && kv(k)
        && kv(v)
        && k.ne[0] == q.ne[0]
        && v.ne[1] == k.ne[1]
        && v.ne[2] == k.ne[2]
        && k.ne[2] > 0
        && q.ne[2].is_multiple_of(k.ne[2])
        && k.ne[3] == q.ne[3]
        && v.ne[3] == q.ne[3]
        && v.ne[0] <= FLASH_ATTN_MAX_DV
        && mask.is_none_or(|m| {
            m.dtype == DType::F16
                && m.ne[0] == k.ne[1]
                && m.ne[1] >= q.ne[1]
                && m.ne[2] > 0
                && m.ne[3] > 0
                && q.ne[2].is_multiple_of(m.ne[2])
                && q.ne[3].is_multiple_of(m.ne[3])
        })
}

/// Alignment the kernels need for offsets and strides of `dtype`: words for
/// 4-byte types, half-words for 2-byte types and for quantized blocks (their
/// scales are f16), none for single bytes.
pub fn elem_align(dtype: DType) -> usize {
    if dtype.is_quantized() {
        2
    } else {
        dtype.type_size().min(4)
    }
}

fn view_aligned(dtype: DType, offs: usize) -> bool {
    offs.is_multiple_of(elem_align(dtype))
}

/// Sizes fit 32-bit byte addressing; rows are whole blocks; strides of
/// dimensions with more than one element are aligned.
fn sane(l: &Layout) -> bool {
    let align = elem_align(l.dtype);
    let Ok(bytes) = l.checked_nbytes() else {
        return false;
    };
    u32::try_from(bytes).is_ok()
        && l.checked_nelements()
            .is_ok_and(|n| u32::try_from(n).is_ok())
        && !matches!(l.dtype, DType::Q8K | DType::Q8_1)
        && l.ne[0].is_multiple_of(l.dtype.block_size())
        && (0..4).all(|i| {
            u32::try_from(l.nb[i]).is_ok() && (l.ne[i] <= 1 || l.nb[i].is_multiple_of(align))
        })
        && (!l.dtype.is_quantized()
            || l.ne[0] <= l.dtype.block_size()
            || l.nb[0] == l.dtype.type_size())
}
