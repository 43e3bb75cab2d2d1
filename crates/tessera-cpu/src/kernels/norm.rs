//! RMS_NORM, NORM and L2_NORM over each row of an F32 tensor (ggml's
//! `ggml_compute_forward_rms_norm_f32`, `_norm_f32` and `_l2_norm_f32`).
//!
//! L2_NORM: `y = x * (1 / max(sqrt(sum x^2), eps))`, the squares rounded to
//! f32 and summed in f64, the sum rounded to f32 before its square root, as
//! in ggml.
//!
//! RMS_NORM: `y = x * (1 / sqrt(mean(x^2) + eps))`; NORM: `y = (x - mean) *
//! (1 / sqrt(var + eps))` with the population variance. Sums are accumulated
//! in f64 (ggml's `ggml_float`), the mean, variance and scale are rounded to
//! f32 as in ggml. Any strides; in place works (statistics are gathered
//! before the row is written). Threads split the rows.
//!
//! Rows with contiguous elements use the [`Simd`] primitives (f64 sums with
//! AVX2, then one f32 multiply per element); the per-element results are
//! those of the strided loop up to the summation order of the f64 sums.
//! Big tensors prefetch the next row while scaling the current one.

use tessera::{DType, Error, Op, Result};

use super::NodeCtx;
use super::elem::rows;
use super::simd::{Prefetch, Simd};

/// Source size from which the scaling pass prefetches the next row. The
/// hardware prefetchers already stream cache-resident rows (software
/// prefetching then costs fill buffers: 375 against 305 µs for a 16 MiB
/// RMS_NORM on the 2-core test machine), but they fall behind on rows that
/// come from DRAM (3.4 against 6.5 ms for a 128 MiB one).
const PREFETCH_MIN_BYTES: usize = 32 << 20;

/// Compute this thread's share of an L2_NORM node.
pub fn l2_norm(ctx: &NodeCtx) -> Result<()> {
    let Op::L2Norm { eps } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not an L2_NORM node"));
    };
    let src = ctx.src(0)?;
    let d = &ctx.dst;
    if src.layout.dtype != DType::F32
        || d.layout.dtype != DType::F32
        || src.layout.ne != d.layout.ne
    {
        return Err(Error::op(
            "L2_NORM",
            format!(
                "source {} and result {} must be F32 of one shape",
                src.layout, d.layout
            ),
        ));
    }
    let ne = d.layout.ne;
    let (snb, dnb) = (src.nb(0), d.nb(0));
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range row of both tensors.
        let (x, y) = unsafe { (src.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        let mut sum = 0.0f64;
        for i in 0..ne[0] {
            // SAFETY: `i < ne0`: an aligned f32 element of the row.
            let v = unsafe { (x.add(i * snb) as *const f32).read() };
            sum += f64::from(v * v);
        }
        let scale = 1.0 / (sum as f32).sqrt().max(eps);
        for i in 0..ne[0] {
            // SAFETY: `i < ne0`: aligned f32 elements; L2_NORM is not in
            // place, so the rows do not overlap.
            unsafe {
                let v = (x.add(i * snb) as *const f32).read();
                (y.add(i * dnb) as *mut f32).write(v * scale);
            }
        }
    }
    Ok(())
}

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
    let simd = Simd::new(ctx.isa);
    let contiguous = snb == 4 && dnb == 4;
    let prefetch = src.layout.nbytes() >= PREFETCH_MIN_BYTES;
    let mut it = rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne).peekable();
    while let Some((i1, i2, i3)) = it.next() {
        // SAFETY: in-range row of both tensors.
        let (x, y) = unsafe { (src.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        if contiguous {
            // While scaling this row, pull in the next one (big tensors only).
            let pf = it
                .peek()
                .filter(|_| prefetch)
                .map_or(Prefetch::NONE, |&(j1, j2, j3)| Prefetch {
                    // SAFETY: in-range row of both tensors.
                    rows: unsafe {
                        [
                            src.row(j1, j2, j3) as *const u8,
                            d.row(j1, j2, j3) as *const u8,
                        ]
                    },
                    bytes: 4 * n,
                });
            let (x, y) = (x as *const f32, y as *mut f32);
            // SAFETY: rows of `n` contiguous f32; `y` equals `x` (in place)
            // or does not overlap it (executor contract).
            unsafe {
                if rms {
                    let mean = (simd.sum_sq_f64(x, 0.0, n) / n as f64) as f32;
                    simd.sub_scale(y, x, 0.0, 1.0 / (mean + eps).sqrt(), n, pf);
                } else {
                    let mean = (simd.sum_f64(x, n) / n as f64) as f32;
                    let var = (simd.sum_sq_f64(x, mean, n) / n as f64) as f32;
                    simd.sub_scale(y, x, mean, 1.0 / (var + eps).sqrt(), n, pf);
                }
            }
            continue;
        }
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
