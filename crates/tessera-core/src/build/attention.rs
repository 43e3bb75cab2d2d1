//! Attention ops: SOFT_MAX (with mask, ALiBi and sinks) and FLASH_ATTN_EXT
//! (with mask, ALiBi, soft-capping and sinks). ROPE is in `rope.rs`.

use super::{ensure, ensure_finite, ensure_type, shape};
use crate::DType;
use crate::error::Result;
use crate::graph::{Graph, TensorId};
use crate::layout::Layout;
use crate::op::Op;

impl Graph {
    /// Row softmax of `a` (F32).
    pub fn soft_max(&mut self, a: TensorId) -> Result<TensorId> {
        self.soft_max_ext(a, None, 1.0, 0.0)
    }

    /// `softmax(a * scale + slope * mask)` over each row. `mask` (F16 or F32)
    /// is `[ne0, >= ne1, ne2 / r2, ne3 / r3]` and is broadcast over dims 2-3;
    /// `slope` is 1 unless `max_bias > 0` (ALiBi, per head = dim 2), which
    /// requires a mask.
    pub fn soft_max_ext(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.soft_max_impl(a, mask, None, scale, max_bias)
    }

    /// [`Graph::soft_max_ext`] with attention sinks (ggml's
    /// `ggml_soft_max_ext` followed by `ggml_soft_max_add_sinks`): `sinks` is
    /// a contiguous F32 vector of one logit per head (`a`'s dim 2). The sink
    /// `s_h` of row `(i1, h, i3)` joins the row's maximum and adds
    /// `exp(s_h - max)` to its sum; it is neither scaled nor masked, and
    /// gets no output element.
    pub fn soft_max_ext_sinks(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: TensorId,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        self.soft_max_impl(a, mask, Some(sinks), scale, max_bias)
    }

    fn soft_max_impl(
        &mut self,
        a: TensorId,
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
    ) -> Result<TensorId> {
        let name = "SOFT_MAX";
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &[DType::F32])?;
        ensure_finite(name, "scale", scale)?;
        ensure_finite(name, "max_bias", max_bias)?;
        ensure(max_bias >= 0.0, name, || {
            format!("max_bias = {max_bias} is negative")
        })?;
        ensure(la.is_contiguous_rows(), name, || {
            format!("a {} must have contiguous rows", shape(self, a))
        })?;
        if let Some(m) = mask {
            let lm = self.layout(m)?;
            ensure_type(name, "mask", lm.dtype, &[DType::F16, DType::F32])?;
            ensure(
                lm.ne[0] == la.ne[0]
                    && lm.ne[1] >= la.ne[1]
                    && lm.ne[2] > 0
                    && lm.ne[3] > 0
                    && la.ne[2] % lm.ne[2] == 0
                    && la.ne[3] % lm.ne[3] == 0,
                name,
                || {
                    format!(
                        "mask {} does not fit a {}: need ne0 equal, ne1 >= a's, dims 2-3 dividing a's",
                        shape(self, m),
                        shape(self, a)
                    )
                },
            )?;
            ensure(lm.is_contiguous_rows(), name, || {
                "mask rows must be contiguous".into()
            })?;
        } else {
            ensure(max_bias == 0.0, name, || {
                "ALiBi (max_bias > 0) needs a mask".into()
            })?;
        }
        if let Some(sk) = sinks {
            self.check_sinks(name, sk, la.ne[2])?;
        }
        let out = Layout::contiguous4(la.dtype, la.ne)?;
        self.push_op(
            Op::SoftMax { scale, max_bias },
            out,
            &[Some(a), mask, sinks],
        )
    }

    /// Fused attention. `q` is F32 `[d, n_q, n_head, ne3]`; `k` is
    /// `[d, n_kv, n_head_kv, ne3]` and `v` is `[dv, n_kv, n_head_kv, ne3]`, each
    /// F16, F32 or Q8_0 (a quantized cache), with `n_head` a multiple of `n_head_kv` (grouped-query
    /// attention); `mask` (F16) is `[n_kv, >= n_q, ...]` broadcast over heads
    /// and dim 3. The result is F32 `[dv, n_head, n_q, ne3]` (heads and queries
    /// swapped, as in ggml).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> Result<TensorId> {
        let qkv = [q, k, v];
        self.flash_attn_impl(qkv, mask, None, scale, max_bias, logit_softcap)
    }

    /// [`Graph::flash_attn_ext`] with attention sinks (ggml's
    /// `ggml_flash_attn_ext` followed by `ggml_flash_attn_ext_add_sinks`):
    /// `sinks` is a contiguous F32 vector of one logit per query head (`q`'s
    /// dim 2). The sink `s_h` joins the softmax's maximum and sum as one more
    /// key whose value row is zero; it is neither scaled, soft-capped nor
    /// masked.
    #[allow(clippy::too_many_arguments)]
    pub fn flash_attn_ext_sinks(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        mask: Option<TensorId>,
        sinks: TensorId,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> Result<TensorId> {
        let qkv = [q, k, v];
        self.flash_attn_impl(qkv, mask, Some(sinks), scale, max_bias, logit_softcap)
    }

    fn flash_attn_impl(
        &mut self,
        [q, k, v]: [TensorId; 3],
        mask: Option<TensorId>,
        sinks: Option<TensorId>,
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    ) -> Result<TensorId> {
        let name = "FLASH_ATTN_EXT";
        let lq = self.layout(q)?;
        let lk = self.layout(k)?;
        let lv = self.layout(v)?;
        ensure_type(name, "q", lq.dtype, &[DType::F32])?;
        // Q8_0: a quantized KV cache (rows of whole blocks).
        ensure_type(name, "k", lk.dtype, &[DType::F16, DType::F32, DType::Q8_0])?;
        ensure_type(name, "v", lv.dtype, &[DType::F16, DType::F32, DType::Q8_0])?;
        for (what, l) in [("k", &lk), ("v", &lv)] {
            ensure(l.ne[0] % l.dtype.block_size() == 0, name, || {
                format!("{what} {l}: rows are not whole {} blocks", l.dtype)
            })?;
        }
        ensure_finite(name, "scale", scale)?;
        ensure_finite(name, "max_bias", max_bias)?;
        ensure_finite(name, "logit_softcap", logit_softcap)?;
        ensure(max_bias >= 0.0 && logit_softcap >= 0.0, name, || {
            "max_bias and logit_softcap must be >= 0".into()
        })?;
        let dims = || {
            format!(
                "q {}, k {}, v {}",
                shape(self, q),
                shape(self, k),
                shape(self, v)
            )
        };
        ensure(lk.ne[0] == lq.ne[0], name, || {
            format!("k and q head sizes differ: {}", dims())
        })?;
        ensure(lv.ne[1] == lk.ne[1], name, || {
            format!("k and v lengths differ: {}", dims())
        })?;
        ensure(lv.ne[2] == lk.ne[2] && lk.ne[2] > 0, name, || {
            format!("k and v head counts differ: {}", dims())
        })?;
        ensure(lq.ne[2] % lk.ne[2] == 0, name, || {
            format!("q heads must be a multiple of k heads: {}", dims())
        })?;
        ensure(lk.ne[3] == lq.ne[3] && lv.ne[3] == lq.ne[3], name, || {
            format!("dim 3 must match: {}", dims())
        })?;
        ensure(
            lq.is_contiguous_rows() && lk.is_contiguous_rows() && lv.is_contiguous_rows(),
            name,
            || format!("q, k and v rows must be contiguous: {}", dims()),
        )?;
        if let Some(m) = mask {
            let lm = self.layout(m)?;
            ensure_type(name, "mask", lm.dtype, &[DType::F16])?;
            ensure(
                lm.ne[0] == lk.ne[1]
                    && lm.ne[1] >= lq.ne[1]
                    && lm.ne[2] > 0
                    && lm.ne[3] > 0
                    && lq.ne[2] % lm.ne[2] == 0
                    && lq.ne[3] % lm.ne[3] == 0
                    && lm.is_contiguous_rows(),
                name,
                || {
                    format!(
                        "mask {} must be [n_kv = {}, >= n_q = {}, dividing heads, dividing ne3] with contiguous rows",
                        shape(self, m),
                        lk.ne[1],
                        lq.ne[1]
                    )
                },
            )?;
        } else {
            ensure(max_bias == 0.0, name, || {
                "ALiBi (max_bias > 0) needs a mask".into()
            })?;
        }
        if let Some(sk) = sinks {
            self.check_sinks(name, sk, lq.ne[2])?;
        }
        let out = Layout::contiguous4(DType::F32, [lv.ne[0], lq.ne[2], lq.ne[1], lq.ne[3]])?;
        self.push_op(
            Op::FlashAttnExt {
                scale,
                max_bias,
                logit_softcap,
            },
            out,
            &[Some(q), Some(k), Some(v), mask, sinks],
        )
    }

    /// Sinks: a contiguous F32 vector of `n_head` logits (ggml asserts
    /// `sinks->ne[0] == a->ne[2]` and F32, and reads it as a plain array).
    fn check_sinks(&self, name: &'static str, sinks: TensorId, n_head: usize) -> Result<()> {
        let ls = self.layout(sinks)?;
        ensure_type(name, "sinks", ls.dtype, &[DType::F32])?;
        ensure(
            ls.ne == [n_head, 1, 1, 1] && ls.is_contiguous(),
            name,
            || {
                format!(
                    "sinks {} must be a contiguous vector of one logit per head ({n_head})",
                    shape(self, sinks)
                )
            },
        )
    }
}
