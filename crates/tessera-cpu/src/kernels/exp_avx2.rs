//! A vectorised `exp` for AVX2/FMA and the row primitives built on it:
//! SOFT_MAX's passes and SILU/SWIGLU.
//!
//! [`exp256`] is Cephes' `expf` scheme: `n = round(x log2 e)`, `r = x - n
//! ln 2` in two FMA steps (ln 2 split in a short high part and a low
//! correction), `e^r = 1 + r + r^2 P(r)` with Cephes' degree-5 minimax `P`,
//! then `2^n` applied as two exact power-of-two factors so results that
//! overflow or fall into the subnormal range round once, like `expf`.
//! Inputs are clamped to `[-110, 89]` first (beyond them `expf` is 0 or
//! infinite anyway); NaN propagates. Measured accuracy (see the tests): at
//! most 2 ulp from the correctly rounded value over the normal range, and
//! within one subnormal step below it.
//!
//! Every function is `#[target_feature(enable = "avx2,fma,f16c")]`;
//! [`super::simd::Simd`] is the only caller and checks the CPU first.
//! Pointer preconditions are those of the `simd` module docs.

use std::arch::x86_64::*;

use super::simd::Prefetch;
use super::simd_avx2::{add_wide, hsum_pd, prefetch};

/// `exp` of eight lanes (see the module docs for the accuracy).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn exp256(x: __m256) -> __m256 {
    // max/min return their second operand when either is NaN: NaN survives.
    let x = _mm256_min_ps(
        _mm256_set1_ps(89.0),
        _mm256_max_ps(_mm256_set1_ps(-110.0), x),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    // ln 2 = 0.693359375 - 2.12194440e-4: the high part has 9 significant
    // bits, so n * high is exact for |n| < 2^15.
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.398_199_9e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.333_452e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166_579_6e-2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.666_666_5e-1));
    // Cephes' 5.0000001201e-1 rounds to 0.5 in f32.
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
    let e = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    // 2^n = 2^n1 * 2^n2 with both factors normal for n in [-159, 128].
    let ni = _mm256_cvtps_epi32(n);
    let n1 = _mm256_srai_epi32::<1>(ni);
    let n2 = _mm256_sub_epi32(ni, n1);
    let bias = _mm256_set1_epi32(127);
    let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
    let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
    _mm256_mul_ps(_mm256_mul_ps(e, s1), s2)
}

/// Lane mask for the first `k` (< 8) lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tail_mask(k: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(k as i32), idx)
}

/// Largest of eight lanes by `a > b ? a : b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
    let m = _mm_max_ps(_mm_movehl_ps(m, m), m);
    let m = _mm_max_ss(_mm_movehdup_ps(m), m);
    _mm_cvtss_f32(m)
}

/// SOFT_MAX's first pass (see `Simd::softmax_scale_max`).
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax_scale_max(
    y: *mut f32,
    x: *const f32,
    scale: f32,
    mask: Option<(*const u8, bool, f32)>,
    n: usize,
) -> f32 {
    let sv = _mm256_set1_ps(scale);
    let mut maxv = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY: every access is below `n` elements of its row; `y` may equal
    // `x` (each chunk is loaded before it is stored).
    unsafe {
        while i + 8 <= n {
            let mut w = _mm256_mul_ps(_mm256_loadu_ps(x.add(i)), sv);
            if let Some((m, f16, slope)) = mask {
                let mv = if f16 {
                    _mm256_cvtph_ps(_mm_loadu_si128(m.add(2 * i).cast()))
                } else {
                    _mm256_loadu_ps((m as *const f32).add(i))
                };
                w = _mm256_add_ps(w, _mm256_mul_ps(_mm256_set1_ps(slope), mv));
            }
            _mm256_storeu_ps(y.add(i), w);
            maxv = _mm256_max_ps(maxv, w);
            i += 8;
        }
        let mut max = hmax(maxv);
        while i < n {
            let mut w = *x.add(i) * scale;
            if let Some((m, f16, slope)) = mask {
                let mv = if f16 {
                    (m as *const half::f16).add(i).read().to_f32()
                } else {
                    (m as *const f32).add(i).read()
                };
                w += slope * mv;
            }
            *y.add(i) = w;
            max = if max > w { max } else { w };
            i += 1;
        }
        max
    }
}

/// `y[i] = exp(y[i] - max)`, returning their sum in f64.
///
/// # Safety
/// AVX2/FMA/F16C present; `n` elements at `y`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_sub_sum(y: *mut f32, max: f32, n: usize, pf: Prefetch) -> f64 {
    let mv = _mm256_set1_ps(max);
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut i = 0;
    // SAFETY: full chunks are below `n`; the tail uses masked loads and
    // stores that touch only the first `n - i` lanes.
    unsafe {
        while i + 16 <= n {
            prefetch(&pf, 4 * i);
            let e0 = exp256(_mm256_sub_ps(_mm256_loadu_ps(y.add(i)), mv));
            let e1 = exp256(_mm256_sub_ps(_mm256_loadu_ps(y.add(i + 8)), mv));
            _mm256_storeu_ps(y.add(i), e0);
            _mm256_storeu_ps(y.add(i + 8), e1);
            let [a0, a1, a2, a3] = &mut acc;
            add_wide(e0, a0, a1);
            add_wide(e1, a2, a3);
            i += 16;
        }
        while i < n {
            let k = (n - i).min(8);
            let m = tail_mask(k);
            let v = _mm256_maskload_ps(y.add(i), m);
            let e = _mm256_and_ps(exp256(_mm256_sub_ps(v, mv)), _mm256_castsi256_ps(m));
            _mm256_maskstore_ps(y.add(i), m, e);
            let [a0, a1, ..] = &mut acc;
            add_wide(e, a0, a1);
            i += k;
        }
    }
    let s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    hsum_pd(s)
}

/// `x / (1 + exp(-x))` of eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn silu256(x: __m256) -> __m256 {
    let e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

/// GELU, tanh approximation, in the logistic form `x / (1 + exp(-2u))`
/// with `u = sqrt(2/pi) x (1 + 0.044715 x^2)` (equal to `0.5 x (1 +
/// tanh(u))`, without its cancellation for negative `x`; `exp` overflows
/// to infinity far left, giving -0).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn gelu256(x: __m256) -> __m256 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044_715;
    let x2 = _mm256_mul_ps(x, x);
    let inner = _mm256_fmadd_ps(_mm256_set1_ps(GELU_COEF_A), x2, _mm256_set1_ps(1.0));
    let minus_2u = _mm256_mul_ps(
        _mm256_set1_ps(-2.0 * SQRT_2_OVER_PI),
        _mm256_mul_ps(x, inner),
    );
    let e = exp256(minus_2u);
    _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

/// `y[i] = silu(x[i])`, times `g[i]` when given.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu(y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { gated(|v| silu256(v), y, x, g, n) }
}

/// `y[i] = gelu(x[i])` (tanh approximation), times `g[i]` when given.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gelu(y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { gated(|v| gelu256(v), y, x, g, n) }
}

/// `y[i] = act(x[i])`, times `g[i]` when given.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gated(
    act: impl Fn(__m256) -> __m256,
    y: *mut f32,
    x: *const f32,
    g: Option<*const f32>,
    n: usize,
) {
    let mut i = 0;
    // SAFETY: full chunks are below `n`; the tail uses masked loads and
    // stores of the first `n - i` lanes. `y` may equal `x` or `g`.
    unsafe {
        while i < n {
            let k = (n - i).min(8);
            let m = tail_mask(k);
            let full = k == 8;
            let xv = if full {
                _mm256_loadu_ps(x.add(i))
            } else {
                _mm256_maskload_ps(x.add(i), m)
            };
            let mut v = act(xv);
            if let Some(g) = g {
                let gv = if full {
                    _mm256_loadu_ps(g.add(i))
                } else {
                    _mm256_maskload_ps(g.add(i), m)
                };
                v = _mm256_mul_ps(v, gv);
            }
            if full {
                _mm256_storeu_ps(y.add(i), v);
            } else {
                _mm256_maskstore_ps(y.add(i), m, v);
            }
            i += k;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::isa::Isa;

    /// `exp` of one value through the vector code.
    fn vexp(x: f32) -> f32 {
        let mut out = [0f32; 8];
        // SAFETY: only called after the caller checked AVX2/FMA/F16C; `out`
        // holds eight f32.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), exp256(_mm256_set1_ps(x))) };
        out[0]
    }

    /// Distance in ulps between two finite positive f32 (by bit patterns).
    fn ulps(a: f32, b: f32) -> u32 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn exp_is_within_two_ulp_of_correctly_rounded() {
        if !Isa::Avx2.available() {
            return;
        }
        let mut worst = (0u32, 0f32);
        // Every 61st f32 bit pattern of magnitude up to 104, kept in
        // [-103.9, 88.72] (about 35 million inputs).
        let mut bits = 0u32;
        while bits < 0x42d0_0000 {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                if !(-103.9..=88.72).contains(&x) {
                    continue;
                }
                let want = f64::from(x).exp();
                let got = vexp(x);
                let want32 = want as f32;
                if want32 >= f32::MIN_POSITIVE {
                    let u = ulps(got, want32);
                    if u > worst.0 {
                        worst = (u, x);
                    }
                } else {
                    // Subnormal results: within one subnormal step.
                    let step = f64::from(f32::from_bits(1));
                    assert!(
                        (f64::from(got) - want).abs() <= step,
                        "exp({x}) = {got:e}, want {want:e}"
                    );
                }
            }
            bits += 61;
        }
        println!("worst {} ulp at x = {}", worst.0, worst.1);
        assert!(worst.0 <= 2, "worst {} ulp at x = {}", worst.0, worst.1);
    }

    #[test]
    fn exp_edges_and_specials() {
        if !Isa::Avx2.available() {
            return;
        }
        assert_eq!(vexp(0.0), 1.0);
        assert_eq!(vexp(-0.0), 1.0);
        assert_eq!(vexp(f32::NEG_INFINITY), 0.0);
        assert_eq!(vexp(-200.0), 0.0);
        assert_eq!(vexp(f32::INFINITY), f32::INFINITY);
        assert_eq!(vexp(88.8), f32::INFINITY);
        assert_eq!(vexp(89.0), f32::INFINITY);
        assert!(vexp(f32::NAN).is_nan());
        assert!(vexp(-f32::NAN).is_nan());
        let big = vexp(88.72);
        assert!(big.is_finite() && ulps(big, f64::from(88.72f32).exp() as f32) <= 2);
        let tiny = vexp(-103.0);
        assert!(tiny > 0.0 && tiny < f32::MIN_POSITIVE);
    }

    /// The vector GELU against the f64 formula, over [-12, 12] and
    /// beyond, times `g`, with a tail shorter than a vector: within a few
    /// ulp of the value times `1 + |2u|` (the rounding of the exponent
    /// `-2u` is magnified by `|2u|` in `exp`), or 1e-30 absolute where it
    /// underflows.
    #[test]
    fn gelu_matches_the_f64_formula() {
        if !Isa::Avx2.available() {
            return;
        }
        let u = |x: f64| (2.0 / std::f64::consts::PI).sqrt() * x * (1.0 + 0.044715 * x * x);
        // `0.5 x (1 + tanh(u))`, in the form that does not cancel in f64
        // either (`1 + tanh(u)` is 0 in f64 from u = -19 on).
        let want = |x: f64| x / (1.0 + (-2.0 * u(x)).exp());
        let xs: Vec<f32> = (0..24_003)
            .map(|i| -12.0 + i as f32 * 0.001)
            .chain([-100.0, -20.0, 20.0, 100.0, 0.0, -0.0])
            .collect();
        let gs: Vec<f32> = (0..xs.len()).map(|i| 1.0 + (i % 7) as f32 * 0.25).collect();
        let mut y = vec![f32::NAN; xs.len()];
        // SAFETY: AVX2 checked; three slices of the same length.
        unsafe { gelu(y.as_mut_ptr(), xs.as_ptr(), Some(gs.as_ptr()), xs.len()) };
        let mut worst = 0f64;
        for ((&x, &g), &got) in xs.iter().zip(&gs).zip(&y) {
            let w = want(f64::from(x)) * f64::from(g);
            let err = (f64::from(got) - w).abs();
            let scale = 1.0 + 2.0 * u(f64::from(x)).abs();
            assert!(
                err <= 4.0 * f64::from(f32::EPSILON) * w.abs() * scale + 1e-30,
                "gelu({x}) * {g} = {got:e}, want {w:e}"
            );
            worst = worst.max(err / (w.abs() * scale).max(1e-30));
        }
        println!("worst relative error {worst:e}");
    }
}
