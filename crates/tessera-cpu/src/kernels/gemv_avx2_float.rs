//! AVX2/FMA/F16C tile kernels for float weights (see [`super::gemv_avx2`]
//! for the tile contract): F32 x F32, F16 x F16 and BF16 x BF16 (the dot
//! types, used by flash attention), and F16 x F32 and BF16 x F32, which
//! MUL_MAT uses so that the activations are neither rounded nor converted
//! (one widening per weight vector instead of one per weight and one per
//! activation vector).
//!
//! Each kernel keeps `R x C` accumulators of eight lanes; a step loads the
//! eight next values of every column once and of every row once and does
//! `R * C` FMAs. Weight rows are prefetched ahead of the loads.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::gemv_avx2::imp::{f16_at, hsums};
use super::gemv_avx2_q8::prefetch;

/// Defines tile kernel `$name`: weight elements of `$wx` bytes widened by
/// `$lx` (eight) and `$sx` (one), activations of `$wy` bytes by `$ly`, `$sy`.
macro_rules! float_tile {
    ($name:ident, $wx:expr, $lx:ident, $sx:ident, $wy:expr, $ly:ident, $sy:ident) => {
        /// # Safety
        /// Every row and column must hold `n` elements; the CPU must have
        /// AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name<const R: usize, const C: usize>(
            xs: [*const u8; R],
            ys: [*const u8; C],
            n: usize,
        ) -> [[f32; R]; C] {
            const WX: usize = $wx;
            const WY: usize = $wy;
            let mut acc = [[_mm256_setzero_ps(); R]; C];
            let mut i = 0;
            // Two steps per iteration when there are few chains.
            if R * C <= 2 {
                let mut acc2 = [[_mm256_setzero_ps(); R]; C];
                while i + 16 <= n {
                    for x in xs {
                        prefetch(x.wrapping_add(i * WX), 16 * WX);
                    }
                    for r in 0..R {
                        // SAFETY: elements i..i + 16 < n of every row and column.
                        let x0 = unsafe { $lx(xs[r].add(i * WX)) };
                        // SAFETY: as above.
                        let x1 = unsafe { $lx(xs[r].add((i + 8) * WX)) };
                        for c in 0..C {
                            // SAFETY: as above.
                            let y0 = unsafe { $ly(ys[c].add(i * WY)) };
                            // SAFETY: as above.
                            let y1 = unsafe { $ly(ys[c].add((i + 8) * WY)) };
                            acc[c][r] = _mm256_fmadd_ps(x0, y0, acc[c][r]);
                            acc2[c][r] = _mm256_fmadd_ps(x1, y1, acc2[c][r]);
                        }
                    }
                    i += 16;
                }
                for (a, b) in acc.iter_mut().zip(&acc2) {
                    for (a, b) in a.iter_mut().zip(b) {
                        *a = _mm256_add_ps(*a, *b);
                    }
                }
            }
            while i + 8 <= n {
                if (i * WX) % 64 == 0 {
                    for x in xs {
                        prefetch(x.wrapping_add(i * WX), 1);
                    }
                }
                let mut y = [_mm256_setzero_ps(); C];
                for c in 0..C {
                    // SAFETY: elements i..i + 8 < n.
                    y[c] = unsafe { $ly(ys[c].add(i * WY)) };
                }
                for r in 0..R {
                    // SAFETY: elements i..i + 8 < n.
                    let x = unsafe { $lx(xs[r].add(i * WX)) };
                    for c in 0..C {
                        acc[c][r] = _mm256_fmadd_ps(x, y[c], acc[c][r]);
                    }
                }
                i += 8;
            }
            let mut out = hsums(&acc);
            for e in i..n {
                for c in 0..C {
                    for r in 0..R {
                        // SAFETY: element e < n.
                        unsafe {
                            out[c][r] += $sx(xs[r].add(e * WX)) * $sy(ys[c].add(e * WY));
                        }
                    }
                }
            }
            out
        }
    };
}

/// Eight f32 at `p` (unaligned).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 32 readable bytes.
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

/// One f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn one_f32(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    unsafe { p.cast::<f32>().read_unaligned() }
}

/// One bf16 at `p` as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn one_bf16(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    f32::from_bits(u32::from(unsafe { p.cast::<u16>().read_unaligned() }) << 16)
}

float_tile!(f32_tile, 4, load_f32, one_f32, 4, load_f32, one_f32);
float_tile!(f16_tile, 2, load_f16, f16_at, 2, load_f16, f16_at);
float_tile!(bf16_tile, 2, load_bf16, one_bf16, 2, load_bf16, one_bf16);
float_tile!(f16_f32_tile, 2, load_f16, f16_at, 4, load_f32, one_f32);
float_tile!(bf16_f32_tile, 2, load_bf16, one_bf16, 4, load_f32, one_f32);
