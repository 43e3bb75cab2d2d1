//! Row reductions: ARGMAX and SUM_ROWS.
//!
//! ARGMAX follows ggml's `ggml_vec_argmax_f32` exactly: `max = MAX(max, x[i])`
//! with C's `MAX(a, b) = a > b ? a : b`, starting from `-inf`, and the index
//! moves to `i` whenever `max == x[i]`. So ties go to the *last* equal
//! element; a row of `-inf` gives its last index; a NaN never becomes the
//! answer but resets the running maximum to the element after it (`[5, NaN,
//! 1]` gives 2), and a row of NaNs gives 0.
//!
//! SUM_ROWS sums each row in f64 (ggml's `ggml_vec_sum_f32`) and stores it
//! as f32. Both read F32 with any strides; threads split the rows.

use tessera::{DType, Error, Result};

use super::NodeCtx;
use super::elem::{load, rows};

/// ggml's argmax of `n` values given by `at`.
pub fn argmax_ggml(n: usize, at: impl Fn(usize) -> f32) -> usize {
    let mut max = f32::NEG_INFINITY;
    let mut idx = 0;
    for i in 0..n {
        let v = at(i);
        max = if max > v { max } else { v };
        if max == v {
            idx = i;
        }
    }
    idx
}

/// Compute this thread's share of an ARGMAX node.
pub fn argmax(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let d = &ctx.dst;
    let (sne, dne) = (src.layout.ne, d.layout.ne);
    if src.layout.dtype != DType::F32
        || d.layout.dtype != DType::I32
        || sne[2] != 1
        || sne[3] != 1
        || dne != [sne[1], 1, 1, 1]
        || i32::try_from(sne[0]).is_err()
    {
        return Err(Error::op(
            "ARGMAX",
            format!("input {} does not fit result {}", src.layout, d.layout),
        ));
    }
    let nb0 = src.nb(0);
    for i1 in ctx.split(sne[1]) {
        // SAFETY: `i1 < ne1`.
        let row = unsafe { src.row(i1, 0, 0) as *const u8 };
        // SAFETY: callers pass `i < ne0`: aligned elements of the row.
        let idx = argmax_ggml(sne[0], |i| unsafe { load::<f32>(row, i, nb0) });
        // `idx < ne0 <= i32::MAX` (checked above).
        let v = i32::try_from(idx).unwrap_or(i32::MAX);
        // SAFETY: `i1 < dst.ne0`, an aligned I32 element.
        unsafe { (d.at(i1, 0, 0, 0) as *mut i32).write(v) };
    }
    Ok(())
}

/// Compute this thread's share of a SUM_ROWS node.
pub fn sum_rows(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let d = &ctx.dst;
    let (sne, dne) = (src.layout.ne, d.layout.ne);
    if src.layout.dtype != DType::F32
        || d.layout.dtype != DType::F32
        || dne != [1, sne[1], sne[2], sne[3]]
    {
        return Err(Error::op(
            "SUM_ROWS",
            format!("input {} does not fit result {}", src.layout, d.layout),
        ));
    }
    let nb0 = src.nb(0);
    for (i1, i2, i3) in rows(ctx.split(sne[1] * sne[2] * sne[3]), &sne) {
        // SAFETY: in-range row of both tensors.
        let (row, out) = unsafe { (src.row(i1, i2, i3) as *const u8, d.row(i1, i2, i3)) };
        let mut sum = 0.0f64;
        for i in 0..sne[0] {
            // SAFETY: `i < ne0`: aligned elements of the row.
            sum += f64::from(unsafe { load::<f32>(row, i, nb0) });
        }
        // SAFETY: element 0 of an in-range row of `dst`, aligned.
        unsafe { (out as *mut f32).write(sum as f32) };
    }
    Ok(())
}
