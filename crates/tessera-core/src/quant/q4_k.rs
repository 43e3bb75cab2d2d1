//! Q4_K: 256-value super-blocks of eight 32-value sub-blocks,
//! `x = d*sc * q - dmin*m` with 4-bit `q` and 6-bit `sc`, `m` per sub-block.
//!
//! ggml's `quantize_row_q4_K_ref`: each sub-block gets a scale and min from
//! the weighted search [`make_qkx2_quants`] (weights `sqrt(mean x²) + |x|`),
//! the eight scales and mins are quantized to 6 bits against their maxima
//! (`d = max_scale/63`, `dmin = max_min/63`, as f16), and the values are then
//! re-quantized against the *rounded* scales. Sub-blocks whose rounded scale
//! is zero keep the quants of the search, as in ggml.

use super::blocks::{BlockQ4K, K_SCALE_SIZE, QK_K, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::kquant_search::make_qkx2_quants;
use super::rounding::nearest_int;
use crate::dtype::DType;

/// Sub-blocks per super-block.
pub(super) const SUBS: usize = QK_K / 32;

/// The 6-bit scale and min of sub-block `j` (0..8) from a Q4_K (or Q5_K)
/// `scales` array: ggml's `get_scale_min_k4`.
///
/// Sub-blocks 0..4 keep theirs in the low 6 bits of bytes `j` and `j + 4`;
/// 4..8 split them between the nibbles of byte `j + 4` and the top 2 bits of
/// bytes `j - 4` and `j`. `j` is taken modulo 8, so this never panics.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    let j = j % SUBS;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d, m)
    }
}

/// Packs eight 6-bit scales and mins the way [`get_scale_min_k4`] reads them.
pub(super) fn pack_scales(ls: &[u8; SUBS], lm: &[u8; SUBS]) -> [u8; K_SCALE_SIZE] {
    let mut q = [0u8; K_SCALE_SIZE];
    for (j, (&s, &m)) in ls.iter().zip(lm).enumerate() {
        if j < 4 {
            q[j] = s;
            q[j + 4] = m;
        } else {
            q[j + 4] = (s & 0xF) | ((m & 0xF) << 4);
            q[j - 4] |= (s >> 4) << 6;
            q[j] |= (m >> 4) << 6;
        }
    }
    q
}

impl QuantBlock<QK_K> for BlockQ4K {
    const DTYPE: DType = DType::Q4K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; SUBS];
        let mut mins = [0.0f32; SUBS];
        let mut max_scale = 0.0f32; // scales are positive: the min is deducted
        let mut max_min = 0.0f32;
        let (xs, _) = x.as_chunks::<32>();
        for (((xb, lb), scale), min) in xs
            .iter()
            .zip(l.as_chunks_mut::<32>().0)
            .zip(&mut scales)
            .zip(&mut mins)
        {
            let mut sum_x2 = 0.0f32;
            for &v in xb {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            let weights = xb.map(|v| av_x + v.abs());
            (*scale, *min) = make_qkx2_quants(15, xb, &weights, lb, -1.0, 0.1, 20, false);
            if *scale > max_scale {
                max_scale = *scale;
            }
            if *min > max_min {
                max_min = *min;
            }
        }

        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        // C: `uint8_t ls = nearest_int(...)` wraps, then MIN(63, ls).
        let ls = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
        let lm = mins.map(|m| (nearest_int(inv_min * m) as u8).min(63));
        let packed = pack_scales(&ls, &lm);
        let d = f32_to_f16(max_scale / 63.0);
        let dmin = f32_to_f16(max_min / 63.0);

        let (df, dminf) = (f16_to_f32(d), f16_to_f32(dmin));
        for (j, (xb, lb)) in xs.iter().zip(l.as_chunks_mut::<32>().0).enumerate() {
            let (sc, m) = get_scale_min_k4(j, &packed);
            let dd = df * f32::from(sc);
            if dd == 0.0 {
                continue;
            }
            let dm = dminf * f32::from(m);
            for (q, &v) in lb.iter_mut().zip(xb) {
                *q = nearest_int((v + dm) / dd).clamp(0, 15) as u8;
            }
        }

        // Bytes 32i..32i+32 hold sub-block 2i (low nibbles) and 2i+1 (high).
        let mut qs = [0u8; QK_K / 2];
        for (pair, out) in l.as_chunks::<64>().0.iter().zip(qs.as_chunks_mut::<32>().0) {
            let (lo, hi) = pair.split_at(32);
            for ((o, &a), &b) in out.iter_mut().zip(lo).zip(hi) {
                *o = a | (b << 4);
            }
        }
        BlockQ4K {
            d,
            dmin,
            scales: packed,
            qs,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let min = f16_to_f32(self.dmin);
        let pairs = self
            .qs
            .as_chunks::<32>()
            .0
            .iter()
            .zip(y.as_chunks_mut::<64>().0);
        for (i, (q, out)) in pairs.enumerate() {
            let (sc1, m1) = get_scale_min_k4(2 * i, &self.scales);
            let (sc2, m2) = get_scale_min_k4(2 * i + 1, &self.scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (lo, hi) = out.split_at_mut(32);
            for ((y1, y2), &b) in lo.iter_mut().zip(hi).zip(q) {
                *y1 = d1 * f32::from(b & 0xF) - m1;
                *y2 = d2 * f32::from(b >> 4) - m2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_packing_round_trips() {
        let ls: [u8; SUBS] = [0, 1, 17, 63, 32, 47, 5, 63];
        let lm: [u8; SUBS] = [63, 2, 33, 0, 16, 61, 62, 1];
        let q = pack_scales(&ls, &lm);
        for j in 0..SUBS {
            assert_eq!(get_scale_min_k4(j, &q), (ls[j], lm[j]), "sub-block {j}");
        }
        assert_eq!(get_scale_min_k4(8, &q), get_scale_min_k4(0, &q));
    }

    #[test]
    fn zeros_give_a_zero_block() {
        let b = BlockQ4K::quantize(&[0.0; QK_K]);
        assert_eq!(bytemuck::bytes_of(&b), &[0u8; 144][..]);
    }
}
