//! MUL_MAT: `dst[i, j] = sum_k a[k, i] * b[k, j]`, broadcast over dims 2-3.

use super::{ensure, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::Op;

/// Weight types MUL_MAT accepts as `a`.
pub const MUL_MAT_WEIGHT_TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
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

impl Graph {
    /// Matrix product in ggml's convention: `a` is `[k, m, ne02, ne03]` (the
    /// weights, one output row per row of `a`), `b` is `[k, n, ne12, ne13]`
    /// (F32 activations, possibly permuted), the result is F32
    /// `[m, n, ne12, ne13]`. `a` is broadcast over dims 2-3: `ne12` must be a
    /// multiple of `ne02` and `ne13` of `ne03`. `a` must have contiguous rows
    /// (it may be permuted in dims 1-3, not transposed).
    pub fn mul_mat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = "MUL_MAT";
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure_type(name, "a", la.dtype, &MUL_MAT_WEIGHT_TYPES)?;
        ensure_type(name, "b", lb.dtype, &[DType::F32])?;
        ensure(la.ne[0] == lb.ne[0], name, || {
            format!(
                "a {} and b {} must have the same row length k",
                shape(self, a),
                shape(self, b)
            )
        })?;
        ensure(
            lb.ne[2] % la.ne[2].max(1) == 0 && lb.ne[3] % la.ne[3].max(1) == 0,
            name,
            || {
                format!(
                    "a {} cannot be broadcast over b {}: b's dims 2 and 3 must be multiples of a's",
                    shape(self, a),
                    shape(self, b)
                )
            },
        )?;
        ensure(!la.is_transposed() && la.is_contiguous_rows(), name, || {
            format!(
                "a {} must have contiguous rows (not transposed)",
                shape(self, a)
            )
        })?;
        let out = Layout::contiguous4(DType::F32, [la.ne[1], lb.ne[1], lb.ne[2], lb.ne[3]])?;
        self.push_op(Op::MulMat, out, &[Some(a), Some(b)])
    }
}

impl Graph {
    /// Mixture-of-experts product (ggml's `ggml_mul_mat_id`): `as_` holds one
    /// weight matrix per expert, `[k, m, n_as]` (any type of
    /// [`MUL_MAT_WEIGHT_TYPES`], contiguous rows); `b` is F32
    /// `[k, ne11, n_tokens]` with `n_used % ne11 == 0` (`ne11 == 1`
    /// broadcasts one activation row to every expert); `ids` is I32
    /// `[n_used, n_tokens]`, the experts chosen per token. The result is F32
    /// `[m, n_used, n_tokens]` with
    /// `dst[:, e, t] = as_[:, :, ids[e, t]]^T b[:, e % ne11, t]`.
    ///
    /// The ids are data: an id outside `0..n_as` is an error when the graph
    /// is computed (ggml aborts).
    pub fn mul_mat_id(&mut self, as_: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let name = "MUL_MAT_ID";
        let la = self.layout(as_)?;
        let lb = self.layout(b)?;
        let li = self.layout(ids)?;
        ensure_type(name, "as", la.dtype, &MUL_MAT_WEIGHT_TYPES)?;
        ensure_type(name, "b", lb.dtype, &[DType::F32])?;
        ensure_type(name, "ids", li.dtype, &[DType::I32])?;
        ensure(la.ne[3] == 1 && lb.ne[3] == 1, name, || {
            format!(
                "as {} and b {} must be 3-D",
                shape(self, as_),
                shape(self, b)
            )
        })?;
        ensure(li.ne[2] == 1 && li.ne[3] == 1, name, || {
            format!("ids {} must be 2-D", shape(self, ids))
        })?;
        ensure(li.ne[1] == lb.ne[2], name, || {
            format!(
                "ids {} must have one expert list per token of b {}",
                shape(self, ids),
                shape(self, b)
            )
        })?;
        ensure(la.ne[0] == lb.ne[0], name, || {
            format!(
                "as {} and b {} must have the same row length k",
                shape(self, as_),
                shape(self, b)
            )
        })?;
        ensure(lb.ne[1] > 0 && li.ne[0] % lb.ne[1] == 0, name, || {
            format!(
                "b {} cannot be broadcast over the {} experts used per token",
                shape(self, b),
                li.ne[0]
            )
        })?;
        ensure(!la.is_transposed() && la.is_contiguous_rows(), name, || {
            format!(
                "as {} must have contiguous rows (not transposed)",
                shape(self, as_)
            )
        })?;
        let out = Layout::contiguous4(DType::F32, [la.ne[1], li.ne[0], lb.ne[2], 1])?;
        self.push_op(Op::MulMatId, out, &[Some(as_), Some(b), Some(ids)])
    }

    /// `a + b[:, ids]` (ggml's `ggml_add_id`, the per-expert biases of a
    /// mixture of experts): `a` is F32 `[ne0, ne1, ne2]`, `b` F32
    /// `[ne0, n_as]`, `ids` I32 `[ne1, ne2]`;
    /// `dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]]`. An id outside
    /// `0..n_as` is an error when the graph is computed.
    pub fn add_id(&mut self, a: TensorId, b: TensorId, ids: TensorId) -> Result<TensorId> {
        let name = "ADD_ID";
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        let li = self.layout(ids)?;
        ensure_type(name, "a", la.dtype, &[DType::F32])?;
        ensure_type(name, "b", lb.dtype, &[DType::F32])?;
        ensure_type(name, "ids", li.dtype, &[DType::I32])?;
        ensure(
            la.ne[0] == lb.ne[0]
                && la.ne[1] == li.ne[0]
                && la.ne[2] == li.ne[1]
                && la.ne[3] == 1
                && lb.ne[2] == 1
                && lb.ne[3] == 1
                && li.ne[2] == 1
                && li.ne[3] == 1,
            name,
            || {
                format!(
                    "a {} (3-D), b {} ([a.ne0, n_as]) and ids {} ([a.ne1, a.ne2]) do not fit",
                    shape(self, a),
                    shape(self, b),
                    shape(self, ids)
                )
            },
        )?;
        let out = Layout::contiguous4(DType::F32, la.ne)?;
        self.push_op(Op::AddId, out, &[Some(a), Some(b), Some(ids)])
    }
}
