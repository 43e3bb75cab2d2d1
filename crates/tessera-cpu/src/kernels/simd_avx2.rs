//! AVX2/FMA bodies of the arithmetic row primitives of [`super::simd::Simd`]:
//! binary ops, scaling and f64 sums.
//!
//! Every function is `#[target_feature(enable = "avx2,fma,f16c")]` and may
//! only run on a CPU with those features; [`super::simd::Simd`] is the only
//! caller and checks the CPU first. Pointer preconditions are those of the
//! `simd` module docs. Element results are bit-identical to the portable
//! loops (the same IEEE operation per element, no fused multiply-add where
//! the portable code rounds twice); the sums accumulate in f64 in another
//! order.

use std::arch::x86_64::*;

use super::simd::{BinKind, Prefetch};

/// Prefetch the lines at byte `off` of `pf`'s rows (if inside them).
#[inline(always)]
pub(crate) fn prefetch(pf: &Prefetch, off: usize) {
    if off < pf.bytes {
        for r in pf.rows {
            // SAFETY: a prefetch is a hint that never faults, whatever the
            // address; `wrapping_add` computes it without claiming validity.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(r.wrapping_add(off).cast()) };
        }
    }
}

/// Sum of the four f64 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_pd(v: __m256d) -> f64 {
    let s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
    _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
}

/// Eight f32 lanes widened and added into two f64 accumulators.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn add_wide(v: __m256, lo: &mut __m256d, hi: &mut __m256d) {
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
}

/// Eight f32 lanes widened, squared and added into two f64 accumulators.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn add_sq_wide(v: __m256, lo: &mut __m256d, hi: &mut __m256d) {
    let l = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    let h = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
    *lo = _mm256_fmadd_pd(l, l, *lo);
    *hi = _mm256_fmadd_pd(h, h, *hi);
}

/// The vector form of `op`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn vop<const OP: u8>(a: __m256, b: __m256) -> __m256 {
    match OP {
        0 => _mm256_add_ps(a, b),
        1 => _mm256_mul_ps(a, b),
        3 => _mm256_sub_ps(a, b),
        _ => _mm256_div_ps(a, b),
    }
}

/// The scalar form of `op`.
#[inline(always)]
fn sop<const OP: u8>(a: f32, b: f32) -> f32 {
    match OP {
        0 => a + b,
        1 => a * b,
        3 => a - b,
        _ => a / b,
    }
}

/// `z[i] = x[i] op y[i]`.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn binary(op: BinKind, z: *mut f32, x: *const f32, y: *const f32, n: usize) {
    // SAFETY: forwarded preconditions.
    unsafe {
        match op.code() {
            0 => bin_vv::<0>(z, x, y, n),
            1 => bin_vv::<1>(z, x, y, n),
            3 => bin_vv::<3>(z, x, y, n),
            _ => bin_vv::<2>(z, x, y, n),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bin_vv<const OP: u8>(z: *mut f32, x: *const f32, y: *const f32, n: usize) {
    let mut i = 0;
    // SAFETY: every access is below `n` elements of its row; each chunk is
    // loaded before it is stored, so `z` may equal `x` or `y`.
    unsafe {
        while i + 16 <= n {
            let a0 = _mm256_loadu_ps(x.add(i));
            let a1 = _mm256_loadu_ps(x.add(i + 8));
            let b0 = _mm256_loadu_ps(y.add(i));
            let b1 = _mm256_loadu_ps(y.add(i + 8));
            _mm256_storeu_ps(z.add(i), vop::<OP>(a0, b0));
            _mm256_storeu_ps(z.add(i + 8), vop::<OP>(a1, b1));
            i += 16;
        }
        if i + 8 <= n {
            let r = vop::<OP>(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(y.add(i)));
            _mm256_storeu_ps(z.add(i), r);
            i += 8;
        }
        while i < n {
            *z.add(i) = sop::<OP>(*x.add(i), *y.add(i));
            i += 1;
        }
    }
}

/// `z[i] = x[i] op y`.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn binary_scalar(op: BinKind, z: *mut f32, x: *const f32, y: f32, n: usize) {
    // SAFETY: forwarded preconditions.
    unsafe {
        match op.code() {
            0 => bin_vs::<0>(z, x, y, n),
            1 => bin_vs::<1>(z, x, y, n),
            3 => bin_vs::<3>(z, x, y, n),
            _ => bin_vs::<2>(z, x, y, n),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bin_vs<const OP: u8>(z: *mut f32, x: *const f32, y: f32, n: usize) {
    let yv = _mm256_set1_ps(y);
    let mut i = 0;
    // SAFETY: as in `bin_vv`.
    unsafe {
        while i + 16 <= n {
            let a0 = _mm256_loadu_ps(x.add(i));
            let a1 = _mm256_loadu_ps(x.add(i + 8));
            _mm256_storeu_ps(z.add(i), vop::<OP>(a0, yv));
            _mm256_storeu_ps(z.add(i + 8), vop::<OP>(a1, yv));
            i += 16;
        }
        if i + 8 <= n {
            _mm256_storeu_ps(z.add(i), vop::<OP>(_mm256_loadu_ps(x.add(i)), yv));
            i += 8;
        }
        while i < n {
            *z.add(i) = sop::<OP>(*x.add(i), y);
            i += 1;
        }
    }
}

/// `z[i] = x[i] * s + b` (multiply only when `b == 0`).
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_bias(z: *mut f32, x: *const f32, s: f32, b: f32, n: usize) {
    if b == 0.0 {
        // SAFETY: forwarded preconditions.
        return unsafe { bin_vs::<1>(z, x, s, n) };
    }
    let (sv, bv) = (_mm256_set1_ps(s), _mm256_set1_ps(b));
    let mut i = 0;
    // SAFETY: as in `bin_vv`.
    unsafe {
        while i + 8 <= n {
            let v = _mm256_mul_ps(_mm256_loadu_ps(x.add(i)), sv);
            _mm256_storeu_ps(z.add(i), _mm256_add_ps(v, bv));
            i += 8;
        }
        while i < n {
            *z.add(i) = *x.add(i) * s + b;
            i += 1;
        }
    }
}

/// `z[i] = (x[i] - m) * s`.
///
/// # Safety
/// AVX2/FMA/F16C present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sub_scale(z: *mut f32, x: *const f32, m: f32, s: f32, n: usize, pf: Prefetch) {
    let (mv, sv) = (_mm256_set1_ps(m), _mm256_set1_ps(s));
    let mut i = 0;
    // x - (+0) == x for every x (NaN stays NaN, -0 - +0 == -0): then
    // subtracting is skipped, which gives the same bits.
    let sub = m.to_bits() != 0;
    // SAFETY: as in `bin_vv`.
    unsafe {
        while i + 16 <= n {
            prefetch(&pf, 4 * i);
            let (mut a0, mut a1) = (_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(x.add(i + 8)));
            if sub {
                a0 = _mm256_sub_ps(a0, mv);
                a1 = _mm256_sub_ps(a1, mv);
            }
            _mm256_storeu_ps(z.add(i), _mm256_mul_ps(a0, sv));
            _mm256_storeu_ps(z.add(i + 8), _mm256_mul_ps(a1, sv));
            i += 16;
        }
        while i < n {
            *z.add(i) = (*x.add(i) - m) * s;
            i += 1;
        }
    }
}

/// `sum x[i]` in f64.
///
/// # Safety
/// AVX2/FMA/F16C present; `n` readable elements at `x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum_f64(x: *const f32, n: usize) -> f64 {
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut i = 0;
    let mut tail = 0.0f64;
    // SAFETY: every access is below `n`.
    unsafe {
        while i + 16 <= n {
            let [a0, a1, a2, a3] = &mut acc;
            add_wide(_mm256_loadu_ps(x.add(i)), a0, a1);
            add_wide(_mm256_loadu_ps(x.add(i + 8)), a2, a3);
            i += 16;
        }
        while i < n {
            tail += f64::from(*x.add(i));
            i += 1;
        }
    }
    let s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    hsum_pd(s) + tail
}

/// `sum (x[i] - m)^2` in f64, each difference rounded to f32 first.
///
/// # Safety
/// AVX2/FMA/F16C present; `n` readable elements at `x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum_sq_f64(x: *const f32, m: f32, n: usize) -> f64 {
    let mv = _mm256_set1_ps(m);
    // x - (+0) == x: skip the subtraction for plain sums of squares.
    let sub = m.to_bits() != 0;
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut i = 0;
    let mut tail = 0.0f64;
    // SAFETY: every access is below `n`.
    unsafe {
        while i + 16 <= n {
            let [a0, a1, a2, a3] = &mut acc;
            let (mut v0, mut v1) = (_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(x.add(i + 8)));
            if sub {
                v0 = _mm256_sub_ps(v0, mv);
                v1 = _mm256_sub_ps(v1, mv);
            }
            add_sq_wide(v0, a0, a1);
            add_sq_wide(v1, a2, a3);
            i += 16;
        }
        while i < n {
            let v = f64::from(*x.add(i) - m);
            tail += v * v;
            i += 1;
        }
    }
    let s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    hsum_pd(s) + tail
}
