//! Q3_K: 256-value super-blocks of sixteen 16-value sub-blocks,
//! `x = d * (sc - 32) * (q - 4)` with 3-bit `q` and 6-bit `sc` per sub-block.
//!
//! ggml's `quantize_row_q3_K_ref`: each sub-block's scale comes from
//! [`make_q3_quants`] (`nmax` 4, error weights `x²`, iterative refinement);
//! the sixteen scales are quantized to 6 bits against the one of largest
//! magnitude (`d = max/-32` as f16) and the values re-quantized against the
//! rounded scales. The low 2 bits are packed like Q2_K's, the high bit of
//! value `e` goes to bit `e / 32` of `hmask[e % 32]`.

use super::blocks::{BlockQ3K, QK_K, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use super::kquant_search::make_q3_quants;
use super::q2_k::{code_2bit, pack_2bit};
use super::rounding::nearest_int;
use crate::dtype::DType;

/// Sub-blocks per super-block.
const SUBS: usize = QK_K / 16;

/// The 6-bit scale code (0..64) of sub-block `j` (0..16): low 4 bits in the
/// nibbles of bytes 0..8, high 2 bits in bytes 8..12. `j` is taken modulo 16.
#[inline]
pub(crate) fn q3k_scale(scales: &[u8; 12], j: usize) -> u8 {
    let j = j % SUBS;
    let lo = if j < 8 {
        scales[j] & 0xF
    } else {
        scales[j - 8] >> 4
    };
    lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)
}

impl QuantBlock<QK_K> for BlockQ3K {
    const DTYPE: DType = DType::Q3K;

    fn quantize(x: &[f32; QK_K]) -> Self {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; SUBS];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        let (xs, _) = x.as_chunks::<16>();
        for ((xb, lb), s) in xs.iter().zip(l.as_chunks_mut::<16>().0).zip(&mut scales) {
            *s = make_q3_quants(4, xb, lb, true);
            let scale = s.abs();
            if scale > amax {
                amax = scale;
                max_scale = *s;
            }
        }

        let mut sc = [0u8; 12];
        let d;
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                // C: `int8_t l = nearest_int(...)` wraps, then clamps.
                let v = (i32::from(nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = v & 0xF;
                } else {
                    sc[j - 8] |= (v & 0xF) << 4;
                }
                sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
            }
            d = f32_to_f16(1.0 / iscale);
        } else {
            d = f32_to_f16(0.0);
        }

        let df = f16_to_f32(d);
        for (j, (xb, lb)) in xs.iter().zip(l.as_chunks_mut::<16>().0).enumerate() {
            let dd = df * f32::from(i16::from(q3k_scale(&sc, j)) - 32);
            if dd == 0.0 {
                continue;
            }
            for (q, &v) in lb.iter_mut().zip(xb) {
                *q = (nearest_int(v / dd).clamp(-4, 3) + 4) as i8;
            }
        }

        let mut hmask = [0u8; QK_K / 8];
        let mut low = [0u8; QK_K];
        for (e, (&q, o)) in l.iter().zip(&mut low).enumerate() {
            // q is in 0..8 here.
            let mut q = q as u8;
            if q > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                q -= 4;
            }
            *o = q;
        }
        BlockQ3K {
            hmask,
            qs: pack_2bit(&low),
            scales: sc,
            d,
        }
    }

    fn dequantize(&self, y: &mut [f32; QK_K]) {
        let d_all = f16_to_f32(self.d);
        for (s, out) in y.as_chunks_mut::<16>().0.iter_mut().enumerate() {
            let dl = d_all * f32::from(i16::from(q3k_scale(&self.scales, s)) - 32);
            for (i, v) in out.iter_mut().enumerate() {
                let e = 16 * s + i;
                let high = if self.hmask[e % 32] & (1 << (e / 32)) != 0 {
                    0
                } else {
                    4
                };
                *v = dl * f32::from(i16::from(code_2bit(&self.qs, e)) - high);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_give_a_zero_block() {
        let b = BlockQ3K::quantize(&[0.0; QK_K]);
        assert_eq!(bytemuck::bytes_of(&b), &[0u8; 110][..]);
    }
}
