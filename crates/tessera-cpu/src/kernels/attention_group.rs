//! One group of flash-attention rows: up to [`GROUP_ROWS`] (query, head) rows
//! of one batch entry that share a KV head, computed in one pass over K and
//! V (see [`super::attention`] for the op's semantics and the split into
//! groups).
//!
//! Per block of [`KV_BLOCK`] keys: the scores of every row (multi-row dot
//! products of K rows against the converted queries), the mask, scale and
//! softcap, the online-softmax update per row, and one V pass that adds the
//! weighted V rows to every row's accumulator. Keys masked for every row of
//! the group are dropped before K and V are read.

use tessera::{Error, Result};

use super::TensorRef;
use super::act_quant::{convert_strided, round_to_f16};
use super::attention::{Alibi, GROUP_ROWS, KV_BLOCK};
use super::attention_scale::{ScaleMaskFn, scale_mask_scalar};
use super::attention_vec::{ExpFn, F16RowFn, VaccFn};
use super::dot::{DotFn, TILE_COLS, TILE_ROWS, TileFn};
use crate::isa::Isa;

/// A thread's scratch, cut into per-row parts.
pub(crate) struct GroupBufs<'s> {
    /// [`GROUP_ROWS`] queries converted to K's type, `q_stride` bytes apart.
    pub q: &'s mut [u8],
    pub q_stride: usize,
    /// [`GROUP_ROWS`] f32 accumulators of `dv` values, one after the other.
    pub acc: &'s mut [f32],
    /// [`GROUP_ROWS`] blocks of [`KV_BLOCK`] scores (then weights).
    pub scores: &'s mut [f32],
}

/// The per-node constants of the group computation.
pub(crate) struct Group {
    pub q: TensorRef,
    pub k: TensorRef,
    pub v: TensorRef,
    pub mask: Option<TensorRef>,
    /// One F32 logit per query head (contiguous), if any.
    pub sinks: Option<TensorRef>,
    pub dst: TensorRef,
    pub dot: DotFn,
    pub tile: Option<TileFn>,
    /// The type the queries are converted to for `tile` (or `dot`).
    pub q_type: tessera::DType,
    /// Round the (f32) queries to f16 values (F16 K scored in f32).
    pub round_q: bool,
    pub vacc: VaccFn,
    pub exp: ExpFn,
    /// Scale, mask and block maximum of a row's scores.
    pub scale_mask: ScaleMaskFn,
    pub f16_row: F16RowFn,
    pub isa: Isa,
    /// `scale`, divided by the softcap when there is one.
    pub scale: f32,
    pub softcap: f32,
    pub alibi: Alibi,
}

/// One row of a group: where it comes from and its softmax state.
#[derive(Clone, Copy)]
pub(super) struct RowState<'m> {
    pub iq1: usize,
    pub iq2: usize,
    pub slope: f32,
    /// The row's mask (`n_kv` f16), if any.
    pub mask: Option<&'m [u8]>,
    pub max: f32,
    pub sum: f32,
}

fn scratch_error() -> Error {
    Error::device("CPU", "FLASH_ATTN_EXT: group scratch too small")
}

impl Group {
    /// Rows `rows` (numbered query-major: `r = iq1 * heads_per_kv + h`) of
    /// KV head `ik2` in batch entry `iq3`.
    pub fn compute(
        &self,
        iq3: usize,
        ik2: usize,
        rows: std::ops::Range<usize>,
        b: &mut GroupBufs,
    ) -> Result<()> {
        let (n_head, dk, n_kv) = (self.q.ne(2), self.k.ne(0), self.k.ne(1));
        let rk2 = n_head / self.k.ne(2);
        let ik3 = iq3 / (self.q.ne(3) / self.k.ne(3));
        let dv = self.v.ne(0);
        let ng = rows.len().min(GROUP_ROWS);
        let qt = self.q_type;
        let q_len = qt.row_size(dk)?;
        if ng == 0 {
            return Ok(());
        }
        if q_len > b.q_stride
            || b.q.len() < ng * b.q_stride
            || b.acc.len() < ng * dv
            || b.scores.len() < ng * KV_BLOCK
        {
            return Err(scratch_error());
        }

        // The rows: convert each query, find its mask row.
        let mut st = [RowState {
            iq1: 0,
            iq2: 0,
            slope: 1.0,
            mask: None,
            max: f32::NEG_INFINITY,
            sum: 0.0,
        }; GROUP_ROWS];
        for (g, r) in rows.take(ng).enumerate() {
            let (iq1, iq2) = (r / rk2, ik2 * rk2 + r % rk2);
            let out =
                b.q.get_mut(g * b.q_stride..g * b.q_stride + q_len)
                    .ok_or_else(scratch_error)?;
            if dk > 0 {
                // SAFETY: iq1 < n_q and iq2 < n_head (r < n_q * rk2, ik2 <
                // n_kv_head), iq3 < ne3: the row holds dk f32 at stride nb0.
                unsafe {
                    let qr = self.q.row(iq1, iq2, iq3);
                    convert_strided(self.isa, qt, qr, self.q.nb(0), dk, out)?;
                }
            }
            if self.round_q {
                // F16 K with an f16 x f32 kernel: q rounded to f16 as ggml
                // does, kept in f32 (exact) so it is not widened per call.
                let vals: &mut [f32] = bytemuck::try_cast_slice_mut(out)
                    .map_err(|_| Error::device("CPU", "FLASH_ATTN_EXT: unaligned f32 queries"))?;
                round_to_f16(self.isa, vals);
            }
            st[g] = self.row_state(iq1, iq2, iq3);
        }
        let st = &mut st[..ng];
        b.acc[..ng * dv].fill(0.0);

        let (k_row, v_row) = (self.k.layout.row_bytes(), self.v.layout.row_bytes());
        let mut mvals = [[0f32; KV_BLOCK]; GROUP_ROWS];
        for c0 in (0..n_kv).step_by(KV_BLOCK) {
            let c1 = (c0 + KV_BLOCK).min(n_kv);
            // Mask values (times the slope); keys masked for every row are dropped.
            let mut live = [0u16; KV_BLOCK];
            let mut n_live = 0;
            for (g, row) in st.iter().enumerate() {
                if let Some(m) = row.mask {
                    let mv = &mut mvals[g][..c1 - c0];
                    (self.f16_row)(m.get(2 * c0..2 * c1).unwrap_or(&[]), mv);
                    mv.iter_mut().for_each(|x| *x *= row.slope);
                }
            }
            let mut dead = [st.iter().all(|row| row.mask.is_some()); KV_BLOCK];
            for (g, row) in st.iter().enumerate() {
                if row.mask.is_some() {
                    for (d, &mv) in dead.iter_mut().zip(&mvals[g][..c1 - c0]) {
                        *d &= mv == f32::NEG_INFINITY;
                    }
                }
            }
            for (j, _) in dead[..c1 - c0].iter().enumerate().filter(|(_, d)| !**d) {
                live[n_live] = j as u16;
                n_live += 1;
            }
            if n_live == 0 {
                continue;
            }
            let key = |l: usize| c0 + usize::from(live[l]);
            let krow = |j: usize| -> &[u8] {
                if k_row == 0 {
                    return &[];
                }
                // SAFETY: j < n_kv and (ik2, ik3) are in k's range; rows are contiguous.
                unsafe { std::slice::from_raw_parts(self.k.row(j, ik2, ik3), k_row) }
            };

            // Raw scores of the live keys: scores[g * KV_BLOCK + l].
            let qrow = |g: usize| &b.q[g * b.q_stride..g * b.q_stride + q_len];
            if let Some(tile) = self.tile {
                let mut out = [[0f32; TILE_ROWS]; TILE_COLS];
                for l0 in (0..n_live).step_by(TILE_ROWS) {
                    let nl = (n_live - l0).min(TILE_ROWS);
                    let xs: [&[u8]; TILE_ROWS] =
                        std::array::from_fn(|i| if i < nl { krow(key(l0 + i)) } else { &[] });
                    for g0 in (0..ng).step_by(TILE_COLS) {
                        let nc = (ng - g0).min(TILE_COLS);
                        let ys: [&[u8]; TILE_COLS] =
                            std::array::from_fn(|c| if c < nc { qrow(g0 + c) } else { &[] });
                        tile(&xs[..nl], &ys[..nc], &mut out);
                        for (c, o) in out.iter().enumerate().take(nc) {
                            let base = (g0 + c) * KV_BLOCK + l0;
                            b.scores[base..base + nl].copy_from_slice(&o[..nl]);
                        }
                    }
                }
            } else {
                for l in 0..n_live {
                    let kr = krow(key(l));
                    for g in 0..ng {
                        b.scores[g * KV_BLOCK + l] = (self.dot)(kr, qrow(g));
                    }
                }
            }

            // Scale, softcap, mask; then the online-softmax update per row.
            for (g, row) in st.iter_mut().enumerate() {
                let sc = &mut b.scores[g * KV_BLOCK..g * KV_BLOCK + n_live];
                // The live keys' mask values, in order.
                let mut mv = [0f32; KV_BLOCK];
                if row.mask.is_some() {
                    if n_live == c1 - c0 {
                        mv[..n_live].copy_from_slice(&mvals[g][..n_live]);
                    } else {
                        for (d, &l) in mv.iter_mut().zip(&live[..n_live]) {
                            *d = mvals[g][usize::from(l)];
                        }
                    }
                }
                if let Some(ms) = self.softmax_step(row, sc, &mv[..n_live]) {
                    b.acc[g * dv..(g + 1) * dv]
                        .iter_mut()
                        .for_each(|a| *a *= ms);
                }
            }

            // One pass over the live V rows for every row of the group.
            let mut vrows: [&[u8]; KV_BLOCK] = [&[]; KV_BLOCK];
            for (l, vr) in vrows.iter_mut().enumerate().take(n_live) {
                if v_row > 0 {
                    // SAFETY: the key is < n_kv; (ik2, ik3) are in v's range
                    // (v has k's heads and batch); rows are contiguous.
                    *vr =
                        unsafe { std::slice::from_raw_parts(self.v.row(key(l), ik2, ik3), v_row) };
                }
            }
            (self.vacc)(
                &mut b.acc[..ng * dv],
                dv,
                b.scores,
                KV_BLOCK,
                &vrows[..n_live],
            );
        }

        self.finish(st, &mut b.acc[..ng * dv], iq3);
        Ok(())
    }

    /// The starting state of the row of query `iq1` and head `iq2` in batch
    /// entry `iq3` (all in range).
    pub(super) fn row_state(&self, iq1: usize, iq2: usize, iq3: usize) -> RowState<'_> {
        let n_kv = self.k.ne(1);
        let mask = self.mask.as_ref().filter(|_| n_kv > 0).map(|m| {
            // SAFETY: iq1 < n_q <= mask ne1, the moduli are below ne2/ne3
            // (> 0, checked), and the row holds at least n_kv contiguous f16.
            unsafe {
                std::slice::from_raw_parts(m.row(iq1, iq2 % m.ne(2), iq3 % m.ne(3)), 2 * n_kv)
            }
        });
        RowState {
            iq1,
            iq2,
            slope: self.alibi.slope(iq2),
            mask,
            max: f32::NEG_INFINITY,
            sum: 0.0,
        }
    }

    /// Scale, softcap and mask one row's block of raw scores `sc` (`mv`: the
    /// keys' mask values times the slope, zeros without a mask), then the
    /// online-softmax step: `sc` becomes the keys' weights and the row's
    /// maximum and sum are updated. Returns the factor the row's
    /// accumulator must be multiplied by before this block's V rows are
    /// added (`None`: unchanged).
    pub(super) fn softmax_step(
        &self,
        row: &mut RowState,
        sc: &mut [f32],
        mv: &[f32],
    ) -> Option<f32> {
        // A masked key weighs 0 whatever its score (NaN, +inf); the block
        // maximum ignores NaNs.
        let (bmax, nan) = if self.softcap != 0.0 {
            for s in sc.iter_mut() {
                *s = self.softcap * (*s * self.scale).tanh();
            }
            // Times 1 (exact), plus the mask.
            scale_mask_scalar(sc, mv, 1.0)
        } else {
            (self.scale_mask)(sc, mv, self.scale)
        };
        let any = bmax != f32::NEG_INFINITY || nan;
        if !any {
            sc.fill(0.0);
            return None;
        }
        let new_max = row.max.max(bmax);
        let mut rescale = None;
        if new_max > row.max {
            let ms = (row.max - new_max).exp();
            row.sum *= ms;
            row.max = new_max;
            rescale = Some(ms);
        }
        row.sum += (self.exp)(sc, row.max);
        rescale
    }

    /// The end of a group: the sinks, the division by each row's sum, and
    /// the rows written to `dst` (`acc`: the rows' accumulators, `dv` f32
    /// each, in the order of `st`).
    pub(super) fn finish(&self, st: &mut [RowState], acc: &mut [f32], iq3: usize) {
        let dv = self.v.ne(0);
        for (row, acc) in st.iter_mut().zip(acc.chunks_exact_mut(dv.max(1))) {
            if let Some(sk) = self.sinks {
                // SAFETY: iq2 < n_head <= sinks ne0, contiguous f32 (checked
                // by the kernel).
                let s = unsafe { (sk.at(row.iq2, 0, 0, 0) as *const f32).read() };
                if s > row.max {
                    let ms = (row.max - s).exp();
                    acc.iter_mut().for_each(|a| *a *= ms);
                    row.sum = row.sum * ms + 1.0;
                    row.max = s;
                } else {
                    row.sum += (s - row.max).exp();
                }
            }
            let inv = if row.sum == 0.0 { 0.0 } else { 1.0 / row.sum };
            acc.iter_mut().for_each(|a| *a *= inv);
            // SAFETY: dst is contiguous f32 [dv, n_head, n_q, ne3]; row (iq2,
            // iq1, iq3) is in range, holds dv values, and belongs to this
            // thread's groups only.
            unsafe {
                let d = self.dst.row(row.iq2, row.iq1, iq3);
                std::ptr::copy_nonoverlapping(acc.as_ptr().cast::<u8>(), d, dv * 4);
            }
        }
    }
}
