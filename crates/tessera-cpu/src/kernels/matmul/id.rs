//! MUL_MAT_ID (ggml's `ggml_compute_forward_mul_mat_id`): one weight matrix
//! per expert, `as [k, m, n_as]`; F32 activations `b [k, ne11, n_tokens]`;
//! I32 expert ids `ids [n_used, n_tokens]`;
//! `dst[:, e, t] = as[:, :, ids[e, t]]^T b[:, e % ne11, t]`.
//!
//! The MUL_MAT machinery ([`Plan`]) with ggml's grouping:
//! 1. every thread converts its share of the rows of `b` the tile kernels
//!    will read to the weights' dot type (as MUL_MAT) and checks every id
//!    (an id outside `0..n_as` is an [`Error::OutOfBounds`] naming it,
//!    returned by every thread after the barrier; nothing is written);
//!    thread 0 groups the (slot, token) pairs by expert (a counting sort
//!    into the scratch);
//! 2. the work is cut into units of (expert, ~192 KiB of its weight rows,
//!    up to [`BLOCK_N`] of the columns routed to that expert) handed out by
//!    the shared counter, [`Plan::tile`] calls of 16 rows each: the weight
//!    rows of an expert are read once for all the tokens routed to it; an
//!    expert with one column (decoding) takes the one-column kernels
//!    instead ([`Plan::column_into`]);
//! 3. experts with as many columns as the packed GEMM takes (a prompt's)
//!    take it instead, each call on one thread ([`super::id_gemm`]).

use std::sync::atomic::Ordering;

use tessera::{DType, Error, Layout, Op, Result};

use super::super::NodeCtx;
use super::{BLOCK_M, BLOCK_N, COUNTER_BYTES, Plan, scratch_bytes, shape_check};

/// The checks of MUL_MAT on one expert's matrix, plus MUL_MAT_ID's own.
fn id_check(a: &Layout, b: &Layout, ids: &Layout) -> Result<()> {
    let mut one = *a;
    one.ne[2] = 1;
    shape_check(&one, b).map_err(|e| Error::op("MUL_MAT_ID", e.to_string()))?;
    a.checked_nbytes()?;
    ids.checked_nbytes()?;
    let bad = |why: String| Err(Error::op("MUL_MAT_ID", why));
    if ids.dtype != DType::I32 {
        return bad(format!("ids must be i32, not {}", ids.dtype));
    }
    if a.ne[3] != 1 || b.ne[3] != 1 || ids.ne[2] != 1 || ids.ne[3] != 1 {
        return bad(format!("as {a}, b {b} must be 3-D and ids {ids} 2-D"));
    }
    if ids.ne[1] != b.ne[2] || b.ne[1] == 0 || !ids.ne[0].is_multiple_of(b.ne[1]) {
        return bad(format!("ids {ids} do not fit b {b}"));
    }
    if i32::try_from(a.ne[2]).is_err() {
        return bad(format!("as {a} has too many experts"));
    }
    Ok(())
}

/// Bytes of the expert map after the converted activations: offsets and unit
/// prefixes (`n_as + 1` each) and one entry per (slot, token), as usize.
fn map_words(a: &Layout, ids: &Layout) -> Option<usize> {
    a.ne[2]
        .checked_add(1)?
        .checked_mul(2)?
        .checked_add(ids.ne[0].checked_mul(ids.ne[1])?)
}

/// Scratch of the whole node: [`scratch_bytes`] (counter and converted `b`)
/// rounded to 64, then the expert map, then (at a multiple of 64) the
/// experts' GEMM area where an expert could take it
/// ([`super::id_gemm::area_bytes`]): (head, start of the GEMM area,
/// total); `None` on overflow.
fn id_scratch_parts(
    a: &Layout,
    b: &Layout,
    ids: &Layout,
    nth: usize,
    isa: crate::isa::Isa,
) -> Option<(usize, usize, usize)> {
    let mut one = *a;
    one.ne[2] = 1;
    let head = scratch_bytes(&one, b)?.checked_add(63)? / 64 * 64;
    let map = map_words(a, ids)?.checked_mul(size_of::<usize>())?;
    let area = head.checked_add(map)?.checked_add(63)? / 64 * 64;
    // Only where an expert of every token's columns could take the GEMM
    // (not decoding's one token).
    let gemm = if super::id_gemm::takes(a, b.ne[2], isa) {
        super::id_gemm::area_bytes(a, b, ids.ne[0], nth)?
    } else {
        0
    };
    Some((head, area, area.checked_add(gemm)?))
}

/// Can the CPU compute MUL_MAT_ID for these operands?
pub fn mul_mat_id_supported(a: &Layout, b: &Layout, ids: &Layout) -> bool {
    id_check(a, b, ids).is_ok() && id_scratch_parts(a, b, ids, 1, crate::isa::Isa::Scalar).is_some()
}

/// Scratch bytes of a MUL_MAT_ID node on `nth` threads running `isa`'s
/// kernels (`usize::MAX` on overflow).
pub fn mul_mat_id_scratch_size(
    a: &Layout,
    b: &Layout,
    ids: &Layout,
    nth: usize,
    isa: crate::isa::Isa,
) -> usize {
    id_scratch_parts(a, b, ids, nth, isa).map_or(usize::MAX, |(_, _, total)| total)
}

/// Output rows per unit of an expert whose weight rows are `a_row` bytes:
/// about [`super::COLUMN_CHUNK_BYTES`] of weights, 64 to 512 rows, whatever
/// its columns (up to [`BLOCK_N`] a unit). One column takes the one-column
/// kernels, which read a unit's rows as four streams; more go through
/// [`Plan::tile`] [`BLOCK_M`] rows at a time, prefetching the next tiles'
/// rows. Measured with Qwen3 30B-A3B's experts (768 rows of 2048, 8 a
/// token; `tessera bench ops --op MUL_MAT_ID`), 2 threads: one column on a
/// Xeon with AVX-512, Q4_K, 64-row units 201 µs an op, 160-row units 184
/// (ggml 208-213 live); 32 tokens (about two columns an expert) on an AMD
/// EPYC Zen 5, units of 16 rows / of this size, both with the tiles'
/// prefetch, Q4_K 5.4-6.0 / 3.6-3.9 ms, Q8_0 6.7-8.4 / 4.9-6.2.
///
/// With many threads and few experts in use the units are smaller (down to
/// 64 rows), so that the node has about four units a thread: `experts`
/// routed (at most `n_as`, at most the (slot, token) pairs) of `rows` rows
/// over `nth` threads. Every thread finds the same size (layouts only).
fn unit_rows(a_row: usize, rows: usize, experts: usize, nth: usize) -> usize {
    let chunk = (super::COLUMN_CHUNK_BYTES / a_row.max(1) / 16 * 16).clamp(64, 512);
    let spread = rows.saturating_mul(experts) / nth.max(1).saturating_mul(4) / 16 * 16;
    chunk.min(spread.max(64))
}

/// Compute this thread's share of a MUL_MAT_ID node.
pub fn mul_mat_id(ctx: &NodeCtx) -> Result<()> {
    let prep = prepare(ctx);
    let converted = match &prep {
        Ok((p, m)) => p.convert_share(ctx, m.rows_for_tiles(p).as_deref()),
        Err(_) => Ok(()),
    };
    let checked = match &prep {
        Ok((_, m)) => m.check_ids(ctx),
        Err(_) => Ok(()),
    };
    if let Ok((p, m)) = &prep
        && ctx.ith == 0
        && checked.is_ok()
    {
        p.counter.store(ctx.nth, Ordering::Relaxed);
        gemm_counter(ctx).store(ctx.nth, Ordering::Relaxed);
        failure_flag(ctx).store(0, Ordering::Relaxed);
        m.group();
    }
    // Every thread waits exactly once here, whatever happened above.
    ctx.barrier.wait();
    // Same on every thread (the node's layouts, every id).
    let (plan, map) = prep?;
    checked?;
    // A conversion may fail on one thread only (its share): the threads
    // agree (a second barrier) before any of them reaches phase 3's.
    if converted.is_err() {
        failure_flag(ctx).store(1, Ordering::Relaxed);
    }
    ctx.barrier.wait();
    let failed = failure_flag(ctx).load(Ordering::Relaxed) != 0;
    converted?;
    if failed {
        return Err(Error::op(
            "MUL_MAT_ID",
            "another thread could not convert its share of the activations",
        ));
    }
    map.multiply_share(&plan, ctx);
    map.multiply_gemm(&plan, ctx)
}

/// The second word of the scratch's counter bytes: set by a thread whose
/// share of the conversion failed, read by all after a barrier. Only once
/// [`prepare`] has succeeded (it checked the scratch).
fn failure_flag<'c>(ctx: &'c NodeCtx<'_>) -> &'c std::sync::atomic::AtomicUsize {
    const _: () = assert!(COUNTER_BYTES >= 2 * size_of::<usize>());
    // SAFETY: `prepare` checked the scratch: non-null, 64-byte aligned, at
    // least COUNTER_BYTES (64) long, its first bytes the counter's; word 1
    // is used only here, atomically, by the node's threads.
    unsafe {
        &*ctx
            .scratch
            .ptr
            .add(size_of::<usize>())
            .cast::<std::sync::atomic::AtomicUsize>()
    }
}

/// The third word of the scratch's counter bytes: the experts' GEMM calls
/// handed out ([`super::id_gemm::multiply`]), set by thread 0 before the
/// first barrier. Only once [`prepare`] has succeeded.
fn gemm_counter<'c>(ctx: &'c NodeCtx<'_>) -> &'c std::sync::atomic::AtomicUsize {
    const _: () = assert!(COUNTER_BYTES >= 3 * size_of::<usize>());
    // SAFETY: as `failure_flag`'s: word 2 of the counter bytes, used only
    // here, atomically, by the node's threads.
    unsafe {
        &*ctx
            .scratch
            .ptr
            .add(2 * size_of::<usize>())
            .cast::<std::sync::atomic::AtomicUsize>()
    }
}

/// The expert map in the scratch.
struct Map {
    ids: super::super::TensorRef,
    n_as: usize,
    /// `n_as + 1` offsets into `entries`, then `n_as + 1` unit prefixes, then
    /// the entries (`slot + token * n_used`).
    words: *mut usize,
    rows: usize,
    /// Output rows per work unit ([`unit_rows`]).
    unit: usize,
    /// The weights' layout and the stream's kernels (which experts take
    /// the GEMM: [`super::id_gemm::takes`]).
    a: Layout,
    isa: crate::isa::Isa,
    /// The experts' GEMM area of the scratch.
    area: super::super::Scratch,
}

impl Map {
    fn offsets(&self) -> *mut usize {
        self.words
    }

    fn prefix(&self) -> *mut usize {
        // SAFETY: the map holds 2 (n_as + 1) + entries words.
        unsafe { self.words.add(self.n_as + 1) }
    }

    fn entries(&self) -> *mut usize {
        // SAFETY: as above.
        unsafe { self.words.add(2 * (self.n_as + 1)) }
    }

    /// Id `(slot, token)`.
    fn id(&self, slot: usize, token: usize) -> i32 {
        // SAFETY: the caller passes in-range indices; ids is I32 (checked),
        // its pointer aligned (executor contract).
        unsafe { (self.ids.at(slot, token, 0, 0) as *const i32).read() }
    }

    /// Every id is in `0..n_as`.
    fn check_ids(&self, _ctx: &NodeCtx) -> Result<()> {
        for t in 0..self.ids.ne(1) {
            for s in 0..self.ids.ne(0) {
                let id = self.id(s, t);
                if !matches!(usize::try_from(id), Ok(e) if e < self.n_as) {
                    return Err(Error::OutOfBounds(format!(
                        "MUL_MAT_ID: expert id {id} at ids[{s}, {t}] is outside the {} experts",
                        self.n_as
                    )));
                }
            }
        }
        Ok(())
    }

    /// Thread 0, after `check_ids`: the counting sort of (slot, token) by
    /// expert, and the number of work units before each expert.
    fn group(&self) {
        let (n_used, n_tok) = (self.ids.ne(0), self.ids.ne(1));
        // SAFETY: the map's words lie in the scratch (sized by
        // `mul_mat_id_scratch_size`, checked in `prepare`), aligned for
        // usize; only thread 0 touches them before the barrier.
        let (off, pre, ent) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.offsets(), self.n_as + 1),
                std::slice::from_raw_parts_mut(self.prefix(), self.n_as + 1),
                std::slice::from_raw_parts_mut(self.entries(), n_used * n_tok),
            )
        };
        off.fill(0);
        for t in 0..n_tok {
            for s in 0..n_used {
                let e = self.id(s, t) as usize;
                off[e + 1] += 1;
            }
        }
        for e in 0..self.n_as {
            off[e + 1] += off[e];
        }
        // `pre` doubles as the fill cursor, then holds the unit prefixes.
        pre[..self.n_as].copy_from_slice(&off[..self.n_as]);
        for t in 0..n_tok {
            for s in 0..n_used {
                let e = self.id(s, t) as usize;
                ent[pre[e]] = s + t * n_used;
                pre[e] += 1;
            }
        }
        pre[0] = 0;
        let mut total = 0usize;
        for e in 0..self.n_as {
            pre[e] = total;
            let cols = off[e + 1] - off[e];
            if cols > 0 && !self.gemm(cols) {
                total += self.rows.div_ceil(self.unit) * cols.div_ceil(BLOCK_N);
            }
        }
        pre[self.n_as] = total;
    }

    /// Which rows of `b` the tile kernels read (`None`: all of them, or no
    /// expert can take the GEMM): those of (slot, token) pairs whose expert
    /// has too few columns for the GEMM, which gathers its columns from `b`
    /// as they are. Every thread finds the same (ids are only read; an id
    /// out of range counts as read, and fails the node later). A prompt's
    /// experts all taking the GEMM spares converting `b` at all.
    fn rows_for_tiles(&self, plan: &Plan) -> Option<Vec<bool>> {
        if self.area.len == 0 {
            return None;
        }
        let (n_used, n_tok, ne11) = (self.ids.ne(0), self.ids.ne(1), plan.b.ne(1));
        let mut count = vec![0usize; self.n_as];
        for t in 0..n_tok {
            for s in 0..n_used {
                if let Some(c) = usize::try_from(self.id(s, t))
                    .ok()
                    .and_then(|e| count.get_mut(e))
                {
                    *c += 1;
                }
            }
        }
        let mut needed = vec![false; ne11 * n_tok];
        for t in 0..n_tok {
            for s in 0..n_used {
                let tiles = usize::try_from(self.id(s, t))
                    .ok()
                    .and_then(|e| count.get(e))
                    .is_none_or(|&c| !self.gemm(c));
                if tiles && let Some(r) = needed.get_mut(s % ne11 + t * ne11) {
                    *r = true;
                }
            }
        }
        Some(needed)
    }

    /// Whether an expert of `cols` columns takes the GEMM (phase 3).
    fn gemm(&self, cols: usize) -> bool {
        self.area.len > 0 && super::id_gemm::takes(&self.a, cols, self.isa)
    }

    /// Phase 3: the experts that take the GEMM, by every thread.
    fn multiply_gemm(&self, plan: &Plan, ctx: &NodeCtx) -> Result<()> {
        // No GEMM area: no expert could take it (decoding's one token).
        if self.area.len == 0 {
            return Ok(());
        }
        let n_used = self.ids.ne(0);
        // SAFETY: written by thread 0 before the barrier, read-only since.
        let (off, ent) = unsafe {
            (
                std::slice::from_raw_parts(self.offsets(), self.n_as + 1),
                std::slice::from_raw_parts(self.entries(), n_used * self.ids.ne(1)),
            )
        };
        if !off.windows(2).any(|w| self.gemm(w[1] - w[0])) {
            return Ok(());
        }
        let experts: Vec<&[usize]> = off.windows(2).map(|w| &ent[w[0]..w[1]]).collect();
        super::id_gemm::multiply(
            ctx,
            (plan.a, plan.b, plan.dst),
            &experts,
            self.area,
            gemm_counter(ctx),
        )
    }

    /// Phase 2: units until none are left.
    fn multiply_share(&self, plan: &Plan, ctx: &NodeCtx) {
        let n_used = self.ids.ne(0);
        // SAFETY: written by thread 0 before the barrier, read-only since.
        let (off, pre, ent) = unsafe {
            (
                std::slice::from_raw_parts(self.offsets(), self.n_as + 1),
                std::slice::from_raw_parts(self.prefix(), self.n_as + 1),
                std::slice::from_raw_parts(self.entries(), n_used * self.ids.ne(1)),
            )
        };
        let total = pre[self.n_as];
        let nth = ctx.nth.max(1);
        let ne11 = plan.b.ne(1);
        let mut unit = ctx.ith;
        let mut tile = [[0f32; BLOCK_M]; BLOCK_N];
        while unit < total {
            // The expert of `unit`: the last with prefix <= unit and columns.
            let e = pre.partition_point(|&p| p <= unit).saturating_sub(1);
            let cols = &ent[off[e]..off[e + 1]];
            let size = self.unit;
            let nc0 = self.rows.div_ceil(size);
            let u = unit - pre[e];
            let (c0, c1) = (u % nc0, u / nc0);
            let r0 = c0 * size;
            let r1 = (r0 + size).min(self.rows);
            let j0 = c1 * BLOCK_N;
            let j1 = (j0 + BLOCK_N).min(cols.len());
            let mut ys: [&[u8]; BLOCK_N] = [&[]; BLOCK_N];
            for (y, &ent) in ys.iter_mut().zip(&cols[j0..j1]) {
                let (slot, tok) = (ent % n_used, ent / n_used);
                let i11 = slot % ne11;
                *y = plan.b_col(i11 + tok * ne11, i11, tok, 0);
            }
            let ys = &ys[..j1 - j0];
            // SAFETY: e < n_as (ids checked), a matrix of `as`.
            let a0 = unsafe { plan.a.row(0, e, 0) };
            if let ([y], [ent]) = (ys, &cols[j0..j1]) {
                // One column (decoding): the one-column kernels, straight
                // into dst.
                let (slot, tok) = (ent % n_used, ent / n_used);
                // SAFETY: a0 is expert e's matrix, r1 <= its rows; dst row
                // (slot, tok) of contiguous f32 [m, n_used, n_tokens] exists,
                // its rows r0..r1 this unit's only (one expert per pair).
                unsafe {
                    let d = plan.dst.row(slot, tok, 0).cast::<f32>();
                    plan.column_into(a0, y, d, r0..r1);
                }
            } else {
                for t0 in (r0..r1).step_by(BLOCK_M) {
                    let m = (t0 + BLOCK_M).min(r1) - t0;
                    if plan.a_row == 0 {
                        tile.iter_mut().for_each(|c| c.fill(0.0));
                    } else {
                        plan.tile(a0, t0..t0 + m, ys, &mut tile);
                    }
                    for (col, &ent) in tile.iter().zip(&cols[j0..j1]) {
                        let (slot, tok) = (ent % n_used, ent / n_used);
                        // SAFETY: dst is contiguous f32 [m, n_used, n_tokens]; row
                        // (slot, tok) exists; its rows t0..t0 + m are this unit's
                        // only (each pair is in exactly one expert's list).
                        unsafe {
                            let d = plan.dst.row(slot, tok, 0).add(t0 * 4);
                            std::ptr::copy_nonoverlapping(col.as_ptr().cast::<u8>(), d, m * 4);
                        }
                    }
                }
            }
            if nth >= total {
                break;
            }
            unit = plan.counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Validate the node and lay out the scratch.
fn prepare<'s>(ctx: &'s NodeCtx<'_>) -> Result<(Plan<'s>, Map)> {
    if !matches!(ctx.op, Op::MulMatId) {
        return Err(Error::op(
            "MUL_MAT_ID",
            format!("kernel called for {}", ctx.op.name()),
        ));
    }
    let (a, b, ids, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.dst);
    let (la, lb, li, ld) = (a.layout, b.layout, ids.layout, dst.layout);
    id_check(&la, &lb, &li)?;
    let want = [la.ne[1], li.ne[0], lb.ne[2], 1];
    if ld.dtype != DType::F32 || ld.ne != want || !ld.is_contiguous() {
        return Err(Error::op(
            "MUL_MAT_ID",
            format!("dst {ld} must be contiguous f32 {want:?}"),
        ));
    }
    let (head, area, total) = id_scratch_parts(&la, &lb, &li, ctx.nth, ctx.isa)
        .ok_or_else(|| Error::Overflow(format!("MUL_MAT_ID scratch for b {lb}")))?;
    let s = ctx.scratch;
    if s.len < total || s.ptr.is_null() || !(s.ptr as usize).is_multiple_of(64) {
        return Err(Error::InvalidLayout(format!(
            "MUL_MAT_ID needs {total} bytes of 64-byte aligned scratch, {} given",
            s.len
        )));
    }
    let plan = Plan::with_weights(ctx, a, b, dst, head)?;
    debug_assert!(head >= COUNTER_BYTES);
    Ok((
        plan,
        Map {
            ids,
            n_as: la.ne[2],
            // SAFETY: head + map bytes <= s.len (checked above); head is a
            // multiple of 64 from a 64-aligned pointer, so usize-aligned.
            words: unsafe { s.ptr.add(head) }.cast::<usize>(),
            rows: la.ne[1],
            unit: unit_rows(
                la.row_bytes(),
                la.ne[1],
                la.ne[2].min(li.ne[0].saturating_mul(li.ne[1])),
                ctx.nth,
            ),
            a: la,
            isa: ctx.isa,
            area: super::super::Scratch {
                // SAFETY: area <= total <= s.len (checked above).
                ptr: unsafe { s.ptr.add(area) },
                len: total - area,
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::unit_rows;

    #[test]
    fn units_are_about_192_kib_of_rows_and_shrink_for_many_threads() {
        // Q4_K rows of 2,048 values (1,152 bytes): 160 rows; decoding's 8
        // experts of 768 rows on 2 threads keep them.
        assert_eq!(unit_rows(1152, 768, 8, 2), 160);
        // 16 threads: 768 x 8 / 64 = 96 rows; 64 threads: the floor, 64.
        assert_eq!(unit_rows(1152, 768, 8, 16), 96);
        assert_eq!(unit_rows(1152, 768, 8, 64), 64);
        // Short rows: at most 512; long ones: at least 64.
        assert_eq!(unit_rows(144, 700, 128, 2), 512);
        assert_eq!(unit_rows(1 << 20, 768, 128, 2), 64);
        assert_eq!(unit_rows(0, usize::MAX, usize::MAX, 0), 512);
    }
}
