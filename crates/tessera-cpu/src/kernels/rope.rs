//! ROPE: rotary position embedding, normal and NeoX pairing, with YaRN
//! (ggml's `ggml_compute_forward_rope_flt`, `rope_yarn`,
//! `ggml_rope_yarn_corr_dims`).
//!
//! For row `(i1, i2, i3)` at position `p = pos[i2]` and pair `i` (`0 <= i <
//! n_dims / 2`): `theta_i = p * theta_scale^i` with `theta_scale =
//! freq_base^(-2 / n_dims)`, accumulated by repeated multiplication in f32
//! as ggml does, divided by `freq_factors[i]` when given. YaRN mixes the
//! interpolated angle `freq_scale * theta` with the extrapolated one by a
//! ramp over the correction dimensions when `ext_factor != 0`, and then
//! scales the magnitude by `1 + 0.1 ln(1 / freq_scale)`; `attn_factor`
//! always scales it. Normal mode rotates `(x[2i], x[2i+1])`, NeoX rotates
//! `(x[i], x[i + n_dims/2])`; dimensions `n_dims..ne0` are copied through.
//! F32 and F16, computed in f32; rows must have contiguous elements (checked
//! by `support`); in place works. Threads split the rows; each keeps a
//! cos/sin cache per position in its part of the scratch.

use half::f16;
use tessera::{DType, Error, Op, Result, RopeMode, RopeParams};

use super::elem::{Float, rows};
use super::{NodeCtx, TensorRef};

/// Compute this thread's share of a ROPE node.
pub fn rope(ctx: &NodeCtx) -> Result<()> {
    let Op::Rope(p) = ctx.op else {
        return Err(Error::op(ctx.op.name(), "not a ROPE node"));
    };
    let x = ctx.src(0)?;
    let pos = ctx.src(1)?;
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let ok = x.layout.ne == ne
        && x.layout.dtype == d.layout.dtype
        && pos.layout.dtype == DType::I32
        && pos.layout.ne[0] >= ne[2]
        && p.n_dims.is_multiple_of(2)
        && p.n_dims <= ne[0]
        && ctx.src[2]
            .is_none_or(|f| f.layout.dtype == DType::F32 && f.layout.ne[0] >= p.n_dims / 2);
    if !ok {
        return Err(Error::op(
            "ROPE",
            format!("operands do not fit the result {}", d.layout),
        ));
    }
    match d.layout.dtype {
        DType::F32 => run::<f32>(ctx, &x, &pos, &p),
        DType::F16 => run::<f16>(ctx, &x, &pos, &p),
        t => Err(Error::unsupported("CPU", format!("ROPE of {t}"))),
    }
}

/// ggml's `ggml_rope_yarn_corr_dims`: the first and last dimension of the
/// YaRN ramp, in f32.
pub fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * freq_base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    let last = n_dims as f32 - 1.0;
    // C's MAX(0, start) and MIN(n_dims - 1, end), NaN behaviour included.
    [
        if 0.0 > start { 0.0 } else { start },
        if last < end { last } else { end },
    ]
}

/// ggml's `rope_yarn_ramp` for dimension `i0` (an even index).
fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let den = if 0.001 > high - low {
        0.001
    } else {
        high - low
    };
    let y = ((i0 / 2) as f32 - low) / den;
    let clamped = if 0.0 > y { 0.0 } else { y };
    1.0 - if 1.0 < clamped { 1.0 } else { clamped }
}

/// The `(cos, sin)` of pair `i0 / 2` for extrapolated angle `theta_extrap`
/// (ggml's `rope_yarn`).
pub fn rope_yarn(theta_extrap: f32, p: &RopeParams, corr: [f32; 2], i0: usize) -> (f32, f32) {
    let theta_interp = p.freq_scale * theta_extrap;
    let mut theta = theta_interp;
    let mut mscale = p.attn_factor;
    if p.ext_factor != 0.0 {
        let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
        theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

fn run<T: Float>(ctx: &NodeCtx, x: &TensorRef, pos: &TensorRef, p: &RopeParams) -> Result<()> {
    let d = &ctx.dst;
    let ne = d.layout.ne;
    let nd = p.n_dims;
    let size = size_of::<T>();
    if x.nb(0) != size || d.nb(0) != size {
        return Err(Error::op("ROPE", "rows must have contiguous elements"));
    }
    let range = ctx.split(ne[1] * ne[2] * ne[3]);
    if range.is_empty() {
        return Ok(());
    }
    let cache = ctx.thread_scratch_f32(nd)?;
    let theta_scale = p.freq_base.powf(-2.0 / nd as f32);
    let corr = yarn_corr_dims(nd, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow);
    let ff = ctx.src[2];
    let mut cached_i2 = usize::MAX;
    for (i1, i2, i3) in rows(range, &ne) {
        if cached_i2 != i2 {
            // SAFETY: `i2 < ne2 <= pos.ne0` (checked by the caller).
            let position = unsafe { (pos.at(i2, 0, 0, 0) as *const i32).read() };
            let mut theta = position as f32;
            for i0 in (0..nd).step_by(2) {
                let factor = match ff {
                    // SAFETY: `i0 / 2 < n_dims / 2 <= ne0` of the factors.
                    Some(f) => unsafe { (f.at(i0 / 2, 0, 0, 0) as *const f32).read() },
                    None => 1.0,
                };
                let (c, s) = rope_yarn(theta / factor, p, corr, i0);
                // SAFETY: `i0 + 1 < n_dims`: inside this thread's cache.
                unsafe {
                    *cache.add(i0) = c;
                    *cache.add(i0 + 1) = s;
                }
                theta *= theta_scale;
            }
            cached_i2 = i2;
        }
        // SAFETY: in-range rows; contiguous aligned elements of `T`.
        let (src, dst) = unsafe { (x.row(i1, i2, i3) as *const T, d.row(i1, i2, i3) as *mut T) };
        let (offset, step) = match p.mode {
            RopeMode::Normal => (1, 2),
            RopeMode::Neox => (nd / 2, 1),
        };
        for i0 in (0..nd).step_by(2) {
            // Normal: pair (i0, i0 + 1); NeoX: pair (i0/2, i0/2 + nd/2).
            let ic = i0 / 2 * step;
            // SAFETY: `ic + offset < n_dims <= ne0` and `i0 + 1 < n_dims`.
            // Both inputs are read before either output is written, so
            // `dst == src` (in place) is fine.
            unsafe {
                let (c, s) = (*cache.add(i0), *cache.add(i0 + 1));
                let x0 = (*src.add(ic)).to_f32();
                let x1 = (*src.add(ic + offset)).to_f32();
                *dst.add(ic) = T::from_f32(x0 * c - x1 * s);
                *dst.add(ic + offset) = T::from_f32(x0 * s + x1 * c);
            }
        }
        for i in nd..ne[0] {
            // SAFETY: `i < ne0`.
            unsafe { *dst.add(i) = *src.add(i) };
        }
    }
    Ok(())
}
