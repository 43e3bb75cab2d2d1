//! MUL_MAT: `dst[i, j] = sum_k a[k, i] * b[k, j]`, broadcast over dims 2-3.

use super::{ensure, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::Op;

/// Weight types MUL_MAT accepts as `a`.
pub const MUL_MAT_WEIGHT_TYPES: [DType; 12] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q4K,
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
