//! One node of a graph built again in another graph over other operands
//! (a device's piece of it), through the validating builder: every check
//! the op's constructor makes holds for the per-device graph too, so the
//! devices' kernels see only graphs the builder accepted.

use tessera::{Error, Graph, MAX_DIMS, Node, Op, Result, TensorId};

/// Append `node`'s op over `srcs` (ids of `g`, present where `node`'s are)
/// to `g`. Views are not built here (their extents and strides change
/// per device, see `crate::views`). `ne0` is the result's dimension-0
/// extent where the op needs it (TOP_K's k); `ne` the result's extents
/// where the op takes them (REPEAT).
pub(crate) fn rebuild(
    g: &mut Graph,
    node: &Node,
    srcs: &[Option<TensorId>],
    ne: [usize; MAX_DIMS],
) -> Result<TensorId> {
    let s = |i: usize| -> Result<TensorId> {
        srcs.get(i).copied().flatten().ok_or_else(|| {
            Error::op(
                node.op.name(),
                format!("operand {i} missing in a per-device graph"),
            )
        })
    };
    let opt = |i: usize| srcs.get(i).copied().flatten();
    let id = match node.op {
        Op::Dup => g.dup(s(0)?)?,
        Op::Cont => g.cont_4d(s(0)?, ne)?,
        Op::Cpy => g.cpy(s(0)?, s(1)?)?,
        Op::GetRows => g.get_rows(s(0)?, s(1)?)?,
        Op::SetRows => g.set_rows(s(0)?, s(1)?, s(2)?)?,
        Op::Add => g.add(s(0)?, s(1)?)?,
        Op::Mul => g.mul(s(0)?, s(1)?)?,
        Op::Div => g.div(s(0)?, s(1)?)?,
        Op::Sub => g.sub(s(0)?, s(1)?)?,
        Op::Sqr => g.sqr(s(0)?)?,
        Op::Sqrt => g.sqrt(s(0)?)?,
        Op::Clamp { min, max } => g.clamp(s(0)?, min, max)?,
        Op::Scale { scale, bias } => g.scale_bias(s(0)?, scale, bias)?,
        Op::RmsNorm { eps } => g.rms_norm(s(0)?, eps)?,
        Op::Norm { eps } => g.norm(s(0)?, eps)?,
        Op::L2Norm { eps } => g.l2_norm(s(0)?, eps)?,
        Op::Repeat => g.repeat_4d(s(0)?, ne)?,
        Op::Pad { lp, rp } => g.pad_ext(s(0)?, lp.map(|x| x as usize), rp.map(|x| x as usize))?,
        Op::Argsort { order } => g.argsort(s(0)?, order)?,
        Op::TopK => g.top_k(s(0)?, ne[0])?,
        Op::MulMat => g.mul_mat(s(0)?, s(1)?)?,
        Op::MulMatId => g.mul_mat_id(s(0)?, s(1)?, s(2)?)?,
        Op::AddId => g.add_id(s(0)?, s(1)?, s(2)?)?,
        Op::SoftMax { scale, max_bias } => match opt(2) {
            Some(sinks) => g.soft_max_ext_sinks(s(0)?, opt(1), sinks, scale, max_bias)?,
            None => g.soft_max_ext(s(0)?, opt(1), scale, max_bias)?,
        },
        Op::Rope(p) => g.rope(s(0)?, s(1)?, opt(2), p)?,
        Op::Unary(f) => g.unary(s(0)?, f)?,
        Op::Glu { op, swapped } => match opt(1) {
            Some(b) => g.glu_split(s(0)?, b, op)?,
            None => g.glu(s(0)?, op, swapped)?,
        },
        Op::SwiGluOai { alpha, limit } => g.swiglu_oai(s(0)?, s(1)?, alpha, limit)?,
        Op::Concat { dim } => g.concat(s(0)?, s(1)?, dim as usize)?,
        Op::Argmax => g.argmax(s(0)?)?,
        Op::SumRows => g.sum_rows(s(0)?)?,
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => match opt(4) {
            Some(sinks) => g.flash_attn_ext_sinks(
                s(0)?,
                s(1)?,
                s(2)?,
                opt(3),
                sinks,
                scale,
                max_bias,
                logit_softcap,
            )?,
            None => {
                g.flash_attn_ext(s(0)?, s(1)?, s(2)?, opt(3), scale, max_bias, logit_softcap)?
            }
        },
        Op::None | Op::Reshape | Op::View | Op::Permute(_) | Op::Transpose | Op::Transfer => {
            return Err(Error::op(
                node.op.name(),
                "not an op a per-device graph rebuilds (leaf, view or transfer)",
            ));
        }
    };
    if !node.name.is_empty() {
        g.set_name(id, &node.name)?;
    }
    Ok(id)
}
