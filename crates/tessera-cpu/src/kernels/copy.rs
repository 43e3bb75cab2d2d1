//! DUP, CONT and CPY: copy a tensor into another layout, converting the type.
//!
//! ggml's semantics (`ggml_compute_forward_dup`): the elements of the source,
//! taken in its logical row-major order (dimension 0 fastest), are written in
//! the destination's logical row-major order. The two may have different
//! extents (same element count) and any strides. Plain types convert through
//! f32 (F32, F16, BF16) or copy bytes (same type, I32/I64 included).
//! Quantized copies go row by row: the builder and `support` require equal
//! row lengths and contiguous rows, so row `r` of the source (counted over
//! dimensions 1-3) becomes row `r` of the destination: same type copies the
//! row's bytes, F32 to a quantized type quantizes with
//! [`tessera::quant::from_f32`], a quantized type to F32 dequantizes with
//! [`tessera::quant::to_f32`] (or their AVX2 twins, same bytes).
//!
//! Threads split the source rows; every destination element is written by
//! exactly one thread.
//!
//! F32 <-> F16 runs with contiguous elements and the Q8_0/Q4_0 rows use the
//! [`Simd`] conversions (AVX2/F16C), whose bytes are identical to
//! `tessera::quant`'s.

use half::f16;
use tessera::{DType, Error, Result};

use super::elem::{Float, rows, with_float};
use super::simd::Simd;
use super::{NodeCtx, TensorRef};

/// Compute this thread's share of a DUP, CONT or CPY node (`src[0]` into `dst`).
pub fn copy(ctx: &NodeCtx) -> Result<()> {
    let src = ctx.src(0)?;
    let (st, dt) = (src.layout.dtype, ctx.dst.layout.dtype);
    if st.is_quantized() || dt.is_quantized() {
        return copy_quantized_rows(ctx, &src);
    }
    if st == dt {
        let size = st.type_size();
        return walk_segments(ctx, &src, |s, snb, d, dnb, n| {
            // SAFETY: the walker hands out `n` in-range elements of each
            // tensor; `dst` does not overlap `src` (executor contract).
            unsafe { copy_bytes(s, snb, d, dnb, n, size) }
        });
    }
    let simd = Simd::new(ctx.isa);
    match (st, dt) {
        (DType::F32, DType::F16) => {
            return walk_segments(ctx, &src, |s, snb, d, dnb, n| {
                // SAFETY: the walker hands out `n` in-range, aligned elements
                // of each tensor; `dst` does not overlap `src`.
                unsafe {
                    if snb == 4 && dnb == 2 {
                        simd.f32_to_f16(d.cast(), s.cast(), n);
                    } else {
                        convert::<f32, f16>(s, snb, d, dnb, n);
                    }
                }
            });
        }
        (DType::F16, DType::F32) => {
            return walk_segments(ctx, &src, |s, snb, d, dnb, n| {
                // SAFETY: as above.
                unsafe {
                    if snb == 2 && dnb == 4 {
                        simd.f16_to_f32(d.cast(), s.cast(), n);
                    } else {
                        convert::<f16, f32>(s, snb, d, dnb, n);
                    }
                }
            });
        }
        _ => {}
    }
    with_float!(st, S => with_float!(dt, D => {
        walk_segments(ctx, &src, |s, snb, d, dnb, n| {
            // SAFETY: as above; both pointers are aligned for their types.
            unsafe { convert::<S, D>(s, snb, d, dnb, n) }
        })
    }, _ => Err(unsupported(st, dt))), _ => Err(unsupported(st, dt)))
}

fn unsupported(st: DType, dt: DType) -> Error {
    Error::unsupported("CPU", format!("copying {st} to {dt}"))
}

/// Walk this thread's source rows and hand `f` maximal runs of elements that
/// are consecutive along dimension 0 in both tensors: `(src, src_nb0, dst,
/// dst_nb0, len)`.
fn walk_segments(
    ctx: &NodeCtx,
    src: &TensorRef,
    mut f: impl FnMut(*const u8, usize, *mut u8, usize, usize),
) -> Result<()> {
    let dst = &ctx.dst;
    let (sne, dne) = (src.layout.ne, dst.layout.ne);
    let nrows = sne[1] * sne[2] * sne[3];
    if sne[0] == 0 || nrows == 0 {
        return Ok(());
    }
    let range = ctx.split(nrows);
    if sne == dne {
        for (i1, i2, i3) in rows(range, &sne) {
            // SAFETY: in-range row indices of two tensors of the same extents.
            let (s, d) = unsafe { (src.row(i1, i2, i3), dst.row(i1, i2, i3)) };
            f(s, src.nb(0), d, dst.nb(0), sne[0]);
        }
        return Ok(());
    }
    if dne[0] == 0 {
        return Ok(());
    }
    // Destination position of the first element of the first row: element
    // `d0` of destination row `first_row`; later rows are counted.
    let first = range.start * sne[0];
    let mut d0 = first % dne[0];
    let first_row = first / dne[0];
    let d_rows = dne[1] * dne[2] * dne[3];
    let mut drows = rows(first_row.min(d_rows)..d_rows, &dne);
    let mut cur = drows.next();
    for (i1, i2, i3) in rows(range, &sne) {
        // SAFETY: in-range source row.
        let srow = unsafe { src.row(i1, i2, i3) };
        let mut j = 0;
        while j < sne[0] {
            let Some((o1, o2, o3)) = cur else {
                return Err(Error::device(
                    "CPU",
                    "copy: element counts of source and destination differ",
                ));
            };
            let n = (sne[0] - j).min(dne[0] - d0);
            // SAFETY: `j < ne0` and `(d0, o1, o2, o3)` is in range.
            let (s, d) = unsafe { (srow.add(j * src.nb(0)), dst.at(d0, o1, o2, o3)) };
            f(s, src.nb(0), d, dst.nb(0), n);
            j += n;
            d0 += n;
            if d0 == dne[0] {
                d0 = 0;
                cur = drows.next();
            }
        }
    }
    Ok(())
}

/// Copy `n` elements of `size` bytes.
///
/// # Safety
/// Both runs must be in bounds and must not overlap.
unsafe fn copy_bytes(s: *const u8, snb: usize, d: *mut u8, dnb: usize, n: usize, size: usize) {
    if snb == size && dnb == size {
        // SAFETY: both runs are `n * size` contiguous bytes (precondition).
        unsafe { std::ptr::copy_nonoverlapping(s, d, n * size) };
        return;
    }
    for i in 0..n {
        // SAFETY: element `i` of each run is in bounds (precondition).
        unsafe { std::ptr::copy_nonoverlapping(s.add(i * snb), d.add(i * dnb), size) };
    }
}

/// Convert `n` elements from `S` to `D` through f32.
///
/// # Safety
/// Both runs must be in bounds, aligned, and must not overlap.
unsafe fn convert<S: Float, D: Float>(s: *const u8, snb: usize, d: *mut u8, dnb: usize, n: usize) {
    for i in 0..n {
        // SAFETY: element `i` of each run is in bounds and aligned.
        unsafe {
            (d.add(i * dnb) as *mut D)
                .write(D::from_f32((s.add(i * snb) as *const S).read().to_f32()))
        };
    }
}

/// Quantized copies, row `r` to row `r`.
fn copy_quantized_rows(ctx: &NodeCtx, src: &TensorRef) -> Result<()> {
    let dst = &ctx.dst;
    let (st, dt) = (src.layout.dtype, dst.layout.dtype);
    let (sne, dne) = (src.layout.ne, dst.layout.ne);
    let ne0 = sne[0];
    let nrows = sne[1] * sne[2] * sne[3];
    if ne0 != dne[0] || nrows != dne[1] * dne[2] * dne[3] {
        return Err(Error::op(
            ctx.op.name(),
            format!(
                "a quantized copy needs equal rows: {} into {}",
                src.layout, dst.layout
            ),
        ));
    }
    if ne0 == 0 || nrows == 0 {
        return Ok(());
    }
    let (s_bytes, d_bytes) = (st.row_size(ne0)?, dt.row_size(ne0)?);
    let simd = Simd::new(ctx.isa);
    let range = ctx.split(nrows);
    for ((i1, i2, i3), (o1, o2, o3)) in rows(range.clone(), &sne).zip(rows(range, &dne)) {
        // SAFETY: in-range rows; `support` checked both have contiguous rows,
        // so each row is `row_size` bytes inside the tensor; `dst` does not
        // overlap `src`; pointers are aligned for their element types.
        let (s, d) = unsafe {
            (
                std::slice::from_raw_parts(src.row(i1, i2, i3) as *const u8, s_bytes),
                std::slice::from_raw_parts_mut(dst.row(o1, o2, o3), d_bytes),
            )
        };
        if st == dt {
            d.copy_from_slice(s);
        } else if st == DType::F32 {
            // SAFETY: `s` holds `ne0` aligned f32 values (contiguous row).
            let sf = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, ne0) };
            simd.quantize_row(dt, sf, d)?;
        } else if dt == DType::F32 {
            // SAFETY: `d` holds `ne0` aligned f32 values (contiguous row).
            let df = unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, ne0) };
            simd.dequantize_row(st, s, df)?;
        } else {
            return Err(unsupported(st, dt));
        }
    }
    Ok(())
}
