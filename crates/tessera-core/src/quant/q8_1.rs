//! Q8_1: 32 values per block, `x = d * q` with `q` in -127..=127, plus
//! `s = d * sum(q)`: the activation format of Q4_1 and Q5_1 dot products
//! (their mins multiply `s`, one product per block).
//!
//! ggml's `quantize_row_q8_1_ref`, exactly: `d = amax / 127`,
//! `q = roundf(x * id)` (half away from zero) with the C `(int8_t)` cast as
//! x86-64 performs it, the sum of the stored (wrapped) quants as an `int`,
//! and `s = (float)sum * d` stored as f16. ggml has no `dequantize_row_q8_1`;
//! [`QuantBlock::dequantize`] gives `d * q`.

use super::blocks::{BlockQ8_1, QK8_1, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::rounding::trunc_i32_x86;
use crate::dtype::DType;

impl QuantBlock<QK8_1> for BlockQ8_1 {
    const DTYPE: DType = DType::Q8_1;

    fn quantize(x: &[f32; QK8_1]) -> Self {
        let mut amax = 0.0f32;
        for &v in x {
            // C's MAX(amax, fabsf(v)): see Q8_0 for why not f32::max.
            let a = v.abs();
            amax = if amax > a { amax } else { a };
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let qs = x.map(|v| trunc_i32_x86((v * id).round()) as i8);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        BlockQ8_1 {
            d: f32_to_f16(d),
            s: f32_to_f16(sum as f32 * d),
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK8_1]) {
        let d = f16_to_f32(self.d);
        for (out, &q) in y.iter_mut().zip(&self.qs) {
            *out = f32::from(q) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::BlockQ8_0;

    #[test]
    fn quants_are_q8_0s_and_s_is_d_times_their_sum() {
        let x: [f32; QK8_1] = std::array::from_fn(|i| (i as f32 - 11.3) * 0.73);
        let b = BlockQ8_1::quantize(&x);
        let b0 = BlockQ8_0::quantize(&x);
        assert_eq!(b.qs, b0.qs);
        assert_eq!(b.d.to_bits(), b0.d.to_bits());
        let sum: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        let d = (0..32).fold(0f32, |m, i| m.max(x[i].abs())) / 127.0;
        assert_eq!(f16_to_f32(b.s), f16_to_f32(f32_to_f16(sum as f32 * d)));
    }

    #[test]
    fn ties_round_away_from_zero_and_zeros_stay_zero() {
        let mut x = [0.0f32; QK8_1];
        x[0] = 127.0; // d = 1
        x[1] = 2.5;
        x[2] = -3.5;
        let b = BlockQ8_1::quantize(&x);
        assert_eq!(&b.qs[..3], &[127, 3, -4]);
        assert_eq!(f16_to_f32(b.s), 126.0);
        let z = BlockQ8_1::quantize(&[0.0; QK8_1]);
        assert_eq!((z.d.to_bits(), z.s.to_bits()), (0, 0));
        for v in [f32::NAN, f32::INFINITY, f32::MAX, 1e-40] {
            let mut x = [1.0f32; QK8_1];
            x[7] = v;
            let mut y = [0.0; QK8_1];
            BlockQ8_1::quantize(&x).dequantize(&mut y);
        }
    }
}
