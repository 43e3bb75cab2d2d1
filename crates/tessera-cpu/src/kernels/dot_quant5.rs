//! Portable dot products of the "legacy" 32-value weight types with a min
//! or a fifth bit: Q5_0 x Q8_0, Q4_1 x Q8_1, Q5_1 x Q8_1 (ggml's
//! `ggml_vec_dot_{q5_0_q8_0,q4_1_q8_1,q5_1_q8_1}_generic`): per block an
//! exact integer sum of products, scaled by `dx * dy` in f32, plus
//! `m * s` for the types with a min (`s = dy * sum(qy)`, stored in the Q8_1
//! block, so the min costs one multiply per block). The AVX2 versions in
//! [`super::gemv_avx2_q5`] compute the same integer sums.
//!
//! Block layouts (little-endian, ggml's):
//! - Q4_1 (20 B / 32): `d: f16`, `m: f16`, `qs: [u8; 16]` (value `i` in the
//!   low nibble of `qs[i]` for `i < 16`, the high nibble of `qs[i - 16]`
//!   otherwise); `x = d * q + m`;
//! - Q5_0 (22 B / 32): `d: f16`, `qh: u32` (bit `i`: bit 4 of value `i`),
//!   `qs: [u8; 16]` (low nibbles as Q4_1); `x = d * (q - 16)`;
//! - Q5_1 (24 B / 32): `d: f16`, `m: f16`, `qh: u32`, `qs: [u8; 16]`;
//!   `x = d * q + m`;
//! - Q8_1 (36 B / 32): `d: f16`, `s: f16` (`d * sum(qs)`), `qs: [i8; 32]`.

use super::dot_quant::{Q8_0_BYTES, f16_at};

/// Bytes per block of each type.
pub(crate) const Q4_1_BYTES: usize = 20;
pub(crate) const Q5_0_BYTES: usize = 22;
pub(crate) const Q5_1_BYTES: usize = 24;
pub(crate) const Q8_1_BYTES: usize = 36;

/// The 32 unsigned 4- or 5-bit codes of a block: nibbles from `qs` (16
/// bytes), bit 4 from `qh` (`None` for 4-bit types).
#[inline(always)]
pub(crate) fn codes(qs: &[u8], qh: Option<u32>) -> [i32; 32] {
    let mut q = [0i32; 32];
    for j in 0..16 {
        q[j] = i32::from(qs[j] & 0xf);
        q[j + 16] = i32::from(qs[j] >> 4);
    }
    if let Some(h) = qh {
        for (j, v) in q.iter_mut().enumerate() {
            *v |= (((h >> j) & 1) as i32) << 4;
        }
    }
    q
}

/// The little-endian u32 at `b[i..i + 4]`.
#[inline(always)]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// `sum q[j] * y[j]` over a block (`y`: 32 signed bytes).
#[inline(always)]
fn isum(q: &[i32; 32], y: &[u8]) -> i32 {
    q.iter().zip(y).map(|(&a, &b)| a * i32::from(b as i8)).sum()
}

/// Q5_0 weights x Q8_0 activations.
pub fn dot_q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q5_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
        let mut q = codes(&xb[6..22], Some(u32_at(xb, 2)));
        q.iter_mut().for_each(|v| *v -= 16);
        sum += isum(&q, &yb[2..34]) as f32 * (f16_at(xb, 0) * f16_at(yb, 0));
    }
    sum
}

/// Q4_1 weights x Q8_1 activations.
pub fn dot_q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q4_1_BYTES).zip(y.chunks_exact(Q8_1_BYTES)) {
        let q = codes(&xb[4..20], None);
        sum += (f16_at(xb, 0) * f16_at(yb, 0)) * isum(&q, &yb[4..36]) as f32
            + f16_at(xb, 2) * f16_at(yb, 2);
    }
    sum
}

/// Q5_1 weights x Q8_1 activations.
pub fn dot_q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (xb, yb) in x.chunks_exact(Q5_1_BYTES).zip(y.chunks_exact(Q8_1_BYTES)) {
        let q = codes(&xb[8..24], Some(u32_at(xb, 4)));
        sum += (f16_at(xb, 0) * f16_at(yb, 0)) * isum(&q, &yb[4..36]) as f32
            + f16_at(xb, 2) * f16_at(yb, 2);
    }
    sum
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Each dot product against an f64 dot of both rows dequantized by
    //! test-local transcriptions of ggml's `dequantize_row_*` (written from
    //! the format, not from the dot code), on random blocks whose every
    //! quant bit is exercised, for every ISA; and the AVX2 kernels against
    //! the portable ones.

    use tessera::DType;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::act_quant::convert_row;
    use crate::kernels::dot::{dot_fn, scalar_dot_fn, vec_dot_type};

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

    /// Random blocks of `t`: random quant bytes, sane f16 scales (and mins).
    fn random_blocks(t: DType, nblocks: usize, rng: &mut Rng) -> Vec<u8> {
        let ts = t.type_size();
        let mut x: Vec<u8> = (0..nblocks * ts).map(|_| rng.next() as u8).collect();
        for b in x.chunks_exact_mut(ts) {
            put_f16(b, 0, 0.01 + 0.05 * rng.f32().abs());
            if t != DType::Q5_0 {
                put_f16(b, 2, 0.5 * rng.f32());
            }
        }
        x
    }

    /// ggml's `dequantize_row_*`, per value, in f64.
    fn dequant(t: DType, x: &[u8]) -> Vec<f64> {
        let mut out = Vec::new();
        for b in x.chunks_exact(t.type_size()) {
            let d = f64::from(f16_at(b, 0));
            let (m, qh, qs) = match t {
                DType::Q5_0 => (0.0, Some(u32_at(b, 2)), &b[6..22]),
                DType::Q4_1 => (f64::from(f16_at(b, 2)), None, &b[4..20]),
                DType::Q5_1 => (f64::from(f16_at(b, 2)), Some(u32_at(b, 4)), &b[8..24]),
                // The sum `s` is not a value: only `d * q` counts.
                DType::Q8_1 => {
                    out.extend(b[4..36].iter().map(|&q| d * f64::from(q as i8)));
                    continue;
                }
                DType::Q8_0 => {
                    out.extend(b[2..34].iter().map(|&q| d * f64::from(q as i8)));
                    continue;
                }
                _ => unreachable!("test covers the types of this module"),
            };
            let mut y = [0f64; 32];
            for j in 0..16 {
                let (mut q0, mut q1) = (u32::from(qs[j] & 0xf), u32::from(qs[j] >> 4));
                if let Some(h) = qh {
                    q0 |= ((h >> j) & 1) << 4;
                    q1 |= ((h >> (j + 16)) & 1) << 4;
                }
                let off = if t == DType::Q5_0 { 16.0 } else { 0.0 };
                y[j] = d * (f64::from(q0) - off) + m;
                y[j + 16] = d * (f64::from(q1) - off) + m;
            }
            out.extend(y);
        }
        out
    }

    /// A Q8_1 block's `s` is `d * sum(q)` rounded to f16, and the mins
    /// multiply that stored value (ggml's semantics): `sum_b m_b * (s_b -
    /// dy_b * sum(qy_b))` is what separates the dot product from the f64 dot
    /// of the dequantized rows (0 for other activation types).
    fn s_correction(t: DType, x: &[u8], yt: DType, y: &[u8]) -> f64 {
        if yt != DType::Q8_1 {
            return 0.0;
        }
        let xb = x.chunks_exact(t.type_size());
        xb.zip(y.chunks_exact(Q8_1_BYTES))
            .map(|(xb, yb)| {
                let exact: f64 = yb[4..36]
                    .iter()
                    .map(|&q| f64::from(f16_at(yb, 0)) * f64::from(q as i8))
                    .sum();
                f64::from(f16_at(xb, 2)) * (f64::from(f16_at(yb, 2)) - exact)
            })
            .sum()
    }

    #[test]
    fn dots_match_dequantized_f64_on_every_isa() {
        let mut rng = Rng(17);
        for t in [DType::Q5_0, DType::Q4_1, DType::Q5_1] {
            let yt = vec_dot_type(t).unwrap();
            for n in [32usize, 96, 256, 1024, 32 * 37] {
                let x = random_blocks(t, n / 32, &mut rng);
                let act: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
                let mut y = vec![0u8; yt.row_size(n).unwrap()];
                convert_row(yt, &act, &mut y).unwrap();
                let (xd, yd) = (dequant(t, &x), dequant(yt, &y));
                let want: f64 = xd.iter().zip(&yd).map(|(a, b)| a * b).sum::<f64>()
                    + s_correction(t, &x, yt, &y);
                let mag: f64 = xd.iter().zip(&yd).map(|(a, b)| (a * b).abs()).sum();
                let scalar = f64::from(scalar_dot_fn(t).unwrap()(&x, &y));
                for isa in Isa::all_available() {
                    let got = f64::from(dot_fn(t, isa).unwrap()(&x, &y));
                    assert!(
                        (got - want).abs() <= 1e-5 * mag,
                        "{t} n={n} {isa:?}: {got} vs {want} (magnitude {mag})"
                    );
                    assert!(
                        (got - scalar).abs() <= 1e-5 * mag,
                        "{t} n={n} {isa:?}: {got} vs scalar {scalar}"
                    );
                }
            }
        }
    }

    #[test]
    fn codes_extreme_values() {
        // All nibbles 15 and every fifth bit set: q = 31; none set: q = 15.
        let q = codes(&[0xff; 16], Some(u32::MAX));
        assert!(q.iter().all(|&v| v == 31));
        let q = codes(&[0xff; 16], Some(0));
        assert!(q.iter().all(|&v| v == 15));
        // Bit j of qh belongs to value j: only value 17 gets bit 4.
        let q = codes(&[0; 16], Some(1 << 17));
        assert_eq!(q.iter().position(|&v| v != 0), Some(17));
        assert_eq!(q[17], 16);
    }
}
