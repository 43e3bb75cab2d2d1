//! Row normalisations: RMS_NORM, NORM and L2_NORM.

use super::{ensure, ensure_finite, ensure_type};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::Op;

impl Graph {
    /// `x / sqrt(mean(x^2) + eps)` over each row (F32).
    pub fn rms_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.norm_impl(Op::RmsNorm { eps }, a, eps)
    }

    /// `(x - mean) / sqrt(var + eps)` over each row (F32).
    pub fn norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.norm_impl(Op::Norm { eps }, a, eps)
    }

    /// `x / max(sqrt(sum(x^2)), eps)` over each row (F32), ggml's `ggml_l2_norm`.
    pub fn l2_norm(&mut self, a: TensorId, eps: f32) -> Result<TensorId> {
        self.norm_impl(Op::L2Norm { eps }, a, eps)
    }

    fn norm_impl(&mut self, op: Op, a: TensorId, eps: f32) -> Result<TensorId> {
        let la = self.layout(a)?;
        ensure_type(op.name(), "a", la.dtype, &[DType::F32])?;
        ensure_finite(op.name(), "eps", eps)?;
        ensure(eps >= 0.0, op.name(), || format!("eps = {eps} is negative"))?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }
}
