//! GLU: gated linear units `act(x) * g` (SWIGLU, GEGLU, REGLU, GEGLU_ERF,
//! GEGLU_QUICK).
//!
//! Fused form (one operand of `2n` columns): `x` is the first half of each
//! row and `g` the second, or the reverse when `swapped`. Split form: `x` is
//! `src0` and `g` is `src1`, of the same type and shape. F32, F16, BF16 with
//! any strides, computed in f32. REGLU is ggml's `x > 0 ? x * g : 0` (not
//! `relu(x) * g`, which differs when `g` is infinite). Threads split rows.
//! F32 SWIGLU and GEGLU with contiguous rows use [`Simd::silu`] and
//! [`Simd::gelu`] (AVX2's polynomial `exp`; GELU as `x / (1 + exp(-2u))`).

use tessera::{Error, GluOp, Op, Result};

use tessera::DType;

use super::elem::{Float, load, rows, store, with_float};
use super::simd::Simd;
use super::{NodeCtx, TensorRef, math};

/// ggml's `std::min(x, limit)`.
fn min_c(x: f32, limit: f32) -> f32 {
    if limit < x { limit } else { x }
}

/// ggml's `std::clamp(g, -limit, limit)` (no panic when `-limit > limit`).
fn clamp_c(g: f32, limit: f32) -> f32 {
    if g < -limit {
        -limit
    } else if limit < g {
        limit
    } else {
        g
    }
}

/// Compute this thread's share of a SWIGLU_OAI node (F32, split form), as
/// ggml's `ggml_compute_forward_swiglu_oai_f32`.
pub fn swiglu_oai(ctx: &NodeCtx) -> Result<()> {
    let Op::SwiGluOai { alpha, limit } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a SWIGLU_OAI node"));
    };
    let a = ctx.src(0)?;
    let b = ctx.src(1)?;
    let f32s = [a.layout.dtype, b.layout.dtype, ctx.dst.layout.dtype] == [DType::F32; 3];
    if !f32s {
        return Err(Error::unsupported("CPU", "SWIGLU_OAI of non-f32 tensors"));
    }
    run::<f32>(ctx, &a, false, move |x, g| {
        let x = min_c(x, limit);
        let y = clamp_c(g, limit);
        x / (1.0 + (alpha * -x).exp()) * (y + 1.0)
    })
}

/// Compute this thread's share of a GLU node.
pub fn glu(ctx: &NodeCtx) -> Result<()> {
    let Op::Glu { op, swapped } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a GLU node"));
    };
    let a = ctx.src(0)?;
    let dt = ctx.dst.layout.dtype;
    if a.layout.dtype != dt || ctx.src[1].is_some_and(|b| b.layout.dtype != dt) {
        return Err(Error::unsupported(
            "CPU",
            format!("{} with mixed types", op.name()),
        ));
    }
    with_float!(dt, T => match op {
        GluOp::SwiGlu => run::<T>(ctx, &a, swapped, |x, g| math::silu(x) * g),
        GluOp::GeGlu => run::<T>(ctx, &a, swapped, |x, g| math::gelu(x) * g),
        GluOp::ReGlu => run::<T>(ctx, &a, swapped, |x, g| if x > 0.0 { x * g } else { 0.0 }),
        GluOp::GeGluErf => run::<T>(ctx, &a, swapped, |x, g| math::gelu_erf(x) * g),
        GluOp::GeGluQuick => run::<T>(ctx, &a, swapped, |x, g| math::gelu_quick(x) * g),
    }, _ => Err(Error::unsupported("CPU", format!("{} of {dt}", op.name()))))
}

fn run<T: Float>(
    ctx: &NodeCtx,
    a: &TensorRef,
    swapped: bool,
    f: impl Fn(f32, f32) -> f32,
) -> Result<()> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let nc = ne[0];
    // (tensor of x, tensor of g, element offset of x, element offset of g)
    let (xt, gt, xo, go) = match ctx.src[1] {
        Some(b) => {
            if a.layout.ne != ne || b.layout.ne != ne {
                return Err(shape_error(ctx, a));
            }
            (*a, b, 0, 0)
        }
        None => {
            let mut half = a.layout.ne;
            half[0] /= 2;
            if half != ne || a.layout.ne[0] != 2 * nc {
                return Err(shape_error(ctx, a));
            }
            if swapped {
                (*a, *a, nc, 0)
            } else {
                (*a, *a, 0, nc)
            }
        }
    };
    let (xnb, gnb, dnb) = (xt.nb(0), gt.nb(0), d.nb(0));
    let contiguous_f32 = T::DTYPE == DType::F32 && xnb == 4 && gnb == 4 && dnb == 4;
    let vector_op = match ctx.op {
        Op::Glu { op, .. } if contiguous_f32 => {
            Some(op).filter(|op| matches!(op, GluOp::SwiGlu | GluOp::GeGlu))
        }
        _ => None,
    };
    let simd = Simd::new(ctx.isa);
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range rows; the offsets `xo`, `go` plus `nc` stay inside
        // the fused row of `2 nc` elements.
        let (xr, gr, yr) = unsafe {
            (
                xt.row(i1, i2, i3).add(xo * xnb) as *const u8,
                gt.row(i1, i2, i3).add(go * gnb) as *const u8,
                d.row(i1, i2, i3),
            )
        };
        if let Some(op) = vector_op {
            // SAFETY: rows of `nc` contiguous f32; `dst` equals an operand
            // or does not overlap it (executor contract).
            unsafe {
                if op == GluOp::SwiGlu {
                    simd.silu(yr.cast(), xr.cast(), Some(gr.cast()), nc);
                } else {
                    simd.gelu(yr.cast(), xr.cast(), Some(gr.cast()), nc);
                }
            }
            continue;
        }
        for i in 0..nc {
            // SAFETY: `i < nc`: in-range, aligned elements of each row.
            unsafe { store::<T>(yr, i, dnb, f(load::<T>(xr, i, xnb), load::<T>(gr, i, gnb))) };
        }
    }
    Ok(())
}

fn shape_error(ctx: &NodeCtx, a: &TensorRef) -> Error {
    Error::op(
        ctx.op.display_name(),
        format!(
            "operand {} does not fit result {}",
            a.layout, ctx.dst.layout
        ),
    )
}
