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
//!   dimensions from `n_dims` on pass through unchanged;
//! - multi-section modes (`ggml_rope_multi`, `ggml_mrope_cache_init`): four
//!   positions per token (t, h, w, e at `pos[i2 + s * ne2]`); pair `k` of
//!   `sector = k % sum(sections)` uses one stream's position times
//!   `theta_scale^e`, where `e` counts the pairs since the stream started
//!   (`k` itself, except in vision, where a stream restarts at its section's
//!   first sector); M-RoPE picks the stream by contiguous sections,
//!   interleaved M-RoPE by `sector % 3` within `3 * sections[..]`; M-RoPE
//!   and interleaved rotate NeoX pairs, vision `(x[k], x[k + n_dims])` for
//!   every `k < n_dims = ne0 / 2`.

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

/// `theta_extrap` (before frequency factors) of the first `n_pairs` pairs of
/// a token whose stream positions are `positions` (only `[0]` used outside
/// the multi-section modes).
pub fn pair_angles(p: &RopeParams, positions: [f64; 4], theta_scale: f64) -> Vec<f64> {
    let n_pairs = p.n_pairs();
    if !p.mode.is_multi() {
        return (0..n_pairs)
            .map(|k| positions[0] * theta_scale.powi(k as i32))
            .collect();
    }
    let sec = p.sections.map(|s| s as usize);
    let sect_dims = sec.iter().sum::<usize>().max(1);
    let (sec_w, sec_e) = (sec[0] + sec[1], sec[0] + sec[1] + sec[2]);
    // Pairs since each stream (t, h, w, e) started.
    let mut since = [0i32; 4];
    let mut out = Vec::with_capacity(n_pairs);
    for k in 0..n_pairs {
        let sector = k % sect_dims;
        if p.mode == RopeMode::Vision {
            let restart = [
                sector == 0,
                sector == sec[0],
                sector == sec_w,
                sector == sec_e,
            ];
            // ggml's `else if` chain: the first matching stream restarts.
            if let Some(r) = restart.iter().position(|&b| b) {
                since[r] = 0;
            }
        }
        let stream = if p.mode == RopeMode::Imrope {
            match sector % 3 {
                1 if sector < 3 * sec[1] => 1,
                2 if sector < 3 * sec[2] => 2,
                0 if sector < 3 * sec[0] => 0,
                _ => 3,
            }
        } else if (sec[0]..sec_w).contains(&sector) {
            1
        } else if (sec_w..sec_e).contains(&sector) {
            2
        } else if sector >= sec_e {
            3
        } else {
            0
        };
        out.push(positions[stream] * theta_scale.powi(since[stream]));
        since.iter_mut().for_each(|e| *e += 1);
    }
    out
}

/// ROPE of `a` (`[head_dim, n_head, n_tokens, ne3]`) at positions `pos`
/// (`[n_tokens]`, or `[4 n_tokens]` for the multi-section modes), with
/// optional `freq_factors`.
pub fn rope(a: &Dense, pos: &Dense, freq_factors: Option<&Dense>, p: &RopeParams) -> Result<Dense> {
    let n_dims = p.n_dims;
    let streams = if p.mode.is_multi() { 4 } else { 1 };
    let sections_ok = !p.mode.is_multi()
        || (p.sections[..3].iter().any(|&s| s > 0)
            && p.sections.iter().map(|&s| s as usize).sum::<usize>() <= a.ne[0]);
    if n_dims == 0
        || !n_dims.is_multiple_of(2)
        || n_dims > a.ne[0]
        || pos.data.len() != streams * a.ne[2]
        || !sections_ok
        || (p.mode == RopeMode::Vision && 2 * n_dims != a.ne[0])
    {
        return Err(Error::op(
            "ROPE",
            format!(
                "n_dims {n_dims}, a {:?} and positions {:?} do not fit",
                a.ne, pos.ne
            ),
        ));
    }
    let n_pairs = p.n_pairs();
    if freq_factors.is_some_and(|f| f.data.len() < n_pairs) {
        return Err(Error::op(
            "ROPE",
            format!("fewer than {n_pairs} freq factors"),
        ));
    }
    let theta_scale = f64::from(p.freq_base).powf(-2.0 / n_dims as f64);
    let corr = yarn_corr_dims(p);
    let mut out = a.clone();
    let ne0 = a.ne[0];
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            let mut positions = [0.0; 4];
            for (s, x) in positions.iter_mut().enumerate().take(streams) {
                *x = pos.data[i2 + s * a.ne[2]];
            }
            // (cos, sin) of every pair, shared by the heads of this token.
            let cs: Vec<(f64, f64)> = pair_angles(p, positions, theta_scale)
                .into_iter()
                .enumerate()
                .map(|(k, theta_extrap)| {
                    let ff = freq_factors.map_or(1.0, |f| f.data[k]);
                    rope_yarn(theta_extrap / ff, 2 * k, corr, p)
                })
                .collect();
            for i1 in 0..a.ne[1] {
                let start = a.flat([0, i1, i2, i3]);
                let x = &a.data[start..start + ne0];
                let y = &mut out.data[start..start + ne0];
                for (k, &(c, s)) in cs.iter().enumerate() {
                    let (j0, j1) = match p.mode {
                        RopeMode::Normal => (2 * k, 2 * k + 1),
                        RopeMode::Neox | RopeMode::Mrope | RopeMode::Imrope => (k, k + n_dims / 2),
                        RopeMode::Vision => (k, k + n_dims),
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

    #[test]
    fn multi_section_streams_follow_ggml() {
        let ts = 0.5;
        let pos = [2.0, 3.0, 5.0, 7.0];
        // M-RoPE, sections [1, 1, 0, 0] (wrapping every 2 pairs): t, h, t, h,
        // each at its pair's own power of theta_scale.
        let p = RopeParams::multi(8, RopeMode::Mrope, [1, 1, 0, 0], 10000.0);
        let got = pair_angles(&p, pos, ts);
        assert_eq!(got, vec![2.0, 3.0 * 0.5, 2.0 * 0.25, 3.0 * 0.125]);
        // Interleaved, sections [2, 1, 1, 0]: sectors 0..4 are t, h, w, t.
        let p = RopeParams::multi(8, RopeMode::Imrope, [2, 1, 1, 0], 10000.0);
        let got = pair_angles(&p, pos, ts);
        assert_eq!(got, vec![2.0, 3.0 * 0.5, 5.0 * 0.25, 2.0 * 0.125]);
        // Vision, n_dims = 4 (ne0 = 8, 4 pairs), sections [1, 1, 0, 0]: each
        // section restarts its stream, so every angle is a bare position.
        let p = RopeParams::multi(4, RopeMode::Vision, [1, 1, 0, 0], 10000.0);
        assert_eq!(pair_angles(&p, pos, ts), vec![2.0, 3.0, 2.0, 3.0]);
        // Vision, sections [2, 2, 0, 0]: t, t*ts, h, h*ts.
        let p = RopeParams::multi(4, RopeMode::Vision, [2, 2, 0, 0], 10000.0);
        assert_eq!(pair_angles(&p, pos, ts), vec![2.0, 1.0, 3.0, 1.5]);
    }
}
