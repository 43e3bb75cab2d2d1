//! Q8_K: 256 values `x = d * q` with an f32 scale and the sums of each 16
//! quants: the activation format K-quant dot products consume.
//!
//! ggml's `quantize_row_q8_K_ref` scales by the value of largest magnitude
//! (`iscale = -127/max`, so that value maps to -127) and rounds with
//! `nearest_int` (ties to even, unlike Q8_0's `roundf`). An all-zero block
//! gets `d = 0` and zero quants; ggml leaves its `bsums` unwritten, Tessera
//! writes zeros (which is what ggml's zeroed buffers hold, and what the sums
//! are anyway).

use bytemuck::Zeroable;

use super::blocks::{BlockQ8K, QK_K, QuantBlock};
use super::rounding::nearest_int;
use crate::dtype::DType;

impl QuantBlock<QK_K> for BlockQ8K {
    const DTYPE: DType = DType::Q8K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax == 0.0 {
            return BlockQ8K::zeroed();
        }
        let iscale = -127.0 / max;
        // C: int8_t = MIN(127, v); the conversion wraps.
        let qs = x.map(|v| nearest_int(iscale * v).min(127) as i8);
        let mut bsums = [0i16; QK_K / 16];
        for (sum, group) in bsums.iter_mut().zip(qs.as_chunks::<16>().0) {
            // At most 16 * 128 in magnitude: fits i16.
            *sum = group.iter().map(|&q| i32::from(q)).sum::<i32>() as i16;
        }
        BlockQ8K {
            d: 1.0 / iscale,
            qs,
            bsums,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        for (out, &q) in y.iter_mut().zip(&self.qs) {
            *out = self.d * f32::from(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_to_even_and_sums_match() {
        let mut x = [0.0f32; QK_K];
        x[0] = -127.0; // iscale = 1
        x[1] = 2.5;
        x[2] = -3.5;
        x[17] = 0.5;
        let b = BlockQ8K::quantize(&x);
        assert_eq!(b.d, 1.0);
        assert_eq!(&b.qs[..3], &[-127, 2, -4]);
        assert_eq!(b.qs[17], 0);
        assert_eq!(b.bsums[0], -129);
        assert_eq!(b.bsums[1], 0);
    }

    #[test]
    fn positive_max_flips_sign_of_d() {
        let mut x = [0.0f32; QK_K];
        x[9] = 2.0;
        let b = BlockQ8K::quantize(&x);
        assert_eq!(b.qs[9], -127);
        assert!(b.d < 0.0);
        let mut y = [0.0; QK_K];
        b.dequantize(&mut y);
        assert!((y[9] - 2.0).abs() < 1e-6);
    }
}
