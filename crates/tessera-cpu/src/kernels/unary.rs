//! SCALE, SQR, SQRT, CLAMP and UNARY: element-wise functions of one tensor.
//!
//! SCALE is `x * s + b` on F32 (ggml multiplies only when `b == 0`, which
//! gives the same values). SQR, SQRT, CLAMP and UNARY (SILU, GELU (tanh
//! approximation), GELU_ERF, SIGMOID, RELU, TANH, EXP, GELU_QUICK) apply to
//! F32, F16 or BF16 tensors,
//! computing in f32 (see [`super::math`]). Any strides; in place works (each
//! element is read before it is written, through raw pointers). Threads split
//! the rows.
//!
//! F32 rows with contiguous elements take the [`Simd`] primitives for SCALE
//! (bit-identical) and SILU (AVX2: the polynomial `exp` of `exp_avx2`, a
//! few ulp from the C library's).

use tessera::{DType, Error, Op, Result, UnaryOp};

use super::elem::{Float, rows, with_float};
use super::math;
use super::simd::Simd;
use super::{NodeCtx, TensorRef};

/// Compute this thread's share of a SCALE node.
pub fn scale(ctx: &NodeCtx) -> Result<()> {
    let Op::Scale { scale, bias } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a SCALE node"));
    };
    let src = ctx.src(0)?;
    if src.layout.dtype != DType::F32 || ctx.dst.layout.dtype != DType::F32 {
        return Err(Error::unsupported(
            "CPU",
            format!("SCALE of {}", src.layout.dtype),
        ));
    }
    let simd = Simd::new(ctx.isa);
    if let Some(done) = f32_rows(ctx, &src, |y, x, n| {
        // SAFETY: forwarded from `f32_rows`' contract.
        unsafe { simd.scale_bias(y, x, scale, bias, n) }
    }) {
        return done;
    }
    map_rows::<f32>(ctx, &src, |x| {
        if bias == 0.0 {
            x * scale
        } else {
            x * scale + bias
        }
    })
}

/// Run `row(y, x, n)` on this thread's rows if `src` and `dst` are F32 with
/// contiguous rows of one shape (`None` otherwise). `row` gets two rows of
/// `n` f32 that are equal (in place) or do not overlap.
fn f32_rows(
    ctx: &NodeCtx,
    src: &TensorRef,
    row: impl Fn(*mut f32, *const f32, usize),
) -> Option<Result<()>> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    if src.layout.dtype != DType::F32
        || d.layout.dtype != DType::F32
        || src.layout.ne != ne
        || src.nb(0) != 4
        || d.nb(0) != 4
    {
        return None;
    }
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range rows of both tensors.
        let (x, y) = unsafe {
            (
                src.row(i1, i2, i3) as *const f32,
                d.row(i1, i2, i3) as *mut f32,
            )
        };
        row(y, x, ne[0]);
    }
    Some(Ok(()))
}

/// Compute this thread's share of a UNARY node.
pub fn unary(ctx: &NodeCtx) -> Result<()> {
    let Op::Unary(f) = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a UNARY node"));
    };
    let src = ctx.src(0)?;
    let dt = src.layout.dtype;
    if ctx.dst.layout.dtype != dt {
        return Err(Error::unsupported(
            "CPU",
            format!("{} from {dt} to {}", f.name(), ctx.dst.layout.dtype),
        ));
    }
    if f == UnaryOp::Silu {
        let simd = Simd::new(ctx.isa);
        if let Some(done) = f32_rows(ctx, &src, |y, x, n| {
            // SAFETY: forwarded from `f32_rows`' contract.
            unsafe { simd.silu(y, x, None, n) }
        }) {
            return done;
        }
    }
    with_float!(dt, T => match f {
        UnaryOp::Silu => map_rows::<T>(ctx, &src, math::silu),
        UnaryOp::Gelu => map_rows::<T>(ctx, &src, math::gelu),
        UnaryOp::GeluErf => map_rows::<T>(ctx, &src, math::gelu_erf),
        UnaryOp::Sigmoid => map_rows::<T>(ctx, &src, math::sigmoid),
        UnaryOp::Relu => map_rows::<T>(ctx, &src, math::relu),
        UnaryOp::Tanh => map_rows::<T>(ctx, &src, f32::tanh),
        UnaryOp::Exp => map_rows::<T>(ctx, &src, f32::exp),
        UnaryOp::GeluQuick => map_rows::<T>(ctx, &src, math::gelu_quick),
    }, _ => Err(Error::unsupported("CPU", format!("{} of {dt}", f.name()))))
}

/// Compute this thread's share of a SQR, SQRT or CLAMP node.
pub fn elementwise(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let dt = src.layout.dtype;
    if ctx.dst.layout.dtype != dt {
        return Err(Error::unsupported(
            "CPU",
            format!("{} from {dt} to {}", ctx.op.name(), ctx.dst.layout.dtype),
        ));
    }
    with_float!(dt, T => match ctx.op {
        Op::Sqr => map_rows::<T>(ctx, &src, |x| x * x),
        Op::Sqrt => map_rows::<T>(ctx, &src, f32::sqrt),
        Op::Clamp { min, max } => map_rows::<T>(ctx, &src, |x| math::clamp(x, min, max)),
        op => Err(Error::op(op.name(), "not an element-wise op")),
    }, _ => Err(Error::unsupported("CPU", format!("{} of {dt}", ctx.op.name()))))
}

/// `dst[i] = f(src[i])` over this thread's rows; `src` and `dst` have the
/// same extents and element type `T`.
fn map_rows<T: Float>(ctx: &NodeCtx, src: &TensorRef, f: impl Fn(f32) -> f32) -> Result<()> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    if src.layout.ne != ne {
        return Err(Error::op(
            ctx.op.name(),
            format!(
                "source {} and result {} differ in shape",
                src.layout, d.layout
            ),
        ));
    }
    let nrows = ne[1] * ne[2] * ne[3];
    let (snb, dnb) = (src.nb(0), d.nb(0));
    let size = size_of::<T>();
    for (i1, i2, i3) in rows(ctx.split(nrows), &ne) {
        // SAFETY: in-range row of both tensors.
        let (x, y) = unsafe { (src.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        if snb == size && dnb == size {
            let (x, y) = (x as *const T, y as *mut T);
            for i in 0..ne[0] {
                // SAFETY: `i < ne0` in contiguous aligned rows; raw accesses
                // tolerate `y == x` (in place).
                unsafe { *y.add(i) = T::from_f32(f((*x.add(i)).to_f32())) };
            }
        } else {
            for i in 0..ne[0] {
                // SAFETY: `i < ne0`, strided aligned elements.
                unsafe {
                    let v = (x.add(i * snb) as *const T).read().to_f32();
                    (y.add(i * dnb) as *mut T).write(T::from_f32(f(v)));
                }
            }
        }
    }
    Ok(())
}
