//! The scale searches behind ggml's K-quants.
//!
//! The K-quants do not simply divide by the largest value: for each
//! sub-block they try a handful of candidate scales and keep the one with the
//! smallest weighted squared error (`make_qkx2_quants` for the
//! scale-and-min types, `make_qx_quants` for the symmetric ones). The chosen
//! scale decides every byte of the block, so these are transcriptions of
//! ggml-quants.c with the same f32 arithmetic in the same order (`a*b*c` is
//! `(a*b)*c`, integers converted to f32 where C converts them, `>`/`<`
//! comparisons exactly where C has them, so NaNs flow the same way). Rust
//! never fuses `a*b + c` into an FMA, matching ggml's x86-64 build of
//! ggml-base (no `-march`, so no contraction).

use super::rounding::{GROUP_MAX_EPS, nearest_int};

/// ggml's `make_qkx2_quants`: finds `scale` and `min` so that
/// `x[i] ≈ scale * l[i] - min` with `l[i]` in `0..=nmax`, minimizing the
/// `weights`-weighted squared (or absolute, with `use_mad`) error over
/// `nstep + 1` candidate inverse scales `(nmax + rmin + rdelta*is) / (max - min)`.
///
/// Writes the quants to `l` and returns `(scale, min)` (`min` is ggml's
/// `the_min`, i.e. already negated: the block minimum is `-min`).
#[allow(clippy::too_many_arguments)] // mirrors ggml's signature
pub(crate) fn make_qkx2_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    l: &mut [u8; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let (Some(&x0), Some(&w0)) = (x.first(), weights.first()) else {
        return (0.0, 0.0);
    };
    let mut min = x0;
    let mut max = x0;
    let mut sum_w = w0;
    let mut sum_x = sum_w * x0;
    for (&xi, &w) in x.iter().zip(weights).skip(1) {
        if xi < min {
            min = xi;
        }
        if xi > max {
            max = xi;
        }
        sum_w += w;
        sum_x += w * xi;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let clamp = |q: i32| q.min(nmax).max(0);
    let error = |diff: f32| if use_mad { diff.abs() } else { diff * diff };

    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((li, &xi), &w) in l.iter_mut().zip(x).zip(weights) {
        *li = clamp(nearest_int(iscale * (xi - min))) as u8;
        best_error += w * error(scale * f32::from(*li) + min - xi);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; N];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((la, &xi), &w) in laux.iter_mut().zip(x).zip(weights) {
            let q = clamp(nearest_int(iscale * (xi - min)));
            *la = q as u8;
            let lf = q as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * xi;
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for ((&la, &xi), &w) in laux.iter().zip(x).zip(weights) {
                cur_error += w * error(this_scale * f32::from(la) + this_min - xi);
            }
            if cur_error < best_error {
                *l = laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_qx_quants`: a symmetric scale so that
/// `x[i] ≈ scale * (l[i] - nmax)` with `l[i]` in `0..2*nmax`.
///
/// `rmse_type` 0 takes `-nmax / max` as is; otherwise the error weights are
/// `qw` if given, else `x²` (1), `1` (2), `|x|` (3) or `sqrt|x|` (4 and up),
/// and 18 nearby scales are tried; a negative `rmse_type` returns right after
/// the first refinement, as in ggml. Q6_K uses `rmse_type` 1 without `qw`.
pub(crate) fn make_qx_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    l: &mut [i8; N],
    rmse_type: i32,
    qw: Option<&[f32; N]>,
) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &xi in x {
        let ax = xi.abs();
        if ax > amax {
            amax = ax;
            max = xi;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let clamp = |q: i32| q.min(nmax - 1).max(-nmax);
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for (li, &xi) in l.iter_mut().zip(x) {
            *li = (nmax + clamp(nearest_int(iscale * xi))) as i8;
        }
        return 1.0 / iscale;
    }
    let return_early = rmse_type < 0;
    let rmse_type = rmse_type.unsigned_abs();
    let weights: [f32; N] = match qw {
        Some(qw) => *qw,
        None => x.map(|xi| match rmse_type {
            1 => xi * xi,
            2 => 1.0,
            3 => xi.abs(),
            _ => xi.abs().sqrt(),
        }),
    };

    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for ((li, &xi), &w) in l.iter_mut().zip(x).zip(&weights) {
        let q = clamp(nearest_int(iscale * xi));
        *li = (q + nmax) as i8;
        let lf = q as f32;
        sumlx += w * xi * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for (&xi, &w) in x.iter().zip(&weights) {
            let lf = clamp(nearest_int(iscale * xi)) as f32;
            sumlx += w * xi * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &xi) in l.iter_mut().zip(x) {
                *li = (nmax + clamp(nearest_int(iscale * xi))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants`: a symmetric scale so that
/// `x[i] ≈ scale * (l[i] - nmax)` with `l[i]` in `0..2*nmax`.
///
/// With `do_rmse` the codes start at `nearest_int(-nmax / max * x)` and are
/// refined coordinate by coordinate (at most five sweeps) to maximize
/// `(Σ w x l)² / Σ w l²` with weights `x²`; the least-squares scale is
/// returned. An all-zero group gives codes 0 (not `nmax`) and scale 0, as in
/// ggml. Q3_K uses `nmax` 4 with `do_rmse`.
pub(crate) fn make_q3_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    l: &mut [i8; N],
    do_rmse: bool,
) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &xi in x {
        let ax = xi.abs();
        if ax > amax {
            amax = ax;
            max = xi;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let clamp = |q: i32| q.min(nmax - 1).max(-nmax);
    let iscale = -(nmax as f32) / max;
    if !do_rmse {
        for (li, &xi) in l.iter_mut().zip(x) {
            *li = (clamp(nearest_int(iscale * xi)) + nmax) as i8;
        }
        return 1.0 / iscale;
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (li, &xi) in l.iter_mut().zip(x) {
        let q = clamp(nearest_int(iscale * xi));
        *li = q as i8;
        let w = xi * xi;
        let lf = q as f32;
        sumlx += w * xi * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (li, &xi) in l.iter_mut().zip(x) {
            let w = xi * xi;
            let lf = f32::from(*li);
            let mut slx = sumlx - w * xi * lf;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * lf * lf;
                let new_l = clamp(nearest_int(xi * sl2 / slx));
                if new_l != i32::from(*li) {
                    let nf = new_l as f32;
                    slx += w * xi * nf;
                    sl2 += w * nf * nf;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for li in l.iter_mut() {
        *li += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qkx2_constant_negative_block_is_all_min() {
        let x = [-0.5f32; 32];
        let w = [1.0f32; 32];
        let mut l = [7u8; 32];
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        assert_eq!((scale, min), (0.0, 0.5));
        assert_eq!(l, [0u8; 32]);
    }

    #[test]
    fn qkx2_ramp_is_exact() {
        // 0..=15 repeated: representable exactly with scale 1, min 0.
        let x: [f32; 32] = std::array::from_fn(|i| (i % 16) as f32);
        let w = [1.0f32; 32];
        let mut l = [0u8; 32];
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, -1.0, 0.1, 20, false);
        for (q, xi) in l.iter().zip(&x) {
            assert!((scale * f32::from(*q) - min - xi).abs() < 1e-5);
        }
    }

    #[test]
    fn qx_zero_group_and_sign() {
        let mut l = [5i8; 16];
        assert_eq!(make_qx_quants(32, &[0.0f32; 16], &mut l, 1, None), 0.0);
        assert_eq!(l, [0i8; 16]);
        // A negative maximum gives a positive scale: x = scale * (l - 32).
        let x: [f32; 16] =
            std::array::from_fn(|i| if i == 3 { -2.0 } else { 0.1 * i as f32 - 0.8 });
        let scale = make_qx_quants(32, &x, &mut l, 1, None);
        assert!(scale > 0.0);
        for (q, xi) in l.iter().zip(&x) {
            assert!((scale * f32::from(q - 32) - xi).abs() <= scale * 0.5 + 1e-6);
        }
        // The other error weightings never panic and stay in range.
        for rmse_type in [-1, 0, 2, 3, 4] {
            make_qx_quants(32, &x, &mut l, rmse_type, None);
            assert!(l.iter().all(|&q| (0..64).contains(&q)));
        }
    }
}
