//! AVX2/F16C bodies of ROPE's rotation, for F32 and F16 rows.
//!
//! The cos/sin of each pair come precomputed (once per position, shared by
//! every head, see `super::rope`). Normal mode reads them interleaved
//! (`[c0, s0, c1, s1, ...]`, the layout of the pairs themselves); NeoX mode
//! reads two arrays (`cos[i]`, `sin[i]`). Per element the operations are the
//! portable code's (two rounded products, then one sum or difference), so
//! results are bit-identical to it.
//!
//! Every function is `#[target_feature(enable = "avx2,fma,f16c")]`; the
//! ROPE kernel calls them only after `super::simd::Simd` found the features.

use std::arch::x86_64::*;

use half::f16;

use super::cvt_avx2::to_f16x8;
use super::elem::Float;

/// Eight elements of a row as f32, and back.
trait Lanes: Float {
    /// # Safety
    /// Eight readable elements at `p`.
    unsafe fn load8(p: *const Self) -> __m256;
    /// # Safety
    /// Eight writable elements at `p`.
    unsafe fn store8(p: *mut Self, v: __m256);
}

impl Lanes for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: forwarded precondition; only reached from AVX2 code.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn store8(p: *mut f32, v: __m256) {
        // SAFETY: forwarded precondition; only reached from AVX2 code.
        unsafe { _mm256_storeu_ps(p, v) }
    }
}

impl Lanes for f16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: forwarded precondition; only reached from AVX2/F16C code.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn store8(p: *mut f16, v: __m256) {
        // SAFETY: forwarded precondition; only reached from AVX2/F16C code.
        unsafe { _mm_storeu_si128(p.cast(), to_f16x8(v)) }
    }
}

/// Normal mode: rotate pairs `(2i, 2i + 1)` of `src[..nd]` into `dst` with
/// `cs = [cos_0, sin_0, cos_1, sin_1, ...]` (`nd` floats).
///
/// # Safety
/// AVX2/FMA/F16C present; `nd` (even) elements at `src`, `dst` and `cs`;
/// `dst` equals `src` or does not overlap it.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn normal_f32(dst: *mut f32, src: *const f32, cs: *const f32, nd: usize) {
    // SAFETY: forwarded preconditions.
    unsafe { normal::<f32>(dst, src, cs, nd) }
}

/// [`normal_f32`] for F16 rows.
///
/// # Safety
/// As [`normal_f32`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn normal_f16(dst: *mut f16, src: *const f16, cs: *const f32, nd: usize) {
    // SAFETY: forwarded preconditions.
    unsafe { normal::<f16>(dst, src, cs, nd) }
}

/// NeoX mode: rotate pairs `(i, i + h)` for `i < h` with `cos[i]`, `sin[i]`.
///
/// # Safety
/// AVX2/FMA/F16C present; `2h` elements at `src` and `dst`, `h` at `cos`
/// and `sin`; `dst` equals `src` or does not overlap it.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn neox_f32(dst: *mut f32, src: *const f32, cos: *const f32, sin: *const f32, h: usize) {
    // SAFETY: forwarded preconditions.
    unsafe { neox::<f32>(dst, src, cos, sin, h) }
}

/// [`neox_f32`] for F16 rows.
///
/// # Safety
/// As [`neox_f32`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn neox_f16(dst: *mut f16, src: *const f16, cos: *const f32, sin: *const f32, h: usize) {
    // SAFETY: forwarded preconditions.
    unsafe { neox::<f16>(dst, src, cos, sin, h) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn normal<T: Lanes>(dst: *mut T, src: *const T, cs: *const f32, nd: usize) {
    let mut i = 0;
    // SAFETY: every access is below `nd`; a chunk is read before it is
    // written (in place works).
    unsafe {
        while i + 8 <= nd {
            let x = T::load8(src.add(i));
            let c = _mm256_loadu_ps(cs.add(i));
            let cc = _mm256_moveldup_ps(c); // c0 c0 c1 c1 ...
            let ss = _mm256_movehdup_ps(c); // s0 s0 s1 s1 ...
            let xs = _mm256_permute_ps::<0b10_11_00_01>(x); // x1 x0 x3 x2 ...
            // even: x0 c - x1 s; odd: x1 c + x0 s.
            let r = _mm256_addsub_ps(_mm256_mul_ps(x, cc), _mm256_mul_ps(xs, ss));
            T::store8(dst.add(i), r);
            i += 8;
        }
        while i + 1 < nd {
            let (c, s) = (*cs.add(i), *cs.add(i + 1));
            let x0 = (*src.add(i)).to_f32();
            let x1 = (*src.add(i + 1)).to_f32();
            *dst.add(i) = T::from_f32(x0 * c - x1 * s);
            *dst.add(i + 1) = T::from_f32(x0 * s + x1 * c);
            i += 2;
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn neox<T: Lanes>(dst: *mut T, src: *const T, cos: *const f32, sin: *const f32, h: usize) {
    let mut i = 0;
    // SAFETY: every access is below `h` (cos, sin) or `2h` (rows); both
    // halves of a chunk are read before either is written.
    unsafe {
        while i + 8 <= h {
            let x0 = T::load8(src.add(i));
            let x1 = T::load8(src.add(i + h));
            let c = _mm256_loadu_ps(cos.add(i));
            let s = _mm256_loadu_ps(sin.add(i));
            let r0 = _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s));
            let r1 = _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c));
            T::store8(dst.add(i), r0);
            T::store8(dst.add(i + h), r1);
            i += 8;
        }
        while i < h {
            let (c, s) = (*cos.add(i), *sin.add(i));
            let x0 = (*src.add(i)).to_f32();
            let x1 = (*src.add(i + h)).to_f32();
            *dst.add(i) = T::from_f32(x0 * c - x1 * s);
            *dst.add(i + h) = T::from_f32(x0 * s + x1 * c);
            i += 1;
        }
    }
}
