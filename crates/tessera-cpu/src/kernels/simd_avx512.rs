//! Binary ops (ADD, MUL, SUB, DIV of f32 rows) on sixteen lanes
//! (AVX-512F): the same IEEE operation per element as the AVX2 and
//! portable bodies, so the results are bit for bit theirs. Tails use
//! masked loads and stores (no access past `n`).
//!
//! Why: on an AMD EPYC Zen 5 (full-width AVX-512), 2 threads, ADD and MUL
//! of 4096 x 512 rows from L3 were 0.86x-0.92x of ggml's (`tessera bench
//! ops --op ADD --ggml …`), whose loops the compiler widens to 512 bits.
//!
//! Every function is `#[target_feature(enable = "avx512f")]`;
//! [`super::simd::Simd`] is the only caller and checks the CPU first.
//! Pointer preconditions are those of the `simd` module docs.

use std::arch::x86_64::*;

use super::simd::BinKind;

/// The vector form of `op` (`OP`: 0 add, 1 mul, 2 div, 3 sub).
#[inline]
#[target_feature(enable = "avx512f")]
fn vop<const OP: u8>(a: __m512, b: __m512) -> __m512 {
    match OP {
        0 => _mm512_add_ps(a, b),
        1 => _mm512_mul_ps(a, b),
        3 => _mm512_sub_ps(a, b),
        _ => _mm512_div_ps(a, b),
    }
}

/// `z[i] = x[i] op y[i]`.
///
/// # Safety
/// AVX-512F present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx512f")]
pub unsafe fn binary(op: BinKind, z: *mut f32, x: *const f32, y: *const f32, n: usize) {
    // SAFETY: forwarded preconditions.
    unsafe {
        match op.code() {
            0 => bin::<0, false>(z, x, y, n),
            1 => bin::<1, false>(z, x, y, n),
            3 => bin::<3, false>(z, x, y, n),
            _ => bin::<2, false>(z, x, y, n),
        }
    }
}

/// `z[i] = x[i] op y[0]` (a broadcast scalar).
///
/// # Safety
/// AVX-512F present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx512f")]
pub unsafe fn binary_scalar(op: BinKind, z: *mut f32, x: *const f32, y: f32, n: usize) {
    let y = std::ptr::from_ref(&y);
    // SAFETY: forwarded preconditions; `y` is one readable f32.
    unsafe {
        match op.code() {
            0 => bin::<0, true>(z, x, y, n),
            1 => bin::<1, true>(z, x, y, n),
            3 => bin::<3, true>(z, x, y, n),
            _ => bin::<2, true>(z, x, y, n),
        }
    }
}

/// The loop of both: `y` is a row, or one value when `SCALAR`.
///
/// # Safety
/// AVX-512F present; `x`, `z` (and `y` unless `SCALAR`) hold `n` f32, `y`
/// at least one.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn bin<const OP: u8, const SCALAR: bool>(
    z: *mut f32,
    x: *const f32,
    y: *const f32,
    n: usize,
) {
    let mut i = 0;
    // SAFETY: `i + 16 <= n`, or a mask of the lanes below `n`; each chunk
    // is loaded before it is stored, so `z` may equal `x` or `y`.
    unsafe {
        while i + 32 <= n {
            let a0 = _mm512_loadu_ps(x.add(i));
            let a1 = _mm512_loadu_ps(x.add(i + 16));
            let (b0, b1) = (load_y::<SCALAR>(y, i, !0), load_y::<SCALAR>(y, i + 16, !0));
            _mm512_storeu_ps(z.add(i), vop::<OP>(a0, b0));
            _mm512_storeu_ps(z.add(i + 16), vop::<OP>(a1, b1));
            i += 32;
        }
        while i < n {
            let m: __mmask16 = if n - i >= 16 {
                !0
            } else {
                (1u16 << (n - i)) - 1
            };
            let r = vop::<OP>(
                _mm512_maskz_loadu_ps(m, x.add(i)),
                load_y::<SCALAR>(y, i, m),
            );
            _mm512_mask_storeu_ps(z.add(i), m, r);
            i += 16;
        }
    }
}

/// Lanes `i..i + 16` of `y` under mask `m` (zeros elsewhere), or `y[0]` in
/// every lane when `SCALAR`.
///
/// # Safety
/// AVX-512F present; the lanes of `m` lie in `y` (one f32 when `SCALAR`).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_y<const SCALAR: bool>(y: *const f32, i: usize, m: __mmask16) -> __m512 {
    // SAFETY: the caller's.
    unsafe {
        if SCALAR {
            _mm512_set1_ps(*y)
        } else {
            _mm512_maskz_loadu_ps(m, y.add(i))
        }
    }
}
