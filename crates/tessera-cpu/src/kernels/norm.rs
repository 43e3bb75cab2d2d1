//! RMS_NORM and NORM over each row of an F32 tensor (ggml's
//! `ggml_compute_forward_rms_norm_f32` and `_norm_f32`).
//!
//! RMS_NORM: `y = x * (1 / sqrt(mean(x^2) + eps))`; NORM: `y = (x - mean) *
//! (1 / sqrt(var + eps))` with the population variance. Sums are accumulated
//! in f64 (ggml's `ggml_float`), the mean, variance and scale are rounded to
//! f32 as in ggml. Any strides; in place works (statistics are gathered
//! before the row is written). Threads split the rows.

use tessera::{DType, Error, Op, Result};

use super::NodeCtx;
use super::elem::rows;

/// Compute this thread's share of an RMS_NORM or NORM node.
pub fn norm(ctx: &NodeCtx) -> Result<()> {
    let (eps, rms) = match ctx.op {
        Op::RmsNorm { eps } => (eps, true),
        Op::Norm { eps } => (eps, false),
        op => return Err(Error::op(op.name(), "not a normalisation")),
    };
    let src = ctx.src(0)?;
    let d = &ctx.dst;
    if src.layout.dtype != DType::F32
        || d.layout.dtype != DType::F32
        || src.layout.ne != d.layout.ne
    {
        return Err(Error::op(
            ctx.op.name(),
            format!(
                "source {} and result {} must be F32 of one shape",
                src.layout, d.layout
            ),
        ));
    }
    let ne = d.layout.ne;
    let n = ne[0];
    if n == 0 {
        return Ok(());
    }
    let (snb, dnb) = (src.nb(0), d.nb(0));
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range row of both tensors.
        let (x, y) = unsafe { (src.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        // Callers pass `i < n`: aligned f32 elements of the row with strides
        // `snb`/`dnb`; raw accesses tolerate `y == x` (in place).
        let at = |i: usize| {
            // SAFETY: see above.
            unsafe { (x.add(i * snb) as *const f32).read() }
        };
        let put = |i: usize, v: f32| {
            // SAFETY: see above.
            unsafe { (y.add(i * dnb) as *mut f32).write(v) }
        };
        if rms {
            let mut sum = 0.0f64;
            for i in 0..n {
                let v = f64::from(at(i));
                sum += v * v;
            }
            let mean = (sum / n as f64) as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            for i in 0..n {
                put(i, at(i) * scale);
            }
        } else {
            let mut sum = 0.0f64;
            for i in 0..n {
                sum += f64::from(at(i));
            }
            let mean = (sum / n as f64) as f32;
            let mut var = 0.0f64;
            for i in 0..n {
                let v = f64::from(at(i) - mean);
                var += v * v;
            }
            let var = (var / n as f64) as f32;
            let scale = 1.0 / (var + eps).sqrt();
            for i in 0..n {
                put(i, (at(i) - mean) * scale);
            }
        }
    }
    Ok(())
}
