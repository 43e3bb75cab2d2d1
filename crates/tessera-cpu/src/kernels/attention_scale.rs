//! The first pass of flash attention's softmax step over a block of raw
//! scores: scale, mask and the block maximum (portable and AVX2). Compiled
//! for the baseline target, the scalar loop runs four lanes at a time with
//! its running maximum kept on the stack; on a prompt with small heads
//! (64 values) that loop took a sixth of the attention.

use crate::isa::Isa;

/// `s[j] = s[j] * scale + m[j]` for `j < s.len()` (`m` as long as `s`),
/// `-inf` where `m[j]` is `-inf` whatever the score (NaN, `+inf`); returns
/// the largest new value ignoring NaNs (`-inf` if none) and whether any
/// new value is NaN.
pub(crate) type ScaleMaskFn = fn(s: &mut [f32], m: &[f32], scale: f32) -> (f32, bool);

/// The scale-and-mask pass for `isa`.
pub(crate) fn scale_mask_fn(isa: Isa) -> ScaleMaskFn {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx2() {
            return avx2::scale_mask_safe;
        }
    }
    let _ = isa;
    scale_mask_scalar
}

/// One value of the pass.
#[inline(always)]
fn one(s: f32, m: f32, scale: f32) -> f32 {
    if m == f32::NEG_INFINITY {
        f32::NEG_INFINITY
    } else {
        s * scale + m
    }
}

pub(crate) fn scale_mask_scalar(s: &mut [f32], m: &[f32], scale: f32) -> (f32, bool) {
    let (mut max, mut nan) = (f32::NEG_INFINITY, false);
    for (s, &m) in s.iter_mut().zip(m) {
        *s = one(*s, m, scale);
        if *s > max {
            max = *s;
        }
        nan |= s.is_nan();
    }
    (max, nan)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    pub(super) fn scale_mask_safe(s: &mut [f32], m: &[f32], scale: f32) -> (f32, bool) {
        // SAFETY: only handed out by `scale_mask_fn` after checking AVX2.
        unsafe { scale_mask(s, m, scale) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale_mask(s: &mut [f32], m: &[f32], scale: f32) -> (f32, bool) {
        let n = s.len().min(m.len());
        let (s, m) = (&mut s[..n], &m[..n]);
        let (vs, ninf) = (_mm256_set1_ps(scale), _mm256_set1_ps(f32::NEG_INFINITY));
        let (mut vmax, mut vnan) = (ninf, _mm256_setzero_ps());
        let mut sc = s.chunks_exact_mut(8);
        let mut mc = m.chunks_exact(8);
        for (s, m) in (&mut sc).zip(&mut mc) {
            // SAFETY: `s` and `m` hold 8 f32; unaligned loads and store.
            unsafe {
                let mv = _mm256_loadu_ps(m.as_ptr());
                // Multiply, then add: the scalar pass's two roundings.
                let x = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s.as_ptr()), vs), mv);
                let x = _mm256_blendv_ps(x, ninf, _mm256_cmp_ps::<_CMP_EQ_OQ>(mv, ninf));
                _mm256_storeu_ps(s.as_mut_ptr(), x);
                // max returns its second operand when either is NaN.
                vmax = _mm256_max_ps(x, vmax);
                vnan = _mm256_or_ps(vnan, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
            }
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax) };
        let mut max = lanes.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        let mut nan = _mm256_movemask_ps(vnan) != 0;
        let (tm, tn) = super::scale_mask_scalar(sc.into_remainder(), mc.remainder(), scale);
        if tm > max {
            max = tm;
        }
        nan |= tn;
        (max, nan)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Bit for bit the scalar pass, on odd lengths, with NaNs, infinities
    /// and masked entries.
    #[test]
    fn avx2_pass_matches_the_scalar_one() {
        let f = scale_mask_fn(Isa::best());
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed
        };
        for n in [0usize, 1, 7, 8, 9, 31, 64] {
            for round in 0..20 {
                let pick = |r: u32| match r % 16 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    _ => (r >> 8) as f32 / (1 << 20) as f32 - 4.0,
                };
                let s: Vec<f32> = (0..n).map(|_| pick(next())).collect();
                let m: Vec<f32> = (0..n)
                    .map(|_| match next() % 4 {
                        0 => f32::NEG_INFINITY,
                        1 => 0.0,
                        r => r as f32 * -0.25,
                    })
                    .collect();
                let (mut a, mut b) = (s.clone(), s.clone());
                let ra = f(&mut a, &m, 0.125);
                let rb = scale_mask_scalar(&mut b, &m, 0.125);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "n {n} round {round}");
                assert_eq!(ra.0.to_bits(), rb.0.to_bits(), "n {n} round {round}");
                assert_eq!(ra.1, rb.1, "n {n} round {round}");
                // And what the pass promises, from first principles.
                let want_max = b
                    .iter()
                    .filter(|x| !x.is_nan())
                    .fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                assert_eq!(rb.0, want_max);
                assert_eq!(rb.1, b.iter().any(|x| x.is_nan()));
                for ((&x, &s0), &mj) in b.iter().zip(&s).zip(&m) {
                    if mj == f32::NEG_INFINITY {
                        assert_eq!(x, f32::NEG_INFINITY);
                    } else if !x.is_nan() {
                        assert_eq!(x, s0 * 0.125 + mj);
                    }
                }
            }
        }
    }
}
