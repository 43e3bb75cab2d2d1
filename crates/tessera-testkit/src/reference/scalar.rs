//! Scalar conversions and functions of the reference, in f64.
//!
//! Stored values must be rounded exactly as a device stores them: a device
//! computes in f32 and rounds the f32 result, so the reference rounds its f64
//! value to f32 first, then to f16 (round to nearest even) or bf16 (ggml's
//! `ggml_compute_fp32_to_bf16`: round to nearest even, NaN made quiet). The
//! elementary functions ggml uses (`erf` for GELU_ERF, ALiBi slopes, YaRN
//! corrections) are written out here; Rust's `f64` has no `erf`.

use half::f16;

/// f64 rounded to f32 and back (round to nearest even).
pub fn round_f32(v: f64) -> f64 {
    f64::from(v as f32)
}

/// Bits of the f16 a device stores for `v`.
pub fn f16_bits(v: f64) -> u16 {
    f16::from_f32(v as f32).to_bits()
}

/// Value of f16 bits.
pub fn f16_value(bits: u16) -> f64 {
    f16::from_bits(bits).to_f64()
}

/// Bits of the bf16 a device stores for `v` (ggml's rounding).
pub fn bf16_bits(v: f64) -> u16 {
    let u = (v as f32).to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        // NaN: keep the sign and payload top, force quiet.
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Value of bf16 bits.
pub fn bf16_value(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// The error function, to about 1e-15 relative.
///
/// Uses the everywhere-convergent series
/// `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))`,
/// whose terms are all of one sign (no cancellation). `|erf(x)|` rounds to 1
/// in f64 beyond `|x| = 6`.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() >= 6.0 {
        return x.signum();
    }
    let x2 = x * x;
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0f64;
    // At |x| < 6 the terms peak near n = x^2 = 36 and are below 1e-17 of the
    // sum well before n = 200.
    for _ in 0..200 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term.abs() <= sum.abs() * 1e-17 {
            break;
        }
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum
}

/// `1 / (1 + e^-x)`.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `x * sigmoid(x)`.
pub fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// GELU, tanh approximation (ggml's `ggml_gelu_f32`).
pub fn gelu(x: f64) -> f64 {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    const COEF_A: f64 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

/// GELU, exact: `0.5 x (1 + erf(x / sqrt 2))`.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// `max(x, 0)` as ggml writes it (`x > 0 ? x : 0`).
pub fn relu(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// The ALiBi slope of head `h` of `n_head` heads (ggml's soft_max and
/// flash attention): 1 when `max_bias <= 0`.
pub fn alibi_slope(max_bias: f64, n_head: usize, h: usize) -> f64 {
    if max_bias <= 0.0 || n_head == 0 {
        return 1.0;
    }
    // Largest power of two not above n_head.
    let n_head_log2 = 1usize << (usize::BITS - 1 - n_head.leading_zeros());
    let l2 = n_head_log2 as f64;
    let m0 = 2f64.powf(-max_bias / l2);
    let m1 = 2f64.powf(-(max_bias / 2.0) / l2);
    if h < n_head_log2 {
        m0.powi(h as i32 + 1)
    } else {
        m1.powi(2 * (h - n_head_log2) as i32 + 1)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_tabulated_values_and_symmetry() {
        // Abramowitz & Stegun, table 7.1.
        for (x, e) in [
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
        ] {
            assert!((erf(x) - e).abs() < 1e-15, "erf({x}) = {} vs {e}", erf(x));
            assert!((erf(-x) + e).abs() < 1e-15);
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(7.0), 1.0);
        // The derivative is 2/sqrt(pi) e^{-x^2}: check by central differences.
        for x in [-2.5, -0.3, 0.7, 1.9, 4.0] {
            let h = 1e-5;
            let d = (erf(x + h) - erf(x - h)) / (2.0 * h);
            let want = 2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp();
            // Truncation error ~h^2 erf'''/6 < 1e-10, rounding ~eps/h ~ 1e-11.
            assert!(
                (d - want).abs() < 1e-9,
                "erf derivative at {x}: {d} vs {want}"
            );
        }
    }

    #[test]
    fn f16_and_bf16_round_to_nearest_even() {
        // 1 + 2^-11 is half-way between 1 and 1 + 2^-10 in f16: ties to even (1).
        assert_eq!(f16_value(f16_bits(1.0 + 2f64.powi(-11))), 1.0);
        // 1 + 3 * 2^-11 is half-way between 1 + 2^-10 and 1 + 2^-9: to even (1 + 2^-9).
        assert_eq!(
            f16_value(f16_bits(1.0 + 3.0 * 2f64.powi(-11))),
            1.0 + 2f64.powi(-9)
        );
        assert_eq!(f16_value(f16_bits(65520.0)), f64::INFINITY);
        // bf16 keeps 8 significant bits: 1 + 2^-8 ties to 1, 1 + 3*2^-8 to 1 + 2^-6.
        assert_eq!(bf16_value(bf16_bits(1.0 + 2f64.powi(-8))), 1.0);
        assert_eq!(
            bf16_value(bf16_bits(1.0 + 3.0 * 2f64.powi(-8))),
            1.0 + 2f64.powi(-6)
        );
        assert_eq!(bf16_value(bf16_bits(-2.5)), -2.5);
        assert!(bf16_value(bf16_bits(f64::NAN)).is_nan());
        assert_eq!(bf16_value(bf16_bits(f64::NEG_INFINITY)), f64::NEG_INFINITY);
    }

    #[test]
    fn alibi_slopes_follow_the_definition() {
        // 8 heads, max_bias 8: slopes 2^-1, 2^-2, ..., 2^-8.
        for h in 0..8 {
            let s = alibi_slope(8.0, 8, h);
            assert!((s - 2f64.powi(-(h as i32 + 1))).abs() < 1e-15);
        }
        // 6 heads: the first 4 use m0 = 2^-2, the rest m1 = 2^-1 at odd powers.
        assert!((alibi_slope(8.0, 6, 3) - 2f64.powi(-8)).abs() < 1e-15);
        assert!((alibi_slope(8.0, 6, 4) - 0.5).abs() < 1e-15);
        assert!((alibi_slope(8.0, 6, 5) - 0.125).abs() < 1e-15);
        assert_eq!(alibi_slope(0.0, 6, 5), 1.0);
    }
}
