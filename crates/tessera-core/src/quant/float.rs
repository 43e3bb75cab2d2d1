//! f16 and bf16 scalar conversions, exactly as ggml does them.
//!
//! Every quantized block stores its scales as f16, and F16/BF16 tensors are
//! converted element by element, so these functions decide bytes everywhere.
//!
//! - f32 -> f16 is ggml's `ggml_compute_fp32_to_fp16`: round to nearest even
//!   (what `half::f16::from_f32` does), except that every NaN becomes the
//!   canonical quiet NaN `0x7E00` with the input's sign, where `half` (and
//!   numpy) keep the top payload bits;
//! - f16 -> f32 is exact (`half` and ggml agree on every one of the 65536
//!   patterns, NaNs included: both set the quiet bit and keep the payload);
//! - f32 -> bf16 is `ggml_compute_fp32_to_bf16`: round to nearest even on the
//!   raw bits, NaNs truncated and forced quiet (bit 6), subnormals kept;
//! - bf16 -> f32 is a 16-bit shift.

use half::f16;

/// ggml's `GGML_FP32_TO_FP16`: round to nearest even, NaN to `±0x7E00`.
#[inline]
pub fn f32_to_f16(x: f32) -> f16 {
    if x.is_nan() {
        // Sign of the NaN, canonical quiet payload.
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        f16::from_bits(sign | 0x7E00)
    } else {
        f16::from_f32(x)
    }
}

/// ggml's `GGML_FP16_TO_FP32` (exact).
#[inline]
pub fn f16_to_f32(h: f16) -> f32 {
    h.to_f32()
}

/// ggml's `ggml_compute_fp32_to_bf16`: the upper half of the f32 bits,
/// rounded to nearest even; NaNs are truncated and made quiet.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 64) as u16;
    }
    // No overflow: the largest non-NaN pattern is 0xff80_0000.
    ((bits + (0x7fff + ((bits >> 16) & 1))) >> 16) as u16
}

/// ggml's `GGML_BF16_TO_FP32` (exact).
#[inline]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line-by-line transcription of ggml's `ggml_compute_fp32_to_fp16`
    /// (ggml-impl.h), to check [`f32_to_f16`] against.
    fn ggml_fp32_to_fp16_bits(f: f32) -> u16 {
        let scale_to_inf = f32::from_bits(0x7780_0000); // 0x1.0p+112f
        let scale_to_zero = f32::from_bits(0x0880_0000); // 0x1.0p-110f
        let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
        let w = f.to_bits();
        let shl1_w = w.wrapping_add(w);
        let sign = w & 0x8000_0000;
        let mut bias = shl1_w & 0xFF00_0000;
        if bias < 0x7100_0000 {
            bias = 0x7100_0000;
        }
        base += f32::from_bits((bias >> 1) + 0x0780_0000);
        let bits = base.to_bits();
        let exp_bits = (bits >> 13) & 0x0000_7C00;
        let mantissa_bits = bits & 0x0000_0FFF;
        let nonsign = exp_bits + mantissa_bits;
        let magnitude = if shl1_w > 0xFF00_0000 {
            0x7E00
        } else {
            nonsign
        };
        ((sign >> 16) | magnitude) as u16
    }

    /// Transcription of ggml's `ggml_compute_fp16_to_fp32`.
    fn ggml_fp16_to_fp32(h: u16) -> f32 {
        let w = u32::from(h) << 16;
        let sign = w & 0x8000_0000;
        let two_w = w.wrapping_add(w);
        let exp_offset = 0xE0u32 << 23;
        let exp_scale = f32::from_bits(0x0780_0000); // 0x1.0p-112f
        let normalized = f32::from_bits((two_w >> 4) + exp_offset) * exp_scale;
        let magic_mask = 126u32 << 23;
        let denormalized = f32::from_bits((two_w >> 17) | magic_mask) - 0.5;
        let cutoff = 1u32 << 27;
        let result = sign
            | if two_w < cutoff {
                denormalized.to_bits()
            } else {
                normalized.to_bits()
            };
        f32::from_bits(result)
    }

    #[test]
    fn f16_matches_ggml_on_every_rounding_case() {
        // All sign/exponent/top-10-mantissa combinations, with the 13 bits
        // that get rounded away set to every interesting pattern (ties, just
        // below and above); ties of f16 subnormals live in the upper bits.
        for upper in 0u32..(1 << 19) {
            for low in [0u32, 1, 0x7ff, 0x800, 0xfff, 0x1000, 0x1001, 0x1800, 0x1fff] {
                let x = f32::from_bits((upper << 13) | low);
                assert_eq!(
                    f32_to_f16(x).to_bits(),
                    ggml_fp32_to_fp16_bits(x),
                    "{:#010x}",
                    x.to_bits()
                );
            }
        }
    }

    #[test]
    fn f16_to_f32_matches_ggml_on_all_patterns() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(f16::from_bits(h)).to_bits();
            assert_eq!(ours, ggml_fp16_to_fp32(h).to_bits(), "{h:#06x}");
        }
    }

    #[test]
    fn nan_becomes_canonical_f16() {
        assert_eq!(f32_to_f16(f32::from_bits(0x7fff_ffff)).to_bits(), 0x7E00);
        assert_eq!(f32_to_f16(f32::from_bits(0xff80_0001)).to_bits(), 0xFE00);
        // half alone would keep the payload:
        assert_eq!(f16::from_f32(f32::from_bits(0x7fff_ffff)).to_bits(), 0x7FFF);
    }

    #[test]
    fn bf16_rounding_and_nan() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even stays
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd rounds up
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f7f_ffff)), 0x7f80); // max rounds to inf
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16(f32::from_bits(0xffa1_2345)), 0xffe1);
        assert_eq!(f32_to_bf16(f32::from_bits(1)), 0); // subnormal rounds, not flushed
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0x8000).to_bits(), 0x8000_0000);
    }
}
