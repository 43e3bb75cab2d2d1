//! IQ4_NL and IQ4_XS: 4-bit indices into ggml's non-linear table
//! [`KVALUES_IQ4NL`], with one f16 scale per 32 values (IQ4_NL) or an f16
//! super-block scale and 6-bit sub-block scales per 256 values (IQ4_XS).
//!
//! Both quantizers are ggml's `quantize_row_iq4_nl_impl` without an
//! importance matrix (the weights are `x * x`), operation for operation:
//!
//! - IQ4_NL is `quantize_row_iq4_nl_ref` (`ntry = -1`): `d = max / -127`,
//!   one pass of nearest table values, then the least-squares scale
//!   `sumqx / sumq2`; the indices are those of the first pass.
//! - IQ4_XS is `quantize_iq4_xs` without weights (`ntry = 7`): each
//!   32-value sub-block tries 15 scales around `max / 127` and keeps the best
//!   least-squares one; the sub-block scales are then quantized to 6 bits
//!   against `-max_scale / 32` and the indices recomputed with them.
//!
//! One deliberate difference: for an IQ4_NL block whose largest magnitude is
//! below `GROUP_MAX_EPS` ggml writes `d = 0` and leaves the indices as
//! whatever its scratch array held (the previous block's, or uninitialised
//! stack for the first block of a call). Tessera writes `d = 0` and the
//! index of the table value nearest zero (`0x88` bytes); both dequantize to
//! zeros.

use super::blocks::{BlockIQ4NL, BlockIQ4XS, QK_K, QK4_NL, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::rounding::{GROUP_MAX_EPS, nearest_int};
use crate::dtype::DType;

/// ggml's `kvalues_iq4nl`: the 16 values a 4-bit IQ4 index stands for.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `best_index_int8(16, kvalues_iq4nl, x)`: the index of the table
/// value nearest `x` (ties and NaN as the C binary search resolves them).
#[inline]
pub(crate) fn best_index_iq4nl(x: f32) -> u8 {
    let val = &KVALUES_IQ4NL;
    if x <= f32::from(val[0]) {
        return 0;
    }
    if x >= f32::from(val[15]) {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < f32::from(val[mav]) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - f32::from(val[mu - 1]) < f32::from(val[mu]) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The first part of `quantize_row_iq4_nl_impl` for one 32-value block:
/// the block's scale (0 for an all-tiny block, whose `l` is left alone),
/// with the indices of the first pass in `l`.
fn block_scale(xb: &[f32; 32], l: &mut [u8; 32], ntry: i32) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(KVALUES_IQ4NL[0]);
    let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
    let mut id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (lj, &x) in l.iter_mut().zip(xb) {
        let idx = best_index_iq4nl(id * x);
        *lj = idx;
        let q = f32::from(KVALUES_IQ4NL[usize::from(idx)]);
        let w = x * x;
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        sumqx = 0.0;
        sumq2 = 0.0;
        for &x in xb {
            let idx = best_index_iq4nl(id * x);
            let q = f32::from(KVALUES_IQ4NL[usize::from(idx)]);
            let w = x * x;
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 indices as ggml does: index `j` low, index `j + 16` high.
#[inline]
fn pack(l: &[u8; 32], q: &mut [u8]) {
    for j in 0..16 {
        q[j] = l[j] | (l[16 + j] << 4);
    }
}

impl QuantBlock<QK4_NL> for BlockIQ4NL {
    const DTYPE: DType = DType::IQ4NL;

    fn quantize(x: &[f32; QK4_NL]) -> Self {
        // Index of the table value nearest 0, for all-tiny blocks (see the module docs).
        let mut l = [8u8; 32];
        let d = block_scale(x, &mut l, -1);
        let mut qs = [0u8; QK4_NL / 2];
        pack(&l, &mut qs);
        BlockIQ4NL {
            d: f32_to_f16(d),
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK4_NL]) {
        let d = f16_to_f32(self.d);
        let (lo, hi) = y.split_at_mut(QK4_NL / 2);
        for ((y0, y1), &q) in lo.iter_mut().zip(hi).zip(&self.qs) {
            *y0 = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0F)]);
            *y1 = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    }
}

/// The 6-bit scale of sub-block `ib` of an IQ4_XS block, minus 32.
#[inline]
pub fn iq4_xs_scale(b: &BlockIQ4XS, ib: usize) -> i32 {
    let lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let hi = (u16::from_le_bytes(b.scales_h) >> (2 * ib)) & 3;
    i32::from(lo) | (i32::from(hi) << 4)
}

impl QuantBlock<QK_K> for BlockIQ4XS {
    const DTYPE: DType = DType::IQ4XS;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut scales = [0.0f32; QK_K / 32];
        let mut l = [0u8; 32];
        let mut max_scale = 0.0f32;
        let mut amax_scale = 0.0f32;
        let blocks = x.as_chunks::<32>().0;
        for (s, xb) in scales.iter_mut().zip(blocks) {
            // The first pass's indices are all recomputed below.
            *s = block_scale(xb, &mut l, 7);
            let abs_d = s.abs();
            if abs_d > amax_scale {
                amax_scale = abs_d;
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut out = BlockIQ4XS {
            d: f32_to_f16(d),
            scales_h: [0; 2],
            scales_l: [0; QK_K / 64],
            qs: [0; QK_K / 2],
        };
        let mut scales_h = 0u16;
        for (ib, (&s, xb)) in scales.iter().zip(blocks).enumerate() {
            let li = nearest_int(id * s).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for (lj, &v) in l.iter_mut().zip(xb) {
                *lj = best_index_iq4nl(idl * v);
            }
            let lu = (li + 32) as u8;
            if ib % 2 == 0 {
                out.scales_l[ib / 2] = lu & 0x0F;
            } else {
                out.scales_l[ib / 2] |= (lu & 0x0F) << 4;
            }
            scales_h |= u16::from(lu >> 4) << (2 * ib);
            pack(&l, &mut out.qs[16 * ib..16 * ib + 16]);
        }
        out.scales_h = scales_h.to_le_bytes();
        out
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let chunks = y.as_chunks_mut::<32>().0;
        for (ib, yb) in chunks.iter_mut().enumerate() {
            let dl = d * (iq4_xs_scale(self, ib) - 32) as f32;
            let qs = &self.qs[16 * ib..16 * ib + 16];
            let (lo, hi) = yb.split_at_mut(16);
            for ((y0, y1), &q) in lo.iter_mut().zip(hi).zip(qs) {
                *y0 = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0F)]);
                *y1 = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_follows_the_c_search() {
        assert_eq!(best_index_iq4nl(-200.0), 0);
        assert_eq!(best_index_iq4nl(200.0), 15);
        assert_eq!(best_index_iq4nl(0.0), 8);
        assert_eq!(best_index_iq4nl(-4.5), 8); // tie between -10 and 1 goes up
        assert_eq!(best_index_iq4nl(f32::NAN), 15);
        for (i, &v) in KVALUES_IQ4NL.iter().enumerate() {
            assert_eq!(usize::from(best_index_iq4nl(f32::from(v))), i);
        }
    }

    #[test]
    fn round_trips_are_close() {
        let x: [f32; QK_K] = std::array::from_fn(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0);
        let b = BlockIQ4XS::quantize(&x);
        let mut y = [0.0; QK_K];
        b.dequantize(&mut y);
        let err: f32 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(err < 0.3, "{err}");
        let xs: &[f32; 32] = x[..32].try_into().unwrap_or(&[0.0; 32]);
        let b = BlockIQ4NL::quantize(xs);
        let mut y = [0.0; 32];
        b.dequantize(&mut y);
        let err: f32 = xs
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(err < 0.3, "{err}");
        let z = BlockIQ4NL::quantize(&[0.0; 32]);
        assert_eq!(z.qs, [0x88; 16]);
        assert_eq!(z.d.to_bits(), 0);
        assert_eq!(BlockIQ4XS::quantize(&[0.0; QK_K]).d.to_bits(), 0x8000);
    }
}
