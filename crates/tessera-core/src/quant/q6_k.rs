//! Q6_K: 256-value super-blocks of sixteen 16-value sub-blocks,
//! `x = d * scales[s] * (q - 32)` with 6-bit `q` and i8 sub-block scales.
//!
//! ggml's `quantize_row_q6_K_ref`: each sub-block's scale comes from
//! [`make_qx_quants`] (`nmax` 32, error weights `x²`); the sixteen scales are
//! quantized to i8 against the one of largest magnitude (`d = max/-128` as
//! f16, so that scale maps to -128), and the values are re-quantized against
//! the rounded scales. A super-block whose scales are all below
//! `GROUP_MAX_EPS` is all zero bytes.

use bytemuck::Zeroable;

use super::blocks::{BlockQ6K, QK_K, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::kquant_search::make_qx_quants;
use super::rounding::{GROUP_MAX_EPS, nearest_int};
use crate::dtype::DType;

/// Sub-blocks per super-block.
const SUBS: usize = QK_K / 16;

impl QuantBlock<QK_K> for BlockQ6K {
    const DTYPE: DType = DType::Q6K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; SUBS];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        let (xs, _) = x.as_chunks::<16>();
        for ((xb, lb), s) in xs.iter().zip(l.as_chunks_mut::<16>().0).zip(&mut scales) {
            *s = make_qx_quants(32, xb, lb, 1, None);
            let abs_scale = s.abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = *s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            // ggml memsets the block and stores d = fp16(0): all zero bytes.
            return BlockQ6K::zeroed();
        }

        let iscale = -128.0 / max_scale;
        let d = f32_to_f16(1.0 / iscale);
        // C: int8_t = MIN(127, nearest_int(...)); the conversion wraps.
        let sc = scales.map(|s| nearest_int(iscale * s).min(127) as i8);

        let df = f16_to_f32(d);
        for ((xb, lb), &s) in xs.iter().zip(l.as_chunks_mut::<16>().0).zip(&sc) {
            let dd = df * f32::from(s);
            if dd == 0.0 {
                continue;
            }
            for (q, &v) in lb.iter_mut().zip(xb) {
                *q = (nearest_int(v / dd).clamp(-32, 31) + 32) as i8;
            }
        }

        // Per 128 values: ql[0..32] = q[0..32] | q[64..96] << 4,
        // ql[32..64] = q[32..64] | q[96..128] << 4, and qh[l] gathers the
        // high 2 bits of q[l], q[l+32], q[l+64], q[l+96].
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        let halves = l
            .as_chunks::<128>()
            .0
            .iter()
            .zip(ql.as_chunks_mut::<64>().0)
            .zip(qh.as_chunks_mut::<32>().0);
        for ((lq, ql), qh) in halves {
            // L is in 0..64 here; read it as the bits C shifts.
            let lq = lq.map(|v| v as u8);
            let (ql_lo, ql_hi) = ql.split_at_mut(32);
            for (i, ((a, b), h)) in ql_lo.iter_mut().zip(ql_hi).zip(qh).enumerate() {
                let (q1, q2, q3, q4) = (lq[i], lq[i + 32], lq[i + 64], lq[i + 96]);
                *a = (q1 & 0xF) | ((q3 & 0xF) << 4);
                *b = (q2 & 0xF) | ((q4 & 0xF) << 4);
                *h = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        BlockQ6K {
            ql,
            qh,
            scales: sc,
            d,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let halves = y
            .as_chunks_mut::<128>()
            .0
            .iter_mut()
            .zip(self.ql.as_chunks::<64>().0)
            .zip(self.qh.as_chunks::<32>().0)
            .zip(self.scales.as_chunks::<8>().0);
        for (((out, ql), qh), sc) in halves {
            for (i, &h) in qh.iter().enumerate() {
                let is = i / 16;
                let q1 = i32::from((ql[i] & 0xF) | ((h & 3) << 4)) - 32;
                let q2 = i32::from((ql[i + 32] & 0xF) | (((h >> 2) & 3) << 4)) - 32;
                let q3 = i32::from((ql[i] >> 4) | (((h >> 4) & 3) << 4)) - 32;
                let q4 = i32::from((ql[i + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
                out[i] = d * f32::from(sc[is]) * q1 as f32;
                out[i + 32] = d * f32::from(sc[is + 2]) * q2 as f32;
                out[i + 64] = d * f32::from(sc[is + 4]) * q3 as f32;
                out[i + 96] = d * f32::from(sc[is + 6]) * q4 as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_and_tiny_give_a_zero_block() {
        for scale in [0.0f32, 1e-20] {
            let x: [f32; QK_K] = std::array::from_fn(|i| scale * (i as f32 - 100.0));
            let b = BlockQ6K::quantize(&x);
            assert_eq!(bytemuck::bytes_of(&b), &[0u8; 210][..], "scale {scale}");
        }
    }

    #[test]
    fn largest_scale_maps_to_minus_128() {
        let x: [f32; QK_K] = std::array::from_fn(|i| ((i * 37) % 64) as f32 / 8.0 - 4.0);
        let b = BlockQ6K::quantize(&x);
        assert!(b.scales.contains(&-128));
        let mut y = [0.0; QK_K];
        b.dequantize(&mut y);
        let err = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(err < 0.1, "max error {err}");
    }
}
