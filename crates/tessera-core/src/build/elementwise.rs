//! Element-wise ops: ADD, SUB, MUL, DIV (with broadcasting), SCALE, SQR,
//! SQRT, CLAMP, UNARY, GLU (SWIGLU_OAI included), and the soft-capping helper.

use super::{FLOATS, ensure, ensure_finite, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::{GluOp, Op, UnaryOp};

impl Graph {
    /// `a + b`, `b` broadcast to `a`'s shape (each extent of `a` a multiple of `b`'s).
    pub fn add(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Add, a, b)
    }

    /// `a * b`, `b` broadcast to `a`'s shape.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Mul, a, b)
    }

    /// `a / b`, `b` broadcast to `a`'s shape.
    pub fn div(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Div, a, b)
    }

    /// `a - b`, `b` broadcast to `a`'s shape.
    pub fn sub(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.binary(Op::Sub, a, b)
    }

    fn binary(&mut self, op: Op, a: TensorId, b: TensorId) -> Result<TensorId> {
        let name = op.name();
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure_type(name, "a", la.dtype, &FLOATS)?;
        ensure_type(name, "b", lb.dtype, &FLOATS)?;
        ensure(lb.can_repeat_to(&la), name, || {
            format!(
                "b {} cannot be broadcast to a {}: each extent of a must be a multiple of b's",
                shape(self, b),
                shape(self, a)
            )
        })?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a), Some(b)])
    }

    /// `a * scale + bias` (F32).
    pub fn scale_bias(&mut self, a: TensorId, scale: f32, bias: f32) -> Result<TensorId> {
        let op = Op::Scale { scale, bias };
        let la = self.layout(a)?;
        ensure_type(op.name(), "a", la.dtype, &[crate::DType::F32])?;
        ensure_finite(op.name(), "scale", scale)?;
        ensure_finite(op.name(), "bias", bias)?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }

    /// `a * scale` (F32).
    pub fn scale(&mut self, a: TensorId, scale: f32) -> Result<TensorId> {
        self.scale_bias(a, scale, 0.0)
    }

    /// `a^2`, element-wise (F32, F16 or BF16).
    pub fn sqr(&mut self, a: TensorId) -> Result<TensorId> {
        self.elementwise(Op::Sqr, a)
    }

    /// `sqrt(a)`, element-wise (F32, F16 or BF16; negative values give NaN).
    pub fn sqrt(&mut self, a: TensorId) -> Result<TensorId> {
        self.elementwise(Op::Sqrt, a)
    }

    /// `a` clamped into `[min, max]` (F32, F16 or BF16), ggml's
    /// `MAX(MIN(x, max), min)`: a NaN element becomes `max`, and `min > max`
    /// gives `min` everywhere. The bounds may be infinite, not NaN.
    pub fn clamp(&mut self, a: TensorId, min: f32, max: f32) -> Result<TensorId> {
        let op = Op::Clamp { min, max };
        ensure(!min.is_nan() && !max.is_nan(), op.name(), || {
            format!("bounds [{min}, {max}] must not be NaN")
        })?;
        self.elementwise(op, a)
    }

    /// Logit soft-capping `cap * tanh(a / cap)` (F32). ggml has no op for it
    /// (llama.cpp composes it the same way): SCALE, TANH, SCALE.
    pub fn softcap(&mut self, a: TensorId, cap: f32) -> Result<TensorId> {
        ensure(cap.is_finite() && cap > 0.0, "SCALE", || {
            format!("soft cap {cap} must be finite and positive")
        })?;
        let x = self.scale(a, 1.0 / cap)?;
        let x = self.unary(x, UnaryOp::Tanh)?;
        self.scale(x, cap)
    }

    /// A same-shape element-wise op on a float tensor.
    fn elementwise(&mut self, op: Op, a: TensorId) -> Result<TensorId> {
        let la = self.layout(a)?;
        ensure_type(op.name(), "a", la.dtype, &FLOATS)?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }

    /// An element-wise function of `a` (F32, F16 or BF16).
    pub fn unary(&mut self, a: TensorId, f: UnaryOp) -> Result<TensorId> {
        let op = Op::Unary(f);
        let la = self.layout(a)?;
        ensure_type(f.name(), "a", la.dtype, &FLOATS)?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(op, out, &[Some(a)])
    }

    /// `silu(a)`.
    pub fn silu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Silu)
    }

    /// `gelu(a)` (tanh approximation).
    pub fn gelu(&mut self, a: TensorId) -> Result<TensorId> {
        self.unary(a, UnaryOp::Gelu)
    }

    /// Fused gated linear unit: `a` holds `[x, g]` along dimension 0 (`[g, x]`
    /// when `swapped`); the result is `act(x) * g`, half as wide.
    pub fn glu(&mut self, a: TensorId, f: GluOp, swapped: bool) -> Result<TensorId> {
        let name = f.name();
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &FLOATS)?;
        ensure(la.ne[0] % 2 == 0, name, || {
            format!(
                "fused input {} must have an even row length",
                shape(self, a)
            )
        })?;
        ensure(la.is_contiguous_rows(), name, || {
            format!("input {} must have contiguous rows", shape(self, a))
        })?;
        let mut ne = la.ne;
        ne[0] /= 2;
        let out = Layout::contiguous4(la.dtype, ne)?;
        self.push_op(Op::Glu { op: f, swapped }, out, &[Some(a)])
    }

    /// Split gated linear unit: `act(a) * b`, `a` and `b` of the same shape and type.
    pub fn glu_split(&mut self, a: TensorId, b: TensorId, f: GluOp) -> Result<TensorId> {
        let name = f.name();
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure_type(name, "a", la.dtype, &FLOATS)?;
        ensure(la.dtype == lb.dtype && la.ne == lb.ne, name, || {
            format!(
                "x {} and g {} must have the same type and shape",
                shape(self, a),
                shape(self, b)
            )
        })?;
        ensure(
            la.is_contiguous_rows() && lb.is_contiguous_rows(),
            name,
            || "x and g must have contiguous rows".to_string(),
        )?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(
            Op::Glu {
                op: f,
                swapped: false,
            },
            out,
            &[Some(a), Some(b)],
        )
    }

    /// `silu(a) * b`.
    pub fn swiglu_split(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        self.glu_split(a, b, GluOp::SwiGlu)
    }

    /// gpt-oss's SwiGLU (ggml's `ggml_swiglu_oai`): F32 `x` (`a`) and `g`
    /// (`b`) of the same shape with contiguous rows;
    /// `min(x, limit) * sigmoid(alpha min(x, limit)) * (clamp(g, -limit, limit) + 1)`.
    pub fn swiglu_oai(
        &mut self,
        a: TensorId,
        b: TensorId,
        alpha: f32,
        limit: f32,
    ) -> Result<TensorId> {
        let name = "SWIGLU_OAI";
        let la = self.layout(a)?;
        let lb = self.layout(b)?;
        ensure_type(name, "x", la.dtype, &[DType::F32])?;
        ensure_type(name, "g", lb.dtype, &[DType::F32])?;
        ensure(la.ne == lb.ne, name, || {
            format!(
                "x {} and g {} must have the same shape",
                shape(self, a),
                shape(self, b)
            )
        })?;
        ensure(
            la.is_contiguous_rows() && lb.is_contiguous_rows(),
            name,
            || "x and g must have contiguous rows".to_string(),
        )?;
        ensure(alpha.is_finite() && !limit.is_nan(), name, || {
            format!("alpha {alpha} must be finite and limit {limit} not NaN")
        })?;
        let out = Layout::contiguous4(DType::F32, la.ne)?;
        self.push_op(Op::SwiGluOai { alpha, limit }, out, &[Some(a), Some(b)])
    }
}
