//! AVX2/FMA/F16C dot products for the hottest weight types: F32, F16, BF16,
//! Q4_0, Q8_0, Q4K and Q6K (Q2K, Q3K and Q5K: [`super::gemv_avx2_k`]).
//!
//! Each `*_avx2` function is compiled with `#[target_feature]` and may only
//! run on a CPU that has AVX2, FMA and F16C. The safe wrappers handed out by
//! [`dot_fn`] are private to this module and [`dot_fn`] returns them only
//! after checking the CPU, which is what makes calling them sound. Off
//! x86-64, [`dot_fn`] returns `None` and callers use the portable path.
//!
//! The quantized kernels compute the same exact integer sums per block as
//! [`super::dot_quant`] (the signed-by-unsigned `maddubs` trick: products of
//! 4- or 6-bit unsigned quants and signed 8-bit activations cannot overflow
//! the 16-bit pair sums), then scale in f32 with FMA.

use tessera::DType;

use super::dot::DotFn;

/// The AVX2 dot product for `weights`, if there is one and the CPU has
/// AVX2, FMA and F16C.
pub fn dot_fn(weights: DType) -> Option<DotFn> {
    imp::dot_fn(weights)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub fn dot_fn(_weights: DType) -> Option<DotFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::dot_quant::{
        Q4_0_BYTES, Q4K_BYTES, Q6K_BYTES, Q8_0_BYTES, Q8K_BYTES, f16_at, q4k_scales_mins,
        q8k_bsums_dot_mins, q8k_d,
    };

    pub fn dot_fn(weights: DType) -> Option<DotFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::F32 => f32_safe,
            DType::F16 => f16_safe,
            DType::BF16 => bf16_safe,
            DType::Q4_0 => q4_0_safe,
            DType::Q8_0 => q8_0_safe,
            DType::Q4K => q4k_safe,
            DType::Q6K => q6k_safe,
            _ => return None,
        })
    }

    macro_rules! safe_wrapper {
        ($safe:ident, $imp:ident) => {
            fn $safe(x: &[u8], y: &[u8]) -> f32 {
                // SAFETY: this wrapper is only reachable through `dot_fn`,
                // which returns it only after checking that the CPU has AVX2,
                // FMA and F16C (the features `$imp` is compiled for).
                unsafe { $imp(x, y) }
            }
        };
    }
    safe_wrapper!(f32_safe, dot_f32);
    safe_wrapper!(f16_safe, dot_f16);
    safe_wrapper!(bf16_safe, dot_bf16);
    safe_wrapper!(q4_0_safe, dot_q4_0);
    safe_wrapper!(q8_0_safe, dot_q8_0);
    safe_wrapper!(q4k_safe, dot_q4k);
    safe_wrapper!(q6k_safe, dot_q6k);

    /// Sum of the eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Signed 8-bit dot of 32 pairs as eight f32 partial sums (`x` must not
    /// hold -128 together with `y` = -128 in a pair; Q8 activations never hold -128).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256 {
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        let dot = _mm256_maddubs_epi16(ax, sy);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)))
    }

    /// Shared body of the float dots: `W` bytes per element, `load` widens 8
    /// elements to f32, `scalar` converts one for the tail.
    macro_rules! float_dot {
        ($name:ident, $w:expr, $load:expr, $scalar:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn $name(x: &[u8], y: &[u8]) -> f32 {
                const W: usize = $w;
                let n = (x.len() / W).min(y.len() / W);
                let (x, y) = (&x[..n * W], &y[..n * W]);
                let mut acc = [_mm256_setzero_ps(); 4];
                let xc = x.chunks_exact(32 * W);
                let yc = y.chunks_exact(32 * W);
                let (xr, yr) = (xc.remainder(), yc.remainder());
                for (xb, yb) in xc.zip(yc) {
                    for (i, a) in acc.iter_mut().enumerate() {
                        // SAFETY: each chunk holds 32 elements; lane group `i`
                        // reads elements 8i..8i+8, inside the chunk.
                        let (vx, vy) = unsafe {
                            (
                                $load(xb.as_ptr().add(8 * i * W)),
                                $load(yb.as_ptr().add(8 * i * W)),
                            )
                        };
                        *a = _mm256_fmadd_ps(vx, vy, *a);
                    }
                }
                let mut tail = 0f32;
                for (xe, ye) in xr.chunks_exact(W).zip(yr.chunks_exact(W)) {
                    tail += $scalar(xe) * $scalar(ye);
                }
                let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                hsum(s) + tail
            }
        };
    }

    /// Eight f32 at `p` (unaligned).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f32(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 32 readable bytes; loadu needs no alignment.
        unsafe { _mm256_loadu_ps(p.cast()) }
    }

    /// Eight f16 at `p` widened to f32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f16(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }

    /// Eight bf16 at `p` widened to f32 (the upper halves of f32s).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_bf16(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes.
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    fn f32_of(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn f16_of(b: &[u8]) -> f32 {
        f16_at(b, 0)
    }
    fn bf16_of(b: &[u8]) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    }

    float_dot!(dot_f32, 4, load_f32, f32_of);
    float_dot!(dot_f16, 2, load_f16, f16_of);
    float_dot!(dot_bf16, 2, load_bf16, bf16_of);

    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_q4_0(x: &[u8], y: &[u8]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let m4 = _mm256_set1_epi8(0xf);
        let eight = _mm256_set1_epi8(8);
        for (xb, yb) in x.chunks_exact(Q4_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
            let d = _mm256_set1_ps(f16_at(xb, 0) * f16_at(yb, 0));
            // SAFETY: a Q4_0 block has 16 quant bytes at 2..18, a Q8_0 block
            // 32 at 2..34; the chunks are whole blocks.
            let (q, qy) = unsafe {
                (
                    _mm_loadu_si128(xb.as_ptr().add(2).cast()),
                    _mm256_loadu_si256(yb.as_ptr().add(2).cast()),
                )
            };
            // Low nibbles (values 0..16) in the low lane, high ones above.
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
            let qx = _mm256_sub_epi8(_mm256_and_si256(both, m4), eight);
            acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
        }
        hsum(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_q8_0(x: &[u8], y: &[u8]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (xb, yb) in x.chunks_exact(Q8_0_BYTES).zip(y.chunks_exact(Q8_0_BYTES)) {
            let d = _mm256_set1_ps(f16_at(xb, 0) * f16_at(yb, 0));
            // SAFETY: both blocks hold 32 quant bytes at 2..34.
            let (qx, qy) = unsafe {
                (
                    _mm256_loadu_si256(xb.as_ptr().add(2).cast()),
                    _mm256_loadu_si256(yb.as_ptr().add(2).cast()),
                )
            };
            acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
        }
        hsum(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_q4k(x: &[u8], y: &[u8]) -> f32 {
        let m4 = _mm256_set1_epi8(0xf);
        let mut acc = _mm256_setzero_ps();
        let mut acc_min = 0f32;
        for (xb, yb) in x.chunks_exact(Q4K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
            let yd = q8k_d(yb);
            let (sc, mn) = q4k_scales_mins(&xb[4..16]);
            acc_min += f16_at(xb, 2) * yd * q8k_bsums_dot_mins(yb, &mn) as f32;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                // SAFETY: quants of 64 values are 32 bytes at 16 + 32j (< 144);
                // their activations 64 bytes at 4 + 64j (< 260).
                let (q4, q8l, q8h) = unsafe {
                    (
                        _mm256_loadu_si256(xb.as_ptr().add(16 + 32 * j).cast()),
                        _mm256_loadu_si256(yb.as_ptr().add(4 + 64 * j).cast()),
                        _mm256_loadu_si256(yb.as_ptr().add(36 + 64 * j).cast()),
                    )
                };
                let q4l = _mm256_and_si256(q4, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4), m4);
                let pl = _mm256_madd_epi16(
                    _mm256_set1_epi16(i16::from(sc[2 * j])),
                    _mm256_maddubs_epi16(q4l, q8l),
                );
                let ph = _mm256_madd_epi16(
                    _mm256_set1_epi16(i16::from(sc[2 * j + 1])),
                    _mm256_maddubs_epi16(q4h, q8h),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
            }
            let d = _mm256_set1_ps(f16_at(xb, 0) * yd);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum(acc) - acc_min
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_q6k(x: &[u8], y: &[u8]) -> f32 {
        let m4 = _mm256_set1_epi8(0xf);
        let m2 = _mm256_set1_epi8(3);
        let m32 = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for (xb, yb) in x.chunks_exact(Q6K_BYTES).zip(y.chunks_exact(Q8K_BYTES)) {
            let mut sumi = _mm256_setzero_si256();
            for c in 0..2 {
                // SAFETY: ql of 128 values is 64 bytes at 64c, qh 32 bytes at
                // 128 + 32c (< 192); activations 128 bytes at 4 + 128c (< 260).
                let (l1, l2, h) = unsafe {
                    (
                        _mm256_loadu_si256(xb.as_ptr().add(64 * c).cast()),
                        _mm256_loadu_si256(xb.as_ptr().add(64 * c + 32).cast()),
                        _mm256_loadu_si256(xb.as_ptr().add(128 + 32 * c).cast()),
                    )
                };
                let hi = |shift: i32| -> __m256i {
                    let bits = match shift {
                        0 => h,
                        2 => _mm256_srli_epi16::<2>(h),
                        4 => _mm256_srli_epi16::<4>(h),
                        _ => _mm256_srli_epi16::<6>(h),
                    };
                    _mm256_slli_epi16::<4>(_mm256_and_si256(bits, m2))
                };
                let q = [
                    _mm256_or_si256(_mm256_and_si256(l1, m4), hi(0)),
                    _mm256_or_si256(_mm256_and_si256(l2, m4), hi(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4), hi(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l2), m4), hi(6)),
                ];
                let sc = &xb[192 + 8 * c..200 + 8 * c];
                for (n, qn) in q.iter().enumerate() {
                    // SAFETY: 32 activation bytes at 4 + 128c + 32n (< 260).
                    let q8 =
                        unsafe { _mm256_loadu_si256(yb.as_ptr().add(4 + 128 * c + 32 * n).cast()) };
                    // q in 0..64 times q8, minus 32 * q8: (q - 32) * q8 in pairs.
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(*qn, q8),
                        _mm256_maddubs_epi16(m32, q8),
                    );
                    let scales = _mm256_set_m128i(
                        _mm_set1_epi16(i16::from(sc[2 * n + 1] as i8)),
                        _mm_set1_epi16(i16::from(sc[2 * n] as i8)),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
                }
            }
            let d = _mm256_set1_ps(f16_at(xb, 208) * q8k_d(yb));
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum(acc)
    }
}
