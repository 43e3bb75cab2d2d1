//! Row indexing and reductions: GET_ROWS, SET_ROWS, ARGMAX, SUM_ROWS.

use super::{ensure, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::Op;

impl Graph {
    /// Gather rows: `a` is `[ne0, n_rows, ne2, ne3]` (any type with
    /// contiguous rows), `ids` is I32 `[n, ne2, ne3]`; the result is
    /// `[ne0, n, ne2, ne3]` with `result[:, i, j, l] = a[:, ids[i, j, l], j, l]`,
    /// F32 (I32 when `a` is I32).
    pub fn get_rows(&mut self, a: TensorId, ids: TensorId) -> Result<TensorId> {
        let name = "GET_ROWS";
        let la = self.layout(a)?;
        let li = self.layout(ids)?;
        ensure_type(name, "ids", li.dtype, &[DType::I32])?;
        ensure(
            li.ne[3] == 1 && la.ne[2] == li.ne[1] && la.ne[3] == li.ne[2],
            name,
            || {
                format!(
                    "ids {} must be [n, a.ne2, a.ne3] for a {}",
                    shape(self, ids),
                    shape(self, a)
                )
            },
        )?;
        ensure(
            la.is_contiguous_rows() && la.dtype != DType::I64,
            name,
            || {
                format!(
                    "a {} must have contiguous rows of a float, quantized or I32 type",
                    shape(self, a)
                )
            },
        )?;
        let out_t = if la.dtype == DType::I32 {
            DType::I32
        } else {
            DType::F32
        };
        let out = Layout::contiguous4(out_t, [la.ne[0], li.ne[0], li.ne[1], li.ne[2]])?;
        self.push_op(Op::GetRows, out, &[Some(a), Some(ids)])
    }

    /// Scatter rows into `dst` (e.g. a KV cache, any type with contiguous
    /// rows): `src` is F32 `[ne0, n, ne2, ne3]`, `ids` (I64 or I32) is
    /// `[n, r2, r3]` with `ne2 % r2 == 0`, `ne3 % r3 == 0`; row `i` of `src`
    /// goes to row `ids[i, j % r2, l % r3]` of `dst`. The result is a view of
    /// `dst` (writing it is the point of the op).
    pub fn set_rows(&mut self, dst: TensorId, src: TensorId, ids: TensorId) -> Result<TensorId> {
        let name = "SET_ROWS";
        let ld = self.layout(dst)?;
        let ls = self.layout(src)?;
        let li = self.layout(ids)?;
        ensure_type(name, "src", ls.dtype, &[DType::F32])?;
        ensure_type(name, "ids", li.dtype, &[DType::I64, DType::I32])?;
        ensure(
            ld.dtype.is_float()
                || ld.dtype.is_quantized() && !matches!(ld.dtype, DType::Q8K | DType::Q8_1),
            name,
            || format!("destination type {} is not supported", ld.dtype),
        )?;
        ensure(
            ld.ne[0] == ls.ne[0]
                && ld.ne[2] == ls.ne[2]
                && ld.ne[3] == ls.ne[3]
                && ls.ne[1] == li.ne[0]
                && li.ne[1] > 0
                && li.ne[2] > 0
                && ls.ne[2] % li.ne[1] == 0
                && ls.ne[3] % li.ne[2] == 0
                && li.ne[3] == 1,
            name,
            || {
                format!(
                    "dst {}, src {} and ids {} do not fit together",
                    shape(self, dst),
                    shape(self, src),
                    shape(self, ids)
                )
            },
        )?;
        ensure(
            ld.is_contiguous_rows() && ls.is_contiguous_rows(),
            name,
            || "dst and src rows must be contiguous".into(),
        )?;
        self.push_view(Op::SetRows, ld, dst, 0, &[Some(dst), Some(src), Some(ids)])
    }

    /// Index of the largest element of each row of the F32 matrix `a`
    /// (I32 `[ne1]`).
    pub fn argmax(&mut self, a: TensorId) -> Result<TensorId> {
        let name = "ARGMAX";
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &[DType::F32])?;
        ensure(la.is_matrix(), name, || {
            format!("a {} must be a matrix", shape(self, a))
        })?;
        ensure(la.ne[0] <= i32::MAX as usize, name, || {
            "rows longer than i32::MAX".into()
        })?;
        let out = Layout::contiguous4(DType::I32, [la.ne[1], 1, 1, 1])?;
        self.push_op(Op::Argmax, out, &[Some(a)])
    }

    /// Sum of each row of `a` (F32): `[1, ne1, ne2, ne3]`.
    pub fn sum_rows(&mut self, a: TensorId) -> Result<TensorId> {
        let la = self.layout(a)?;
        ensure_type("SUM_ROWS", "a", la.dtype, &[DType::F32])?;
        let out = Layout::contiguous4(DType::F32, [1, la.ne[1], la.ne[2], la.ne[3]])?;
        self.push_op(Op::SumRows, out, &[Some(a)])
    }
}
