//! FLASH_ATTN_EXT: fused `softmax(scale * q k^T + slope * mask) v` per
//! (query, head) row, with ggml's semantics (`ggml_compute_forward_flash_attn_ext_f16`).
//!
//! For query `iq1` of head `iq2` (KV head `iq2 / (n_head / n_head_kv)`):
//! `s_j = scale * (q . k_j)`; with `logit_softcap = c != 0`, ggml divides
//! `scale` by `c` up front and takes `s_j = c * tanh(s_j)`; then
//! `s_j += slope * mask[j, iq1]` (ALiBi slope per head, 1 without ALiBi); the
//! output row is `sum_j softmax(s)_j v_j`, written at `dst[:, iq2, iq1, iq3]`
//! (heads and queries swapped, as in ggml).
//!
//! Work is cut into *groups*: up to [`GROUP_ROWS`] output rows of one batch
//! entry that share a KV head (the query heads of one KV head under GQA, and
//! the queries of a prompt). A group reads each block of [`KV_BLOCK`] K and V
//! rows once for all its rows: the scores come from the MUL_MAT multi-row
//! dot products (several K rows against several queries per call), the
//! softmax weights from a vector `exp`, and the V rows are accumulated into
//! all the group's accumulators while loaded (see [`super::attention_vec`]).
//! The softmax is online (running maximum and sum per row, one rescale per
//! block). Like ggml, `q` is first converted to K's dot type (F16 K: `q` is
//! rounded to f16; Q8_0 K, a quantized cache: `q` is quantized to Q8_0) so
//! the dot products are the MUL_MAT ones; unlike ggml, F16 V rows are
//! accumulated in f32, not f16 (Q8_0 V rows are dequantized into f32
//! accumulators, as ggml does). The computation of one group
//! lives in [`super::attention_group`].
//!
//! Prompts with an F16 or F32 cache take the GEMM form instead
//! ([`super::attention_gemm`]) where their groups hold at least
//! [`GEMM_MIN_ROWS`] rows with two groups a thread: groups of up to
//! [`GEMM_ROWS`] rows, scores and outputs as small matrix products on
//! the GEMM's f32 micro-kernels, the same softmax step. Groups are handed
//! out last queries first. With 64-value heads (a 1B Llama's prompt) this
//! form runs the attention 1.3-1.5x as fast; with 256-value heads (Gemma
//! 3) about as fast as the dot-product form.
//!
//! Sinks (F32 `src4`, optional, one logit per query head; ggml's
//! `ggml_flash_attn_ext_add_sinks`) join after the keys, as ggml does: with
//! `s` the head's sink, `s > max` rescales the accumulators and the sum by
//! `exp(max - s)` and adds 1 to the sum, otherwise `exp(s - max)` is added
//! to the sum; no value row is added.
//!
//! Masked entries (`mask * slope == -inf`) and scores of `-inf` get weight 0,
//! and a key masked for every row of a group is not read at all. A row with
//! no other entry (fully masked) has a zero sum; ggml outputs zeros for it
//! (`S == 0` gives `1/S := 0`), and so does Tessera. NaN scores propagate to
//! the output row.
//!
//! Threads take the groups from a shared counter (thread `i` starts with
//! group `i`, then takes the next one not taken): with a causal mask a
//! group's work grows with its queries' positions, so contiguous ranges
//! gave the last thread most of it when all heads share one KV head (Gemma
//! 3 270M, 512-token prompt, two threads: the first thread's queries saw
//! 128 keys on average, the second's 384), and taking them in turn left a
//! thread that was slowed down (a busy core, a VM's neighbour) holding the
//! others at the barrier after the node (9-22 % of the node on a noisy
//! two-vCPU VM). The counter lives in the scratch's first cache line, set
//! by thread 0 before one barrier; with no more groups than threads each
//! thread takes its own and there is no barrier. Each thread uses its own
//! part of the scratch for the converted queries, the accumulators and a
//! block of scores.

use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{DType, Error, Layout, Op, Result};

use super::NodeCtx;
use super::attention_gemm::{GEMM_MIN_ROWS, GEMM_ROWS, GemmBufs, gemm_bytes};
use super::attention_group::{Group, GroupBufs};
use super::attention_scale::scale_mask_fn;
use super::attention_vec::{exp_fn, f16_row_fn, vacc_fn};
use super::dot::{dot_fn, tile_f32_fn, tile_fn, vec_dot_type};
use super::gemm::f32_kernels;

/// Keys scored per step of the online softmax.
pub const KV_BLOCK: usize = 64;

/// Most output rows computed together against one pass over K and V.
pub const GROUP_ROWS: usize = 8;

/// Can the CPU run flash attention with these operands (mask optional)?
pub fn flash_attn_supported(q: &Layout, k: &Layout, v: &Layout, mask: Option<&Layout>) -> bool {
    check(q, k, v, mask).is_ok() && per_thread(q, k, v).is_some()
}

/// Scratch bytes a FLASH_ATTN_EXT node needs on `nth` threads.
pub fn flash_attn_scratch_size(q: &Layout, k: &Layout, v: &Layout, nth: usize) -> usize {
    per_thread(q, k, v)
        .and_then(|p| p.checked_mul(nth.max(1)))
        .and_then(|b| b.checked_add(COUNTER_BYTES))
        .unwrap_or(usize::MAX)
}

/// The scratch's first cache line: the counter handing out groups.
const COUNTER_BYTES: usize = 64;

/// `n` f32 rounded up to a cache line, so parts and threads never share one.
fn padded_f32(n: usize) -> Option<usize> {
    n.checked_mul(4)?.checked_add(63).map(|b| b / 64 * 64)
}

/// The parts of one thread's scratch: [`GROUP_ROWS`] converted queries (at
/// most 4 bytes per value, each padded to a cache line), the accumulators
/// (`dv` f32 each, contiguous) and blocks of [`KV_BLOCK`] scores:
/// (query row bytes, accumulator bytes, total).
fn parts(q: &Layout, v: &Layout) -> Option<(usize, usize, usize)> {
    let qb = padded_f32(q.ne[0])?;
    let ab = padded_f32(v.ne[0].checked_mul(GROUP_ROWS)?)?;
    let sb = padded_f32(KV_BLOCK * GROUP_ROWS)?;
    Some((
        qb,
        ab,
        qb.checked_mul(GROUP_ROWS)?
            .checked_add(ab)?
            .checked_add(sb)?,
    ))
}

/// Bytes of one thread's scratch in the form the node runs in (the GEMM
/// form's buffers are larger: decoding graphs do not reserve them).
fn per_thread(q: &Layout, k: &Layout, v: &Layout) -> Option<usize> {
    let rows = parts(q, v)?.2;
    if gemm_form(q, k, v) {
        Some(rows.max(gemm_bytes(q.ne[0], v.ne[0])?))
    } else {
        Some(rows)
    }
}

/// May the node run in the GEMM form: an F16 or F32 cache and at least
/// [`GEMM_MIN_ROWS`] rows (queries times the query heads of a KV head)
/// sharing each KV head? (Its groups per thread decide at run time.)
fn gemm_form(q: &Layout, k: &Layout, v: &Layout) -> bool {
    let f_or_h = |t: DType| matches!(t, DType::F16 | DType::F32);
    let shared = q.ne[1].saturating_mul(q.ne[2] / k.ne[2].max(1));
    shared >= GEMM_MIN_ROWS && f_or_h(k.dtype) && f_or_h(v.dtype)
}

/// The operand checks shared by [`flash_attn_supported`] and the kernel.
fn check(q: &Layout, k: &Layout, v: &Layout, mask: Option<&Layout>) -> Result<()> {
    let bad = |why: String| Err(Error::op("FLASH_ATTN_EXT", why));
    let kv_type = |t: DType| matches!(t, DType::F16 | DType::F32 | DType::Q8_0);
    if q.dtype != DType::F32 || !kv_type(k.dtype) || !kv_type(v.dtype) {
        return bad(format!(
            "types q {}, k {}, v {} (need f32 q, f16/f32/q8_0 k and v)",
            q.dtype, k.dtype, v.dtype
        ));
    }
    for t in [k, v] {
        if !t.ne[0].is_multiple_of(t.dtype.block_size()) {
            return bad(format!("{t}: rows are not whole {} blocks", t.dtype));
        }
    }
    if !(q.is_contiguous_rows() && k.is_contiguous_rows() && v.is_contiguous_rows()) {
        return bad(format!("q {q}, k {k}, v {v} need contiguous rows"));
    }
    if k.ne[0] != q.ne[0] || v.ne[1] != k.ne[1] || v.ne[2] != k.ne[2] || v.ne[3] != k.ne[3] {
        return bad(format!("q {q}, k {k}, v {v} do not fit together"));
    }
    if k.ne[2] == 0
        || k.ne[3] == 0
        || !q.ne[2].is_multiple_of(k.ne[2])
        || !q.ne[3].is_multiple_of(k.ne[3])
    {
        return bad(format!("q {q} heads/batch are not multiples of k {k}'s"));
    }
    if let Some(m) = mask {
        if m.dtype != DType::F16 || !m.is_contiguous_rows() {
            return bad(format!("mask {m} must be f16 with contiguous rows"));
        }
        if m.ne[0] < k.ne[1] || m.ne[1] < q.ne[1] || m.ne[2] == 0 || m.ne[3] == 0 {
            return bad(format!(
                "mask {m} must be at least [n_kv = {}, n_q = {}]",
                k.ne[1], q.ne[1]
            ));
        }
        m.checked_nbytes()?;
    }
    q.checked_nbytes()?;
    k.checked_nbytes()?;
    v.checked_nbytes()?;
    Ok(())
}

/// Compute this thread's share of the attention output.
pub fn flash_attn_ext(ctx: &NodeCtx) -> Result<()> {
    let Op::FlashAttnExt {
        scale,
        max_bias,
        logit_softcap,
    } = ctx.op
    else {
        return Err(Error::op(
            "FLASH_ATTN_EXT",
            format!("kernel called for {}", ctx.op.name()),
        ));
    };
    let (q, k, v, mask) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.src[3]);
    let sinks = ctx.src[4];
    if let Some(s) = sinks {
        let l = &s.layout;
        if l.dtype != DType::F32 || l.ne[0] < q.ne(2) || s.nb(0) != 4 {
            return Err(Error::op(
                "FLASH_ATTN_EXT",
                format!("sinks {l} must be F32 with one logit per head"),
            ));
        }
    }
    check(
        &q.layout,
        &k.layout,
        &v.layout,
        mask.as_ref().map(|m| &m.layout),
    )?;
    let dv = v.ne(0);
    let (n_q, n_head, ne3) = (q.ne(1), q.ne(2), q.ne(3));
    let ld = ctx.dst.layout;
    let want = [dv, n_head, n_q, ne3];
    if ld.dtype != DType::F32 || ld.ne != want || !ld.is_contiguous() {
        return Err(Error::op(
            "FLASH_ATTN_EXT",
            format!("dst {ld} must be contiguous f32 {want:?}"),
        ));
    }
    // Groups: per batch entry and KV head, the n_q * (heads per KV head)
    // rows sharing that K/V, GROUP_ROWS at a time, or up to GEMM_ROWS in
    // the GEMM form (prompts with an F16 or F32 cache). The GEMM form's
    // groups are cut so that every thread gets two (a few queries after a
    // long context on one KV head would otherwise be one group, one
    // thread's work); where that leaves groups of fewer than GEMM_MIN_ROWS
    // rows, the dot-product form runs instead.
    let nth = ctx.nth.max(1);
    let n_kv_head = k.ne(2);
    let shared = n_q * (n_head / n_kv_head);
    let per_gemm_head = (2 * nth).div_ceil(n_kv_head * ne3).max(1);
    let gemm_rows = shared
        .div_ceil(per_gemm_head)
        .next_multiple_of(4)
        .min(GEMM_ROWS);
    let gemm = gemm_form(&q.layout, &k.layout, &v.layout) && gemm_rows >= GEMM_MIN_ROWS;
    let group_rows = if gemm { gemm_rows } else { GROUP_ROWS };
    let per_head = shared.div_ceil(group_rows);
    let n_groups = ne3 * n_kv_head * per_head;
    // More groups than threads: handed out by the counter (one barrier).
    let dynamic = n_groups > nth && dv > 0;
    if !dynamic && (ctx.ith >= n_groups || dv == 0) {
        return Ok(());
    }
    let kt = k.layout.dtype;
    let dot = dot_fn(kt, ctx.isa)
        .ok_or_else(|| Error::unsupported("CPU", format!("FLASH_ATTN_EXT with {kt} K")))?;
    let vacc = vacc_fn(v.layout.dtype, ctx.isa).ok_or_else(|| {
        Error::unsupported("CPU", format!("FLASH_ATTN_EXT with {} V", v.layout.dtype))
    })?;

    // This thread's scratch: [queries | accumulators | scores], GROUP_ROWS each.
    let (q_bytes, a_bytes, _) = parts(&q.layout, &v.layout)
        .ok_or_else(|| Error::Overflow("FLASH_ATTN_EXT scratch".into()))?;
    let per = per_thread(&q.layout, &k.layout, &v.layout)
        .ok_or_else(|| Error::Overflow("FLASH_ATTN_EXT scratch".into()))?;
    // Checked for every thread at once, so that either every thread goes
    // on to the barrier or none does.
    let s = ctx.scratch;
    let fits = per
        .checked_mul(nth)
        .and_then(|b| b.checked_add(COUNTER_BYTES))
        .is_some_and(|b| b <= s.len);
    let aligned = !s.ptr.is_null() && (s.ptr as usize).is_multiple_of(COUNTER_BYTES);
    if !fits || !aligned || ctx.ith >= nth {
        return Err(Error::device(
            "CPU",
            format!(
                "FLASH_ATTN_EXT: scratch of {} bytes too small for {nth} threads (or not 64-byte aligned, or thread {} of {nth})",
                s.len, ctx.ith
            ),
        ));
    }
    let start = COUNTER_BYTES + per * ctx.ith;
    // SAFETY: start + per <= 64 + per * nth <= s.len (ith < nth): this
    // thread's part of the scratch, after the counter's line, used by this
    // thread alone while the node runs; 64-byte aligned (64-aligned base,
    // offsets multiples of 64: `parts` and `gemm_bytes` pad every part).
    let mine = unsafe { std::slice::from_raw_parts_mut(s.ptr.add(start), per) };
    let mut bufs = if gemm {
        Bufs::Gemm(GemmBufs::new(mine, q.ne(0), dv)?)
    } else {
        let (qs_len, acc_len) = (GROUP_ROWS * q_bytes, a_bytes);
        let (qs, rest) = mine.split_at_mut(qs_len);
        let (acc, scores) = rest.split_at_mut(acc_len);
        let n = scores.len() / 4 * 4;
        Bufs::Rows(GroupBufs {
            q: qs,
            q_stride: q_bytes,
            acc: f32s(acc)?,
            scores: f32s(&mut scores[..n])?,
        })
    };

    // F16 K: where there is an f16 x f32 kernel, q is rounded to f16 (as in
    // ggml) but stored as f32, so it is not widened again for every key.
    let (tile, q_type, round_q) = match (kt, tile_f32_fn(kt, ctx.isa)) {
        (DType::F16, Some(t)) => (Some(t), DType::F32, true),
        _ => {
            // The queries in K's dot type (F32, F16, Q8_0), as in ggml.
            let qt = vec_dot_type(kt)
                .ok_or_else(|| Error::unsupported("CPU", format!("FLASH_ATTN_EXT with {kt} K")))?;
            (tile_fn(kt, ctx.isa), qt, false)
        }
    };
    let group = Group {
        q,
        k,
        v,
        mask,
        sinks,
        dst: ctx.dst,
        dot,
        tile,
        q_type,
        round_q,
        vacc,
        exp: exp_fn(ctx.isa),
        scale_mask: scale_mask_fn(ctx.isa),
        f16_row: f16_row_fn(ctx.isa),
        isa: ctx.isa,
        scale: if logit_softcap != 0.0 {
            scale / logit_softcap
        } else {
            scale
        },
        softcap: logit_softcap,
        alibi: Alibi::new(max_bias, n_head),
    };
    let ks = f32_kernels(ctx.isa);
    let run = |gi: usize, bufs: &mut Bufs| {
        let (rest, part) = (gi / per_head, gi % per_head);
        let (iq3, ik2) = (rest / n_kv_head, rest % n_kv_head);
        match bufs {
            Bufs::Rows(b) => {
                let rows = part * GROUP_ROWS..(part * GROUP_ROWS + GROUP_ROWS).min(shared);
                group.compute(iq3, ik2, rows, b)
            }
            Bufs::Gemm(b) => {
                // The last queries first: under a causal mask they see the
                // most keys, and the groups handed out last are then the
                // short ones.
                let part = per_head - 1 - part;
                let rows = part * group_rows..(part * group_rows + group_rows).min(shared);
                group.compute_gemm(ks, iq3, ik2, rows, b)
            }
        }
    };
    if !dynamic {
        return run(ctx.ith, &mut bufs);
    }
    // SAFETY: the scratch's first 8 bytes (64-byte aligned, inside it:
    // checked above), used by this node's threads only through this atomic
    // while the node runs.
    let counter = unsafe { &*s.ptr.cast::<AtomicUsize>() };
    if ctx.ith == 0 {
        // Every thread's first group is its index; published by the barrier.
        counter.store(nth, Ordering::Relaxed);
    }
    ctx.barrier.wait();
    let mut gi = ctx.ith;
    while gi < n_groups {
        run(gi, &mut bufs)?;
        gi = counter.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Bytes as f32 (aligned, whole values).
fn f32s(b: &mut [u8]) -> Result<&mut [f32]> {
    bytemuck::try_cast_slice_mut(b)
        .map_err(|_| Error::device("CPU", "FLASH_ATTN_EXT: unaligned scratch"))
}

/// A thread's scratch in the form the node runs in.
enum Bufs<'s> {
    /// Groups of [`GROUP_ROWS`] rows, dot products.
    Rows(GroupBufs<'s>),
    /// Groups of [`GEMM_ROWS`] rows, the GEMM's micro-kernels.
    Gemm(GemmBufs<'s>),
}

/// ALiBi slopes as in ggml's softmax and flash attention.
pub(crate) struct Alibi {
    max_bias: f32,
    n_head_log2: usize,
    m0: f32,
    m1: f32,
}

impl Alibi {
    fn new(max_bias: f32, n_head: usize) -> Self {
        let n_head_log2 = if n_head == 0 {
            1
        } else {
            1usize << n_head.ilog2()
        };
        Alibi {
            max_bias,
            n_head_log2,
            m0: 2f32.powf(-max_bias / n_head_log2 as f32),
            m1: 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32),
        }
    }

    pub(crate) fn slope(&self, h: usize) -> f32 {
        if self.max_bias <= 0.0 {
            1.0
        } else if h < self.n_head_log2 {
            self.m0.powf((h + 1) as f32)
        } else {
            self.m1.powf((2 * (h - self.n_head_log2) + 1) as f32)
        }
    }
}
