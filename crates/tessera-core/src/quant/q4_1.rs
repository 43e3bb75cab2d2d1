//! Q4_1: 32 values per block, `x = d * q + m` with 4-bit `q`.
//!
//! ggml's `quantize_row_q4_1_ref` takes the block's minimum `min` and
//! maximum `max` with plain `<` / `>` comparisons from `FLT_MAX` /
//! `-FLT_MAX` (so NaNs are skipped, and a block of NaNs keeps those
//! sentinels), sets `d = (max - min) / 15`, stores `d` and the *f32* `min`
//! rounded to f16, and quantizes `(x - min) * id` (with the unrounded f32
//! `min` and `id = d ? 1/d : 0`) as `MIN(15, (int8_t)(v + 0.5f))`. All of
//! that is reproduced here, the cast as x86-64 performs it.

use super::blocks::{BlockQ4_1, QK4_1, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::rounding::trunc_i32_x86;
use crate::dtype::DType;

/// The block's `(min, max)` as ggml's `_1` quantizers compute them:
/// `if (v < min) min = v; if (v > max) max = v;` from `(FLT_MAX, -FLT_MAX)`.
#[inline]
pub(super) fn c_min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `id = d ? 1.0f/d : 0.0f` (a NaN `d` is true in C).
#[inline]
pub(super) fn c_inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// `MIN(15, (int8_t)(v + 0.5f))` stored into a `uint8_t`.
#[inline]
fn nibble(v: f32) -> u8 {
    let q = i32::from(trunc_i32_x86(v + 0.5) as i8);
    q.min(15) as u8
}

impl QuantBlock<QK4_1> for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;

    fn quantize(x: &[f32; QK4_1]) -> Self {
        let (min, max) = c_min_max(x);
        let d = (max - min) / 15.0;
        let id = c_inverse(d);
        let (lo, hi) = x.split_at(QK4_1 / 2);
        let mut qs = [0u8; QK4_1 / 2];
        for ((q, &x0), &x1) in qs.iter_mut().zip(lo).zip(hi) {
            // C: qs = xi0; qs |= xi1 << 4 (bits above the byte are dropped).
            *q = nibble((x0 - min) * id) | (nibble((x1 - min) * id) << 4);
        }
        BlockQ4_1 {
            d: f32_to_f16(d),
            m: f32_to_f16(min),
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK4_1]) {
        let d = f16_to_f32(self.d);
        let m = f16_to_f32(self.m);
        let (lo, hi) = y.split_at_mut(QK4_1 / 2);
        for ((y0, y1), &q) in lo.iter_mut().zip(hi).zip(&self.qs) {
            // C: x0*d + m, two roundings (no FMA contraction).
            *y0 = f32::from(q & 0x0F) * d + m;
            *y1 = f32::from(q >> 4) * d + m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_and_max_map_to_0_and_15() {
        let mut x = [0.5f32; QK4_1];
        x[3] = -1.0; // min
        x[20] = 14.0; // max: d = 1
        let b = BlockQ4_1::quantize(&x);
        assert_eq!(f16_to_f32(b.d), 1.0);
        assert_eq!(f16_to_f32(b.m), -1.0);
        assert_eq!(b.qs[3] & 0x0F, 0);
        assert_eq!(b.qs[4] >> 4, 15);
        assert_eq!(b.qs[0] & 0x0F, 2); // (0.5 + 1) + 0.5 = 2 exactly
        let mut y = [0.0; QK4_1];
        b.dequantize(&mut y);
        assert_eq!(y[3], -1.0);
        assert_eq!(y[20], 14.0);
        assert_eq!(y[0], 1.0);
    }

    #[test]
    fn min_max_skips_nans_like_c() {
        assert_eq!(c_min_max(&[f32::NAN, 2.0, -3.0]), (-3.0, 2.0));
        assert_eq!(c_min_max(&[f32::NAN; 4]), (f32::MAX, -f32::MAX));
        // inf < FLT_MAX is false: the min keeps its sentinel.
        assert_eq!(c_min_max(&[f32::INFINITY]), (f32::MAX, f32::INFINITY));
    }

    #[test]
    fn nibble_follows_the_c_cast() {
        assert_eq!(nibble(14.6), 15);
        assert_eq!(nibble(15.0), 15); // 15.5 -> 15
        assert_eq!(nibble(16.0), 15); // 16 -> MIN(15, 16)
        assert_eq!(nibble(f32::NAN), 0);
        assert_eq!(nibble(-20.0), 237); // (int8_t)-19 stored into a uint8_t
    }

    #[test]
    fn constant_and_nan_blocks_do_not_panic() {
        let b = BlockQ4_1::quantize(&[-0.3; QK4_1]);
        assert_eq!(b.d.to_bits(), 0);
        assert_eq!(b.qs, [0; QK4_1 / 2]);
        let mut y = [0.0; QK4_1];
        b.dequantize(&mut y);
        assert!(y.iter().all(|&v| v == f16_to_f32(f32_to_f16(-0.3))));
        let b = BlockQ4_1::quantize(&[f32::NAN; QK4_1]);
        assert_eq!(b.m, f32_to_f16(f32::MAX)); // f16 inf
        b.dequantize(&mut y);
    }
}
