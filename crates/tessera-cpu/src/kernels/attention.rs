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
//! The softmax is online (running maximum and sum, one pass over K/V), taken
//! [`KV_BLOCK`] keys at a time: the block's scores first, then one rescale of
//! the accumulator per block instead of one per new maximum. Like ggml, `q`
//! is first converted to K's type (F16 K: `q` is rounded to f16) so the dot
//! products are the MUL_MAT ones; unlike ggml, F16 V rows are accumulated in
//! f32, not f16.
//!
//! Masked entries (`mask * slope == -inf`) and scores of `-inf` get weight 0.
//! A row with no other entry (fully masked) has a zero sum; ggml outputs
//! zeros for it (`S == 0` gives `1/S := 0`), and so does Tessera. NaN scores
//! propagate to the output row.
//!
//! Threads split the rows (query, head, batch) into contiguous ranges; each
//! uses its own part of the scratch for the converted `q`, the accumulator
//! and a block of scores. No barrier is needed.

use tessera::{DType, Error, Layout, Op, Result};

use super::act_quant::convert_strided;
use super::attention_vec::axpy_fn;
use super::dot::dot_fn;
use super::{NodeCtx, TensorRef};

/// Keys scored per step of the online softmax.
pub const KV_BLOCK: usize = 64;

/// Can the CPU run flash attention with these operands (mask optional)?
pub fn flash_attn_supported(q: &Layout, k: &Layout, v: &Layout, mask: Option<&Layout>) -> bool {
    check(q, k, v, mask).is_ok() && per_thread(q, v).is_some()
}

/// Scratch bytes a FLASH_ATTN_EXT node needs on `nth` threads.
pub fn flash_attn_scratch_size(q: &Layout, k: &Layout, v: &Layout, nth: usize) -> usize {
    let _ = k;
    per_thread(q, v)
        .and_then(|p| p.checked_mul(nth.max(1)))
        .unwrap_or(usize::MAX)
}

/// `n` f32 rounded up to a cache line, so parts and threads never share one.
fn padded_f32(n: usize) -> Option<usize> {
    n.checked_mul(4)?.checked_add(63).map(|b| b / 64 * 64)
}

/// Bytes of one thread's scratch: the converted `q` (at most 4 bytes per
/// value), the f32 accumulator, and a block of scores, each padded.
fn per_thread(q: &Layout, v: &Layout) -> Option<usize> {
    padded_f32(q.ne[0])?
        .checked_add(padded_f32(v.ne[0])?)?
        .checked_add(padded_f32(KV_BLOCK)?)
}

/// The operand checks shared by [`flash_attn_supported`] and the kernel.
fn check(q: &Layout, k: &Layout, v: &Layout, mask: Option<&Layout>) -> Result<()> {
    let bad = |why: String| Err(Error::op("FLASH_ATTN_EXT", why));
    let kv_type = |t: DType| matches!(t, DType::F16 | DType::F32);
    if q.dtype != DType::F32 || !kv_type(k.dtype) || !kv_type(v.dtype) {
        return bad(format!(
            "types q {}, k {}, v {} (need f32 q, f16/f32 k and v)",
            q.dtype, k.dtype, v.dtype
        ));
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
    check(
        &q.layout,
        &k.layout,
        &v.layout,
        mask.as_ref().map(|m| &m.layout),
    )?;
    let (dk, dv) = (k.ne(0), v.ne(0));
    let (n_q, n_head, ne3) = (q.ne(1), q.ne(2), q.ne(3));
    let ld = ctx.dst.layout;
    let want = [dv, n_head, n_q, ne3];
    if ld.dtype != DType::F32 || ld.ne != want || !ld.is_contiguous() {
        return Err(Error::op(
            "FLASH_ATTN_EXT",
            format!("dst {ld} must be contiguous f32 {want:?}"),
        ));
    }
    let rows = ctx.split(n_q * n_head * ne3);
    if rows.is_empty() || dv == 0 {
        return Ok(());
    }
    let dot = dot_fn(k.layout.dtype, ctx.isa).ok_or_else(|| {
        Error::unsupported("CPU", format!("FLASH_ATTN_EXT with {} K", k.layout.dtype))
    })?;
    let axpy = axpy_fn(v.layout.dtype, ctx.isa).ok_or_else(|| {
        Error::unsupported("CPU", format!("FLASH_ATTN_EXT with {} V", v.layout.dtype))
    })?;

    // This thread's scratch: [q converted | accumulator | scores].
    let per = per_thread(&q.layout, &v.layout)
        .ok_or_else(|| Error::Overflow("FLASH_ATTN_EXT scratch".into()))?;
    let s = ctx.scratch;
    let start = per
        .checked_mul(ctx.ith)
        .filter(|st| st.saturating_add(per) <= s.len);
    let Some(start) = start.filter(|_| !s.ptr.is_null() && (s.ptr as usize).is_multiple_of(4))
    else {
        return Err(Error::device(
            "CPU",
            format!(
                "FLASH_ATTN_EXT: scratch of {} bytes too small for thread {}",
                s.len, ctx.ith
            ),
        ));
    };
    // Both fit in `per` (computed with the same padding, checked above).
    let q_bytes = padded_f32(dk).unwrap_or(0);
    let sc_off = q_bytes + padded_f32(dv).unwrap_or(0);
    // SAFETY: start + per <= s.len, so the three parts are inside the scratch;
    // this thread alone uses [start, start + per); the offsets are multiples of
    // 64 from a 4-aligned pointer, so the f32 parts are aligned; they do not overlap.
    let (qbuf, acc, scores) = unsafe {
        let base = s.ptr.add(start);
        (
            std::slice::from_raw_parts_mut(base, q_bytes),
            std::slice::from_raw_parts_mut(base.add(q_bytes).cast::<f32>(), dv),
            std::slice::from_raw_parts_mut(base.add(sc_off).cast::<f32>(), KV_BLOCK),
        )
    };
    let qconv = qbuf
        .get_mut(..k.layout.dtype.row_size(dk)?)
        .ok_or_else(|| Error::Overflow("FLASH_ATTN_EXT q buffer".into()))?;

    let row = Row {
        q,
        k,
        v,
        mask,
        dst: ctx.dst,
        dot,
        axpy,
        scale: if logit_softcap != 0.0 {
            scale / logit_softcap
        } else {
            scale
        },
        softcap: logit_softcap,
        alibi: Alibi::new(max_bias, n_head),
    };
    for ir in rows {
        row.compute(ir, qconv, acc, scores)?;
    }
    Ok(())
}

/// ALiBi slopes as in ggml's softmax and flash attention.
struct Alibi {
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

    fn slope(&self, h: usize) -> f32 {
        if self.max_bias <= 0.0 {
            1.0
        } else if h < self.n_head_log2 {
            self.m0.powf((h + 1) as f32)
        } else {
            self.m1.powf((2 * (h - self.n_head_log2) + 1) as f32)
        }
    }
}

/// The per-node constants of one attention row computation.
struct Row {
    q: TensorRef,
    k: TensorRef,
    v: TensorRef,
    mask: Option<TensorRef>,
    dst: TensorRef,
    dot: super::dot::DotFn,
    axpy: super::attention_vec::AxpyFn,
    /// `scale`, divided by the softcap when there is one.
    scale: f32,
    softcap: f32,
    alibi: Alibi,
}

impl Row {
    /// Output row `ir` (query fastest, then head, then batch).
    fn compute(
        &self,
        ir: usize,
        qconv: &mut [u8],
        acc: &mut [f32],
        scores: &mut [f32],
    ) -> Result<()> {
        let (n_q, n_head) = (self.q.ne(1), self.q.ne(2));
        let (iq1, iq2, iq3) = (ir % n_q, ir / n_q % n_head, ir / (n_q * n_head));
        let ik2 = iq2 / (n_head / self.k.ne(2));
        let ik3 = iq3 / (self.q.ne(3) / self.k.ne(3));
        let (dk, n_kv) = (self.k.ne(0), self.k.ne(1));
        let (k_row, v_row) = (self.k.layout.row_bytes(), self.v.layout.row_bytes());
        let slope = self.alibi.slope(iq2);

        if dk > 0 {
            // SAFETY: (iq1, iq2, iq3) is in q's range (q is not empty); its
            // row holds dk f32 at stride nb0.
            let qr = unsafe { self.q.row(iq1, iq2, iq3) };
            // SAFETY: as above.
            unsafe { convert_strided(self.k.layout.dtype, qr, self.q.nb(0), dk, qconv)? };
        }
        let mask_row: Option<&[u8]> = self.mask.map(|m| {
            if n_kv == 0 {
                return &[][..];
            }
            // SAFETY: iq1 < n_q <= mask ne1, the moduli are below ne2/ne3 (> 0,
            // checked), and the row holds at least n_kv contiguous f16.
            unsafe {
                std::slice::from_raw_parts(m.row(iq1, iq2 % m.ne(2), iq3 % m.ne(3)), 2 * n_kv)
            }
        });

        acc.fill(0.0);
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        for c0 in (0..n_kv).step_by(KV_BLOCK) {
            let c1 = (c0 + KV_BLOCK).min(n_kv);
            let block = &mut scores[..c1 - c0];
            let mut bmax = f32::NEG_INFINITY;
            let mut any = false;
            for (j, out) in (c0..c1).zip(block.iter_mut()) {
                let mv = match mask_row {
                    Some(mr) => {
                        slope
                            * half::f16::from_bits(u16::from_le_bytes([mr[2 * j], mr[2 * j + 1]]))
                                .to_f32()
                    }
                    None => 0.0,
                };
                *out = f32::NEG_INFINITY;
                if mv == f32::NEG_INFINITY {
                    continue;
                }
                let kr: &[u8] = if k_row == 0 {
                    &[]
                } else {
                    // SAFETY: j < n_kv and (ik2, ik3) are in k's range; rows are contiguous.
                    unsafe { std::slice::from_raw_parts(self.k.row(j, ik2, ik3), k_row) }
                };
                let mut s = (self.dot)(kr, qconv) * self.scale;
                if self.softcap != 0.0 {
                    s = self.softcap * s.tanh();
                }
                s += mv;
                *out = s;
                any |= s != f32::NEG_INFINITY;
                bmax = bmax.max(s);
            }
            if !any {
                continue;
            }
            let new_max = max.max(bmax);
            if new_max > max {
                let ms = (max - new_max).exp();
                acc.iter_mut().for_each(|a| *a *= ms);
                sum *= ms;
                max = new_max;
            }
            for (j, &s) in (c0..c1).zip(block.iter()) {
                if s == f32::NEG_INFINITY {
                    continue;
                }
                let p = if s == max { 1.0 } else { (s - max).exp() };
                sum += p;
                // SAFETY: j < n_kv; (ik2, ik3) are in v's range (v has k's heads and batch).
                let vr = unsafe { std::slice::from_raw_parts(self.v.row(j, ik2, ik3), v_row) };
                (self.axpy)(acc, vr, p);
            }
        }

        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        acc.iter_mut().for_each(|a| *a *= inv);
        // SAFETY: dst is contiguous f32 [dv, n_head, n_q, ne3]; row (iq2, iq1, iq3)
        // is in range, holds dv values, and belongs to this thread's rows only.
        unsafe {
            let d = self.dst.row(iq2, iq1, iq3);
            std::ptr::copy_nonoverlapping(acc.as_ptr().cast::<u8>(), d, acc.len() * 4);
        }
        Ok(())
    }
}
