//! MUL_MAT_ID's experts with many tokens (a prompt's) by the packed GEMM
//! of [`crate::kernels::gemm`]: the columns routed to an expert gathered
//! into a contiguous matrix, one GEMM of the expert's weights by them, the
//! results scattered back to their (slot, token) rows.
//!
//! Why: the grouped tile kernels of [`super::id`] read each expert's rows
//! once for its tokens but multiply with the few-column tile kernels: in
//! a synthetic Qwen3 MoE's 512-token prompt they ran at 146 GFLOPS where
//! the dense products' GEMM ran at 690, and the prompt at 0.82x of
//! llama.cpp's.
//!
//! The threads take whole experts (or up to [`CALL_COLS`] of an expert's
//! columns by up to [`CALL_ROWS`] of its rows) from a shared counter,
//! each gathering, multiplying on one thread and scattering in its own
//! part of the scratch: no barrier
//! between experts (four an expert when all threads shared each expert's
//! GEMM), and the threads stream different experts' weights side by side.
//! Qwen3 30B-A3B's experts (`tessera bench ops --op MUL_MAT_ID`, n = 512,
//! a Xeon with AVX-512, 2 threads), ms an op, shared / by thread (ggml
//! live): Q4_K 41.2 / 35.7 (50.8), Q6_K 43.7 / 38.0 (60.2), Q4_0 37.3 /
//! 31.9 (133.7), Q8_0 38.5 / 35.6 (134.9).
//!
//! An expert takes this path where the GEMM would take a MUL_MAT of its
//! weights by that many columns ([`crate::kernels::gemm::applies`]); the
//! others stay with the tile kernels.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{DType, Layout, MAX_SRC, Op, Result};

use super::super::{NodeCtx, Scratch, TensorRef};
use crate::kernels::gemm;

/// One expert's weights as a MUL_MAT operand (`k x m`).
fn one_matrix(a: &Layout) -> Layout {
    let mut one = *a;
    one.ne[2] = 1;
    one.ne[3] = 1;
    one
}

/// `rows` rows of one expert's weights as a MUL_MAT operand.
fn rows_of(a: &Layout, rows: usize) -> Layout {
    let mut one = one_matrix(a);
    one.ne[1] = rows;
    one
}

/// The gathered activations of `cols` columns of `k` values.
fn gathered(k: usize, cols: usize) -> Result<Layout> {
    Layout::contiguous(DType::F32, &[k, cols])
}

/// Most columns of one GEMM call: an expert with more takes several,
/// of equal size.
const CALL_COLS: usize = 256;
/// Most weight rows of one GEMM call: an expert with more (Mixtral's
/// 14,336) is cut into calls of whole `MC` blocks of rows (the last one
/// shorter), so that few large experts still give every thread work, and
/// a thread's results stay small.
const CALL_ROWS: usize = 1024;
const _: () = assert!(CALL_ROWS.is_multiple_of(gemm::MC));

/// The row blocks of an expert of `m` rows: how many, and the rows of
/// each but the last (whole `MC` blocks, at most [`CALL_ROWS`]; the last
/// has the rest, at least one row).
fn row_blocks(m: usize) -> (usize, usize) {
    let n = m.div_ceil(CALL_ROWS).max(1);
    let block = m
        .div_ceil(n)
        .next_multiple_of(gemm::MC)
        .min(CALL_ROWS)
        .min(m.max(1));
    (m.div_ceil(block.max(1)).max(1), block)
}

/// The calls of an expert of `cols` columns: how many, and the columns
/// of each (the last may have fewer).
fn calls(cols: usize) -> (usize, usize) {
    let n = cols.div_ceil(CALL_COLS).max(1);
    (n, cols.div_ceil(n))
}

/// Whether an expert of `cols` columns takes the GEMM: the GEMM would take
/// a MUL_MAT of each call's columns.
pub(super) fn takes(a: &Layout, cols: usize, isa: crate::isa::Isa) -> bool {
    cols > 0
        && gathered(a.ne[0], calls(cols).1).is_ok_and(|b| gemm::applies(&one_matrix(a), &b, isa))
}

/// Bytes of one thread's part of the area: the gathered activations (`k x
/// c`, c the most columns of a call: [`CALL_COLS`], or every pair of
/// `tokens` tokens by `used` experts where fewer), the results (`r x c`,
/// r the rows of a call: [`row_blocks`])
/// and the one-thread GEMM's scratch, each at a multiple of 64; `None` on
/// overflow.
pub(super) fn thread_parts(a: &Layout, b: &Layout, used: usize) -> Option<(usize, usize, usize)> {
    let (k, m) = (a.ne[0], a.ne[1]);
    let cols = b.ne[2].saturating_mul(used).clamp(1, CALL_COLS);
    let round = |n: usize| n.checked_add(63).map(|n| n / 64 * 64);
    let acts = round(k.checked_mul(cols)?.checked_mul(4)?)?;
    let rows = row_blocks(m).1;
    let outs = round(rows.checked_mul(cols)?.checked_mul(4)?)?;
    let g = gemm::scratch_size(&rows_of(a, rows), &gathered(k, cols).ok()?, 1);
    (g != usize::MAX).then_some((acts, outs, round(g)?))
}

/// Bytes of the whole area for `nth` threads (`None`: as [`thread_parts`]).
pub(super) fn area_bytes(a: &Layout, b: &Layout, used: usize, nth: usize) -> Option<usize> {
    let (acts, outs, g) = thread_parts(a, b, used)?;
    acts.checked_add(outs)?
        .checked_add(g)?
        .checked_mul(nth.max(1))
}

/// The experts that take the GEMM, whole or by [`CALL_COLS`] columns, as
/// the threads take them from `next` (set to `nth` before: each thread's
/// first call is its index) (`experts[e]`: the (slot + token * used)
/// entries routed to expert `e`; `area`: the scratch after the tile
/// kernels' part, [`area_bytes`]).
pub(super) fn multiply(
    ctx: &NodeCtx,
    (a, b, dst): (TensorRef, TensorRef, TensorRef),
    experts: &[&[usize]],
    area: Scratch,
    next: &AtomicUsize,
) -> Result<()> {
    let (k, m, ne11, used) = (a.ne(0), a.ne(1), b.ne(1), dst.ne(1));
    let Some((acts, outs, gs)) = thread_parts(&a.layout, &b.layout, used) else {
        return Ok(());
    };
    let per = acts + outs + gs;
    if area.len < per.saturating_mul(ctx.nth.max(1)) || ctx.ith >= ctx.nth.max(1) {
        return Err(tessera::Error::InvalidLayout(format!(
            "MUL_MAT_ID needs {per} bytes of scratch a thread for its experts' GEMM, {} given for {}",
            area.len, ctx.nth
        )));
    }
    // This thread's part: gathered activations, results, GEMM scratch.
    let mine = area.ptr.wrapping_add(ctx.ith * per);
    let (b_at, out_at) = (mine, mine.wrapping_add(acts));
    let gemm_scratch = Scratch {
        ptr: mine.wrapping_add(acts + outs),
        len: gs,
    };
    // Every call: (expert, its columns, its rows), the same list on every
    // thread.
    let (blocks, block) = row_blocks(m);
    let jobs: Vec<(usize, Range<usize>, Range<usize>)> = experts
        .iter()
        .enumerate()
        .filter(|(_, cols)| takes(&a.layout, cols.len(), ctx.isa))
        .flat_map(|(e, cols)| {
            let (n, per_call) = calls(cols.len());
            (0..n).flat_map(move |c| {
                let cs = c * per_call..((c + 1) * per_call).min(cols.len());
                (0..blocks).map(move |r| (e, cs.clone(), r * block..((r + 1) * block).min(m)))
            })
        })
        .collect();
    let solo = crate::pool::Barrier::new();
    let mut job = ctx.ith;
    while let Some((e, cs, rows)) = jobs.get(job) {
        let (e, r0, nr) = (*e, rows.start, rows.len());
        let cols = &experts[e][cs.clone()];
        let n = cols.len();
        for (j, &ent) in cols.iter().enumerate() {
            let (slot, tok) = (ent % used, ent / used);
            // SAFETY: (slot % ne11, tok) is a column of b (slot < used,
            // tok < tokens, checked with the ids); this thread's gathering
            // area holds min(CALL_COLS, tokens * used) columns of k f32
            // (`thread_parts`), and a call has at most CALL_COLS columns
            // (`calls`) of distinct pairs, so at most tokens * used.
            unsafe {
                let src = b.row(slot % ne11, tok, 0);
                let to = b_at.add(j * k * 4);
                if b.nb(0) == 4 {
                    std::ptr::copy_nonoverlapping(src, to, k * 4);
                } else {
                    for l in 0..k {
                        to.cast::<f32>()
                            .add(l)
                            .write(src.add(l * b.nb(0)).cast::<f32>().read_unaligned());
                    }
                }
            }
        }
        // Expert e < n_as (ids checked) and rows r0..r0 + nr < m of its
        // matrix; this thread's parts lie in the scratch (size checked
        // above): the GEMM's operands are valid for their layouts, and
        // only this thread uses them.
        let sub = NodeCtx {
            op: Op::MulMat,
            dst: TensorRef {
                ptr: out_at,
                layout: Layout::contiguous(DType::F32, &[nr, n])?,
                packing: crate::repack::Packing::Standard,
            },
            src: {
                let mut s = [None; MAX_SRC];
                s[0] = Some(TensorRef {
                    ptr: a.ptr.wrapping_add(e * a.nb(2) + r0 * a.nb(1)),
                    layout: rows_of(&a.layout, nr),
                    packing: a.packing,
                });
                s[1] = Some(TensorRef {
                    ptr: b_at,
                    layout: gathered(k, n)?,
                    packing: crate::repack::Packing::Standard,
                });
                s
            },
            ith: 0,
            nth: 1,
            scratch: gemm_scratch,
            table: None,
            barrier: &solo,
            isa: ctx.isa,
        };
        gemm::mul_mat(&sub)?;
        for (j, &ent) in cols.iter().enumerate() {
            let (slot, tok) = (ent % used, ent / used);
            // SAFETY: dst is contiguous f32 [m, used, tokens] (checked by
            // the caller); result column j holds nr f32, rows r0..r0 + nr
            // < m of the pair's output row; each (slot, tok) is routed to
            // one expert and lies in one call's columns, and the calls of
            // those columns have disjoint rows: no other write touches
            // these.
            unsafe {
                let d = dst.row(slot, tok, 0).add(r0 * 4);
                std::ptr::copy_nonoverlapping(out_at.add(j * nr * 4), d, nr * 4);
            }
        }
        job = next.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
