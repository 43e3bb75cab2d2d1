//! ROPE: rotary position embedding, in every ggml mode (normal, NeoX, and the
//! multi-section modes of `ggml_rope_multi`: M-RoPE, vision, interleaved
//! M-RoPE), with YaRN and frequency factors.

use super::{ensure, ensure_finite, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::{Op, RopeMode, RopeParams};

impl Graph {
    /// Rotary position embedding of `a` (`[head_dim, n_head, n_tokens, ne3]`,
    /// F32 or F16) at the I32 positions `pos`, with optional per-frequency
    /// divisors `freq_factors` (F32, at least [`RopeParams::n_pairs`]
    /// entries; ggml's `n_dims / 2` except for vision, whose pairs span
    /// `ne0`).
    ///
    /// `pos` is `[n_tokens]`, or `[4 * n_tokens]` for the multi-section modes
    /// (`ggml_rope_multi`: the t, h, w and e streams one after the other),
    /// whose `p.sections` must not all of t, h, w be zero and must sum to at
    /// most `ne0`; vision needs `n_dims == ne0 / 2`.
    pub fn rope(
        &mut self,
        a: TensorId,
        pos: TensorId,
        freq_factors: Option<TensorId>,
        p: RopeParams,
    ) -> Result<TensorId> {
        let name = "ROPE";
        let la = self.layout(a)?;
        let lp = self.layout(pos)?;
        ensure_type(name, "a", la.dtype, &[DType::F32, DType::F16])?;
        ensure_type(name, "positions", lp.dtype, &[DType::I32])?;
        let streams = if p.mode.is_multi() { 4 } else { 1 };
        ensure(
            lp.ne[1] == 1
                && lp.ne[2] == 1
                && lp.ne[3] == 1
                && Some(lp.ne[0]) == la.ne[2].checked_mul(streams),
            name,
            || {
                format!(
                    "positions {} must be a vector of {streams} entr{} per a's dim 2 ({})",
                    shape(self, pos),
                    if streams == 1 { "y" } else { "ies" },
                    la.ne[2]
                )
            },
        )?;
        ensure(
            p.n_dims > 0 && p.n_dims.is_multiple_of(2) && p.n_dims <= la.ne[0],
            name,
            || {
                format!(
                    "n_dims = {} must be even, > 0 and <= ne0 = {}",
                    p.n_dims, la.ne[0]
                )
            },
        )?;
        if p.mode.is_multi() {
            let s = p.sections.map(u64::from);
            ensure(
                s[0] + s[1] + s[2] > 0 && s.iter().sum::<u64>() <= la.ne[0] as u64,
                name,
                || {
                    format!(
                        "sections {:?} must not be all zero for t, h, w and must sum to at most ne0 = {}",
                        p.sections, la.ne[0]
                    )
                },
            )?;
        }
        if p.mode == RopeMode::Vision {
            ensure(2 * p.n_dims == la.ne[0], name, || {
                format!(
                    "vision mode needs n_dims = ne0 / 2; got n_dims = {}, ne0 = {}",
                    p.n_dims, la.ne[0]
                )
            })?;
        }
        for (what, v) in [
            ("freq_base", p.freq_base),
            ("freq_scale", p.freq_scale),
            ("ext_factor", p.ext_factor),
            ("attn_factor", p.attn_factor),
            ("beta_fast", p.beta_fast),
            ("beta_slow", p.beta_slow),
        ] {
            ensure_finite(name, what, v)?;
        }
        ensure(p.freq_base > 0.0 && p.freq_scale > 0.0, name, || {
            format!(
                "freq_base = {} and freq_scale = {} must be positive",
                p.freq_base, p.freq_scale
            )
        })?;
        if let Some(ff) = freq_factors {
            let lf = self.layout(ff)?;
            ensure_type(name, "freq_factors", lf.dtype, &[DType::F32])?;
            ensure(lf.ne[0] >= p.n_pairs() && lf.is_contiguous(), name, || {
                format!(
                    "freq_factors {} must be contiguous with at least {} entries",
                    shape(self, ff),
                    p.n_pairs()
                )
            })?;
        }
        ensure(la.is_contiguous_rows(), name, || {
            format!("a {} must have contiguous rows", shape(self, a))
        })?;
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(Op::Rope(p), out, &[Some(a), Some(pos), freq_factors])
    }
}
