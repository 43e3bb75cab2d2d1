//! Portable dot products of Q2_K, Q3_K and Q5_K weight rows with Q8K
//! activations (ggml's `ggml_vec_dot_q{2,3,5}_K_q8_K_generic`): per block an
//! exact integer sum of code times activation products weighted by the
//! sub-block scales, scaled by `d * dy` in f32; the mins of Q2_K and Q5_K
//! use the Q8K `bsums` (sums of 16 activation quants). The AVX2 versions in
//! [`super::gemv_avx2_k`] compute the same integer sums.
//!
//! Block layouts (little-endian, ggml's):
//! - Q2K (84 B / 256): `scales: [u8; 16]` (4-bit scale low, min high),
//!   `qs: [u8; 64]`, `d: f16`, `dmin: f16`; value `128h + 32j + l` is bits
//!   `2j..2j+2` of `qs[32h + l]`; `x = d * sc * q - dmin * m` per 16 values;
//! - Q3K (110 B / 256): `hmask: [u8; 32]`, `qs: [u8; 64]` (as Q2K),
//!   `scales: [u8; 12]` (sixteen 6-bit scales), `d: f16`;
//!   `x = d * (sc - 32) * (q + 4 * hbit - 4)`, the high bit of value `e` in
//!   bit `e / 32` of `hmask[e % 32]`;
//! - Q5K (176 B / 256): `d: f16`, `dmin: f16`, `scales: [u8; 12]` (as Q4K),
//!   `qh: [u8; 32]`, `qs: [u8; 128]` (as Q4K's nibbles); bit 4 of value `e`
//!   is bit `e / 32` of `qh[e % 32]`.

use super::dot_quant::{Q8K_BYTES, f16_at, q4k_scales_mins, q8k_bsums_dot_mins, q8k_d};

/// Bytes per block.
pub(crate) const Q2K_BYTES: usize = 84;
pub(crate) const Q3K_BYTES: usize = 110;
pub(crate) const Q5K_BYTES: usize = 176;

/// The i16 `bsums[j]` of a Q8K block.
#[inline(always)]
pub(crate) fn q8k_bsum(y: &[u8], j: usize) -> i32 {
    i32::from(i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]))
}

/// The sixteen 6-bit scales of a Q3K block minus 32 (ggml's `aux`
/// shuffle), from the block's 12 scale bytes. A fixed-size array keeps it
/// free of bounds checks in the SIMD kernels (through a slice, the AVX2
/// one-column Q3_K product ran 3x slower: 4.1-4.5 ms against 1.4-1.9 ms at
/// m = 4096, k = 14336).
#[inline(always)]
pub(crate) fn q3k_scales16(s: &[u8; 12]) -> [i16; 16] {
    std::array::from_fn(|j| {
        let lo = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        i16::from(lo | (hi << 4)) - 32
    })
}

/// Q2K weights x Q8K activations.
pub fn dot_q2_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q2K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let sc = &xb[..16];
        let qs = &xb[16..80];
        let q8 = &yb[4..260];
        let mut summs = 0i32;
        for (j, &s) in sc.iter().enumerate() {
            summs += q8k_bsum(yb, j) * i32::from(s >> 4);
        }
        let yd = q8k_d(yb);
        let dall = yd * f16_at(xb, 80);
        let dmin = yd * f16_at(xb, 82);
        let mut isum = 0i32;
        for (s, (&scale, q8s)) in sc.iter().zip(q8.chunks_exact(16)).enumerate() {
            let (h, j, half) = (s / 8, (s % 8) / 2, s % 2);
            let q2 = &qs[32 * h + 16 * half..32 * h + 16 * half + 16];
            let mut part = 0i32;
            for (&q, &a) in q2.iter().zip(q8s) {
                part += i32::from(a as i8) * i32::from((q >> (2 * j)) & 3);
            }
            isum += i32::from(scale & 0xF) * part;
        }
        sum += dall * isum as f32 - dmin * summs as f32;
    }
    sum
}

/// Q3K weights x Q8K activations.
pub fn dot_q3_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q3K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let hm = &xb[..32];
        let qs = &xb[32..96];
        let mut s12 = [0u8; 12];
        s12.copy_from_slice(&xb[96..108]);
        let scales = q3k_scales16(&s12).map(i32::from);
        let q8 = &yb[4..260];
        let mut isum = 0i32;
        for (s, (&scale, q8s)) in scales.iter().zip(q8.chunks_exact(16)).enumerate() {
            let (h, j, half) = (s / 8, (s % 8) / 2, s % 2);
            let base = 32 * h + 16 * half;
            let bit = 1u8 << (4 * h + j);
            let mut part = 0i32;
            for (l, &a) in q8s.iter().enumerate() {
                let low = i32::from((qs[base + l] >> (2 * j)) & 3);
                let q = low - if hm[16 * half + l] & bit != 0 { 0 } else { 4 };
                part += i32::from(a as i8) * q;
            }
            isum += scale * part;
        }
        sum += f16_at(xb, 108) * q8k_d(yb) * isum as f32;
    }
    sum
}

/// Q5K weights x Q8K activations.
pub fn dot_q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q5K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let yd = q8k_d(yb);
        let d = f16_at(xb, 0) * yd;
        let dmin = f16_at(xb, 2) * yd;
        let (sc, mn) = q4k_scales_mins(&xb[4..16]);
        let qh = &xb[16..48];
        let qs = &xb[48..176];
        let q8 = &yb[4..260];
        let mut isum = 0i32;
        for (p, (q4, q8p)) in qs.chunks_exact(32).zip(q8.chunks_exact(64)).enumerate() {
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                let h = qh[l] >> (2 * p);
                let ql = (q4[l] & 0xf) | ((h & 1) << 4);
                let qu = (q4[l] >> 4) | (((h >> 1) & 1) << 4);
                lo += i32::from(ql) * i32::from(q8p[l] as i8);
                hi += i32::from(qu) * i32::from(q8p[l + 32] as i8);
            }
            isum += i32::from(sc[2 * p]) * lo + i32::from(sc[2 * p + 1]) * hi;
        }
        sum += d * isum as f32 - dmin * q8k_bsums_dot_mins(yb, &mn) as f32;
    }
    sum
}
