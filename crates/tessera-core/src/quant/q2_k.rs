//! Q2_K: 256-value super-blocks of sixteen 16-value sub-blocks,
//! `x = d*sc * q - dmin*m` with 2-bit `q` and 4-bit `sc`, `m` per sub-block.
//!
//! ggml's `quantize_row_q2_K_ref`: each sub-block's scale and min come from
//! [`make_qkx2_quants`] (`nmax` 3, weights `|x|`, absolute error, `rmin`
//! -0.5, `rdelta` 0.1, 15 steps); scales and mins are quantized to 4 bits
//! against their maxima (`d = max_scale/15`, `dmin = max_min/15` as f16) and
//! the values re-quantized against the rounded scales. Sub-blocks whose
//! rounded scale is zero keep the quants of the search, as in ggml.

use super::blocks::{BlockQ2K, QK_K, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::kquant_search::make_qkx2_quants;
use super::rounding::nearest_int;
use crate::dtype::DType;

/// Sub-blocks per super-block.
const SUBS: usize = QK_K / 16;

/// Packs 2-bit codes `l` (0..4) as Q2_K and Q3_K do: per 128 values, byte
/// `l` of the 32-byte group holds values `l`, `l + 32`, `l + 64`, `l + 96`.
pub(super) fn pack_2bit(l: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for (half, out) in l
        .as_chunks::<128>()
        .0
        .iter()
        .zip(qs.as_chunks_mut::<32>().0)
    {
        for (i, o) in out.iter_mut().enumerate() {
            *o = half[i] | (half[i + 32] << 2) | (half[i + 64] << 4) | (half[i + 96] << 6);
        }
    }
    qs
}

/// The 2-bit code of value `e` (0..256) of a Q2_K/Q3_K `qs` array.
#[inline]
pub(super) fn code_2bit(qs: &[u8; QK_K / 4], e: usize) -> u8 {
    let byte = qs[(e / 128) * 32 + e % 32];
    (byte >> (2 * ((e % 128) / 32))) & 3
}

impl QuantBlock<QK_K> for BlockQ2K {
    const DTYPE: DType = DType::Q2K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        const Q4SCALE: f32 = 15.0;
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; SUBS];
        let mut mins = [0.0f32; SUBS];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        let (xs, _) = x.as_chunks::<16>();
        for (((xb, lb), scale), min) in xs
            .iter()
            .zip(l.as_chunks_mut::<16>().0)
            .zip(&mut scales)
            .zip(&mut mins)
        {
            let weights = xb.map(f32::abs);
            (*scale, *min) = make_qkx2_quants(3, xb, &weights, lb, -0.5, 0.1, 15, true);
            if *scale > max_scale {
                max_scale = *scale;
            }
            if *min > max_min {
                max_min = *min;
            }
        }

        let mut sc = [0u8; SUBS];
        let mut d = f32_to_f16(0.0);
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            // C: `y[i].scales[j] = l` keeps the low byte of the int.
            for (o, &s) in sc.iter_mut().zip(&scales) {
                *o = nearest_int(iscale * s) as u8;
            }
            d = f32_to_f16(max_scale / Q4SCALE);
        }
        let mut dmin = f32_to_f16(0.0);
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (o, &m) in sc.iter_mut().zip(&mins) {
                *o |= (nearest_int(iscale * m) << 4) as u8;
            }
            dmin = f32_to_f16(max_min / Q4SCALE);
        }

        let (df, dminf) = (f16_to_f32(d), f16_to_f32(dmin));
        for ((xb, lb), &s) in xs.iter().zip(l.as_chunks_mut::<16>().0).zip(&sc) {
            let dd = df * f32::from(s & 0xF);
            if dd == 0.0 {
                continue;
            }
            let dm = dminf * f32::from(s >> 4);
            for (q, &v) in lb.iter_mut().zip(xb) {
                *q = nearest_int((v + dm) / dd).clamp(0, 3) as u8;
            }
        }

        BlockQ2K {
            scales: sc,
            qs: pack_2bit(&l),
            d,
            dmin,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let min = f16_to_f32(self.dmin);
        for (s, out) in y.as_chunks_mut::<16>().0.iter_mut().enumerate() {
            let sc = self.scales[s];
            let dl = d * f32::from(sc & 0xF);
            let ml = min * f32::from(sc >> 4);
            for (i, v) in out.iter_mut().enumerate() {
                *v = dl * f32::from(code_2bit(&self.qs, 16 * s + i)) - ml;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_give_a_zero_block() {
        let b = BlockQ2K::quantize(&[0.0; QK_K]);
        assert_eq!(bytemuck::bytes_of(&b), &[0u8; 84][..]);
    }

    #[test]
    fn two_bit_packing_round_trips() {
        let l: [u8; QK_K] = std::array::from_fn(|i| ((i * 7) % 4) as u8);
        let qs = pack_2bit(&l);
        for (e, &v) in l.iter().enumerate() {
            assert_eq!(code_2bit(&qs, e), v);
        }
    }
}
