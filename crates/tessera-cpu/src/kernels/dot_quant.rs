//! Portable dot products of quantized weight rows with quantized activations:
//! Q4_0 x Q8_0, Q8_0 x Q8_0, Q4K x Q8K, Q6K x Q8K (Q2K, Q3K, Q5K: [`super::dot_kquant`]).
//!
//! These are the reference semantics (ggml's `ggml_vec_dot_*_generic`): per
//! block, an exact integer sum of products, scaled by the product of the two
//! block scales in f32. The K-quant mins use the Q8K `bsums` (sums of 16
//! activation quants), so `sum(x * y)` with `x = d*sc*q - dmin*m` costs one
//! multiply per 16 values for the `- dmin*m` part. The AVX2 versions in
//! [`super::dot_avx2`] compute the same integer sums.
//!
//! Block layouts (little-endian, ggml's):
//! - Q4_0 (18 B / 32): `d: f16`, `qs: [u8; 16]` (value `i` in the low nibble of
//!   `qs[i]` for `i < 16`, in the high nibble of `qs[i - 16]` otherwise; `x = d * (q - 8)`);
//! - Q8_0 (34 B / 32): `d: f16`, `qs: [i8; 32]`;
//! - Q4K (144 B / 256): `d: f16`, `dmin: f16`, `scales: [u8; 12]` (eight 6-bit
//!   scales and mins), `qs: [u8; 128]`; each 64 values share 32 bytes, low
//!   nibbles first; `x = d * sc * q - dmin * m` per 32-value sub-block;
//! - Q6K (210 B / 256): `ql: [u8; 128]`, `qh: [u8; 64]`, `scales: [i8; 16]`,
//!   `d: f16`; `x = d * sc * (q - 32)` per 16-value sub-block;
//! - Q8K (292 B / 256): `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]`.

/// Bytes per block of each type.
pub(crate) const Q4_0_BYTES: usize = 18;
pub(crate) const Q8_0_BYTES: usize = 34;
pub(crate) const Q4K_BYTES: usize = 144;
pub(crate) const Q6K_BYTES: usize = 210;
pub(crate) const Q8K_BYTES: usize = 292;

/// The f16 at `b[i..i + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// The f32 scale of a Q8K block.
#[inline(always)]
pub(crate) fn q8k_d(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// `sum_j bsums[j] * mins[j / 2]` of a Q8K block against Q4K mins.
#[inline(always)]
pub(crate) fn q8k_bsums_dot_mins(y: &[u8], mins: &[u8; 8]) -> i32 {
    let mut s = 0i32;
    for (j, b) in y[260..292].chunks_exact(2).enumerate() {
        s += i32::from(i16::from_le_bytes([b[0], b[1]])) * i32::from(mins[j / 2]);
    }
    s
}

/// The eight 6-bit scales and mins of a Q4K block (ggml's `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn q4k_scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xf) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

/// Q4_0 weights x Q8_0 activations.
pub fn dot_q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q4_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let (qx, qy) = (&xb[2..18], &yb[2..34]);
        let mut isum = 0i32;
        for j in 0..16 {
            let lo = i32::from(qx[j] & 0xf) - 8;
            let hi = i32::from(qx[j] >> 4) - 8;
            isum += lo * i32::from(qy[j] as i8) + hi * i32::from(qy[j + 16] as i8);
        }
        sum += isum as f32 * (f16_at(xb, 0) * f16_at(yb, 0));
    }
    sum
}

/// Q8_0 weights x Q8_0 activations.
pub fn dot_q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q8_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let isum: i32 = xb[2..34]
            .iter()
            .zip(&yb[2..34])
            .map(|(&a, &b)| i32::from(a as i8) * i32::from(b as i8))
            .sum();
        sum += isum as f32 * (f16_at(xb, 0) * f16_at(yb, 0));
    }
    sum
}

/// Q4K weights x Q8K activations.
pub fn dot_q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q4K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let yd = q8k_d(yb);
        let d = f16_at(xb, 0) * yd;
        let dmin = f16_at(xb, 2) * yd;
        let (sc, mn) = q4k_scales_mins(&xb[4..16]);
        let qs = &xb[16..144];
        let q8 = &yb[4..260];
        let mut isum = 0i32;
        for (p, (q4, q8p)) in qs.chunks_exact(32).zip(q8.chunks_exact(64)).enumerate() {
            let (mut lo, mut hi) = (0i32, 0i32);
            for l in 0..32 {
                lo += i32::from(q4[l] & 0xf) * i32::from(q8p[l] as i8);
                hi += i32::from(q4[l] >> 4) * i32::from(q8p[l + 32] as i8);
            }
            isum += i32::from(sc[2 * p]) * lo + i32::from(sc[2 * p + 1]) * hi;
        }
        sum += d * isum as f32 - dmin * q8k_bsums_dot_mins(yb, &mn) as f32;
    }
    sum
}

/// Q6K weights x Q8K activations.
pub fn dot_q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q6K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
        let d = f16_at(xb, 208) * q8k_d(yb);
        let mut isum = 0i32;
        for c in 0..2 {
            let ql = &xb[64 * c..64 * c + 64];
            let qh = &xb[128 + 32 * c..128 + 32 * c + 32];
            let sc = &xb[192 + 8 * c..192 + 8 * c + 8];
            let q8 = &yb[4 + 128 * c..4 + 128 * c + 128];
            // Four 32-value quarters, each two 16-value halves with own scales.
            let mut part = [0i32; 8];
            for l in 0..32 {
                let h = l / 16;
                let q = [
                    i32::from((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32,
                    i32::from((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32,
                    i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                    i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
                ];
                for (quarter, qv) in q.iter().enumerate() {
                    part[2 * quarter + h] += qv * i32::from(q8[32 * quarter + l] as i8);
                }
            }
            for (p, s) in part.iter().zip(sc) {
                isum += p * i32::from(*s as i8);
            }
        }
        sum += d * isum as f32;
    }
    sum
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Each quantized dot product against an f64 dot of both rows
    //! dequantized by test-local transcriptions of ggml's `dequantize_row_*`
    //! (written from the format, not from the dot code), on random blocks
    //! whose every quant and scale bit is exercised, for every ISA.

    use tessera::DType;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::act_quant::convert_row;
    use crate::kernels::dot::dot_fn;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn f32(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    fn put_f16(b: &mut [u8], at: usize, v: f32) {
        b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
    }

    /// Random blocks of `t`: random quant bytes, scales set to sane f16 values.
    fn random_blocks(t: DType, nblocks: usize, rng: &mut Rng) -> Vec<u8> {
        let ts = t.type_size();
        let mut x: Vec<u8> = (0..nblocks * ts).map(|_| rng.next() as u8).collect();
        for b in x.chunks_exact_mut(ts) {
            match t {
                DType::Q4_0 | DType::Q8_0 => put_f16(b, 0, 0.01 + 0.05 * rng.f32().abs()),
                DType::Q4K => {
                    put_f16(b, 0, 0.001 + 0.01 * rng.f32().abs());
                    put_f16(b, 2, 0.001 + 0.01 * rng.f32().abs());
                }
                DType::Q6K => put_f16(b, 208, 0.001 + 0.01 * rng.f32().abs()),
                DType::Q5K => {
                    put_f16(b, 0, 0.001 + 0.01 * rng.f32().abs());
                    put_f16(b, 2, 0.001 + 0.01 * rng.f32().abs());
                }
                DType::Q2K => {
                    put_f16(b, 80, 0.001 + 0.01 * rng.f32().abs());
                    put_f16(b, 82, 0.001 + 0.01 * rng.f32().abs());
                }
                DType::Q3K => put_f16(b, 108, 0.001 + 0.01 * rng.f32().abs()),
                _ => {}
            }
        }
        x
    }

    fn dequant(t: DType, x: &[u8]) -> Vec<f64> {
        let mut out = Vec::new();
        for b in x.chunks_exact(t.type_size()) {
            match t {
                DType::Q4_0 => {
                    let d = f64::from(f16_at(b, 0));
                    let mut y = [0f64; 32];
                    for j in 0..16 {
                        y[j] = d * (f64::from(b[2 + j] & 0xf) - 8.0);
                        y[j + 16] = d * (f64::from(b[2 + j] >> 4) - 8.0);
                    }
                    out.extend(y);
                }
                DType::Q8_0 => {
                    let d = f64::from(f16_at(b, 0));
                    out.extend(b[2..34].iter().map(|&q| d * f64::from(q as i8)));
                }
                DType::Q8K => {
                    let d = f64::from(q8k_d(b));
                    out.extend(b[4..260].iter().map(|&q| d * f64::from(q as i8)));
                }
                DType::Q4K => {
                    let (d, dmin) = (f64::from(f16_at(b, 0)), f64::from(f16_at(b, 2)));
                    let s = &b[4..16];
                    // ggml's get_scale_min_k4, written out per index.
                    let scale_min = |j: usize| -> (f64, f64) {
                        if j < 4 {
                            (f64::from(s[j] & 63), f64::from(s[j + 4] & 63))
                        } else {
                            let sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
                            let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
                            (f64::from(sc), f64::from(m))
                        }
                    };
                    for p in 0..4 {
                        let q = &b[16 + 32 * p..48 + 32 * p];
                        let (sc1, m1) = scale_min(2 * p);
                        let (sc2, m2) = scale_min(2 * p + 1);
                        out.extend(q.iter().map(|&v| d * sc1 * f64::from(v & 0xf) - dmin * m1));
                        out.extend(q.iter().map(|&v| d * sc2 * f64::from(v >> 4) - dmin * m2));
                    }
                }
                DType::Q6K => {
                    let d = f64::from(f16_at(b, 208));
                    let mut y = [0f64; 256];
                    for n in 0..2 {
                        let (ql, qh, sc) = (&b[64 * n..], &b[128 + 32 * n..], &b[192 + 8 * n..]);
                        for l in 0..32 {
                            let is = l / 16;
                            let q1 = i32::from((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                            let q2 = i32::from((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                            let s = |i: usize| d * f64::from(sc[i] as i8);
                            y[128 * n + l] = s(is) * f64::from(q1);
                            y[128 * n + l + 32] = s(is + 2) * f64::from(q2);
                            y[128 * n + l + 64] = s(is + 4) * f64::from(q3);
                            y[128 * n + l + 96] = s(is + 6) * f64::from(q4);
                        }
                    }
                    out.extend(y);
                }
                // Q2K, Q3K, Q5K: ggml's dequantize_row_* (tessera-core,
                // checked bit for bit against ggml's C), widened to f64.
                DType::Q2K | DType::Q3K | DType::Q5K => {
                    let mut y = [0f32; 256];
                    tessera::quant::to_f32(t, b, &mut y).unwrap();
                    out.extend(y.iter().map(|&v| f64::from(v)));
                }
                _ => unreachable!("test covers quantized types only"),
            }
        }
        out
    }

    #[test]
    fn quant_dots_match_dequantized_f64() {
        let mut rng = Rng(7);
        for (t, yt) in [
            (DType::Q4_0, DType::Q8_0),
            (DType::Q8_0, DType::Q8_0),
            (DType::Q4K, DType::Q8K),
            (DType::Q6K, DType::Q8K),
            (DType::Q2K, DType::Q8K),
            (DType::Q3K, DType::Q8K),
            (DType::Q5K, DType::Q8K),
        ] {
            for n in [256usize, 512, 1024] {
                let x = random_blocks(t, n / t.block_size(), &mut rng);
                let act: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let mut y = vec![0u8; yt.row_size(n).unwrap()];
                convert_row(yt, &act, &mut y).unwrap();
                let (xd, yd) = (dequant(t, &x), dequant(yt, &y));
                let want: f64 = xd.iter().zip(&yd).map(|(a, b)| a * b).sum();
                let mag: f64 = xd.iter().zip(&yd).map(|(a, b)| (a * b).abs()).sum();
                for isa in Isa::all_available() {
                    let got = f64::from(dot_fn(t, isa).unwrap()(&x, &y));
                    assert!(
                        (got - want).abs() <= 1e-5 * mag,
                        "{t} n={n} {isa:?}: {got} vs {want} (magnitude {mag})"
                    );
                }
            }
        }
    }
}
