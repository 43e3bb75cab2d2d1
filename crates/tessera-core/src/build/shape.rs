//! Copies and layout ops: DUP, CONT, CPY, RESHAPE, VIEW, PERMUTE, TRANSPOSE, CONCAT.

use super::{ensure, shape};
use crate::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, TensorId};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::Op;

/// Can CPY convert `src` to `dst`?
pub fn cpy_supported(src: DType, dst: DType) -> bool {
    let plain = |t: DType| t.is_float();
    src == dst
        || plain(src) && plain(dst)
        || src == DType::F32 && dst.is_quantized() && !matches!(dst, DType::Q8K | DType::Q8_1)
        || src.is_quantized() && dst == DType::F32
}

impl Graph {
    /// A contiguous copy of `a` (same type and shape).
    pub fn dup(&mut self, a: TensorId) -> Result<TensorId> {
        self.copy_op(Op::Dup, a)
    }

    /// A contiguous copy of `a`, e.g. of a permuted view.
    pub fn cont(&mut self, a: TensorId) -> Result<TensorId> {
        self.copy_op(Op::Cont, a)
    }

    /// A contiguous copy of `a` with extents `ne` (ggml's `ggml_cont_4d`:
    /// CONT and RESHAPE in one op; elements in logical row-major order, so
    /// the element counts must agree; a quantized tensor keeps its rows).
    pub fn cont_4d(&mut self, a: TensorId, ne: [usize; MAX_DIMS]) -> Result<TensorId> {
        let op = Op::Cont;
        let la = self.layout(a)?;
        let out = Layout::contiguous4(la.dtype, ne)?;
        ensure(
            out.checked_nelements()? == la.checked_nelements()?,
            op.name(),
            || {
                format!(
                    "{} into extents {ne:?}: the element counts differ",
                    shape(self, a)
                )
            },
        )?;
        ensure(
            !la.dtype.is_quantized() || la.is_contiguous_rows() && ne[0] == la.ne[0],
            op.name(),
            || format!("quantized {} must keep its contiguous rows", shape(self, a)),
        )?;
        self.push_op(op, out, &[Some(a)])
    }

    fn copy_op(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let la = self.layout(a)?;
        ensure(
            !la.dtype.is_quantized() || la.is_contiguous_rows(),
            op.name(),
            || format!("quantized {} must have contiguous rows", shape(self, a)),
        )?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }

    /// Copy `a` into `b`'s memory, converting the type; elements are matched in
    /// logical row-major order, so the element counts must agree. Conversions:
    /// same type, between F32/F16/BF16, F32 to a quantized type and a quantized
    /// type to F32 (quantized sides need whole rows of equal length). The
    /// result is a view of `b`.
    pub fn cpy(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = "CPY";
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure(
            la.checked_nelements()? == lb.checked_nelements()?,
            name,
            || {
                format!(
                    "a {} and b {} have different element counts",
                    shape(self, a),
                    shape(self, b)
                )
            },
        )?;
        ensure(cpy_supported(la.dtype, lb.dtype), name, || {
            format!("no conversion from {} to {}", la.dtype, lb.dtype)
        })?;
        if la.dtype.is_quantized() || lb.dtype.is_quantized() {
            ensure(
                la.ne[0] == lb.ne[0] && la.is_contiguous_rows() && lb.is_contiguous_rows(),
                name,
                || {
                    format!(
                        "a quantized copy needs equal row lengths and contiguous rows: a {}, b {}",
                        shape(self, a),
                        shape(self, b)
                    )
                },
            )?;
        }
        self.push_view(Op::Cpy, lb, b, 0, &[Some(a), Some(b)])
    }

    /// `a` (contiguous) with new extents of the same element count; a view.
    pub fn reshape(&mut self, a: TensorId, ne: &[usize]) -> Result<TensorId> {
        let name = "RESHAPE";
        let la = self.layout(a)?;
        ensure(la.is_contiguous(), name, || {
            format!("a {} must be contiguous (use cont first)", shape(self, a))
        })?;
        let out = Layout::contiguous(la.dtype, ne)?;
        ensure(
            out.checked_nelements()? == la.checked_nelements()?,
            name,
            || {
                format!(
                    "a {} cannot be reshaped to {:?}: element counts differ",
                    shape(self, a),
                    ne
                )
            },
        )?;
        self.push_view(Op::Reshape, out, a, 0, &[Some(a)])
    }

    /// A view of `a` with extents `ne`, byte strides `nb` for dims 1.. (dim 0
    /// keeps the element stride) and a byte `offset` from `a`'s start. The
    /// view must lie inside `a`'s memory.
    pub fn view(
        &mut self,
        a: TensorId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS - 1],
        offset: usize,
    ) -> Result<TensorId> {
        let la = self.layout(a)?;
        la.dtype.row_size(ne[0])?;
        let layout = Layout {
            dtype: la.dtype,
            ne,
            nb: [la.dtype.type_size(), nb[0], nb[1], nb[2]],
        };
        self.push_view(Op::View, layout, a, offset, &[Some(a)])
    }

    /// A 1-D view of `ne0` elements at byte `offset`.
    pub fn view_1d(&mut self, a: TensorId, ne0: usize, offset: usize) -> Result<TensorId> {
        let la = self.layout(a)?;
        let row = la.dtype.row_size(ne0)?;
        self.view(a, [ne0, 1, 1, 1], [row, row, row], offset)
    }

    /// A 2-D view: `ne1` rows of `ne0` elements, `nb1` bytes apart.
    pub fn view_2d(
        &mut self,
        a: TensorId,
        ne0: usize,
        ne1: usize,
        nb1: usize,
        offset: usize,
    ) -> Result<TensorId> {
        let nb2 = nb1
            .checked_mul(ne1)
            .ok_or_else(|| Error::Overflow("VIEW strides".into()))?;
        self.view(a, [ne0, ne1, 1, 1], [nb1, nb2, nb2], offset)
    }

    /// A 3-D view.
    #[allow(clippy::too_many_arguments)]
    pub fn view_3d(
        &mut self,
        a: TensorId,
        ne0: usize,
        ne1: usize,
        ne2: usize,
        nb1: usize,
        nb2: usize,
        offset: usize,
    ) -> Result<TensorId> {
        let nb3 = nb2
            .checked_mul(ne2)
            .ok_or_else(|| Error::Overflow("VIEW strides".into()))?;
        self.view(a, [ne0, ne1, ne2, 1], [nb1, nb2, nb3], offset)
    }

    /// Permute axes: source dimension `i` becomes dimension `axes[i]`
    /// (ggml's `ggml_permute(a, axes[0], axes[1], axes[2], axes[3])`); a view.
    pub fn permute(&mut self, a: TensorId, axes: [usize; MAX_DIMS]) -> Result<TensorId> {
        let la = self.layout(a)?;
        let mut seen = [false; MAX_DIMS];
        for &ax in &axes {
            ensure(ax < MAX_DIMS && !seen[ax], "PERMUTE", || {
                format!("axes {axes:?} are not a permutation of 0..4")
            })?;
            seen[ax] = true;
        }
        let layout = permuted(&la, axes);
        ensure(!la.dtype.is_quantized() || axes[0] == 0, "PERMUTE", || {
            "a quantized tensor's dimension 0 cannot move".into()
        })?;
        let op = Op::Permute(axes.map(|a| a as u8));
        self.push_view(op, layout, a, 0, &[Some(a)])
    }

    /// Swap dimensions 0 and 1; a view.
    pub fn transpose(&mut self, a: TensorId) -> Result<TensorId> {
        let la = self.layout(a)?;
        ensure(!la.dtype.is_quantized(), "TRANSPOSE", || {
            "a quantized tensor cannot be transposed".into()
        })?;
        let layout = permuted(&la, [1, 0, 2, 3]);
        self.push_view(Op::Transpose, layout, a, 0, &[Some(a)])
    }

    /// `a` and `b` joined along `dim`; all other extents and the types must
    /// agree (non-quantized types).
    pub fn concat(&mut self, a: TensorId, b: TensorId, dim: usize) -> Result<TensorId> {
        let name = "CONCAT";
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure(dim < MAX_DIMS, name, || format!("dim {dim} is not 0..4"))?;
        ensure(
            la.dtype == lb.dtype && !la.dtype.is_quantized(),
            name,
            || {
                format!(
                    "a and b must share a non-quantized type ({} vs {})",
                    la.dtype, lb.dtype
                )
            },
        )?;
        ensure(
            (0..MAX_DIMS).all(|d| d == dim || la.ne[d] == lb.ne[d]),
            name,
            || {
                format!(
                    "a {} and b {} differ outside dim {dim}",
                    shape(self, a),
                    shape(self, b)
                )
            },
        )?;
        let mut ne = la.ne;
        ne[dim] = la.ne[dim]
            .checked_add(lb.ne[dim])
            .ok_or_else(|| Error::Overflow("CONCAT extent".into()))?;
        let out = Layout::contiguous4(la.dtype, ne)?;
        self.push_op(Op::Concat { dim: dim as u8 }, out, &[Some(a), Some(b)])
    }
}

fn permuted(la: &Layout, axes: [usize; MAX_DIMS]) -> Layout {
    let mut ne = [0; MAX_DIMS];
    let mut nb = [0; MAX_DIMS];
    for i in 0..MAX_DIMS {
        ne[axes[i]] = la.ne[i];
        nb[axes[i]] = la.nb[i];
    }
    Layout {
        dtype: la.dtype,
        ne,
        nb,
    }
}
