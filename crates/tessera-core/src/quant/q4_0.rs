//! Q4_0: 32 values per block, `x = d * (q - 8)` with 4-bit `q`.
//!
//! ggml's `quantize_row_q4_0_ref` takes the signed value of largest
//! magnitude `max`, sets `d = max / -8` (so that value maps to `q = 0`) and
//! truncates `x / d + 8.5` with a C `(int8_t)` cast, clamped to 15 only from
//! above (`MIN(15, (int8_t)...)`). All of that is reproduced here, including
//! the cast's x86-64 behaviour for NaN and infinities.

use super::blocks::{BlockQ4_0, QK4_0, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::rounding::trunc_i32_x86;
use crate::dtype::DType;

/// `MIN(15, (int8_t)(v + 8.5f))` stored into a `uint8_t`.
#[inline]
fn nibble(v: f32) -> u8 {
    let q = i32::from(trunc_i32_x86(v + 8.5) as i8);
    q.min(15) as u8
}

impl QuantBlock<QK4_0> for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;

    fn quantize(x: &[f32; QK4_0]) -> Self {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (lo, hi) = x.split_at(QK4_0 / 2);
        let mut qs = [0u8; QK4_0 / 2];
        for ((q, &x0), &x1) in qs.iter_mut().zip(lo).zip(hi) {
            // C: qs = xi0; qs |= xi1 << 4 (bits above the byte are dropped).
            *q = nibble(x0 * id) | (nibble(x1 * id) << 4);
        }
        BlockQ4_0 {
            d: f32_to_f16(d),
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK4_0]) {
        let d = f16_to_f32(self.d);
        let (lo, hi) = y.split_at_mut(QK4_0 / 2);
        for ((y0, y1), &q) in lo.iter_mut().zip(hi).zip(&self.qs) {
            *y0 = f32::from(i16::from(q & 0x0F) - 8) * d;
            *y1 = f32::from(i16::from(q >> 4) - 8) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_value_maps_to_zero_nibble() {
        let mut x = [0.0f32; QK4_0];
        x[3] = -4.0; // max = -4, d = 0.5
        x[20] = 3.5;
        let b = BlockQ4_0::quantize(&x);
        assert_eq!(f16_to_f32(b.d), 0.5);
        assert_eq!(b.qs[3] & 0x0F, 0);
        assert_eq!(b.qs[4] >> 4, 15); // x[20] = 3.5 -> q = 15 (clamped from 15.5)
        let mut y = [0.0; QK4_0];
        b.dequantize(&mut y);
        assert_eq!(y[3], -4.0);
        assert_eq!(y[20], 3.5);
        assert_eq!(y[0], 0.0);
    }

    #[test]
    fn nibble_follows_the_c_cast() {
        assert_eq!(nibble(7.0), 15);
        assert_eq!(nibble(8.0), 15); // 16 -> MIN(15, 16)
        assert_eq!(nibble(-8.0), 0);
        assert_eq!(nibble(f32::NAN), 0);
        assert_eq!(nibble(f32::INFINITY), 0);
        assert_eq!(nibble(-20.0), 245); // (int8_t)-11 stored into a uint8_t
    }
}
