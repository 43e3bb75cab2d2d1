//! ROPE in the reference, following ggml's CPU semantics in f64:
//!
//! - `theta_scale = freq_base^(-2 / n_dims)`; pair `i0` (even, `< n_dims`) of a
//!   row at position `p` has `theta_extrap = p * theta_scale^(i0 / 2)`,
//!   divided by `freq_factors[i0 / 2]` when given;
//! - YaRN (`rope_yarn`): `theta = freq_scale * theta_extrap`, and when
//!   `ext_factor != 0` it is mixed with `theta_extrap` by
//!   `ramp(i0) * ext_factor` and the magnitude gets `1 + 0.1 ln(1 / freq_scale)`;
//!   the ramp's correction dims come from `ggml_rope_yarn_corr_dims`;
//! - normal mode rotates `(x[i0], x[i0 + 1])`, NeoX `(x[i0/2], x[i0/2 + n_dims/2])`;
//!   dimensions from `n_dims` on pass through unchanged.

use std::f64::consts::PI;

use tessera::{Error, Result, RopeMode, RopeParams};

use super::memory::Dense;

/// ggml's `ggml_rope_yarn_corr_dim`: the dimension at which `n_rot` full
/// rotations fit in the original context.
fn corr_dim(n_dims: f64, n_ctx_orig: f64, n_rot: f64, base: f64) -> f64 {
    n_dims * (n_ctx_orig / (n_rot * 2.0 * PI)).ln() / (2.0 * base.ln())
}

/// ggml's `ggml_rope_yarn_corr_dims`: `[max(0, floor(low)), min(n_dims - 1, ceil(high))]`.
pub fn yarn_corr_dims(p: &RopeParams) -> [f64; 2] {
    let (nd, nc, base) = (p.n_dims as f64, p.n_ctx_orig as f64, f64::from(p.freq_base));
    let start = corr_dim(nd, nc, f64::from(p.beta_fast), base).floor();
    let end = corr_dim(nd, nc, f64::from(p.beta_slow), base).ceil();
    [start.max(0.0), end.min(nd - 1.0)]
}

/// ggml's `rope_yarn_ramp` (note the integer `i0 / 2`).
fn ramp(low: f64, high: f64, i0: usize) -> f64 {
    let y = ((i0 / 2) as f64 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// `(cos, sin)` of pair `i0` for `theta_extrap` (ggml's `rope_yarn`).
pub fn rope_yarn(theta_extrap: f64, i0: usize, corr: [f64; 2], p: &RopeParams) -> (f64, f64) {
    let freq_scale = f64::from(p.freq_scale);
    let ext = f64::from(p.ext_factor);
    let mut mscale = f64::from(p.attn_factor);
    let theta_interp = freq_scale * theta_extrap;
    let mut theta = theta_interp;
    if ext != 0.0 {
        let mix = ramp(corr[0], corr[1], i0) * ext;
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

/// ROPE of `a` (`[head_dim, n_head, n_tokens, ne3]`) at positions `pos`
/// (`[n_tokens]`), with optional `freq_factors`.
pub fn rope(a: &Dense, pos: &Dense, freq_factors: Option<&Dense>, p: &RopeParams) -> Result<Dense> {
    let n_dims = p.n_dims;
    if n_dims == 0 || !n_dims.is_multiple_of(2) || n_dims > a.ne[0] || pos.data.len() != a.ne[2] {
        return Err(Error::op(
            "ROPE",
            format!(
                "n_dims {n_dims}, a {:?} and positions {:?} do not fit",
                a.ne, pos.ne
            ),
        ));
    }
    if freq_factors.is_some_and(|f| f.data.len() < n_dims / 2) {
        return Err(Error::op(
            "ROPE",
            format!("fewer than n_dims / 2 = {} freq factors", n_dims / 2),
        ));
    }
    let theta_scale = f64::from(p.freq_base).powf(-2.0 / n_dims as f64);
    let corr = yarn_corr_dims(p);
    let mut out = a.clone();
    let ne0 = a.ne[0];
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            let position = pos.data[i2];
            // (cos, sin) of every pair, shared by the heads of this token.
            let cs: Vec<(f64, f64)> = (0..n_dims)
                .step_by(2)
                .map(|i0| {
                    let ff = freq_factors.map_or(1.0, |f| f.data[i0 / 2]);
                    let theta_extrap = position * theta_scale.powi((i0 / 2) as i32);
                    rope_yarn(theta_extrap / ff, i0, corr, p)
                })
                .collect();
            for i1 in 0..a.ne[1] {
                let start = a.flat([0, i1, i2, i3]);
                let x = &a.data[start..start + ne0];
                let y = &mut out.data[start..start + ne0];
                for (k, &(c, s)) in cs.iter().enumerate() {
                    let (j0, j1) = match p.mode {
                        RopeMode::Normal => (2 * k, 2 * k + 1),
                        RopeMode::Neox => (k, k + n_dims / 2),
                    };
                    let (x0, x1) = (x[j0], x[j1]);
                    y[j0] = x0 * c - x1 * s;
                    y[j1] = x0 * s + x1 * c;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_rotates_by_position_times_frequency() {
        // One head of 4 dims at position 3, base 100: pair 0 turns by 3 rad,
        // pair 1 by 3 * 100^(-1/2) = 0.3 rad.
        let a = Dense::from_vec([4, 1, 1, 1], vec![1.0, 0.0, 0.0, 2.0]).unwrap();
        let pos = Dense::from_vec([1, 1, 1, 1], vec![3.0]).unwrap();
        let p = RopeParams::new(4, RopeMode::Normal, 100.0);
        let r = rope(&a, &pos, None, &p).unwrap();
        let (t0, t1) = (3.0f64, 0.3f64);
        let want = [t0.cos(), t0.sin(), -2.0 * t1.sin(), 2.0 * t1.cos()];
        for (g, w) in r.data.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{:?} vs {want:?}", r.data);
        }
        // NeoX pairs (x0, x2) and (x1, x3).
        let pn = RopeParams::new(4, RopeMode::Neox, 100.0);
        let r = rope(&a, &pos, None, &pn).unwrap();
        let want = [t0.cos(), -2.0 * t1.sin(), t0.sin(), 2.0 * t1.cos()];
        for (g, w) in r.data.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{:?} vs {want:?}", r.data);
        }
    }

    #[test]
    fn partial_rotation_freq_factors_and_scale() {
        let a = Dense::from_vec([4, 1, 1, 1], vec![1.0, 0.0, 5.0, 6.0]).unwrap();
        let pos = Dense::from_vec([1, 1, 1, 1], vec![2.0]).unwrap();
        let mut p = RopeParams::new(2, RopeMode::Normal, 10000.0);
        p.freq_scale = 0.5;
        p.attn_factor = 2.0;
        let ff = Dense::from_vec([1, 1, 1, 1], vec![4.0]).unwrap();
        let r = rope(&a, &pos, Some(&ff), &p).unwrap();
        // theta = 0.5 * 2 / 4 = 0.25, magnitude 2; dims 2..4 unchanged.
        assert!((r.data[0] - 2.0 * 0.25f64.cos()).abs() < 1e-12);
        assert!((r.data[1] - 2.0 * 0.25f64.sin()).abs() < 1e-12);
        assert_eq!(&r.data[2..], &[5.0, 6.0]);
    }

    #[test]
    fn yarn_ramp_mixes_between_interpolation_and_extrapolation() {
        let mut p = RopeParams::new(64, RopeMode::Normal, 10000.0);
        p.n_ctx_orig = 4096;
        p.freq_scale = 0.25;
        p.ext_factor = 1.0;
        let corr = yarn_corr_dims(&p);
        assert!(
            corr[0] >= 0.0 && corr[1] <= 63.0 && corr[0] < corr[1],
            "{corr:?}"
        );
        let mscale = 1.0 + 0.1 * 4f64.ln();
        // Below the low correction dim the ramp is 1: pure extrapolation.
        let (c, s) = rope_yarn(1.0, 0, corr, &p);
        assert!((c - 1f64.cos() * mscale).abs() < 1e-12 && (s - 1f64.sin() * mscale).abs() < 1e-12);
        // Above the high one it is 0: pure interpolation (theta * freq_scale).
        let (c, _) = rope_yarn(1.0, 62, corr, &p);
        assert!((c - 0.25f64.cos() * mscale).abs() < 1e-12);
    }
}
