//! Tiling ops: REPEAT and PAD.

use super::{ensure, ensure_type, shape};
use crate::DType;
use crate::error::{Error, Result};
use crate::graph::{Graph, TensorId};
use crate::layout::{Layout, MAX_DIMS};
use crate::op::Op;

/// Types REPEAT and PAD copy (element sizes 2 and 4).
const TILE_TYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::I32];

impl Graph {
    /// `a` tiled to `b`'s extents (ggml's `ggml_repeat`): each extent of `b`
    /// must be a multiple of `a`'s. Only `b`'s shape is used.
    pub fn repeat(&mut self, a: TensorId, b: TensorId) -> Result<TensorId> {
        let ne = self.layout(b)?.ne;
        self.repeat_4d(a, ne)
    }

    /// `a` tiled to extents `ne` (ggml's `ggml_repeat_4d`), each a multiple
    /// of `a`'s (F32, F16, BF16 or I32).
    pub fn repeat_4d(&mut self, a: TensorId, ne: [usize; MAX_DIMS]) -> Result<TensorId> {
        let name = "REPEAT";
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &TILE_TYPES)?;
        let out = Layout::contiguous4(la.dtype, ne)?;
        ensure(la.can_repeat_to(&out), name, || {
            format!(
                "a {} cannot be tiled to {ne:?}: each extent must be a multiple of a's",
                shape(self, a)
            )
        })?;
        self.push_op(Op::Repeat, out, &[Some(a)])
    }

    /// `a` with `p[i]` zeros appended along dimension `i` (ggml's `ggml_pad`).
    pub fn pad(&mut self, a: TensorId, p: [usize; MAX_DIMS]) -> Result<TensorId> {
        self.pad_ext(a, [0; MAX_DIMS], p)
    }

    /// `a` with `lp[i]` zeros before and `rp[i]` zeros after it along
    /// dimension `i` (ggml's `ggml_pad_ext`, not circular); F32, F16, BF16
    /// or I32.
    pub fn pad_ext(
        &mut self,
        a: TensorId,
        lp: [usize; MAX_DIMS],
        rp: [usize; MAX_DIMS],
    ) -> Result<TensorId> {
        let name = "PAD";
        let la = self.layout(a)?;
        ensure_type(name, "a", la.dtype, &TILE_TYPES)?;
        let mut ne = la.ne;
        let mut l32 = [0u32; MAX_DIMS];
        let mut r32 = [0u32; MAX_DIMS];
        for i in 0..MAX_DIMS {
            let fits = |p: usize| i32::try_from(p).is_ok();
            ensure(fits(lp[i]) && fits(rp[i]), name, || {
                format!("padding {} / {} of dim {i} exceeds i32::MAX", lp[i], rp[i])
            })?;
            l32[i] = lp[i] as u32;
            r32[i] = rp[i] as u32;
            ne[i] = ne[i]
                .checked_add(lp[i])
                .and_then(|n| n.checked_add(rp[i]))
                .ok_or_else(|| Error::Overflow("PAD extent".into()))?;
        }
        let out = Layout::contiguous4(la.dtype, ne)?;
        self.push_op(Op::Pad { lp: l32, rp: r32 }, out, &[Some(a)])
    }
}
