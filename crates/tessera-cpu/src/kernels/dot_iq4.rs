//! Portable dot products of the non-linear 4-bit types, in the order of
//! ggml's generic ones: IQ4_NL x Q8_0 (`ggml_vec_dot_iq4_nl_q8_0_generic`)
//! and IQ4_XS x Q8_K (`ggml_vec_dot_iq4_xs_q8_K_generic`). A 4-bit index
//! stands for `kvalues_iq4nl[q]` (a signed byte); per 32 values the
//! products with the activation bytes are an exact integer sum, scaled in
//! f32 (`dx * dy` for IQ4_NL, `dx * dy * (ls - 32)` per sub-block for
//! IQ4_XS). The AVX2 versions ([`super::gemv_avx2_iq4`]) compute the same
//! integer sums.
//!
//! Block layouts (little-endian, ggml's):
//! - IQ4_NL (18 B / 32): `d: f16`, `qs: [u8; 16]` (index `j` in the low
//!   nibble of `qs[j]`, index `j + 16` in the high one);
//! - IQ4_XS (136 B / 256): `d: f16`, `scales_h: u16`, `scales_l: [u8; 4]`,
//!   `qs: [u8; 128]` (sub-block `ib` packed in `qs[16 ib..16 ib + 16]` as
//!   an IQ4_NL block; its 6-bit scale `ls` is nibble `ib % 2` of
//!   `scales_l[ib / 2]` and bits `2 ib..2 ib + 2` of `scales_h`).

use tessera::quant::KVALUES_IQ4NL;

use super::dot_quant::{Q8_0_BYTES, Q8K_BYTES, f16_at};

/// Bytes per block of each type.
pub(crate) const IQ4_NL_BYTES: usize = 18;
pub(crate) const IQ4_XS_BYTES: usize = 136;

/// `(sum_j y[j] kv[lo(qs[j])], sum_j y[j + 16] kv[hi(qs[j])])` over 16
/// index bytes and 32 activation bytes.
#[inline(always)]
fn isums(qs: &[u8], y: &[u8]) -> (i32, i32) {
    let (y0, y1) = y.split_at(16);
    let mut s1 = 0i32;
    let mut s2 = 0i32;
    for ((&q, &a), &b) in qs.iter().zip(y0).zip(y1) {
        s1 += i32::from(a as i8) * i32::from(KVALUES_IQ4NL[usize::from(q & 0xf)]);
        s2 += i32::from(b as i8) * i32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
    (s1, s2)
}

/// IQ4_NL weights x Q8_0 activations.
pub fn dot_iq4_nl_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (xb, yb) in x.chunks_exact(IQ4_NL_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let d = f16_at(yb, 0) * f16_at(xb, 0);
        let (s1, s2) = isums(&xb[2..18], &yb[2..34]);
        sumf += d * (s1 + s2) as f32;
    }
    sumf
}

/// IQ4_XS weights x Q8_K activations.
pub fn dot_iq4_xs_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (xb, yb) in x.chunks_exact(IQ4_XS_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let dy = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
        let d4d8 = f16_at(xb, 0) * dy;
        let mut h = u16::from_le_bytes([xb[2], xb[3]]);
        for ib in (0..8).step_by(2) {
            let sl = xb[4 + ib / 2];
            let ls1 = i32::from(sl & 0xf) | i32::from((h << 4) & 0x30);
            let ls2 = i32::from(sl >> 4) | i32::from((h << 2) & 0x30);
            h >>= 4;
            let d1 = d4d8 * (ls1 - 32) as f32;
            let d2 = d4d8 * (ls2 - 32) as f32;
            let q = 8 + 16 * ib;
            let y = 4 + 32 * ib;
            let (s1, s2) = isums(&xb[q..q + 16], &yb[y..y + 32]);
            sumf += d1 * (s1 + s2) as f32;
            let (s1, s2) = isums(&xb[q + 16..q + 32], &yb[y + 32..y + 64]);
            sumf += d2 * (s1 + s2) as f32;
        }
    }
    sumf
}
