//! ADD, SUB, MUL, DIV with broadcasting (ggml's `binary-ops.cpp`).
//!
//! `dst[i0, i1, i2, i3] = op(src0[i0, i1, i2, i3], src1[i0 % ne10, i1 % ne11,
//! i2 % ne12, i3 % ne13])`, computed in f32. `src0` and `dst` are F32, F16 or
//! BF16 (the same type); `src1` is F32 or `src0`'s type. Any strides on any
//! of the three; a row with contiguous elements takes a tighter loop. Works
//! in place: each element is read before it is written, through raw pointers.
//! Threads split the rows of `dst`.
//!
//! All-F32 nodes with contiguous rows use the [`Simd`] row primitives: when
//! all three tensors are contiguous and `src1` is not broadcast, the whole
//! tensor is one flat array split between threads at 64-byte boundaries;
//! otherwise each row is one call (a broadcast scalar or repeated segments
//! when `src1`'s rows are shorter). Results are bit-identical to the generic
//! loop.

use half::{bf16, f16};
use tessera::{DType, Error, Op, Result};

use super::elem::{Float, rows, split_aligned, wrap};
use super::simd::{BinKind, Simd};
use super::{NodeCtx, TensorRef};

/// An element-wise f32 operation.
trait BinOp {
    const KIND: BinKind;
    fn apply(a: f32, b: f32) -> f32;
}

struct AddOp;
struct MulOp;
struct DivOp;
struct SubOp;

impl BinOp for SubOp {
    const KIND: BinKind = BinKind::Sub;
    #[inline(always)]
    fn apply(a: f32, b: f32) -> f32 {
        a - b
    }
}

impl BinOp for AddOp {
    const KIND: BinKind = BinKind::Add;
    #[inline(always)]
    fn apply(a: f32, b: f32) -> f32 {
        a + b
    }
}

impl BinOp for MulOp {
    const KIND: BinKind = BinKind::Mul;
    #[inline(always)]
    fn apply(a: f32, b: f32) -> f32 {
        a * b
    }
}

impl BinOp for DivOp {
    const KIND: BinKind = BinKind::Div;
    #[inline(always)]
    fn apply(a: f32, b: f32) -> f32 {
        a / b
    }
}

/// Compute this thread's share of an ADD, SUB, MUL or DIV node.
pub fn binary(ctx: &NodeCtx) -> Result<()> {
    match ctx.op {
        Op::Add => by_types::<AddOp>(ctx),
        Op::Mul => by_types::<MulOp>(ctx),
        Op::Div => by_types::<DivOp>(ctx),
        Op::Sub => by_types::<SubOp>(ctx),
        op => Err(Error::op(op.name(), "not a binary op")),
    }
}

fn by_types<O: BinOp>(ctx: &NodeCtx) -> Result<()> {
    let (a, b) = (ctx.src(0)?, ctx.src(1)?);
    match (a.layout.dtype, b.layout.dtype, ctx.dst.layout.dtype) {
        (DType::F32, DType::F32, DType::F32) => {
            if a.nb(0) == 4 && b.nb(0) == 4 && ctx.dst.nb(0) == 4 {
                run_f32_rows(ctx, O::KIND, &a, &b)
            } else {
                run::<O, f32, f32>(ctx, &a, &b)
            }
        }
        (DType::F16, DType::F16, DType::F16) => run::<O, f16, f16>(ctx, &a, &b),
        (DType::BF16, DType::BF16, DType::BF16) => run::<O, bf16, bf16>(ctx, &a, &b),
        (DType::F16, DType::F32, DType::F16) => run::<O, f16, f32>(ctx, &a, &b),
        (DType::BF16, DType::F32, DType::BF16) => run::<O, bf16, f32>(ctx, &a, &b),
        (ta, tb, td) => Err(Error::unsupported(
            "CPU",
            format!("{} of {ta} and {tb} into {td}", ctx.op.name()),
        )),
    }
}

/// The shape checks every path makes; `false`: nothing to compute.
fn check_shapes(ctx: &NodeCtx, a: &TensorRef, b: &TensorRef) -> Result<bool> {
    let ne = ctx.dst.layout.ne;
    if ne[0] == 0 || ne[1] * ne[2] * ne[3] == 0 {
        return Ok(false);
    }
    // `support` checked that each extent of `b` divides `a`'s; an empty `b`
    // must not reach the modulo below.
    if a.layout.ne != ne || b.layout.ne.contains(&0) {
        return Err(Error::op(
            ctx.op.name(),
            format!("{} cannot be broadcast to {}", b.layout, a.layout),
        ));
    }
    Ok(true)
}

/// Bytes of a result above which its operands come from memory rather
/// than the caches, where the AVX-512 bodies (`simd_avx512`) lose to the
/// AVX2 ones: measured on an AMD EPYC Zen 5, 2 threads, ADD of 4096 x 4096
/// (64 MiB a tensor) against ggml live: 0.91x-0.95x with sixteen lanes,
/// 1.00x-1.01x with eight; 4096 x 512 (8 MiB) 1.24x with sixteen.
const STREAMED_BYTES: usize = 32 << 20;

/// All F32, every row contiguous: the row primitives.
fn run_f32_rows(ctx: &NodeCtx, kind: BinKind, a: &TensorRef, b: &TensorRef) -> Result<()> {
    if !check_shapes(ctx, a, b)? {
        return Ok(());
    }
    let d = &ctx.dst;
    let (ne, bne) = (d.layout.ne, b.layout.ne);
    // Sixteen lanes for operands from the caches; eight for those streamed
    // from memory (see `STREAMED_BYTES`).
    let bytes = ne.iter().product::<usize>().saturating_mul(4);
    let simd = Simd::new(if bytes > STREAMED_BYTES {
        ctx.isa.min(crate::isa::Isa::Avx2)
    } else {
        ctx.isa
    });
    let (zp, xp, yp) = (d.ptr as *mut f32, a.ptr as *const f32, b.ptr as *const f32);
    if d.layout.is_contiguous() && a.layout.is_contiguous() {
        let n = ne[0] * ne[1] * ne[2] * ne[3];
        let r = split_aligned(ctx.ith, ctx.nth, n, 16);
        if r.is_empty() {
            return Ok(());
        }
        if bne == ne && b.layout.is_contiguous() {
            // SAFETY: `r` lies in `0..n`, the element count of three
            // contiguous tensors of one shape; `dst` equals an operand or
            // does not overlap it (executor contract).
            unsafe {
                simd.binary(
                    kind,
                    zp.add(r.start),
                    xp.add(r.start),
                    yp.add(r.start),
                    r.len(),
                )
            };
            return Ok(());
        }
        if bne == [1, 1, 1, 1] {
            // SAFETY: as above; `b` holds one element.
            unsafe { simd.binary_scalar(kind, zp.add(r.start), xp.add(r.start), *yp, r.len()) };
            return Ok(());
        }
    }
    let (ne0, ne10) = (ne[0], bne[0]);
    for (i1, i2, i3) in rows(ctx.split(ne[1] * ne[2] * ne[3]), &ne) {
        // SAFETY: in-range rows; `b`'s indices are reduced modulo its extents.
        let (z, x, y) = unsafe {
            (
                d.row(i1, i2, i3) as *mut f32,
                a.row(i1, i2, i3) as *const f32,
                b.row(wrap(i1, bne[1]), wrap(i2, bne[2]), wrap(i3, bne[3])) as *const f32,
            )
        };
        if ne10 == ne0 {
            // SAFETY: rows of `ne0` contiguous f32; `dst` equals an operand
            // or does not overlap it (executor contract).
            unsafe { simd.binary(kind, z, x, y, ne0) };
        } else if ne10 == 1 {
            // SAFETY: as above; `b`'s row holds one element.
            unsafe { simd.binary_scalar(kind, z, x, *y, ne0) };
        } else {
            let mut base = 0;
            while base < ne0 {
                let len = ne10.min(ne0 - base);
                // SAFETY: `base + len <= ne0`, `len <= ne10` (the length of
                // `b`'s row, which divides `ne0`); rows of different shapes
                // cannot alias.
                unsafe { simd.binary(kind, z.add(base), x.add(base), y, len) };
                base += ne10;
            }
        }
    }
    Ok(())
}

/// `T` is the type of `src0` and `dst`, `U` the type of `src1`.
fn run<O: BinOp, T: Float, U: Float>(ctx: &NodeCtx, a: &TensorRef, b: &TensorRef) -> Result<()> {
    if !check_shapes(ctx, a, b)? {
        return Ok(());
    }
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let bne = b.layout.ne;
    let nrows = ne[1] * ne[2] * ne[3];
    let (dnb0, anb0, bnb0) = (d.nb(0), a.nb(0), b.nb(0));
    let contiguous = dnb0 == size_of::<T>() && anb0 == size_of::<T>() && bnb0 == size_of::<U>();
    let (ne0, ne10) = (ne[0], bne[0]);
    for (i1, i2, i3) in rows(ctx.split(nrows), &ne) {
        // SAFETY: in-range rows; `b`'s indices are reduced modulo its extents.
        let (zr, xr, yr) = unsafe {
            (
                d.row(i1, i2, i3),
                a.row(i1, i2, i3) as *const u8,
                b.row(wrap(i1, bne[1]), wrap(i2, bne[2]), wrap(i3, bne[3])) as *const u8,
            )
        };
        if contiguous {
            let (z, x, y) = (zr as *mut T, xr as *const T, yr as *const U);
            let mut base = 0;
            while base < ne0 {
                for j in 0..ne10.min(ne0 - base) {
                    // SAFETY: `base + j < ne0` and `j < ne10`; rows are
                    // contiguous and aligned. Raw reads and writes tolerate
                    // `z` aliasing `x` or `y` exactly.
                    unsafe {
                        let v = O::apply((*x.add(base + j)).to_f32(), (*y.add(j)).to_f32());
                        *z.add(base + j) = T::from_f32(v);
                    }
                }
                base += ne10;
            }
        } else {
            let mut j = 0;
            for i in 0..ne0 {
                // SAFETY: `i < ne0`, `j < ne10`; strided, aligned elements.
                unsafe {
                    let xv = (xr.add(i * anb0) as *const T).read().to_f32();
                    let yv = (yr.add(j * bnb0) as *const U).read().to_f32();
                    (zr.add(i * dnb0) as *mut T).write(T::from_f32(O::apply(xv, yv)));
                }
                j += 1;
                if j == ne10 {
                    j = 0;
                }
            }
        }
    }
    Ok(())
}

/// ADD_ID (ggml's `ggml_compute_forward_add_id`): `dst[:, i1, i2] =
/// a[:, i1, i2] + b[:, ids[i1, i2]]`, all F32 with contiguous rows. Every
/// thread checks every id before writing (an id outside `b`'s rows is an
/// [`Error::OutOfBounds`] and nothing is written), then adds its rows.
pub fn add_id(ctx: &NodeCtx) -> Result<()> {
    let (a, b, ids, d) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.dst);
    let ok = [a.layout.dtype, b.layout.dtype, d.layout.dtype] == [DType::F32; 3]
        && ids.layout.dtype == DType::I32
        && d.layout.ne == a.layout.ne
        && a.ne(0) == b.ne(0)
        && (a.ne(1), a.ne(2)) == (ids.ne(0), ids.ne(1))
        && (a.ne(0) <= 1 || [a.nb(0), b.nb(0), d.nb(0)] == [4; 3]);
    if !ok {
        return Err(Error::op("ADD_ID", "operands do not fit".to_string()));
    }
    let n_as = b.ne(1);
    // SAFETY: (i1, i2) in range of ids (I32, aligned per the executor).
    let id = |i1: usize, i2: usize| unsafe { (ids.at(i1, i2, 0, 0) as *const i32).read() };
    for i2 in 0..a.ne(2) {
        for i1 in 0..a.ne(1) {
            let v = id(i1, i2);
            if !matches!(usize::try_from(v), Ok(e) if e < n_as) {
                return Err(Error::OutOfBounds(format!(
                    "ADD_ID: id {v} at ids[{i1}, {i2}] is outside the {n_as} rows of b"
                )));
            }
        }
    }
    let (n1, ne0) = (a.ne(1), a.ne(0));
    for r in ctx.split(a.ne(1) * a.ne(2)) {
        let (i1, i2) = (r % n1, r / n1);
        let e = id(i1, i2) as usize;
        // SAFETY: indices in range (e checked above); rows hold ne0
        // contiguous f32 values; dst overlaps no operand (ADD_ID is not
        // in-place) and this thread alone writes row r.
        unsafe {
            let x = a.row(i1, i2, 0) as *const f32;
            let y = b.row(e, 0, 0) as *const f32;
            let o = d.row(i1, i2, 0) as *mut f32;
            for i in 0..ne0 {
                o.add(i).write(x.add(i).read() + y.add(i).read());
            }
        }
    }
    Ok(())
}
