//! Sorting ops: ARGSORT and TOP_K.

use super::{ensure, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::{Op, SortOrder};

impl Graph {
    /// The I32 indices that sort each row of the F32 tensor `a` (ggml's
    /// `ggml_argsort`); equal values keep their index order (ggml's
    /// `std::sort` leaves it unspecified), NaNs sort as the largest values.
    pub fn argsort(&mut self, a: TensorId, order: SortOrder) -> Result<TensorId> {
        let op = Op::Argsort { order };
        let la = self.check_sortable(op, a)?;
        let out = Layout::contiguous4(DType::I32, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }

    /// The I32 indices of the `k` largest elements of each row of the F32
    /// tensor `a`: `[k, ne1, ne2, ne3]`, largest first, equal values in index
    /// order (ggml's `ggml_top_k`, whose order is unspecified). `1 <= k <= ne0`.
    pub fn top_k(&mut self, a: TensorId, k: usize) -> Result<TensorId> {
        let op = Op::TopK;
        let la = self.check_sortable(op, a)?;
        ensure(k >= 1 && k <= la.ne[0], op.name(), || {
            format!("k = {k} is not in 1..={} (the row length of a)", la.ne[0])
        })?;
        let out = Layout::contiguous4(DType::I32, [k, la.ne[1], la.ne[2], la.ne[3]])?;
        self.push_op(op, out, &[Some(a)])
    }

    /// `a` is F32 with contiguous rows no longer than `i32::MAX`.
    fn check_sortable(&self, op: Op, a: TensorId) -> Result<Layout> {
        let name = op.name();
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &[DType::F32])?;
        ensure(la.is_contiguous_rows(), name, || {
            format!("a {} must have contiguous rows", shape(self, a))
        })?;
        ensure(la.ne[0] <= i32::MAX as usize, name, || {
            "rows longer than i32::MAX".into()
        })?;
        Ok(la)
    }
}
