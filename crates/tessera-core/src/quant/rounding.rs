//! The exact integer conversions ggml's quantizers rely on.
//!
//! ggml rounds in three different ways, and byte-identical output needs each
//! one reproduced, including what happens outside the "sane" range:
//!
//! - [`nearest_int`]: the K-quants' magic-number trick (round half to even,
//!   garbage but deterministic when `|x| > 2^22`, 0 for NaN);
//! - `roundf` (Q8_0): half away from zero, which is [`f32::round`];
//! - plain C casts `(int8_t)f` (Q4_0 truncates, Q8_0 casts `roundf`'s
//!   result): undefined behaviour in C for NaN and out-of-range values, which
//!   x86-64 compilers turn into `cvttss2si` (NaN/overflow give `i32::MIN`)
//!   followed by keeping the low byte. [`trunc_i32_x86`] reproduces that, so
//!   e.g. a block of f32 subnormals (whose inverse scale overflows to inf)
//!   quantizes to zeros exactly as ggml does on x86-64, not to Rust's
//!   saturated 127.

/// `GROUP_MAX_EPS` of ggml-quants.c: groups whose largest magnitude is below
/// this are treated as all zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: rounds to the nearest integer, ties to even, by
/// adding `1.5 * 2^23` and reading the mantissa.
///
/// ggml only asserts `|fval| <= 4194303` in debug builds; release builds (and
/// this function) return the same wrapped value for larger inputs, and 0 for
/// NaN and infinities.
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    // The mask keeps 23 bits, so the cast cannot change the value.
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C's float-to-integer conversion as x86-64 compilers emit it
/// (`cvttss2si`): truncation toward zero, and `i32::MIN` ("integer
/// indefinite") for NaN and values outside `i32`. Casting the result `as i8`
/// then keeps the low byte, as the C `(int8_t)` conversion does there.
#[inline]
pub(crate) fn trunc_i32_x86(f: f32) -> i32 {
    // NaN fails both comparisons.
    if (-2_147_483_648.0..2_147_483_648.0).contains(&f) {
        f as i32
    } else {
        i32::MIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(2.4999998), 2);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
        assert_eq!(nearest_int(f32::NAN), 0);
        assert_eq!(nearest_int(f32::INFINITY), -0x0040_0000);
    }

    #[test]
    fn nearest_int_agrees_with_round_ties_even_in_range() {
        for k in -400_000..400_000 {
            let x = k as f32 * 0.25;
            assert_eq!(nearest_int(x), x.round_ties_even() as i32, "{x}");
        }
        for k in (0..4_194_303).step_by(997) {
            for x in [k as f32 + 0.5, -(k as f32) - 0.5, k as f32 + 0.499_9] {
                assert_eq!(nearest_int(x), x.round_ties_even() as i32, "{x}");
            }
        }
    }

    #[test]
    fn trunc_matches_cvttss2si() {
        assert_eq!(trunc_i32_x86(15.9), 15);
        assert_eq!(trunc_i32_x86(-15.9), -15);
        assert_eq!(trunc_i32_x86(f32::NAN), i32::MIN);
        assert_eq!(trunc_i32_x86(f32::INFINITY), i32::MIN);
        assert_eq!(trunc_i32_x86(f32::NEG_INFINITY), i32::MIN);
        assert_eq!(trunc_i32_x86(3e9), i32::MIN);
        assert_eq!(trunc_i32_x86(-2_147_483_648.0), i32::MIN);
        assert_eq!(trunc_i32_x86(2_147_483_520.0), 2_147_483_520);
        assert_eq!(trunc_i32_x86(300.0) as i8, 44);
        assert_eq!(trunc_i32_x86(f32::INFINITY) as i8, 0);
    }
}
