//! ARGSORT and TOP_K over the rows of an F32 tensor (ggml's
//! `ggml_compute_forward_argsort_f32` and `_top_k_f32`).
//!
//! Both order indices by a strict total order: by value (NaN above every
//! number, `-0 == +0`), then by index, so equal values keep index order
//! (ggml's `std::sort` and `std::partial_sort` leave it unspecified) and no
//! input can make the sort misbehave. ARGSORT writes every index of a row in
//! ascending or descending order; TOP_K writes the `k = dst.ne0` indices of
//! the largest values, largest first (ggml's order is unspecified: it swaps
//! the first two). Source rows have contiguous elements, any strides
//! between rows; results are contiguous I32 rows. Threads split the rows;
//! TOP_K sorts in its thread's scratch of `ne0` indices.

use std::cmp::Ordering;

use tessera::{DType, Error, Op, Result, SortOrder};

use super::elem::rows;
use super::{NodeCtx, TensorRef, per_thread_bytes};

/// Scratch bytes of a TOP_K over rows of `ne0` elements on `nth` threads.
pub fn top_k_scratch_size(ne0: usize, nth: usize) -> usize {
    nth.saturating_mul(per_thread_bytes(ne0, 4))
}

/// The ascending order of values `a` and `b`: NaN above every number.
#[inline]
fn cmp_values(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Sort `idx` (indices into `x`) ascending or descending by value, then by index.
fn sort_indices(idx: &mut [i32], x: &[f32], desc: bool) {
    let at = |i: i32| x.get(i as usize).copied().unwrap_or(f32::NAN);
    idx.sort_unstable_by(|&a, &b| {
        let by_value = if desc {
            cmp_values(at(b), at(a))
        } else {
            cmp_values(at(a), at(b))
        };
        by_value.then(a.cmp(&b))
    });
}

/// The shared checks: F32 rows with contiguous elements, I32 contiguous result rows.
fn check(ctx: &NodeCtx, src: &TensorRef) -> Result<()> {
    let (s, d) = (&src.layout, &ctx.dst.layout);
    let ok = s.dtype == DType::F32
        && d.dtype == DType::I32
        && (s.ne[0] <= 1 || s.nb[0] == 4)
        && (d.ne[0] <= 1 || d.nb[0] == 4)
        && d.ne[1..] == s.ne[1..]
        && d.ne[0] <= s.ne[0]
        && i32::try_from(s.ne[0]).is_ok();
    if ok {
        Ok(())
    } else {
        Err(Error::op(
            ctx.op.name(),
            format!("input {s} does not fit result {d}"),
        ))
    }
}

/// Compute this thread's share of an ARGSORT or TOP_K node.
pub fn sort(ctx: &NodeCtx) -> Result<()> {
    let desc = match ctx.op {
        Op::Argsort { order } => order == SortOrder::Desc,
        Op::TopK => true,
        op => return Err(Error::op(op.name(), "not a sorting op")),
    };
    let src = ctx.src(0)?;
    check(ctx, &src)?;
    let d = &ctx.dst;
    let (n, k) = (src.ne(0), d.ne(0));
    if k == 0 {
        return Ok(());
    }
    if ctx.op == Op::TopK && k != n {
        // Every thread fetches its scratch (no barrier involved).
        let tmp = ctx.thread_scratch_f32(n)? as *mut i32;
        for (i1, i2, i3) in rows(ctx.split(d.ne(1) * d.ne(2) * d.ne(3)), &d.layout.ne) {
            // SAFETY: an in-range source row of `n` contiguous f32, and this
            // thread's scratch of `n` i32 (aligned: the scratch is aligned to
            // 64 and each thread's part is a multiple of 64 bytes), which no
            // other thread touches.
            let (x, idx) = unsafe {
                (
                    std::slice::from_raw_parts(src.row(i1, i2, i3) as *const f32, n),
                    std::slice::from_raw_parts_mut(tmp, n),
                )
            };
            for (j, v) in idx.iter_mut().enumerate() {
                *v = j as i32;
            }
            let at = |i: i32| x.get(i as usize).copied().unwrap_or(f32::NAN);
            let cmp = |a: &i32, b: &i32| cmp_values(at(*b), at(*a)).then(a.cmp(b));
            if k < n {
                idx.select_nth_unstable_by(k - 1, cmp);
            }
            idx[..k].sort_unstable_by(cmp);
            // SAFETY: an in-range result row of `k` contiguous i32, written by
            // this thread only; it does not overlap the scratch.
            let out = unsafe { std::slice::from_raw_parts_mut(d.row(i1, i2, i3) as *mut i32, k) };
            out.copy_from_slice(&idx[..k]);
        }
        return Ok(());
    }
    for (i1, i2, i3) in rows(ctx.split(d.ne(1) * d.ne(2) * d.ne(3)), &d.layout.ne) {
        // SAFETY: an in-range source row of `n` contiguous f32 and an
        // in-range result row of `n` contiguous i32 (`k == n`), written by
        // this thread only; an I32 result never overlaps its F32 source.
        let (x, out) = unsafe {
            (
                std::slice::from_raw_parts(src.row(i1, i2, i3) as *const f32, n),
                std::slice::from_raw_parts_mut(d.row(i1, i2, i3) as *mut i32, k),
            )
        };
        for (j, v) in out.iter_mut().enumerate() {
            *v = j as i32;
        }
        sort_indices(out, x, desc);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_index_order_and_nan_is_largest() {
        let x = [1.0, f32::NAN, -0.0, 3.0, 0.0, 1.0];
        let mut idx: Vec<i32> = (0..6).collect();
        sort_indices(&mut idx, &x, false);
        assert_eq!(idx, [2, 4, 0, 5, 3, 1]);
        sort_indices(&mut idx, &x, true);
        assert_eq!(idx, [1, 3, 0, 5, 2, 4]);
    }
}
