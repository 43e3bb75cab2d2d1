//! Q5_0 and Q5_1: 32 values per block with 5-bit quants, the fifth bits
//! gathered in a 32-bit `qh`.
//!
//! - `quantize_row_q5_0_ref` is Q4_0 with one more bit: the signed value of
//!   largest magnitude `max` gives `d = max / -16` (that value maps to
//!   `q = 0`), and `q = MIN(31, (int8_t)(x * id + 16.5f))`;
//! - `quantize_row_q5_1_ref` is Q4_1 with one more bit: `d = (max - min) / 31`
//!   and `q = (uint8_t)((x - min) * id + 0.5f)`, with **no** clamp (the
//!   largest value gives `31.5` or a hair more, truncated to 31).
//!
//! Both split `q` into its low nibble (`qs[j]`: value `j` low, `j + 16`
//! high) and bit 4 (bit `j` of `qh`). The C float-to-integer casts are
//! reproduced as x86-64 performs them (`cvttss2si`, then the low byte).

use super::blocks::{BlockQ5_0, BlockQ5_1, QK5_0, QK5_1, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::q4_1::{c_inverse, c_min_max};
use super::rounding::trunc_i32_x86;
use crate::dtype::DType;

/// Packs 32 five-bit quants (`q(j)` for `j` in 0..32; bits above 4 are
/// ignored, as ggml's masks do) into `(qs, qh)`.
#[inline]
fn pack(q: impl Fn(usize) -> u8) -> ([u8; 16], [u8; 4]) {
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for (j, out) in qs.iter_mut().enumerate() {
        let (xi0, xi1) = (q(j), q(j + 16));
        *out = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
        qh |= u32::from((xi0 & 0x10) >> 4) << j;
        qh |= u32::from((xi1 & 0x10) >> 4) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

/// The 5-bit quant of value `j` (0..32) of a block.
#[inline]
fn unpack(qs: &[u8; 16], qh: [u8; 4], j: usize) -> u8 {
    let qh = u32::from_le_bytes(qh);
    let (nib, bit) = if j < 16 {
        (qs[j] & 0x0F, (qh >> j) & 1)
    } else {
        (qs[j - 16] >> 4, (qh >> j) & 1)
    };
    // bit is 0 or 1: the cast cannot truncate.
    nib | ((bit as u8) << 4)
}

/// Q5_0's `MIN(31, (int8_t)(v + 16.5f))` stored into a `uint8_t`.
#[inline]
fn q5_0_code(v: f32) -> u8 {
    let q = i32::from(trunc_i32_x86(v + 16.5) as i8);
    q.min(31) as u8
}

/// Q5_1's `(uint8_t)(v + 0.5f)`.
#[inline]
fn q5_1_code(v: f32) -> u8 {
    trunc_i32_x86(v + 0.5) as u8
}

impl QuantBlock<QK5_0> for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;

    fn quantize(x: &[f32; QK5_0]) -> Self {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = c_inverse(d);
        let (qs, qh) = pack(|j| q5_0_code(x[j] * id));
        BlockQ5_0 {
            d: f32_to_f16(d),
            qh,
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK5_0]) {
        let d = f16_to_f32(self.d);
        for (j, out) in y.iter_mut().enumerate() {
            let q = i16::from(unpack(&self.qs, self.qh, j)) - 16;
            *out = f32::from(q) * d;
        }
    }
}

impl QuantBlock<QK5_1> for BlockQ5_1 {
    const DTYPE: DType = DType::Q5_1;

    fn quantize(x: &[f32; QK5_1]) -> Self {
        let (min, max) = c_min_max(x);
        let d = (max - min) / 31.0;
        let id = c_inverse(d);
        let (qs, qh) = pack(|j| q5_1_code((x[j] - min) * id));
        BlockQ5_1 {
            d: f32_to_f16(d),
            m: f32_to_f16(min),
            qh,
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK5_1]) {
        let d = f16_to_f32(self.d);
        let m = f16_to_f32(self.m);
        for (j, out) in y.iter_mut().enumerate() {
            // C: x0*d + m, two roundings (no FMA contraction).
            *out = f32::from(unpack(&self.qs, self.qh, j)) * d + m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q5_0_extreme_value_maps_to_zero() {
        let mut x = [0.0f32; QK5_0];
        x[3] = -8.0; // max = -8, d = 0.5
        x[20] = 7.5; // 15 + 16.5 = 31.5 -> 31
        x[5] = 0.5; // 1 + 16.5 -> 17: fifth bit set
        let b = BlockQ5_0::quantize(&x);
        assert_eq!(f16_to_f32(b.d), 0.5);
        assert_eq!(unpack(&b.qs, b.qh, 3), 0);
        assert_eq!(unpack(&b.qs, b.qh, 20), 31);
        assert_eq!(unpack(&b.qs, b.qh, 5), 17);
        assert_eq!(unpack(&b.qs, b.qh, 0), 16);
        let qh = u32::from_le_bytes(b.qh);
        assert_eq!(qh & (1 << 3), 0);
        assert_ne!(qh & (1 << 20), 0);
        let mut y = [0.0; QK5_0];
        b.dequantize(&mut y);
        assert_eq!((y[3], y[20], y[5], y[0]), (-8.0, 7.5, 0.5, 0.0));
    }

    #[test]
    fn q5_1_min_and_max_map_to_0_and_31() {
        let mut x = [0.0f32; QK5_1];
        x[7] = -1.0;
        x[30] = 30.0; // d = 1
        let b = BlockQ5_1::quantize(&x);
        assert_eq!((f16_to_f32(b.d), f16_to_f32(b.m)), (1.0, -1.0));
        assert_eq!(unpack(&b.qs, b.qh, 7), 0);
        assert_eq!(unpack(&b.qs, b.qh, 30), 31);
        assert_eq!(unpack(&b.qs, b.qh, 0), 1);
        let mut y = [0.0; QK5_1];
        b.dequantize(&mut y);
        assert_eq!((y[7], y[30], y[0]), (-1.0, 30.0, 0.0));
    }

    #[test]
    fn pack_and_unpack_are_inverse() {
        let (qs, qh) = pack(|j| (j as u8 * 7 + 3) & 31);
        for j in 0..32 {
            assert_eq!(unpack(&qs, qh, j), (j as u8 * 7 + 3) & 31, "{j}");
        }
    }

    #[test]
    fn codes_follow_the_c_casts() {
        assert_eq!(q5_0_code(15.0), 31);
        assert_eq!(q5_0_code(16.0), 31); // MIN(31, 32)
        assert_eq!(q5_0_code(-16.0), 0);
        assert_eq!(q5_0_code(f32::NAN), 0);
        assert_eq!(q5_0_code(-30.0), 243); // (int8_t)-13 into a uint8_t
        assert_eq!(q5_1_code(31.0), 31);
        assert_eq!(q5_1_code(31.6), 32); // no clamp: only bits 0..4 are kept
        assert_eq!(q5_1_code(f32::NAN), 0);
        assert_eq!(q5_1_code(299.6), 44); // 300 & 0xFF
    }

    #[test]
    fn specials_do_not_panic() {
        for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, 1e-40] {
            let mut x = [1.0f32; 32];
            x[5] = v;
            let mut y = [0.0; 32];
            BlockQ5_0::quantize(&x).dequantize(&mut y);
            BlockQ5_1::quantize(&x).dequantize(&mut y);
        }
    }
}
