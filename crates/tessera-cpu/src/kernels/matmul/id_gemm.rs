//! MUL_MAT_ID's experts with many tokens (a prompt's) by the packed GEMM
//! of [`crate::kernels::gemm`], expert by expert: the columns routed to
//! the expert gathered into a contiguous matrix in the scratch, one GEMM
//! of the expert's weights by them (all threads, as a MUL_MAT node runs
//! it), the results scattered back to their (slot, token) rows.
//!
//! Why: the grouped tile kernels of [`super::id`] read each expert's rows
//! once for its tokens but multiply with the few-column tile kernels: in
//! a synthetic Qwen3 MoE's 512-token prompt they ran at 146 GFLOPS where
//! the dense products' GEMM ran at 690, and the prompt at 0.82x of
//! llama.cpp's.
//!
//! An expert takes this path where the GEMM would take a MUL_MAT of its
//! weights by that many columns ([`crate::kernels::gemm::applies`]); the
//! others stay with the tile kernels.

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

/// The gathered activations of `cols` columns of `k` values.
fn gathered(k: usize, cols: usize) -> Result<Layout> {
    Layout::contiguous(DType::F32, &[k, cols])
}

/// Whether an expert of `cols` columns takes the GEMM: the GEMM would take
/// a MUL_MAT of that many, and they fit the gathering area (`tokens`
/// columns: more only where ids route a token to one expert twice).
pub(super) fn takes(a: &Layout, (cols, tokens): (usize, usize), isa: crate::isa::Isa) -> bool {
    (1..=tokens).contains(&cols)
        && gathered(a.ne[0], cols).is_ok_and(|b| gemm::applies(&one_matrix(a), &b, isa))
}

/// Bytes of the gathering area (activations `k x tokens`, results `m x
/// tokens`, each at a multiple of 64) and of the GEMM's scratch for one
/// expert of up to `tokens` columns on `nth` threads, `None` on overflow
/// or where no expert could take the GEMM.
pub(super) fn scratch_parts(a: &Layout, b: &Layout, nth: usize) -> Option<(usize, usize, usize)> {
    let (k, m, tokens) = (a.ne[0], a.ne[1], b.ne[2]);
    let round = |n: usize| n.checked_add(63).map(|n| n / 64 * 64);
    let acts = round(k.checked_mul(tokens)?.checked_mul(4)?)?;
    let outs = round(m.checked_mul(tokens)?.checked_mul(4)?)?;
    let g = gemm::scratch_size(&one_matrix(a), &gathered(k, tokens).ok()?, nth);
    (g != usize::MAX).then_some((acts, outs, g))
}

/// The experts that take the GEMM, one after the other, by every thread
/// (`experts[e]`: the (slot + token * used) entries routed to expert `e`;
/// `area`: the scratch after the tile kernels' part, [`scratch_parts`]).
pub(super) fn multiply(
    ctx: &NodeCtx,
    (a, b, dst): (TensorRef, TensorRef, TensorRef),
    experts: &[&[usize]],
    area: Scratch,
) -> Result<()> {
    let (k, m, ne11, used) = (a.ne(0), a.ne(1), b.ne(1), dst.ne(1));
    let Some((acts, outs, gs)) = scratch_parts(&a.layout, &b.layout, ctx.nth) else {
        return Ok(());
    };
    if area.len < acts + outs + gs {
        return Err(tessera::Error::InvalidLayout(format!(
            "MUL_MAT_ID needs {} bytes of scratch for its experts' GEMM, {} given",
            acts + outs + gs,
            area.len
        )));
    }
    let (b_at, out_at) = (area.ptr, area.ptr.wrapping_add(acts));
    let gemm_scratch = Scratch {
        ptr: area.ptr.wrapping_add(acts + outs),
        len: gs,
    };
    for (e, cols) in experts.iter().enumerate() {
        if !takes(&a.layout, (cols.len(), b.ne(2)), ctx.isa) {
            continue;
        }
        let n = cols.len();
        // Gather: this thread's share of the columns.
        for j in ctx.split(n) {
            let (slot, tok) = (cols[j] % used, cols[j] / used);
            // SAFETY: (slot % ne11, tok) is a column of b (slot < used,
            // tok < tokens, checked with the ids); the gathering area holds
            // `tokens >= n` columns of k f32; threads copy disjoint columns.
            unsafe {
                let src = b.row(slot % ne11, tok, 0);
                let to = b_at.add(j * k * 4).cast::<f32>();
                for l in 0..k {
                    to.add(l)
                        .write(src.add(l * b.nb(0)).cast::<f32>().read_unaligned());
                }
            }
        }
        ctx.barrier.wait();
        let one = one_matrix(&a.layout);
        // Expert e < n_as (ids checked); the areas lie in the scratch (size
        // checked above): the GEMM's operands are valid for their layouts.
        let sub = NodeCtx {
            op: Op::MulMat,
            dst: TensorRef {
                ptr: out_at,
                layout: Layout::contiguous(DType::F32, &[m, n])?,
                packing: crate::repack::Packing::Standard,
            },
            src: {
                let mut s = [None; MAX_SRC];
                s[0] = Some(TensorRef {
                    ptr: a.ptr.wrapping_add(e * a.nb(2)),
                    layout: one,
                    packing: a.packing,
                });
                s[1] = Some(TensorRef {
                    ptr: b_at,
                    layout: gathered(k, n)?,
                    packing: crate::repack::Packing::Standard,
                });
                s
            },
            ith: ctx.ith,
            nth: ctx.nth,
            scratch: gemm_scratch,
            table: None,
            barrier: ctx.barrier,
            isa: ctx.isa,
        };
        gemm::mul_mat(&sub)?;
        ctx.barrier.wait();
        // Scatter: this thread's share of the columns' results.
        for j in ctx.split(n) {
            let (slot, tok) = (cols[j] % used, cols[j] / used);
            // SAFETY: dst is contiguous f32 [m, used, tokens] (checked by
            // the caller); result column j holds m f32; each (slot, tok)
            // is routed to one expert, so no other write touches its row.
            unsafe {
                let d = dst.row(slot, tok, 0);
                std::ptr::copy_nonoverlapping(out_at.add(j * m * 4), d, m * 4);
            }
        }
        ctx.barrier.wait();
    }
    Ok(())
}
