//! Q5_K: 256-value super-blocks of eight 32-value sub-blocks,
//! `x = d*sc * q - dmin*m` with 5-bit `q` and 6-bit `sc`, `m` per sub-block.
//!
//! ggml's `quantize_row_q5_K_ref` is Q4_K's with `nmax` 31 and a shorter
//! search ([`make_qkx2_quants`] with `rmin` -0.5, `rdelta` 0.1, 15 steps);
//! the scales and mins are packed exactly as Q4_K's. The low 4 bits of the
//! quants are packed like Q4_K's nibbles and the high bit of value `e` goes
//! to bit `e / 32` of `qh[e % 32]`.

use super::blocks::{BlockQ5K, QK_K, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::kquant_search::make_qkx2_quants;
use super::q4_k::{SUBS, get_scale_min_k4, pack_scales};
use super::rounding::nearest_int;
use crate::dtype::DType;

impl QuantBlock<QK_K> for BlockQ5K {
    const DTYPE: DType = DType::Q5K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; SUBS];
        let mut mins = [0.0f32; SUBS];
        let mut max_scale = 0.0f32;
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
            (*scale, *min) = make_qkx2_quants(31, xb, &weights, lb, -0.5, 0.1, 15, false);
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
                *q = nearest_int((v + dm) / dd).clamp(0, 31) as u8;
            }
        }

        // Per 64 values n..n+64: ql[l] = low4(L[n+l]) | low4(L[n+l+32]) << 4,
        // and the high bits go to bits 2k, 2k+1 of qh[l] (k = n / 64).
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for (k, (pair, out)) in l
            .as_chunks::<64>()
            .0
            .iter()
            .zip(qs.as_chunks_mut::<32>().0)
            .enumerate()
        {
            let (lo, hi) = pair.split_at(32);
            for (((o, h), &a), &b) in out.iter_mut().zip(&mut qh).zip(lo).zip(hi) {
                *o = (a & 0xF) | ((b & 0xF) << 4);
                *h |= ((a >> 4) << (2 * k)) | ((b >> 4) << (2 * k + 1));
            }
        }
        BlockQ5K {
            d,
            dmin,
            scales: packed,
            qh,
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
            let (u1, u2) = (1u8 << (2 * i), 1u8 << (2 * i + 1));
            let (lo, hi) = out.split_at_mut(32);
            for (((y1, y2), &b), &h) in lo.iter_mut().zip(hi).zip(q).zip(&self.qh) {
                let h1 = if h & u1 != 0 { 16 } else { 0 };
                let h2 = if h & u2 != 0 { 16 } else { 0 };
                *y1 = d1 * f32::from((b & 0xF) + h1) - m1;
                *y2 = d2 * f32::from((b >> 4) + h2) - m2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_give_a_zero_block() {
        let b = BlockQ5K::quantize(&[0.0; QK_K]);
        assert_eq!(bytemuck::bytes_of(&b), &[0u8; 176][..]);
    }
}
