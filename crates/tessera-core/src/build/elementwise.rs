//! Element-wise ops: ADD, MUL, DIV (with broadcasting), SCALE, UNARY, GLU.

use super::{FLOATS, ensure, ensure_finite, ensure_type, shape};
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
}
