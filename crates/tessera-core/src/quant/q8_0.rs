//! Q8_0: 32 values per block, `x = d * q` with `q` in -127..=127.
//!
//! The simplest quantized type, and the activation format of Q4_0/Q8_0 dot
//! products, so it must match ggml's `quantize_row_q8_0_ref` exactly:
//! `d = amax / 127`, `q = roundf(x / d)` (half away from zero, unlike the
//! K-quants' `nearest_int`), and the C `(int8_t)` cast of that float as
//! x86-64 performs it.

use super::blocks::{BlockQ8_0, QK8_0, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::rounding::trunc_i32_x86;
use crate::dtype::DType;

impl QuantBlock<QK8_0> for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;

    fn quantize(x: &[f32; QK8_0]) -> Self {
        let mut amax = 0.0f32;
        for &v in x {
            // C's MAX(amax, a) is `amax > a ? amax : a`: a NaN becomes amax
            // and the next value replaces it, so only a trailing NaN survives
            // (f32::max would ignore NaNs and give different bytes).
            let a = v.abs();
            amax = if amax > a { amax } else { a };
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let qs = x.map(|v| trunc_i32_x86((v * id).round()) as i8);
        BlockQ8_0 {
            d: f32_to_f16(d),
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK8_0]) {
        let d = f16_to_f32(self.d);
        for (out, &q) in y.iter_mut().zip(&self.qs) {
            *out = f32::from(q) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_away_from_zero() {
        let mut x = [0.0f32; QK8_0];
        x[0] = 127.0; // d = 1
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 0.5;
        let b = BlockQ8_0::quantize(&x);
        assert_eq!(f16_to_f32(b.d), 1.0);
        assert_eq!(&b.qs[..4], &[127, 3, -3, 1]);
    }

    #[test]
    fn zeros_and_specials_do_not_panic() {
        let b = BlockQ8_0::quantize(&[0.0; QK8_0]);
        assert_eq!(b.d.to_bits(), 0);
        assert_eq!(b.qs, [0; QK8_0]);
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, 1e-40] {
            let mut x = [1.0f32; QK8_0];
            x[5] = v;
            let mut y = [0.0; QK8_0];
            BlockQ8_0::quantize(&x).dequantize(&mut y);
        }
    }
}
