//! REPEAT and PAD: copies of a tensor into a bigger one (ggml's
//! `ggml_compute_forward_repeat` and `_pad`, not circular).
//!
//! REPEAT: `dst[i] = src[i % ne_src]` in every dimension. PAD: `dst[i] =
//! src[i - lp]` where `lp <= i < lp + ne_src` in every dimension, 0
//! elsewhere. Elements are copied as raw bits (2- or 4-byte types: F16,
//! BF16, F32, I32), any strides on both sides. Threads split the rows of
//! `dst`.

use tessera::{Error, Op, Result};

use super::elem::{rows, wrap};
use super::{NodeCtx, TensorRef};

/// Copy element `i` of row `s` (stride `snb`) to element `j` of row `d`.
///
/// # Safety
/// Both elements in range and aligned for `size` (2 or 4) bytes.
#[inline(always)]
unsafe fn copy_elem(
    d: *mut u8,
    j: usize,
    dnb: usize,
    s: *const u8,
    i: usize,
    snb: usize,
    size: usize,
) {
    // SAFETY: forwarded precondition.
    unsafe {
        if size == 4 {
            (d.add(j * dnb) as *mut u32).write((s.add(i * snb) as *const u32).read());
        } else {
            (d.add(j * dnb) as *mut u16).write((s.add(i * snb) as *const u16).read());
        }
    }
}

/// Write zero to element `j` of row `d` (stride `dnb`).
///
/// # Safety
/// The element in range and aligned for `size` (2 or 4) bytes.
#[inline(always)]
unsafe fn zero_elem(d: *mut u8, j: usize, dnb: usize, size: usize) {
    // SAFETY: forwarded precondition.
    unsafe {
        if size == 4 {
            (d.add(j * dnb) as *mut u32).write(0);
        } else {
            (d.add(j * dnb) as *mut u16).write(0);
        }
    }
}

/// The element size of a tile op's operands (2 or 4, same type both sides).
fn elem_size(ctx: &NodeCtx, src: &TensorRef) -> Result<usize> {
    let (s, d) = (src.layout.dtype, ctx.dst.layout.dtype);
    let size = d.type_size();
    if s != d || d.is_quantized() || !matches!(size, 2 | 4) {
        return Err(Error::unsupported(
            "CPU",
            format!("{} of {s} into {d}", ctx.op.name()),
        ));
    }
    Ok(size)
}

/// Compute this thread's share of a REPEAT node.
pub fn repeat(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let size = elem_size(ctx, &src)?;
    let d = &ctx.dst;
    let (ne, sne) = (d.layout.ne, src.layout.ne);
    if ne.contains(&0) {
        return Ok(());
    }
    if sne.contains(&0) || (0..4).any(|i| !ne[i].is_multiple_of(sne[i])) {
        return Err(Error::op(
            "REPEAT",
            format!("{} cannot be tiled to {}", src.layout, d.layout),
        ));
    }
    let (snb, dnb) = (src.nb(0), d.nb(0));
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range rows; the source indices are reduced modulo its extents.
        let (y, x) = unsafe {
            (
                d.row(i1, i2, i3),
                src.row(wrap(i1, sne[1]), wrap(i2, sne[2]), wrap(i3, sne[3])) as *const u8,
            )
        };
        let mut i = 0;
        for j in 0..ne[0] {
            // SAFETY: `j < ne0`, `i < sne0`: aligned elements; REPEAT is
            // not in place, so the rows do not overlap.
            unsafe { copy_elem(y, j, dnb, x, i, snb, size) };
            i += 1;
            if i == sne[0] {
                i = 0;
            }
        }
    }
    Ok(())
}

/// Compute this thread's share of a PAD node.
pub fn pad(ctx: &NodeCtx) -> Result<()> {
    let Op::Pad { lp, rp } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a PAD node"));
    };
    let src = ctx.src(0)?;
    let size = elem_size(ctx, &src)?;
    let d = &ctx.dst;
    let (ne, sne) = (d.layout.ne, src.layout.ne);
    let lp = lp.map(|p| p as usize);
    let rp = rp.map(|p| p as usize);
    let fits =
        (0..4).all(|i| sne[i].checked_add(lp[i]).and_then(|n| n.checked_add(rp[i])) == Some(ne[i]));
    if !fits {
        return Err(Error::op(
            "PAD",
            format!("{} padded by {lp:?}/{rp:?} is not {}", src.layout, d.layout),
        ));
    }
    if ne.contains(&0) {
        return Ok(());
    }
    let (snb, dnb) = (src.nb(0), d.nb(0));
    let inside = |i: usize, k: usize| i >= lp[k] && i - lp[k] < sne[k];
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range row of `dst`.
        let y = unsafe { d.row(i1, i2, i3) };
        if !(inside(i1, 1) && inside(i2, 2) && inside(i3, 3)) {
            for j in 0..ne[0] {
                // SAFETY: `j < ne0`, aligned elements.
                unsafe { zero_elem(y, j, dnb, size) };
            }
            continue;
        }
        // SAFETY: `inside` put each index in range of the source.
        let x = unsafe { src.row(i1 - lp[1], i2 - lp[2], i3 - lp[3]) as *const u8 };
        for j in 0..ne[0] {
            // SAFETY: `j < ne0`; `j - lp0 < sne0` when copying; aligned
            // elements of rows that do not overlap (PAD is not in place).
            unsafe {
                if inside(j, 0) {
                    copy_elem(y, j, dnb, x, j - lp[0], snb, size);
                } else {
                    zero_elem(y, j, dnb, size);
                }
            }
        }
    }
    Ok(())
}
