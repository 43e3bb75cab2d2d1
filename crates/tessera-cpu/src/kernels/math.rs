//! Scalar activation functions shared by UNARY and GLU, with ggml's formulas.
//!
//! Everything is computed in f32 as ggml does, except the error function:
//! Rust's standard library has none, and `1 + erf(x)` loses all precision
//! for negative `x` in f32, so GELU_ERF is evaluated as
//! `0.5 x erfc(-x / sqrt 2)` in f64 (accurate to about 1e-15 relative) and
//! rounded once.

/// `x / (1 + e^-x)` (ggml's `ggml_silu_f32`).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `x > 0 ? x : 0` (a NaN gives 0, as in ggml).
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if x > 0.0 { x } else { 0.0 }
}

/// GELU, tanh approximation, as ggml's `ggml_gelu_f32`:
/// `0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// GELU, sigmoid approximation, as ggml's `ggml_gelu_quick_f32`:
/// `x * (1 / (1 + e^(-1.702 x)))` (ggml's f32 path without its f16 table).
#[inline(always)]
pub fn gelu_quick(x: f32) -> f32 {
    const GELU_QUICK_COEF: f32 = -1.702;
    x * (1.0 / (1.0 + (GELU_QUICK_COEF * x).exp()))
}

/// `MAX(MIN(x, max), min)` with C's comparisons, as ggml's CLAMP: a NaN
/// becomes `max` (then `min` if `max <= min`).
#[inline(always)]
pub fn clamp(x: f32, min: f32, max: f32) -> f32 {
    let t = if x < max { x } else { max };
    if t > min { t } else { min }
}

/// GELU, exact: `0.5x(1 + erf(x / sqrt 2))`.
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    let xd = f64::from(x);
    if xd.is_nan() {
        return f32::NAN;
    }
    (0.5 * xd * erfc(-xd * std::f64::consts::FRAC_1_SQRT_2)) as f32
}

/// The complementary error function `1 - erf(x)` in f64.
///
/// For `|x| < 3` the everywhere-positive series
/// `erf(x) = 2/sqrt(pi) e^{-x^2} sum_n 2^n x^{2n+1} / (1*3*...*(2n+1))`
/// (no cancellation); for `x >= 3` the continued fraction
/// `erfc(x) = e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`,
/// evaluated bottom-up with 60 terms (converged to f64 precision for
/// `x >= 3`); `erfc(-x) = 2 - erfc(x)`.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 3.0 {
        return 1.0 - erf_series(x);
    }
    if x > 27.0 {
        return 0.0;
    }
    let mut f = x;
    for k in (1..=60).rev() {
        f = x + (k as f64 * 0.5) / f;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * f)
}

/// `erf(x)` for `0 <= x < 3` by the positive series.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while n < 200.0 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// erf by composite Simpson integration of `2/sqrt(pi) e^{-t^2}`.
    fn erf_simpson(x: f64) -> f64 {
        let n = 20_000;
        let h = x / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x);
        for i in 1..n {
            let w = if i % 2 == 1 { 4.0 } else { 2.0 };
            s += w * f(i as f64 * h);
        }
        std::f64::consts::FRAC_2_SQRT_PI * s * h / 3.0
    }

    #[test]
    fn erfc_matches_numerical_integration() {
        for i in -60..=60 {
            let x = i as f64 * 0.1;
            let want = 1.0 - erf_simpson(x);
            let got = erfc(x);
            assert!(
                (got - want).abs() <= 1e-12,
                "erfc({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn erfc_tail_is_relatively_accurate() {
        // erfc(x) * x * sqrt(pi) * e^{x^2} -> 1 - 1/(2x^2) + 3/(4x^4) - ... for large x.
        for x in [4.0f64, 6.0, 10.0, 20.0] {
            let scaled = erfc(x) * x * std::f64::consts::PI.sqrt() * (x * x).exp();
            let asym = 1.0 - 1.0 / (2.0 * x * x) + 3.0 / (4.0 * x.powi(4))
                - 15.0 / (8.0 * x.powi(6))
                + 105.0 / (16.0 * x.powi(8));
            // The asymptotic series errs by less than its first omitted term.
            let bound = 945.0 / (32.0 * x.powi(10)) + 1e-13;
            assert!(
                (scaled - asym).abs() <= bound,
                "x = {x}: {scaled} vs {asym}"
            );
        }
        assert_eq!(erfc(30.0), 0.0);
        assert_eq!(erfc(-30.0), 2.0);
    }

    #[test]
    fn gelu_erf_is_odd_symmetric_around_identity() {
        // gelu(x) - gelu(-x) = x exactly in real arithmetic.
        for i in 1..100 {
            let x = i as f32 * 0.07;
            let d = gelu_erf(x) - gelu_erf(-x);
            assert!((d - x).abs() <= 2.0 * f32::EPSILON * x, "x = {x}");
        }
        assert!(gelu_erf(f32::NAN).is_nan());
    }
}
