//! GET_ROWS and SET_ROWS: gather and scatter rows at indices from a tensor.
//!
//! GET_ROWS (ggml's `ggml_compute_forward_get_rows`): `dst[:, i10, i11, i12]
//! = src0[:, ids[i10, i11, i12], i11, i12]`, converting F32/F16/BF16 and the
//! quantized types to F32 (I32 rows are copied as I32).
//!
//! SET_ROWS (ggml's `ggml_compute_forward_set_rows`; Tessera's operands are
//! `[dst, rows, ids]`): `dst[:, ids[i, i02 % r2, i03 % r3], i02, i03] =
//! rows[:, i, i02, i03]`, converting the F32 rows to the destination's type
//! (quantized with [`tessera::quant::from_f32`] or its AVX2 twin, same bytes). ids are I32 or I64.
//!
//! The indices are data (from a file, a peer): an index outside the rows of
//! the indexed tensor is an [`Error::OutOfBounds`] naming the op, the index
//! and the row count, never a wild access. SET_ROWS checks every index
//! before writing anything, so a bad index leaves the destination untouched.
//! GET_ROWS copies F32 rows, widens F16 and dequantizes Q8_0/Q4_0 with the
//! [`Simd`] conversions (AVX2), and splits the columns of each row between
//! threads when there are fewer rows than threads.
//! Threads of SET_ROWS split the *destination* rows (thread `idx % nth`
//! writes row `idx`), so duplicate indices never race: the last source row
//! with a given index wins, as in a sequential loop.

use tessera::{DType, Error, Result};

use super::elem::{Float, split_aligned, with_float};
use super::simd::Simd;
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
    let simd = Simd::new(ctx.isa);
    // Enough rows: threads split them. Fewer rows than threads (decode's
    // single token): every thread takes a range of columns of each row,
    // whole blocks and 64-byte aligned in the output.
    let (row_range, cols) = if nr >= ctx.nth {
        (ctx.split(nr), 0..nc)
    } else {
        let quantum = st.block_size().max(16);
        (0..nr, split_aligned(ctx.ith, ctx.nth, nc, quantum))
    };
    if cols.is_empty() {
        return Ok(());
    }
    for i in row_range {
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
        // SAFETY: a row of each tensor; `cols` lies in `0..nc` and starts
        // and ends on block boundaries (or at `nc`).
        unsafe { gather(simd, st, s, src.nb(0), o, d.nb(0), cols.clone())? };
    }
    Ok(())
}

/// Convert columns `cols` of one source row (`st`, element stride `snb`)
/// into the result row (F32, or I32 for I32 sources; stride `onb`).
///
/// # Safety
/// `s` and `o` are rows of their tensors; `cols` lies within the row and
/// starts on a block boundary; quantized and I32 rows are contiguous (checked
/// by `support`); the rows do not overlap.
unsafe fn gather(
    simd: Simd,
    st: DType,
    s: *const u8,
    snb: usize,
    o: *mut u8,
    onb: usize,
    cols: std::ops::Range<usize>,
) -> Result<()> {
    let n = cols.len();
    if st.is_quantized() || st == DType::I32 {
        let bs = st.block_size();
        let (sbytes, soff) = (st.row_size(n)?, cols.start / bs * st.type_size());
        // SAFETY: contiguous rows (precondition): these columns are `sbytes`
        // bytes at `soff` of the source row and `n` 4-byte values at
        // `4 * cols.start` of the result row.
        let (sr, or) = unsafe {
            (
                std::slice::from_raw_parts(s.add(soff), sbytes),
                std::slice::from_raw_parts_mut(o.add(4 * cols.start), 4 * n),
            )
        };
        if st == DType::I32 {
            or.copy_from_slice(sr);
            return Ok(());
        }
        // SAFETY: the result row holds aligned f32 (executor contract).
        let of = unsafe { std::slice::from_raw_parts_mut(or.as_mut_ptr().cast::<f32>(), n) };
        return simd.dequantize_row(st, sr, of);
    }
    // SAFETY: columns `cols` of two rows with the given strides.
    let (s, o) = unsafe { (s.add(cols.start * snb), o.add(cols.start * onb)) };
    match st {
        // SAFETY: `n` contiguous elements of each row, not overlapping.
        DType::F32 if snb == 4 && onb == 4 => unsafe { std::ptr::copy_nonoverlapping(s, o, 4 * n) },
        // SAFETY: as above, aligned f16 and f32.
        DType::F16 if snb == 2 && onb == 4 => unsafe { simd.f16_to_f32(o.cast(), s.cast(), n) },
        _ => with_float!(st, T => {
            for j in 0..n {
                // SAFETY: `j < n`: aligned elements of the two rows.
                unsafe { (o.add(j * onb) as *mut f32).write((s.add(j * snb) as *const T).read().to_f32()) };
            }
        }, _ => return Err(Error::unsupported("CPU", format!("GET_ROWS of {st}")))),
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
    let simd = Simd::new(ctx.isa);
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
                    simd.quantize_row(dt, sr, or)?;
                    continue;
                }
                if dt == DType::F16 && rnb == 4 && dnb == 2 {
                    // SAFETY: `nc` contiguous aligned elements of each row;
                    // `dst` does not overlap the rows.
                    unsafe { simd.f32_to_f16(o.cast(), s.cast(), nc) };
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
