//! Comparing a device's result with the reference's, element by element.
//!
//! Both sides are the *stored* values of a tensor of the node's element type:
//! the device's as read back from its memory, the reference's rounded to the
//! same type (the reference keeps F32 in f64, so it is rounded to f32 here).
//! A result fails on the first of:
//!
//! 1. a NaN where the reference has none (an unwritten output, filled with a
//!    NaN pattern before compute, shows up here), or a number where the
//!    reference has NaN;
//! 2. an infinity that the reference does not have with the same sign, or a
//!    finite value where the reference is infinite;
//! 3. for [`Tolerance::Exact`], any element whose bits differ;
//! 4. for [`Tolerance::Nmse`], `sum (a - b)^2 / sum b^2` over the finite
//!    elements above the threshold. For F16/BF16 results a difference of one
//!    unit in the last place (adjacent encodings) counts as agreement: a
//!    device rounds an f32 result and the reference an f64 one, and the two
//!    may fall on either side of a rounding boundary; on a short row a single
//!    such straddle would otherwise exceed 1e-7 by itself.
//!
//! Every failure message names the element (its 4-D index), the value and the
//! expected value, so the message alone is enough to start debugging.

use tessera::DType;

use crate::reference::Dense;
use crate::reference::memory::unflatten;
use crate::reference::scalar::{bf16_bits, bf16_value, f16_bits, f16_value, round_f32};
use crate::tolerance::Tolerance;

/// One element, for messages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Element {
    /// Its index `[i0, i1, i2, i3]`.
    pub index: [usize; 4],
    /// The device's value.
    pub actual: f64,
    /// The reference's value.
    pub expected: f64,
}

impl std::fmt::Display for Element {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "element {:?}: got {}, expected {} (|diff| {:.3e})",
            self.index,
            self.actual,
            self.expected,
            (self.actual - self.expected).abs()
        )
    }
}

/// The outcome of a comparison that passed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The NMSE (0 for exact comparisons).
    pub nmse: f64,
    /// The element with the largest absolute difference, if any differ.
    pub worst: Option<Element>,
}

/// The value `v` takes when stored as `dtype` (quantized and integer values
/// are already stored values and pass through).
pub fn stored_value(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => round_f32(v),
        DType::F16 => f16_value(f16_bits(v)),
        DType::BF16 => bf16_value(bf16_bits(v)),
        _ => v,
    }
}

/// `a` and `b` (both stored values of `dtype`) are adjacent encodings of a
/// 16-bit float type.
fn adjacent_16(dtype: DType, a: f64, b: f64) -> bool {
    let bits = |v: f64| match dtype {
        DType::F16 => Some(f16_bits(v)),
        DType::BF16 => Some(bf16_bits(v)),
        _ => None,
    };
    // Sign-magnitude to a monotone integer line.
    let line = |x: u16| {
        if x & 0x8000 != 0 {
            -i32::from(x & 0x7fff)
        } else {
            i32::from(x)
        }
    };
    match (bits(a), bits(b)) {
        (Some(x), Some(y)) => (line(x) - line(y)).abs() <= 1,
        _ => false,
    }
}

/// Compare `actual` (read from a device) with `expected` (the reference) for
/// a tensor of type `dtype`. `Err` carries a message naming the failure.
pub fn compare_values(
    actual: &Dense,
    expected: &Dense,
    dtype: DType,
    tol: Tolerance,
) -> Result<Comparison, String> {
    if actual.ne != expected.ne || actual.data.len() != expected.data.len() {
        return Err(format!(
            "extents differ: got {:?}, expected {:?}",
            actual.ne, expected.ne
        ));
    }
    let ne = actual.ne;
    let elem = |k: usize, a: f64, b: f64| Element {
        index: unflatten(ne, k),
        actual: a,
        expected: b,
    };
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut worst: Option<Element> = None;
    let mut n_diff = 0usize;
    for (k, (&a, &b_raw)) in actual.data.iter().zip(&expected.data).enumerate() {
        let b = stored_value(dtype, b_raw);
        if a.is_nan() || b.is_nan() {
            if a.is_nan() && b.is_nan() {
                continue;
            }
            let what = if a.is_nan() {
                "is NaN"
            } else {
                "is a number where the reference has NaN"
            };
            return Err(format!("{} {what}", elem(k, a, b)));
        }
        if a.is_infinite() || b.is_infinite() {
            if a != b {
                return Err(format!("{}: infinities do not match", elem(k, a, b)));
            }
            continue;
        }
        if a.to_bits() != b.to_bits() {
            n_diff += 1;
            let d = (a - b).abs();
            if worst.is_none_or(|w| d > (w.actual - w.expected).abs()) {
                worst = Some(elem(k, a, b));
            }
        }
        let d = if matches!(dtype, DType::F16 | DType::BF16) && adjacent_16(dtype, a, b) {
            0.0
        } else {
            a - b
        };
        num += d * d;
        den += b * b;
    }
    match tol {
        Tolerance::Exact => match worst {
            None => Ok(Comparison {
                nmse: 0.0,
                worst: None,
            }),
            Some(w) => Err(format!(
                "{n_diff} of {} elements differ from the exact result; the largest difference is at {w}",
                actual.data.len()
            )),
        },
        Tolerance::Nmse(max) => {
            let nmse = if num == 0.0 {
                0.0
            } else if den == 0.0 {
                f64::INFINITY
            } else {
                num / den
            };
            if nmse <= max {
                Ok(Comparison { nmse, worst })
            } else {
                let w = worst.map_or_else(String::new, |w| {
                    format!("; the largest difference is at {w}")
                });
                Err(format!(
                    "NMSE {nmse:.3e} exceeds {max:.0e} ({n_diff} of {} elements differ){w}",
                    actual.data.len()
                ))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn d(v: &[f64]) -> Dense {
        Dense::from_vec([v.len(), 1, 1, 1], v.to_vec()).unwrap()
    }

    #[test]
    fn nmse_is_relative_to_the_reference() {
        let b = d(&[1.0, -2.0, 2.0]);
        let a = d(&[1.0, -2.0, 2.03]);
        // (0.03)^2 / 9 = 1e-4 (up to f32 rounding of the values).
        let c = compare_values(&a, &b, DType::F32, Tolerance::Nmse(2e-4)).unwrap();
        assert!((c.nmse - 1e-4).abs() < 1e-9, "{}", c.nmse);
        assert_eq!(c.worst.unwrap().index, [2, 0, 0, 0]);
        let e = compare_values(&a, &b, DType::F32, Tolerance::Nmse(5e-5)).unwrap_err();
        assert!(
            e.contains("NMSE") && e.contains("[2, 0, 0, 0]") && e.contains("2.03"),
            "{e}"
        );
    }

    #[test]
    fn nan_inf_and_exact_rules() {
        let b = d(&[1.0, f64::INFINITY]);
        let e = compare_values(
            &d(&[f64::NAN, f64::INFINITY]),
            &b,
            DType::F32,
            Tolerance::Nmse(1.0),
        )
        .unwrap_err();
        assert!(e.contains("NaN") && e.contains("[0, 0, 0, 0]"), "{e}");
        let e = compare_values(
            &d(&[1.0, f64::NEG_INFINITY]),
            &b,
            DType::F32,
            Tolerance::Nmse(1.0),
        )
        .unwrap_err();
        assert!(e.contains("infinities"), "{e}");
        assert!(
            compare_values(&d(&[1.0, f64::INFINITY]), &b, DType::F32, Tolerance::Exact).is_ok()
        );
        // One f32 ulp off fails an exact comparison.
        let one_up = f64::from(f32::from_bits(1.0f32.to_bits() + 1));
        let e = compare_values(
            &d(&[one_up, f64::INFINITY]),
            &b,
            DType::F32,
            Tolerance::Exact,
        )
        .unwrap_err();
        assert!(e.contains("1 of 2 elements differ"), "{e}");
    }

    #[test]
    fn reference_is_rounded_to_the_stored_type() {
        // The reference's f64 0.1 is stored as f32 0.1 by a device: equal.
        let a = d(&[f64::from(0.1f32)]);
        assert!(compare_values(&a, &d(&[0.1]), DType::F32, Tolerance::Exact).is_ok());
        // F16: adjacent encodings count as agreement, two steps apart do not.
        let one = 1.0;
        let next = f16_value(f16_bits(1.0) + 1);
        let next2 = f16_value(f16_bits(1.0) + 2);
        let c = compare_values(&d(&[next]), &d(&[one]), DType::F16, Tolerance::Nmse(1e-7)).unwrap();
        assert_eq!(c.nmse, 0.0);
        assert!(
            compare_values(&d(&[next2]), &d(&[one]), DType::F16, Tolerance::Nmse(1e-7)).is_err()
        );
    }
}
