//! AVX2 tile kernels for the weight types dotted with Q8_0 activations:
//! Q4_0 and Q8_0 (see [`super::gemv_avx2`] for the tile contract).
//!
//! These are the hottest kernels of token generation, and on AVX2 they are
//! bound by the vector ports, not by memory, so they are written to spend as
//! few instructions per 32-value block as possible:
//! - Q4_0: blocks are taken in pairs, one per 128-bit half of a register,
//!   so the widening to i32, the conversion to f32 and the scaling FMA are
//!   done once for two blocks; the f16 scales of eight blocks are gathered
//!   and converted with one F16C instruction, multiplied with the
//!   activations' scales, and read back per pair from the stack; the nibbles
//!   go into `maddubs` unsigned (0..16), the offset 8 removed by subtracting
//!   `8 * (y_i + y_j)` per pair of activations, computed once per block and
//!   shared by the rows of the tile;
//! - Q8_0: ggml's sign trick (`|x|` unsigned times `y` with `x`'s sign in
//!   `maddubs`, exact for every weight byte because Q8_0 activations never
//!   hold -128), then the eight i32 lanes of eight blocks are added into
//!   per-block sums by unpacks (port 5, which the products leave idle) so
//!   that one conversion and one multiply-add with the eight blocks' scales
//!   (`dx * dy`, block order) serve eight blocks.
//!
//! Integer block sums are exact; the f32 scaling rounds like the one-row
//! kernels, in a different order.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_quant::{Q4_0_BYTES, Q8_0_BYTES};
use super::gemv_avx2::imp::{f16_at, hsums};

/// Blocks per scale gather.
const SB: usize = 8;

/// Prefetch the `len` bytes of a weight row at `p` plus the prefetch
/// distance in force ([`super::row_ahead::distance`]: the machine's, 1536
/// bytes, 512 on Zen 4, or a tile call's) (hints only: prefetching past the
/// end of the row is harmless).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch(p: *const u8, len: usize) {
    prefetch_at(p, len, super::row_ahead::distance());
}

/// [`prefetch`] at the distance `ahead`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch_at(p: *const u8, len: usize, ahead: usize) {
    let mut o = 0;
    while o < len {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ahead + o).cast());
        o += 64;
    }
}

/// Prefetch the `len` bytes at `p` into L2 (hints only: past the end of a
/// row is harmless).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_l2(p: *const u8, len: usize) {
    let mut o = 0;
    while o < len {
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o).cast());
        o += 64;
    }
}

/// [`prefetch`], plus the same bytes four times further ahead into L2: for
/// the one-stream-per-thread K-quant kernels, which otherwise keep too few
/// DRAM reads in flight (measured: +5 % from DRAM, nothing lost from L3).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_far(p: *const u8, len: usize) {
    let ahead = super::row_ahead::distance();
    prefetch_at(p, len, ahead);
    let far = 4 * ahead;
    let mut o = 0;
    while o < len {
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(far + o).cast());
        o += 64;
    }
}

/// The f16 scales at `p`, `p + stride`, ... (eight of them) as f32.
///
/// # Safety
/// Two bytes at `p + i * stride` must be readable for `i < 8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scales8(p: *const u8, stride: usize) -> __m256 {
    // SAFETY: forwarded to the caller.
    let h = |i: usize| unsafe { p.add(i * stride).cast::<i16>().read_unaligned() };
    _mm256_cvtph_ps(_mm_setr_epi16(
        h(0),
        h(1),
        h(2),
        h(3),
        h(4),
        h(5),
        h(6),
        h(7),
    ))
}

/// The f16 scales of the first `n` (at most eight) blocks at `p`, `p +
/// stride`, ... as f32, zero in the lanes past `n`: the scales of a last,
/// partial group of blocks.
///
/// # Safety
/// Two bytes at `p + i * stride` must be readable for `i < min(n, 8)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scales_upto(p: *const u8, stride: usize, n: usize) -> __m256 {
    let mut h = [0u16; 8];
    for (i, h) in h.iter_mut().enumerate().take(n) {
        // SAFETY: forwarded to the caller (i < n).
        *h = unsafe { p.add(i * stride).cast::<u16>().read_unaligned() };
    }
    // SAFETY: `h` holds 16 bytes.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
}

/// `ds[c][r][i] = dx[r][i] * dy[c][i]` for the eight blocks at `b`.
///
/// # Safety
/// Blocks `b..b + 8` of every row (`xb` bytes each) and column (Q8_0) exist.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pair_scales<const R: usize, const C: usize>(
    xs: &[*const u8; R],
    ys: &[*const u8; C],
    b: usize,
    xb: usize,
    ds: &mut [[[f32; SB]; R]; C],
) {
    let mut dy = [_mm256_setzero_ps(); C];
    for c in 0..C {
        // SAFETY: blocks b..b + 8 of column c.
        dy[c] = unsafe { scales8(ys[c].add(b * Q8_0_BYTES), Q8_0_BYTES) };
    }
    for r in 0..R {
        // SAFETY: blocks b..b + 8 of row r.
        let dx = unsafe { scales8(xs[r].add(b * xb), xb) };
        for c in 0..C {
            // SAFETY: `ds[c][r]` holds 8 f32.
            unsafe { _mm256_storeu_ps(ds[c][r].as_mut_ptr(), _mm256_mul_ps(dx, dy[c])) };
        }
    }
}

/// `[s[i] x 4 | s[i + 1] x 4]`: the scales of a pair of blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_scale(s: &[f32; SB], i: usize) -> __m256 {
    _mm256_set_m128(_mm_set1_ps(s[(i + 1) % SB]), _mm_set1_ps(s[i % SB]))
}

/// Two 16-byte pieces `[*lo | *hi]` in one register.
///
/// # Safety
/// 16 bytes at `lo` and at `hi` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load2(lo: *const u8, hi: *const u8) -> __m256i {
    // SAFETY: forwarded to the caller.
    unsafe { _mm256_loadu2_m128i(hi.cast(), lo.cast()) }
}

/// Q4_0 rows x Q8_0 columns: `sum_b dx dy sum_i (qx_i - 8) qy_i`.
///
/// # Safety
/// Every `xs[r]` must hold `nb` Q4_0 blocks and every `ys[c]` `nb` Q8_0
/// blocks; the CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4_0_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let m4 = _mm256_set1_epi8(0xf);
    let eight = _mm256_set1_epi8(8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let mut ds = [[[0f32; SB]; R]; C];
    let mut b = 0;
    while b + SB <= nb {
        // SAFETY: blocks b..b + 8 < nb exist in every row and column.
        unsafe { pair_scales(&xs, &ys, b, Q4_0_BYTES, &mut ds) };
        for x in xs {
            prefetch(x.wrapping_add(b * Q4_0_BYTES), SB * Q4_0_BYTES + 63);
        }
        for i in (0..SB).step_by(2) {
            let (b0, b1) = (b + i, b + i + 1);
            // Activations of the pair: values 0..16 of both blocks, then 16..32.
            let mut ylo = [_mm256_setzero_si256(); C];
            let mut yhi = [_mm256_setzero_si256(); C];
            let mut yc = [_mm256_setzero_si256(); C];
            for c in 0..C {
                // SAFETY: quants of blocks b0, b1 < nb: 32 bytes at 2.
                unsafe {
                    let (p0, p1) = (
                        ys[c].add(b0 * Q8_0_BYTES + 2),
                        ys[c].add(b1 * Q8_0_BYTES + 2),
                    );
                    ylo[c] = load2(p0, p1);
                    yhi[c] = load2(p0.add(16), p1.add(16));
                }
                // 8 * (y_i + y_j) per pair of activations, both halves.
                yc[c] = _mm256_add_epi16(
                    _mm256_maddubs_epi16(eight, ylo[c]),
                    _mm256_maddubs_epi16(eight, yhi[c]),
                );
            }
            for r in 0..R {
                // SAFETY: the 16 quant bytes of blocks b0, b1 < nb, at 2.
                let q = unsafe {
                    load2(
                        xs[r].add(b0 * Q4_0_BYTES + 2),
                        xs[r].add(b1 * Q4_0_BYTES + 2),
                    )
                };
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                for c in 0..C {
                    // Four products of at most 15 * 127 per lane: no overflow.
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, ylo[c]),
                        _mm256_maddubs_epi16(hi, yhi[c]),
                    );
                    let p = _mm256_sub_epi16(p, yc[c]);
                    let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    acc[c][r] = _mm256_fmadd_ps(s, pair_scale(&ds[c][r], i), acc[c][r]);
                }
            }
        }
        b += SB;
    }
    // The last blocks, one at a time.
    while b < nb {
        let mut yq = [_mm256_setzero_si256(); C];
        let mut yc = [_mm256_setzero_si256(); C];
        let mut dy = [0f32; C];
        for c in 0..C {
            // SAFETY: block b < nb of column c.
            unsafe {
                let p = ys[c].add(b * Q8_0_BYTES);
                yq[c] = _mm256_loadu_si256(p.add(2).cast());
                dy[c] = f16_at(p);
            }
            yc[c] = _mm256_maddubs_epi16(eight, yq[c]);
        }
        for r in 0..R {
            // SAFETY: block b < nb of row r.
            let (q, dx) = unsafe {
                let p = xs[r].add(b * Q4_0_BYTES);
                (_mm_loadu_si128(p.add(2).cast()), f16_at(p))
            };
            let xu = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), m4);
            for c in 0..C {
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(xu, yq[c]), yc[c]);
                let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[c][r] = _mm256_fmadd_ps(s, _mm256_set1_ps(dx * dy[c]), acc[c][r]);
            }
        }
        b += 1;
    }
    hsums(&acc)
}

/// The integer sums of eight blocks in block order, from the eight lanes of
/// each block (`v[j]`: block `j`): three levels of unpacks, blends and adds
/// (shuffles run on port 5, which the products leave idle), so that one
/// conversion and one multiply-add serve eight blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn block_sums(v: [__m256i; 8]) -> __m256i {
    // Per 128-bit half: [v0 0+2, v1 0+2, v0 1+3, v1 1+3].
    let l1 = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
    };
    // Per 128-bit half: the half's sums of four blocks.
    let l2 = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b))
    };
    let lo = l2(l1(v[0], v[1]), l1(v[2], v[3]));
    let hi = l2(l1(v[4], v[5]), l1(v[6], v[7]));
    // [lo.lo + lo.hi | hi.hi + hi.lo]: blocks 0..4, then 4..8.
    _mm256_add_epi32(
        _mm256_blend_epi32::<0xf0>(lo, hi),
        _mm256_permute2x128_si256::<0x21>(lo, hi),
    )
}

/// Q8_0 rows x Q8_0 columns.
///
/// # Safety
/// Every row and column must hold `nb` Q8_0 blocks; the CPU must have AVX2,
/// FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    // The eight i32 partial sums of one block: |x| (unsigned, 0..=128)
    // times y with x's sign (-127..=127: activations never hold -128), two
    // products per i16 lane (at most 2 * 128 * 127: no saturation).
    let dot = |x: __m256i, ax: __m256i, y: __m256i| {
        _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x)), ones)
    };
    // The quants of block j at p.
    let quants = |p: *const u8, j: usize| -> __m256i {
        // SAFETY: the callers pass p with block j after it.
        unsafe { _mm256_loadu_si256(p.add(j * Q8_0_BYTES + 2).cast()) }
    };
    let mut b = 0;
    while b + SB <= nb {
        let mut dy = [_mm256_setzero_ps(); C];
        let mut yp = [std::ptr::null::<u8>(); C];
        for c in 0..C {
            // SAFETY: blocks b..b + 8 < nb exist in every column.
            yp[c] = unsafe { ys[c].add(b * Q8_0_BYTES) };
            // SAFETY: as above.
            dy[c] = unsafe { scales8(yp[c], Q8_0_BYTES) };
        }
        for x in xs {
            prefetch(x.wrapping_add(b * Q8_0_BYTES), SB * Q8_0_BYTES + 63);
        }
        for r in 0..R {
            // SAFETY: blocks b..b + 8 < nb exist in every row.
            let xp = unsafe { xs[r].add(b * Q8_0_BYTES) };
            // SAFETY: as above.
            let dx = unsafe { scales8(xp, Q8_0_BYTES) };
            let mut v = [[_mm256_setzero_si256(); C]; SB];
            for (j, vj) in v.iter_mut().enumerate() {
                let x = quants(xp, j);
                let ax = _mm256_sign_epi8(x, x);
                for (v, &y) in vj.iter_mut().zip(&yp) {
                    *v = dot(x, ax, quants(y, j));
                }
            }
            for c in 0..C {
                let s = _mm256_cvtepi32_ps(block_sums(std::array::from_fn(|j| v[j][c])));
                acc[c][r] = _mm256_fmadd_ps(s, _mm256_mul_ps(dx, dy[c]), acc[c][r]);
            }
        }
        b += SB;
    }
    // The last blocks (fewer than eight): one partial group, its missing
    // blocks' scales and sums zero, so that the tail costs one conversion
    // and one multiply-add instead of a dependent chain per block (a row of
    // 640 values, Gemma 3's, has four such blocks).
    if b < nb {
        let rem = nb - b;
        let mut dy = [_mm256_setzero_ps(); C];
        let mut yp = [std::ptr::null::<u8>(); C];
        for c in 0..C {
            // SAFETY: blocks b..nb exist in every column.
            yp[c] = unsafe { ys[c].add(b * Q8_0_BYTES) };
            // SAFETY: as above; `scales_upto` reads `rem` scales.
            dy[c] = unsafe { scales_upto(yp[c], Q8_0_BYTES, rem) };
        }
        for r in 0..R {
            // SAFETY: blocks b..nb exist in every row.
            let xp = unsafe { xs[r].add(b * Q8_0_BYTES) };
            // SAFETY: as above.
            let dx = unsafe { scales_upto(xp, Q8_0_BYTES, rem) };
            let mut v = [[_mm256_setzero_si256(); C]; SB];
            for (j, vj) in v.iter_mut().enumerate().take(rem) {
                let x = quants(xp, j);
                let ax = _mm256_sign_epi8(x, x);
                for (v, &y) in vj.iter_mut().zip(&yp) {
                    *v = dot(x, ax, quants(y, j));
                }
            }
            for c in 0..C {
                let s = _mm256_cvtepi32_ps(block_sums(std::array::from_fn(|j| v[j][c])));
                acc[c][r] = _mm256_fmadd_ps(s, _mm256_mul_ps(dx, dy[c]), acc[c][r]);
            }
        }
    }
    hsums(&acc)
}
