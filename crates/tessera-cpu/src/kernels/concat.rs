//! CONCAT: `src0` and `src1` joined along one dimension (ggml's
//! `ggml_compute_forward_concat`), for any non-quantized type.
//!
//! Element `(i0, i1, i2, i3)` of `dst` comes from `src0` when its index along
//! `dim` is below `src0.ne[dim]`, else from `src1` at that index minus
//! `src0.ne[dim]`. Elements are copied as bytes, with any strides (a run of
//! contiguous elements is one `memcpy`). Threads split the rows of `dst`.

use tessera::{Error, Op, Result};

use super::elem::rows;
use super::{NodeCtx, TensorRef};

/// Compute this thread's share of a CONCAT node.
pub fn concat(ctx: &NodeCtx) -> Result<()> {
    let Op::Concat { dim } = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a CONCAT node"));
    };
    let dim = usize::from(dim);
    let (a, b) = (ctx.src(0)?, ctx.src(1)?);
    let d = &ctx.dst;
    let (ane, bne, ne) = (a.layout.ne, b.layout.ne, d.layout.ne);
    let t = d.layout.dtype;
    let fits = dim < 4
        && a.layout.dtype == t
        && b.layout.dtype == t
        && !t.is_quantized()
        && (0..4).all(|i| {
            if i == dim {
                ane[i].checked_add(bne[i]) == Some(ne[i])
            } else {
                ane[i] == ne[i] && bne[i] == ne[i]
            }
        });
    if !fits {
        return Err(Error::op(
            "CONCAT",
            format!(
                "{} and {} along dim {dim} do not give {}",
                a.layout, b.layout, d.layout
            ),
        ));
    }
    let size = t.type_size();
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range row of `dst`.
        let out = unsafe { d.row(i1, i2, i3) };
        if dim == 0 {
            // The row indices are in range of both sources (equal extents
            // outside dim 0); an empty source has no row to point at.
            if ane[0] > 0 {
                // SAFETY: see above; the run is the first `ane0` elements.
                unsafe { copy_run(a.row(i1, i2, i3), a.nb(0), out, d.nb(0), ane[0], size) };
            }
            if bne[0] > 0 {
                // SAFETY: see above; the run is the last `bne0` elements.
                unsafe {
                    copy_run(
                        b.row(i1, i2, i3),
                        b.nb(0),
                        out.add(ane[0] * d.nb(0)),
                        d.nb(0),
                        bne[0],
                        size,
                    )
                };
            }
            continue;
        }
        let mut idx = [0, i1, i2, i3];
        let from: &TensorRef = if idx[dim] < ane[dim] {
            &a
        } else {
            idx[dim] -= ane[dim];
            &b
        };
        // SAFETY: `idx` is in range of the chosen source.
        unsafe {
            copy_run(
                from.row(idx[1], idx[2], idx[3]),
                from.nb(0),
                out,
                d.nb(0),
                ne[0],
                size,
            )
        };
    }
    Ok(())
}

/// Copy `n` elements of `size` bytes between strided runs.
///
/// # Safety
/// Both runs must be in bounds and must not overlap.
unsafe fn copy_run(s: *const u8, snb: usize, d: *mut u8, dnb: usize, n: usize, size: usize) {
    if snb == size && dnb == size {
        // SAFETY: contiguous runs of `n * size` bytes (precondition).
        unsafe { std::ptr::copy_nonoverlapping(s, d, n * size) };
        return;
    }
    for i in 0..n {
        // SAFETY: element `i` of each run (precondition).
        unsafe { std::ptr::copy_nonoverlapping(s.add(i * snb), d.add(i * dnb), size) };
    }
}
