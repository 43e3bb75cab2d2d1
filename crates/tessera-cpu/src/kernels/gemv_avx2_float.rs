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
use super::gemv_avx2_q8::{prefetch, prefetch_l2};

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

/// Values ahead of the current ones whose weight bytes the multi-column
/// tiles prefetch into L2: MUL_MAT cuts float rows into slices of this many
/// values (`matmul::k_block`) and calls a tile for each slice and column
/// chunk, so this is the same rows' next slice, read from memory while the
/// other column chunks of this slice compute from cache. Measured with
/// `TESSERA_CPU_ISA=avx2` on Zen 4, `n = 8`, one thread, distances 0 /
/// 1 / 2 / 4 slices: F32 20.1-20.3 / 17.3-17.8 / 17.4-17.8 / 17.8-18.1 ms,
/// F16 13.2-13.5 / 12.7-13.0 / 13.2-13.3 / 13.2 ms.
pub(crate) const L2_AHEAD_VALUES: usize = 1024;

/// One row of a step of `float_tile_4x3`'s kernels: eight values of row
/// `$x` loaded by `$load` (elements of `$wx` bytes, `$d` steps of eight
/// from element `{e}`) into `{t}` and multiplied into the row's three
/// accumulators `$c0..$c2` with the columns' values `{b0}..{b2}`.
macro_rules! float_row {
    ($load:literal, $wx:literal, $d:literal, $x:literal, $c0:literal, $c1:literal, $c2:literal) => {
        concat!(
            $load,
            "[{",
            $x,
            "} + {e} * ",
            $wx,
            " + 8 * ",
            $wx,
            " * ",
            $d,
            "]\n",
            "vfmadd231ps {",
            $c0,
            "}, {t}, {b0}\n",
            "vfmadd231ps {",
            $c1,
            "}, {t}, {b1}\n",
            "vfmadd231ps {",
            $c2,
            "}, {t}, {b2}\n",
        )
    };
}

/// One step of `float_tile_4x3`'s kernels, `$d` steps of eight values
/// from element `{e}`: the three columns' values, then the four rows.
macro_rules! float_step {
    ($load:literal, $wx:literal, $d:literal) => {
        concat!(
            "vmovups {b0}, ymmword ptr [{y0} + {e} * 4 + 32 * ",
            $d,
            "]\n",
            "vmovups {b1}, ymmword ptr [{y1} + {e} * 4 + 32 * ",
            $d,
            "]\n",
            "vmovups {b2}, ymmword ptr [{y2} + {e} * 4 + 32 * ",
            $d,
            "]\n",
            float_row!($load, $wx, $d, "x0", "c00", "c10", "c20"),
            float_row!($load, $wx, $d, "x1", "c01", "c11", "c21"),
            float_row!($load, $wx, $d, "x2", "c02", "c12", "c22"),
            float_row!($load, $wx, $d, "x3", "c03", "c13", "c23"),
        )
    };
}

/// Defines `$name`: the 4 x 3 tile of weights loaded by the instruction
/// `$load` (eight values into a ymm register from `[{x} + {e} * $xs + disp]`)
/// against three f32 columns, in inline assembly: twelve accumulators, the
/// three columns' eight values and one row's fill AVX2's sixteen vector
/// registers exactly, which LLVM's scheduler does not keep to (it widens the
/// next row early and spills an accumulator: measured 14.6 -> 21 ms at `n =
/// 8` for a 4 x 3 tile in intrinsics). ggml's tinyBLAS uses this shape.
macro_rules! float_tile_4x3 {
    ($name:ident, $generic:ident, $wx:literal, $load:literal) => {
        /// # Safety
        /// Every row and column must hold `n` elements; the CPU must have
        /// AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(xs: [*const u8; 4], ys: [*const u8; 3], n: usize) -> [[f32; 4]; 3] {
            let z = _mm256_setzero_ps();
            let [mut c00, mut c01, mut c02, mut c03] = [z; 4];
            let [mut c10, mut c11, mut c12, mut c13] = [z; 4];
            let [mut c20, mut c21, mut c22, mut c23] = [z; 4];
            let mut e = 0usize;
            while e + 32 <= n {
                for x in xs {
                    let p = x.wrapping_add(e * $wx);
                    prefetch(p, 32 * $wx);
                    prefetch_l2(p.wrapping_add(L2_AHEAD_VALUES * $wx), 32 * $wx);
                }
                // SAFETY: elements e..e + 32 <= n of every row and column are
                // readable (the caller's contract); the block reads memory
                // only there and writes only its register operands.
                unsafe {
                    std::arch::asm!(
                        float_step!($load, $wx, "0"),
                        float_step!($load, $wx, "1"),
                        float_step!($load, $wx, "2"),
                        float_step!($load, $wx, "3"),
                        x0 = in(reg) xs[0], x1 = in(reg) xs[1],
                        x2 = in(reg) xs[2], x3 = in(reg) xs[3],
                        y0 = in(reg) ys[0], y1 = in(reg) ys[1], y2 = in(reg) ys[2],
                        e = in(reg) e,
                        c00 = inout(ymm_reg) c00, c01 = inout(ymm_reg) c01,
                        c02 = inout(ymm_reg) c02, c03 = inout(ymm_reg) c03,
                        c10 = inout(ymm_reg) c10, c11 = inout(ymm_reg) c11,
                        c12 = inout(ymm_reg) c12, c13 = inout(ymm_reg) c13,
                        c20 = inout(ymm_reg) c20, c21 = inout(ymm_reg) c21,
                        c22 = inout(ymm_reg) c22, c23 = inout(ymm_reg) c23,
                        b0 = out(ymm_reg) _, b1 = out(ymm_reg) _, b2 = out(ymm_reg) _,
                        t = out(ymm_reg) _,
                        options(nostack, readonly, preserves_flags),
                    );
                }
                e += 32;
            }
            let acc = [[c00, c01, c02, c03], [c10, c11, c12, c13], [c20, c21, c22, c23]];
            let mut out = hsums(&acc);
            // The rest (fewer than 32 values) by the generic kernel.
            if e < n {
                // SAFETY: elements e..n of every row and column (the caller's).
                let rest = unsafe {
                    $generic::<4, 3>(
                        xs.map(|x| x.add(e * $wx)),
                        ys.map(|y| y.add(e * 4)),
                        n - e,
                    )
                };
                for (o, r) in out.iter_mut().zip(rest) {
                    for (o, r) in o.iter_mut().zip(r) {
                        *o += r;
                    }
                }
            }
            out
        }
    };
}

float_tile_4x3!(
    f16_f32_tile_4x3,
    f16_f32_tile,
    2,
    "vcvtph2ps {t}, xmmword ptr "
);
float_tile_4x3!(f32_tile_4x3, f32_tile, 4, "vmovups {t}, ymmword ptr ");
