//! MUL_MAT: `dst[i, j, i12, i13] = sum_l a[l, i, i12 / r2, i13 / r3] * b[l, j, i12, i13]`
//! for every weight type of [`tessera::MUL_MAT_WEIGHT_TYPES`], with ggml's
//! algorithm and broadcasting rules (`r2 = ne12 / ne02`, `r3 = ne13 / ne03`).
//! This is the path for few columns (token generation, small batches); many
//! columns go to the packed GEMM (`gemm.rs`, dispatched at the top of
//! [`mul_mat`]).
//!
//! Two phases, separated by one barrier:
//! 1. **Convert `b`**: the f32 activations are converted to the type the dot
//!    products read ([`vec_dot_type`]: F16, BF16, Q8_0, Q8_1, Q8K; f32 for F16/BF16
//!    weights on the SIMD paths, see [`tile_f32_fn`]; Q8_0 laid out for the
//!    AVX2 tiles of several columns of Q4_0/Q5_0/Q8_0/IQ4_NL weights, see
//!    [`tiled_tile_fn`]; f32 when `b`'s rows are
//!    not contiguous) into `scratch`, the threads sharing the (row, group)
//!    units (AVX2 conversion, bit-identical to the portable one). F32
//!    activations with contiguous rows are read in place.
//! 2. **Multiply**: the output is cut into chunks over `m` (rows of `a`) and
//!    `n * ne12 * ne13` (columns of `b`), as ggml does (16x16 chunks; with
//!    one column, about 192 KiB of weight rows, read as four row streams,
//!    see `Plan::column`); threads take chunks from a shared
//!    counter in `scratch` (its own cache line), so a thread slowed by the OS
//!    does not hold the others back. Inside a chunk, a [`BLOCK_M`] x
//!    [`BLOCK_N`] tile is computed by the multi-row kernels of the ISA
//!    ([`TileFn`]: up to [`TILE_ROWS`] weight rows by [`TILE_COLS`] columns
//!    per call, `gemv_avx2*` / `gemv_avx512*`), or by the one-row dot product
//!    ([`DotFn`]) on the portable path. With several columns, `k` is cut into
//!    slices (see `Plan::tile`) so that the rows and columns of a slice are
//!    reused from L1.
//!
//! The kernel validates every layout it is given (the node may come from a
//! deserialised graph), and never panics; a failed validation is reported by
//! every thread after the same single barrier.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{DType, Error, Layout, MUL_MAT_WEIGHT_TYPES, Op, Result};

use super::act_quant::{GROUP, convert_strided};
use super::dot::{
    DotFn, GemvFn, TILE_COLS, TILE_ROWS, TileFn, dot_fn, gemv_fn, tile_f32_fn, tile_fn,
    tiled_tile_fn, vec_dot_type,
};
use super::q8_tiled::Q8Tiled;
use super::{NodeCtx, TensorRef};
use crate::isa::Isa;

pub mod id;
mod id_gemm;

/// Bytes at the start of the scratch holding the shared chunk counter (a
/// cache line, so the converted activations do not share it).
const COUNTER_BYTES: usize = 64;
/// Output rows (of `a`) per tile.
const BLOCK_M: usize = 16;
/// Output columns (of `b`) per tile.
const BLOCK_N: usize = 16;
/// The fewest rows per chunk of a one-column product.
const GEMV_ROWS: usize = 64;
/// Most output rows per [`GemvFn`] call.
const GEMV_CALL_ROWS: usize = 512;
/// Weight bytes per chunk of a one-column product (at least [`GEMV_ROWS`]
/// rows): each of the four row streams a chunk is read as (see
/// [`Plan::column`]) then runs about 48 KiB. Measured on Gemma 3's output matrix shape (262,144 rows of
/// 640 values) on a Xeon with AVX-512, 2 threads: Q8_0 22 -> 35 GB/s with
/// 64 -> 256-row chunks in four streams, little more from larger chunks.
const COLUMN_CHUNK_BYTES: usize = 192 << 10;

/// Values of `k` per slice when several columns share the weight rows (a
/// multiple of every block size): the slices of [`TILE_ROWS`] weight rows and
/// of up to 8 columns of `act` type stay in L1 (measured at n = 8).
fn k_block(act: DType) -> usize {
    match act {
        DType::F32 | DType::F16 | DType::BF16 => 1024,
        _ => 2048,
    }
}

/// Can the CPU multiply weights `a` by activations `b`?
pub fn mul_mat_supported(a: &Layout, b: &Layout) -> bool {
    shape_check(a, b).is_ok() && scratch_bytes(a, b).is_some()
}

/// Scratch bytes a MUL_MAT node needs (the chunk counter and the activations
/// converted to the weights' dot type); `usize::MAX` if that overflows.
pub fn mul_mat_scratch_size(a: &Layout, b: &Layout, nth: usize, isa: Isa) -> usize {
    // Many columns: the packed GEMM (kernels/gemm.rs).
    if super::gemm::applies(a, b, isa) {
        return super::gemm::scratch_size(a, b, nth);
    }
    let _ = nth;
    scratch_bytes(a, b).unwrap_or(usize::MAX)
}

/// Compute this thread's share of `dst = a^T b`.
pub fn mul_mat(ctx: &NodeCtx) -> Result<()> {
    // Many columns: the packed GEMM (kernels/gemm.rs).
    // Repacked weights: always (its kernels go down to one column).
    if let (Some(a), Some(b)) = (ctx.src[0], ctx.src[1])
        && (a.packing != crate::repack::Packing::Standard
            || super::gemm::applies(&a.layout, &b.layout, ctx.isa))
    {
        return super::gemm::mul_mat(ctx);
    }
    let plan = Plan::new(ctx);
    let converted = match &plan {
        Ok(p) => p.convert_share(ctx, None),
        Err(_) => Ok(()),
    };
    if let Ok(p) = &plan
        && ctx.ith == 0
    {
        // The first chunk of every thread is its index; the counter hands
        // out the rest. Published to the other threads by the barrier.
        p.counter.store(ctx.nth, Ordering::Relaxed);
    }
    // Every thread waits exactly once, whatever happened above.
    ctx.barrier.wait();
    let plan = plan?;
    converted?;
    plan.multiply_share(ctx)
}

/// The activations the kernels read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// Rows of a type: the weights' dot type, or f32.
    Type(DType),
    /// Q8_0 laid out for the AVX2 multi-column tiles.
    Tiled(Q8Tiled),
}

impl Act {
    /// Bytes of a row of `k` values.
    fn row_size(self, k: usize) -> Result<usize> {
        match self {
            Act::Type(t) => t.row_size(k),
            Act::Tiled(_) => Q8Tiled::row_size(k),
        }
    }

    /// Bytes of the first `v` values of a row (`v` a multiple of every
    /// block size, or the row's length).
    fn bytes(self, v: usize) -> usize {
        match self {
            Act::Type(t) => v / t.block_size() * t.type_size(),
            Act::Tiled(_) => Q8Tiled::bytes(v),
        }
    }
}

/// Does `b` need converting into scratch before the dot products, when the
/// kernels want activations `act`?
fn needs_conversion(act: Act, b: &Layout) -> bool {
    act != Act::Type(DType::F32) || !b.is_contiguous_rows()
}

/// The activations the kernels of some ISA may want for `weights`: the dot
/// type, f32 for F16/BF16 weights (see [`tile_f32_fn`]), the tiled layout
/// for the AVX2 multi-column tiles ([`tiled_tile_fn`]).
fn act_types(weights: DType) -> [Option<Act>; 3] {
    let f32_too = matches!(weights, DType::F16 | DType::BF16);
    [
        vec_dot_type(weights).map(Act::Type),
        f32_too.then_some(Act::Type(DType::F32)),
        Q8Tiled::for_weights(weights).map(Act::Tiled),
    ]
}

/// Scratch bytes for `a x b` on any ISA, `None` on overflow or for a weight
/// type without a dot product.
fn scratch_bytes(a: &Layout, b: &Layout) -> Option<usize> {
    vec_dot_type(a.dtype)?;
    let rows = b.ne[1].checked_mul(b.ne[2])?.checked_mul(b.ne[3])?;
    let mut need = 0usize;
    for act in act_types(a.dtype).into_iter().flatten() {
        if needs_conversion(act, b) {
            need = need.max(act.row_size(b.ne[0]).ok()?.checked_mul(rows)?);
        }
    }
    need.checked_add(COUNTER_BYTES)
}

/// The operand checks shared by [`mul_mat_supported`] and the kernel.
fn shape_check(a: &Layout, b: &Layout) -> Result<()> {
    let bad = |why: String| Err(Error::op("MUL_MAT", why));
    if !MUL_MAT_WEIGHT_TYPES.contains(&a.dtype) || vec_dot_type(a.dtype).is_none() {
        return bad(format!(
            "weights of type {} are not supported on the CPU",
            a.dtype
        ));
    }
    if b.dtype != DType::F32 {
        return bad(format!("activations must be f32, not {}", b.dtype));
    }
    if a.ne[0] != b.ne[0] {
        return bad(format!("a {a} and b {b} differ in row length"));
    }
    if !a.ne[0].is_multiple_of(a.dtype.block_size()) {
        return bad(format!("a {a}: rows are not whole {} blocks", a.dtype));
    }
    if a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
    {
        return bad(format!("a {a} cannot be broadcast over b {b}"));
    }
    if !a.is_contiguous_rows() {
        return bad(format!(
            "a {a} must have contiguous rows (nb0 = {})",
            a.dtype.type_size()
        ));
    }
    a.checked_nbytes()?;
    b.checked_nbytes()?;
    Ok(())
}

/// Everything a thread needs, validated once.
struct Plan<'s> {
    a: TensorRef,
    b: TensorRef,
    dst: TensorRef,
    dot: DotFn,
    /// The multi-row dot product, where the ISA has one.
    tile: Option<TileFn>,
    /// The many-row product for one column, where the ISA has one.
    gemv: Option<GemvFn>,
    /// The activations the dot products read: the weights' dot type, f32
    /// for a tile kernel of [`tile_f32_fn`], or the tiled layout of
    /// [`tiled_tile_fn`].
    act: Act,
    /// `b` was converted into `conv` (else read in place).
    converted: bool,
    /// Bytes of one row of `a`, and of one converted (or in-place) `b` row.
    a_row: usize,
    b_row: usize,
    /// Broadcast ratios of dims 2 and 3.
    r2: usize,
    r3: usize,
    counter: &'s AtomicUsize,
    /// The converted activations (`rows(b) * b_row` bytes after the counter).
    conv: *mut u8,
}

impl<'s> Plan<'s> {
    fn new(ctx: &'s NodeCtx<'_>) -> Result<Self> {
        if !matches!(ctx.op, Op::MulMat) {
            return Err(Error::op(
                "MUL_MAT",
                format!("kernel called for {}", ctx.op.name()),
            ));
        }
        let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.dst);
        let (la, lb, ld) = (a.layout, b.layout, dst.layout);
        shape_check(&la, &lb)?;
        let want = [la.ne[1], lb.ne[1], lb.ne[2], lb.ne[3]];
        if ld.dtype != DType::F32 || ld.ne != want || !ld.is_contiguous() {
            return Err(Error::op(
                "MUL_MAT",
                format!("dst {ld} must be contiguous f32 {want:?}"),
            ));
        }
        let need = scratch_bytes(&la, &lb)
            .ok_or_else(|| Error::Overflow(format!("MUL_MAT scratch for b {lb}")))?;
        let s = ctx.scratch;
        if s.len < need
            || s.ptr.is_null()
            || !(s.ptr as usize).is_multiple_of(align_of::<AtomicUsize>())
        {
            return Err(Error::InvalidLayout(format!(
                "MUL_MAT needs {need} bytes of aligned scratch, {} given",
                s.len
            )));
        }
        Self::with_weights(ctx, a, b, dst, need)
    }

    /// The plan for weights `a` (whose matrices the caller picks) and
    /// activations `b`, whose operands and scratch (at least `need >=`
    /// [`scratch_bytes`] bytes, aligned) the caller checked.
    fn with_weights(
        ctx: &'s NodeCtx<'_>,
        a: TensorRef,
        b: TensorRef,
        dst: TensorRef,
        need: usize,
    ) -> Result<Self> {
        let (la, lb) = (a.layout, b.layout);
        let s = ctx.scratch;
        if s.len < need || need < COUNTER_BYTES || s.ptr.is_null() {
            return Err(Error::InvalidLayout(format!(
                "{} needs {need} bytes of scratch, {} given",
                ctx.op.name(),
                s.len
            )));
        }
        let dot_type = vec_dot_type(la.dtype).ok_or_else(|| {
            Error::unsupported(
                "CPU",
                format!("{} with {} weights", ctx.op.name(), la.dtype),
            )
        })?;
        // The machine's tuning may cap the family for these weights.
        let isa = crate::tuning::dot_isa(la.dtype, ctx.isa);
        let dot = dot_fn(la.dtype, isa).ok_or_else(|| {
            Error::unsupported(
                "CPU",
                format!("{} with {} weights", ctx.op.name(), la.dtype),
            )
        })?;
        // SAFETY: the scratch is valid, shared memory of at least
        // COUNTER_BYTES bytes, aligned for an AtomicUsize (checked by the
        // callers), and only ever accessed atomically at this offset by the
        // node's threads.
        let counter = unsafe { &*s.ptr.cast::<AtomicUsize>() };
        // Several columns on the AVX2 tiles of the 32-value block types: the
        // activations in the tiled layout (one column keeps the many-row
        // product, which reads Q8_0).
        let tiled = match lb.nrows() {
            0 | 1 => None,
            _ => tiled_tile_fn(la.dtype, isa),
        };
        let (tile, gemv, act) = match (tiled, tile_f32_fn(la.dtype, isa)) {
            (Some((layout, t)), _) => (Some(t), None, Act::Tiled(layout)),
            (None, Some(t)) => (Some(t), gemv_fn(la.dtype, isa, true), Act::Type(DType::F32)),
            (None, None) => (
                tile_fn(la.dtype, isa),
                gemv_fn(la.dtype, isa, false),
                Act::Type(dot_type),
            ),
        };
        let converted = needs_conversion(act, &lb);
        Ok(Plan {
            a,
            b,
            dst,
            dot,
            tile,
            gemv,
            act,
            converted,
            a_row: la.row_bytes(),
            b_row: if converted {
                act.row_size(lb.ne[0])?
            } else {
                lb.ne[0] * 4
            },
            r2: lb.ne[2] / la.ne[2].max(1),
            r3: lb.ne[3] / la.ne[3].max(1),
            counter,
            // SAFETY: COUNTER_BYTES <= need <= s.len.
            conv: unsafe { s.ptr.add(COUNTER_BYTES) },
        })
    }

    /// Rows of `b` (and of the output): `n * ne12 * ne13`.
    fn cols(&self) -> usize {
        self.b.layout.nrows()
    }

    /// (i11, i12, i13) of flat column `j`.
    fn col_index(&self, j: usize) -> (usize, usize, usize) {
        let (n1, n2) = (self.b.ne(1), self.b.ne(2));
        (j % n1, j / n1 % n2, j / (n1 * n2))
    }

    /// Phase 1: convert this thread's share of `b` into the scratch (only
    /// the rows `j` with `needed[j]`, where given: the others are never
    /// read).
    fn convert_share(&self, ctx: &NodeCtx, needed: Option<&[bool]>) -> Result<()> {
        let k = self.b.ne(0);
        if !self.converted || k == 0 {
            return Ok(());
        }
        // Units of GROUP values (whole blocks: GROUP is a multiple of every
        // block size, and quantized rows are whole blocks).
        let groups = k.div_ceil(GROUP);
        let units = ctx.split(groups * self.cols());
        let mut u = units.start;
        while u < units.end {
            let (row, g0) = (u / groups, u % groups);
            let g1 = groups.min(g0 + (units.end - u));
            if needed.is_some_and(|n| !n.get(row).copied().unwrap_or(true)) {
                u += g1 - g0;
                continue;
            }
            let (e0, e1) = (g0 * GROUP, (g1 * GROUP).min(k));
            let (i11, i12, i13) = self.col_index(row);
            // SAFETY: row < rows(b), so (i11, i12, i13) is in range and
            // elements e0..e1 < k of that row lie in b's memory.
            let src = unsafe { self.b.row(i11, i12, i13).add(e0 * self.b.nb(0)) };
            let off = row * self.b_row + self.act.bytes(e0);
            let len = self.act.bytes(e1) - self.act.bytes(e0);
            // SAFETY: off + len <= rows(b) * b_row, inside the scratch (checked
            // in `new`); units are disjoint between threads, so this slice is
            // written by this thread only, and nobody reads it before the barrier.
            let out = unsafe { std::slice::from_raw_parts_mut(self.conv.add(off), len) };
            // SAFETY: elements e0..e1 of the row, at stride nb0, are in b.
            unsafe {
                match self.act {
                    Act::Type(t) => convert_strided(ctx.isa, t, src, self.b.nb(0), e1 - e0, out)?,
                    Act::Tiled(l) => l.convert(ctx.isa, src, self.b.nb(0), e1 - e0, out)?,
                }
            };
            u += g1 - g0;
        }
        Ok(())
    }

    /// Phase 2: compute chunks of the output until none are left.
    fn multiply_share(&self, ctx: &NodeCtx) -> Result<()> {
        let (nr0, nr1) = (self.a.ne(1), self.cols());
        if nr0 == 0 || nr1 == 0 {
            return Ok(());
        }
        let nth = ctx.nth.max(1);
        let size = match (nr0, nr1) {
            (_, 1) => self.column_chunk_rows(nr0, nth),
            (1, _) => GEMV_ROWS,
            _ => 16,
        };
        let (mut nc0, mut nc1) = (nr0.div_ceil(size), nr1.div_ceil(size));
        if nc0.saturating_mul(nc1) < nth.saturating_mul(4) {
            (nc0, nc1) = if nr0 > nr1 { (nth, 1) } else { (1, nth) };
        }
        let (dr0, dr1) = (nr0.div_ceil(nc0), nr1.div_ceil(nc1));
        let total = nc0 * nc1;
        let mut chunk = ctx.ith;
        while chunk < total {
            let (c0, c1) = (chunk % nc0, chunk / nc0);
            let rows = (c0 * dr0).min(nr0)..((c0 + 1) * dr0).min(nr0);
            let cols = (c1 * dr1).min(nr1)..((c1 + 1) * dr1).min(nr1);
            self.chunk(rows, cols);
            if nth >= total {
                break;
            }
            chunk = self.counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Rows per chunk of a one-column product over `nr0` rows on `nth`
    /// threads: [`COLUMN_CHUNK_BYTES`] of weights (at least [`GEMV_ROWS`]
    /// rows), fewer where that would leave under four chunks per thread.
    fn column_chunk_rows(&self, nr0: usize, nth: usize) -> usize {
        let want = (COLUMN_CHUNK_BYTES / self.a_row.max(1)).max(GEMV_ROWS);
        let balanced = (nr0 / nth.saturating_mul(4).max(1)).max(GEMV_ROWS);
        want.min(balanced)
    }

    /// Output rows `rows` x flat columns `cols`, in tiles of at most
    /// [`BLOCK_M`] rows by [`BLOCK_N`] columns of one matrix of `b` (so one
    /// matrix of `a`).
    fn chunk(&self, rows: Range<usize>, cols: Range<usize>) {
        if cols.len() == 1 {
            return self.column(rows, cols.start);
        }
        let n1 = self.b.ne(1);
        let mut tile = [[0f32; BLOCK_M]; BLOCK_N];
        let mut j0 = cols.start;
        while j0 < cols.end {
            let (i11, i12, i13) = self.col_index(j0);
            // Columns j0..j1 share (i12, i13) and fit in one tile.
            let j1 = cols.end.min(j0 + BLOCK_N).min(j0 + (n1 - i11));
            let mut ys: [&[u8]; BLOCK_N] = [&[]; BLOCK_N];
            for (c, y) in ys.iter_mut().enumerate().take(j1 - j0) {
                *y = self.b_col(j0 + c, i11 + c, i12, i13);
            }
            let ys = &ys[..j1 - j0];
            for t0 in rows.clone().step_by(BLOCK_M) {
                let m = (t0 + BLOCK_M).min(rows.end) - t0;
                if self.a_row == 0 {
                    tile.iter_mut().for_each(|col| col.fill(0.0));
                } else {
                    // SAFETY: i12 / r2 < ne02 and i13 / r3 < ne03 (r2, r3 are
                    // the exact ratios), so this is a matrix of `a`.
                    let a0 = unsafe { self.a.row(0, i12 / self.r2, i13 / self.r3) };
                    self.tile(a0, t0..t0 + m, ys, &mut tile);
                }
                for (c, col) in tile.iter().enumerate().take(ys.len()) {
                    // SAFETY: dst is contiguous f32 [m, n, ne12, ne13]; output
                    // row (i11 + c, i12, i13) is in range and holds ne01 values,
                    // of which t0..t0 + m belong to this chunk, which only this
                    // thread computes.
                    unsafe {
                        let d = self.dst.row(i11 + c, i12, i13).add(t0 * 4);
                        std::ptr::copy_nonoverlapping(col.as_ptr().cast::<u8>(), d, m * 4);
                    }
                }
            }
            j0 = j1;
        }
    }

    /// Output rows `rows` of the one flat column `j` (token generation):
    /// the weight rows go [`TILE_ROWS`] at a time straight into `dst`, with
    /// no tile to clear or to add up (one column reads whole rows, so there
    /// is nothing to cut into slices either).
    fn column(&self, rows: Range<usize>, j: usize) {
        let (i11, i12, i13) = self.col_index(j);
        let y = self.b_col(j, i11, i12, i13);
        // SAFETY: (i11, i12, i13) is in range; dst is contiguous f32 with
        // ne01 values per row, of which `rows` belong to this chunk, which
        // only this thread computes.
        let d = unsafe { self.dst.row(i11, i12, i13).cast::<f32>() };
        // SAFETY: i12 / r2 < ne02 and i13 / r3 < ne03 (r2, r3 are the exact
        // ratios), so this is a matrix of `a`.
        let a0 = unsafe { self.a.row(0, i12 / self.r2, i13 / self.r3) };
        // SAFETY: as above: `d` is this column's output row, `rows` this
        // thread's.
        unsafe { self.column_into(a0, y, d, rows) }
    }

    /// Rows `rows` of the matrix at `a0` times the one column `y` (in the
    /// activations' type), stored at `d[r]` for each row `r`: the
    /// one-column path of [`Self::column`], also MUL_MAT_ID's for an expert
    /// with one column.
    ///
    /// # Safety
    /// `a0` is a matrix of `a`, `rows.end <= ne01`, and `d` points to at
    /// least `rows.end` f32 that only this thread writes at `rows`.
    pub(super) unsafe fn column_into(
        &self,
        a0: *mut u8,
        y: &[u8],
        d: *mut f32,
        rows: Range<usize>,
    ) {
        let store = |r: usize, v: f32| {
            // SAFETY: see the contract; r < rows.end.
            unsafe { d.add(r).write_unaligned(v) }
        };
        if self.a_row == 0 {
            rows.for_each(|r| store(r, 0.0));
            return;
        }
        let nb01 = self.a.nb(1);
        // SAFETY: a0 is a matrix of `a`; the rows asked for are below ne01.
        let row_at = |row: usize| unsafe { self.weight_rows(a0, row..row + 1) };
        if let Some(gemv) = self.gemv {
            // Whole chunks per call where they fit (the kernels read the rows
            // of a call as four streams, see `dot::gemv_rows`).
            let mut out = [0f32; GEMV_CALL_ROWS];
            let mut r0 = rows.start;
            while r0 < rows.end {
                let nr = (rows.end - r0).min(GEMV_CALL_ROWS);
                // SAFETY: as for `row_at`: rows r0..r0 + nr < ne01.
                let a = unsafe { self.weight_rows(a0, r0..r0 + nr) };
                gemv(a, nb01, y, &mut out[..nr]);
                out[..nr]
                    .iter()
                    .enumerate()
                    .for_each(|(i, &v)| store(r0 + i, v));
                r0 += nr;
            }
            return;
        }
        let Some(tile) = self.tile else {
            rows.for_each(|r| store(r, (self.dot)(row_at(r), y)));
            return;
        };
        let mut res = [[0f32; TILE_ROWS]; TILE_COLS];
        // Four row streams: tile `i` takes rows `i`, `q + i`, `2q + i` and
        // `3q + i` of the chunk. Rows side by side are one sequential stream
        // (or, four at a time, four streams that end after one row), for
        // which the hardware prefetchers keep too few reads in flight; four
        // long streams are fetched at once.
        let q = rows.len().div_ceil(TILE_ROWS);
        for i in 0..q {
            let mut xs: [&[u8]; TILE_ROWS] = [&[]; TILE_ROWS];
            let mut at = [0usize; TILE_ROWS];
            let mut nr = 0;
            for k in 0..TILE_ROWS {
                let r = rows.start + k * q + i;
                if r < rows.end {
                    (xs[nr], at[nr]) = (row_at(r), r);
                    nr += 1;
                }
            }
            tile(&xs[..nr], &[y], &mut res);
            for (&r, &v) in at[..nr].iter().zip(&res[0]) {
                store(r, v);
            }
        }
    }

    /// One tile: `out[c][r - rows.start] = a[r] . ys[c]` for rows `rows` of the
    /// matrix at `a0` (at most [`BLOCK_M`]) and the columns `ys`.
    ///
    /// With a multi-row kernel ([`TileFn`]), rows go [`TILE_ROWS`] and columns
    /// [`TILE_COLS`] at a time. With several columns, `k` is cut into
    /// [`k_block`] slices so that a slice of the rows and of every column
    /// stays in L1 while all of its (rows, columns) pairs are computed; the
    /// slices' partial sums are added in order. The rows are the outer loop,
    /// so each weight row is still read from memory as one sequential
    /// stream. One column reads whole rows (nothing to reuse). Short rows
    /// read whole are prefetched a tile or two of rows ahead
    /// ([`super::row_ahead`]).
    #[inline]
    fn tile(
        &self,
        a0: *mut u8,
        rows: Range<usize>,
        ys: &[&[u8]],
        out: &mut [[f32; BLOCK_M]; BLOCK_N],
    ) {
        // SAFETY: the caller passes rows below ne01 of a matrix of `a`.
        let row_at = |row: usize| unsafe { self.weight_rows(a0, row..row + 1) };
        let Some(tile) = self.tile else {
            for (r, row) in rows.enumerate() {
                let x = row_at(row);
                for (y, col) in ys.iter().zip(out.iter_mut()) {
                    if let Some(o) = col.get_mut(r) {
                        *o = (self.dot)(x, y);
                    }
                }
            }
            return;
        };
        let (wt, act) = (self.a.layout.dtype, self.act);
        let k = self.b.ne(0);
        let kb = if ys.len() > 1 {
            k_block(match act {
                Act::Type(t) => t,
                Act::Tiled(_) => DType::Q8_0,
            })
            .min(k)
        } else {
            k
        };
        // Bytes of the first `v` values of a row of `t` (`v` is a multiple
        // of every block size, or `k`).
        let bytes = |t: DType, v: usize| v / t.block_size() * t.type_size();
        out.iter_mut()
            .take(ys.len())
            .for_each(|col| col[..rows.len()].fill(0.0));
        let mut res = [[0f32; TILE_ROWS]; TILE_COLS];
        // Short rows read whole: the kernels prefetch the next tiles' rows
        // (see `row_ahead`); long ones, in slices, further on in the row.
        let _ahead = (kb >= k)
            .then(|| super::row_ahead::tile_distance(TILE_ROWS, self.a.nb(1)))
            .flatten()
            .map(super::row_ahead::RowAhead::set);
        let mut r0 = rows.start;
        while r0 < rows.end {
            let nr = (rows.end - r0).min(TILE_ROWS);
            let o0 = r0 - rows.start;
            let mut k0 = 0;
            loop {
                let k1 = (k0 + kb).min(k);
                let (x0, x1) = (bytes(wt, k0), bytes(wt, k1));
                let (y0, y1) = (act.bytes(k0), act.bytes(k1));
                let xs: [&[u8]; TILE_ROWS] = std::array::from_fn(|i| {
                    if i < nr {
                        row_at(r0 + i).get(x0..x1).unwrap_or(&[])
                    } else {
                        &[]
                    }
                });
                let mut yk: [&[u8]; BLOCK_N] = [&[]; BLOCK_N];
                for (d, y) in yk.iter_mut().zip(ys) {
                    *d = y.get(y0..y1).unwrap_or(&[]);
                }
                let yk = &yk[..ys.len()];
                for (yc, oc) in yk.chunks(TILE_COLS).zip(out.chunks_mut(TILE_COLS)) {
                    tile(&xs[..nr], yc, &mut res);
                    for (o, r) in oc.iter_mut().zip(&res) {
                        if let (Some(o), Some(r)) = (o.get_mut(o0..o0 + nr), r.get(..nr)) {
                            o.iter_mut().zip(r).for_each(|(o, r)| *o += r);
                        }
                    }
                }
                if k1 >= k {
                    break;
                }
                k0 = k1;
            }
            r0 += nr;
        }
    }

    /// Weight rows `rows` (not empty) of the matrix at `a0` as one slice:
    /// `nb01` bytes apart, the last one `a_row` bytes long.
    ///
    /// # Safety
    /// `a0` is a matrix of `a` (`a.row(0, i2, i3)` in range) and
    /// `rows.end <= ne01`; rows are `a_row` contiguous bytes (checked in
    /// `new`).
    unsafe fn weight_rows(&self, a0: *mut u8, rows: Range<usize>) -> &[u8] {
        let nb01 = self.a.nb(1);
        let len = (rows.len().max(1) - 1) * nb01 + self.a_row;
        // SAFETY: forwarded to the caller: the rows lie in `a`'s memory.
        unsafe { std::slice::from_raw_parts(a0.add(rows.start * nb01), len) }
    }

    /// The (converted or in-place) activations of flat column `j`.
    fn b_col(&self, j: usize, i11: usize, i12: usize, i13: usize) -> &[u8] {
        if self.b_row == 0 {
            return &[];
        }
        // SAFETY: converted rows are `b_row` bytes each at `conv + j * b_row`,
        // written before the barrier and read-only since. In place, `b` has
        // contiguous f32 rows of `b_row = 4k` bytes and (i11, i12, i13) is in range.
        unsafe {
            let p = if self.converted {
                self.conv.add(j * self.b_row)
            } else {
                self.b.row(i11, i12, i13)
            };
            std::slice::from_raw_parts(p, self.b_row)
        }
    }
}
