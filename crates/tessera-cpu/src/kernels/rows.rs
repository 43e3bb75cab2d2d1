//! GET_ROWS and SET_ROWS: gather and scatter rows at indices from a tensor.
//!
//! GET_ROWS (ggml's `ggml_compute_forward_get_rows`): `dst[:, i10, i11, i12]
//! = src0[:, ids[i10, i11, i12], i11, i12]`, converting F32/F16/BF16 and the
//! quantized types to F32 (I32 rows are copied as I32).
//!
//! SET_ROWS (ggml's `ggml_compute_forward_set_rows`; Tessera's operands are
//! `[dst, rows, ids]`): `dst[:, ids[i, i02 % r2, i03 % r3], i02, i03] =
//! rows[:, i, i02, i03]`, converting the F32 rows to the destination's type
//! (quantized with [`tessera::quant::from_f32`]). ids are I32 or I64.
//!
//! The indices are data (from a file, a peer): an index outside the rows of
//! the indexed tensor is an [`Error::OutOfBounds`] naming the op, the index
//! and the row count, never a wild access. SET_ROWS checks every index
//! before writing anything, so a bad index leaves the destination untouched.
//! Threads of SET_ROWS split the *destination* rows (thread `idx % nth`
//! writes row `idx`), so duplicate indices never race: the last source row
//! with a given index wins, as in a sequential loop.

use tessera::{DType, Error, Result, quant};

use super::elem::{Float, with_float};
use super::{NodeCtx, TensorRef};

/// Read index `(i0, i1, i2)` of an I32 or I64 index tensor.
///
/// # Safety
/// The indices must be in range.
unsafe fn read_index(ids: &TensorRef, i0: usize, i1: usize, i2: usize) -> i64 {
    // SAFETY: forwarded precondition; the pointer is aligned for its type.
    unsafe {
        let p = ids.at(i0, i1, i2, 0);
        match ids.layout.dtype {
            DType::I64 => (p as *const i64).read(),
            _ => i64::from((p as *const i32).read()),
        }
    }
}

fn out_of_bounds(op: &str, idx: i64, at: (usize, usize, usize), rows: usize) -> Error {
    Error::OutOfBounds(format!(
        "{op}: index {idx} at ids[{}, {}, {}] is outside the {rows} rows of the indexed tensor",
        at.0, at.1, at.2
    ))
}

/// Compute this thread's share of a GET_ROWS node.
pub fn get_rows(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let ids = ctx.src(1)?;
    let d = &ctx.dst;
    let (sne, ine, dne) = (src.layout.ne, ids.layout.ne, d.layout.ne);
    let st = src.layout.dtype;
    let want = if st == DType::I32 {
        DType::I32
    } else {
        DType::F32
    };
    if ids.layout.dtype != DType::I32
        || d.layout.dtype != want
        || dne != [sne[0], ine[0], ine[1], ine[2]]
        || sne[2] != ine[1]
        || sne[3] != ine[2]
    {
        return Err(Error::op(
            "GET_ROWS",
            format!(
                "rows {}, ids {} and result {} do not fit",
                src.layout, ids.layout, d.layout
            ),
        ));
    }
    let nc = sne[0];
    let nr = ine[0] * ine[1] * ine[2];
    for i in ctx.split(nr) {
        let (i10, i11, i12) = (i % ine[0], i / ine[0] % ine[1], i / (ine[0] * ine[1]));
        // SAFETY: `(i10, i11, i12)` is in range of `ids`.
        let idx = unsafe { read_index(&ids, i10, i11, i12) };
        let row = usize::try_from(idx)
            .ok()
            .filter(|&r| r < sne[1])
            .ok_or_else(|| out_of_bounds("GET_ROWS", idx, (i10, i11, i12), sne[1]))?;
        // SAFETY: `row < ne01`, `i11 < ne02`, `i12 < ne03` (checked above);
        // `(i10, i11, i12)` is a row of `dst`.
        let (s, o) = unsafe { (src.row(row, i11, i12) as *const u8, d.row(i10, i11, i12)) };
        if st.is_quantized() || st == DType::I32 {
            let sbytes = st.row_size(nc)?;
            // SAFETY: `support` checked that both tensors have contiguous rows,
            // so each row is `row_size` bytes inside its tensor; `dst` does
            // not overlap `src`.
            let sr = unsafe { std::slice::from_raw_parts(s, sbytes) };
            if st == DType::I32 {
                // SAFETY: as above, an I32 row of `nc` elements.
                let or = unsafe { std::slice::from_raw_parts_mut(o, sbytes) };
                or.copy_from_slice(sr);
            } else {
                // SAFETY: as above, an F32 row of `nc` aligned elements.
                let or = unsafe { std::slice::from_raw_parts_mut(o as *mut f32, nc) };
                quant::to_f32(st, sr, or)?;
            }
            continue;
        }
        let (snb, onb) = (src.nb(0), d.nb(0));
        with_float!(st, T => {
            for j in 0..nc {
                // SAFETY: `j < nc`: aligned elements of the two rows.
                unsafe { (o.add(j * onb) as *mut f32).write((s.add(j * snb) as *const T).read().to_f32()) };
            }
        }, _ => return Err(Error::unsupported("CPU", format!("GET_ROWS of {st}"))));
    }
    Ok(())
}

/// Compute this thread's share of a SET_ROWS node.
pub fn set_rows(ctx: &NodeCtx) -> Result<()> {
    let rows = ctx.src(1)?;
    let ids = ctx.src(2)?;
    let d = &ctx.dst;
    let (dne, rne, ine) = (d.layout.ne, rows.layout.ne, ids.layout.ne);
    let dt = d.layout.dtype;
    let fits = rows.layout.dtype == DType::F32
        && matches!(ids.layout.dtype, DType::I32 | DType::I64)
        && dne[0] == rne[0]
        && dne[2] == rne[2]
        && dne[3] == rne[3]
        && ine[0] == rne[1]
        && ine[1] > 0
        && ine[2] > 0
        && rne[2].is_multiple_of(ine[1])
        && rne[3].is_multiple_of(ine[2]);
    if !fits {
        return Err(Error::op(
            "SET_ROWS",
            format!(
                "destination {}, rows {} and ids {} do not fit",
                d.layout, rows.layout, ids.layout
            ),
        ));
    }
    // Check every index that will be used before writing anything.
    for i12 in 0..ine[2].min(rne[3]) {
        for i11 in 0..ine[1].min(rne[2]) {
            for i in 0..rne[1] {
                // SAFETY: `i < ine0`, `i11 < ine1`, `i12 < ine2`.
                let idx = unsafe { read_index(&ids, i, i11, i12) };
                if usize::try_from(idx).map_or(true, |r| r >= dne[1]) {
                    return Err(out_of_bounds("SET_ROWS", idx, (i, i11, i12), dne[1]));
                }
            }
        }
    }
    let nc = dne[0];
    let nth = ctx.nth.max(1);
    let (rnb, dnb) = (rows.nb(0), d.nb(0));
    for i03 in 0..rne[3] {
        for i02 in 0..rne[2] {
            for i in 0..rne[1] {
                let at = (i, i02 % ine[1], i03 % ine[2]);
                // SAFETY: in range (reduced modulo the ids' extents).
                let raw = unsafe { read_index(&ids, at.0, at.1, at.2) };
                // Checked above already; cheap to keep the access obviously safe.
                let idx = usize::try_from(raw)
                    .ok()
                    .filter(|&r| r < dne[1])
                    .ok_or_else(|| out_of_bounds("SET_ROWS", raw, at, dne[1]))?;
                if idx % nth != ctx.ith {
                    continue;
                }
                // SAFETY: `idx < dne1`; the other indices are in range of both
                // tensors.
                let (s, o) = unsafe { (rows.row(i, i02, i03) as *const u8, d.row(idx, i02, i03)) };
                if dt.is_quantized() {
                    // SAFETY: `support` checked contiguous rows on both sides:
                    // an F32 row of `nc` aligned values and a row of
                    // `row_size` bytes; `dst` does not overlap the rows.
                    let (sr, or) = unsafe {
                        (
                            std::slice::from_raw_parts(s as *const f32, nc),
                            std::slice::from_raw_parts_mut(o, dt.row_size(nc)?),
                        )
                    };
                    quant::from_f32(dt, sr, or)?;
                    continue;
                }
                with_float!(dt, T => {
                    for j in 0..nc {
                        // SAFETY: `j < nc`: aligned elements of the two rows.
                        unsafe { (o.add(j * dnb) as *mut T).write(T::from_f32((s.add(j * rnb) as *const f32).read())) };
                    }
                }, _ => return Err(Error::unsupported("CPU", format!("SET_ROWS into {dt}"))));
            }
        }
    }
    Ok(())
}
