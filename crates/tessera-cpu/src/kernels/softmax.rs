//! SOFT_MAX: `softmax(x * scale + slope * mask)` over each row (ggml's
//! `ggml_compute_forward_soft_max_f32`).
//!
//! - The mask (F16 or F32, optional) row for row `(i1, i2, i3)` of `x` is
//!   `(i1, i2 % mask.ne2, i3 % mask.ne3)`.
//! - ALiBi: when `max_bias > 0`, head `h = i2` gets `slope = m0^(h+1)` for
//!   `h < n_head_log2` and `m1^(2(h - n_head_log2) + 1)` otherwise, with
//!   `n_head_log2` the largest power of two `<= ne2`,
//!   `m0 = 2^(-max_bias / n_head_log2)`, `m1 = 2^(-(max_bias/2) / n_head_log2)`;
//!   otherwise `slope = 1`.
//! - The maximum uses ggml's `MAX(max, w)` (`max > w ? max : w`), the sum of
//!   exponentials is accumulated in f64 and the row scaled by `(f32)(1/sum)`.
//! - Sinks (F32 `src2`, optional, one per head `i2`; ggml's
//!   `ggml_soft_max_add_sinks`): `max = MAX(max, sink)` after the row's
//!   maximum, and `(f64) expf(sink - max)` joins the sum after the row's
//!   exponentials; the sink is not scaled, masked nor output.
//! - A row whose every logit is `-inf` (fully masked, no sink) becomes NaN, exactly as
//!   in ggml (`exp(-inf - -inf)` is NaN); a row with at least one finite
//!   logit gets exact zeros at the `-inf` entries.
//!
//! F32 input and result, any element strides; in place works (each logit is
//! read before its slot is written). Threads split the rows.
//!
//! Rows with contiguous elements (and mask rows) take the [`Simd`]
//! primitives: three passes over the row (scale, mask and maximum; `exp`
//! and f64 sum; normalise), with AVX2's polynomial `exp` (within 2 ulp,
//! see `exp_avx2`) on that path.

use half::f16;
use tessera::{DType, Error, Op, Result};

use super::elem::{Float, load, rows};
use super::simd::{Prefetch, Simd};
use super::{NodeCtx, TensorRef};

/// Compute this thread's share of a SOFT_MAX node.
pub fn soft_max(ctx: &NodeCtx) -> Result<()> {
    let Op::SoftMax { scale, max_bias } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a SOFT_MAX node"));
    };
    let x = ctx.src(0)?;
    let d = &ctx.dst;
    if x.layout.dtype != DType::F32 || d.layout.dtype != DType::F32 || x.layout.ne != d.layout.ne {
        return Err(Error::op(
            "SOFT_MAX",
            format!(
                "input {} and result {} must be F32 of one shape",
                x.layout, d.layout
            ),
        ));
    }
    let sinks = ctx.src[2];
    if let Some(s) = sinks {
        let l = &s.layout;
        if l.dtype != DType::F32 || l.ne[0] < d.layout.ne[2] || s.nb(0) != 4 {
            return Err(Error::op(
                "SOFT_MAX",
                format!("sinks {l} must be F32 with one logit per head"),
            ));
        }
    }
    let x = Src { x, sinks };
    match ctx.src[1] {
        None => run::<f32>(ctx, &x, None, scale, max_bias),
        Some(m) => {
            let (ne, mne) = (d.layout.ne, m.layout.ne);
            if mne[0] != ne[0] || mne[1] < ne[1] || mne[2] == 0 || mne[3] == 0 {
                return Err(Error::op(
                    "SOFT_MAX",
                    format!("mask {} does not fit {}", m.layout, d.layout),
                ));
            }
            match m.layout.dtype {
                DType::F32 => run::<f32>(ctx, &x, Some(m), scale, max_bias),
                DType::F16 => run::<f16>(ctx, &x, Some(m), scale, max_bias),
                t => Err(Error::unsupported(
                    "CPU",
                    format!("SOFT_MAX with a {t} mask"),
                )),
            }
        }
    }
}

/// ALiBi slope of head `h` among `n_head` heads (1 when `max_bias <= 0`).
pub fn alibi_slope(max_bias: f32, h: usize, n_head: usize) -> f32 {
    if max_bias <= 0.0 || n_head == 0 {
        return 1.0;
    }
    let n_head_log2 = 1usize << (usize::BITS - 1 - n_head.leading_zeros());
    let nl = n_head_log2 as f32;
    let m0 = 2.0f32.powf(-max_bias / nl);
    let m1 = 2.0f32.powf(-(max_bias / 2.0) / nl);
    if h < n_head_log2 {
        m0.powf((h + 1) as f32)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f32)
    }
}

/// The input and the optional sinks.
struct Src {
    x: TensorRef,
    sinks: Option<TensorRef>,
}

fn run<M: Float>(
    ctx: &NodeCtx,
    src: &Src,
    mask: Option<TensorRef>,
    scale: f32,
    max_bias: f32,
) -> Result<()> {
    let x = &src.x;
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let n = ne[0];
    let (xnb, dnb) = (x.nb(0), d.nb(0));
    let simd = Simd::new(ctx.isa);
    let contiguous = xnb == 4 && dnb == 4 && mask.is_none_or(|m| m.nb(0) == size_of::<M>());
    let mask_f16 = M::DTYPE == DType::F16;
    let mut it = rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne).peekable();
    while let Some((i1, i2, i3)) = it.next() {
        let slope = alibi_slope(max_bias, i2, ne[2]);
        // SAFETY: `i2 < ne2 <= sinks.ne0`, contiguous f32 (checked above).
        let sink = src
            .sinks
            .map(|s| unsafe { (s.at(i2, 0, 0, 0) as *const f32).read() });
        // SAFETY: in-range rows; the mask row indices are reduced modulo its
        // extents and `i1 < ne1 <= mask.ne1` (checked above).
        let (xr, yr) = unsafe { (x.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        // SAFETY: as above.
        let mr =
            mask.map(|m| unsafe { (m.row(i1, i2 % m.ne(2), i3 % m.ne(3)) as *const u8, m.nb(0)) });
        if contiguous {
            let (xp, yp) = (xr as *const f32, yr as *mut f32);
            let m = mr.map(|(p, _)| (p, mask_f16, slope));
            // While computing this row's exponentials, pull in the next row.
            let pf = it.peek().map_or(Prefetch::NONE, |&(j1, j2, j3)| Prefetch {
                // SAFETY: in-range row of both tensors.
                rows: unsafe {
                    [
                        x.row(j1, j2, j3) as *const u8,
                        d.row(j1, j2, j3) as *const u8,
                    ]
                },
                bytes: 4 * n,
            });
            // SAFETY: rows of `n` contiguous f32 (the mask row: `n`
            // contiguous elements of its type, `mask.ne0 == ne0`); `yp`
            // equals `xp` or does not overlap it (executor contract).
            unsafe {
                let mut max = simd.softmax_scale_max(yp, xp, scale, m, n);
                if let Some(sk) = sink {
                    max = if max > sk { max } else { sk };
                }
                let mut sum = simd.exp_sub_sum(yp, max, n, pf);
                if let Some(sk) = sink {
                    sum += f64::from((sk - max).exp());
                }
                simd.sub_scale(yp, yp, 0.0, (1.0 / sum) as f32, n, Prefetch::NONE);
            }
            continue;
        }
        // Callers pass `i < n`: aligned f32 elements of the row; raw accesses
        // tolerate `yr == xr` (in place).
        let put = |i: usize, v: f32| {
            // SAFETY: see above.
            unsafe { (yr.add(i * dnb) as *mut f32).write(v) }
        };
        let get = |i: usize| {
            // SAFETY: see above.
            unsafe { (yr.add(i * dnb) as *const f32).read() }
        };
        let mut max = f32::NEG_INFINITY;
        for i in 0..n {
            // SAFETY: `i < n`, aligned elements of the input and mask rows.
            let mut w = unsafe { load::<f32>(xr, i, xnb) } * scale;
            if let Some((mp, mnb)) = mr {
                // SAFETY: as above.
                w += slope * unsafe { load::<M>(mp, i, mnb) };
            }
            put(i, w);
            max = if max > w { max } else { w };
        }
        if let Some(sk) = sink {
            max = if max > sk { max } else { sk };
        }
        let mut sum = 0.0f64;
        for i in 0..n {
            let e = (get(i) - max).exp();
            sum += f64::from(e);
            put(i, e);
        }
        if let Some(sk) = sink {
            sum += f64::from((sk - max).exp());
        }
        let inv = (1.0 / sum) as f32;
        for i in 0..n {
            put(i, get(i) * inv);
        }
    }
    Ok(())
}
