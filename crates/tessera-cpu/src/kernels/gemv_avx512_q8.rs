//! AVX-512 VNNI tile kernels for the weight types dotted with Q8_0
//! activations, Q8_0 and Q4_0 (see [`super::gemv_avx512`] for when they run
//! and [`super::gemv_avx2_q8`] for the AVX2 versions they mirror):
//! - Q8_0 x Q8_0: two blocks per register; `x + 128` (unsigned) times `y`,
//!   the accumulator starting at `-128 * sum y` (computed once per column),
//!   so one `vpdpbusd` per row and column (exact for every byte); the lanes
//!   of eight blocks are then added into per-block sums by shuffles (port 5)
//!   so that one conversion and one multiply-add (port 0) serve eight blocks;
//! - Q4_0 x Q8_0: four blocks per register; unsigned nibbles in `vpdpbusd`,
//!   the offset 8 removed with the activations' sums.
//!
//! The f16 scales of eight blocks are converted at once; integer block sums
//! are exact.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_quant::{Q4_0_BYTES, Q8_0_BYTES};
use super::gemv_avx2_q8::{prefetch, scales_upto, scales8};
use super::gemv_avx512::imp::sums;

/// Blocks per scale gather.
const SB: usize = 8;

/// `ds[c][r] = dx[r] * dy[c]` for the `g` (8 or 4) blocks at `b`, as
/// vectors (zero past them).
///
/// # Safety
/// Blocks `b..b + g` of every row (`xb` bytes each) and column (Q8_0)
/// exist; AVX-512 present.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_scales<const R: usize, const C: usize>(
    xs: &[*const u8; R],
    ys: &[*const u8; C],
    b: usize,
    xb: usize,
    g: usize,
) -> [[__m512; R]; C] {
    // SAFETY: blocks b..b + g of the row or column at `p` (the caller's).
    let scales = |p: *const u8, stride: usize| unsafe {
        if g == SB {
            scales8(p, stride)
        } else {
            scales_upto(p, stride, g)
        }
    };
    let mut ds = [[_mm512_setzero_ps(); R]; C];
    let mut dy = [_mm256_setzero_ps(); C];
    for c in 0..C {
        // SAFETY: blocks b..b + g of column c.
        dy[c] = scales(unsafe { ys[c].add(b * Q8_0_BYTES) }, Q8_0_BYTES);
    }
    for r in 0..R {
        // SAFETY: blocks b..b + g of row r.
        let dx = scales(unsafe { xs[r].add(b * xb) }, xb);
        for c in 0..C {
            ds[c][r] = _mm512_castps256_ps512(_mm256_mul_ps(dx, dy[c]));
        }
    }
    ds
}

/// The f16 scales of the first `n` (4 or 8) Q8_0 blocks at `p` as f32 in
/// the order of [`block_sums`]: lane `4 * l + j` holds block `2 * j + l / 2`
/// (zero for the blocks past `n`). Put together in general-purpose
/// registers (ports the vector work leaves idle).
///
/// # Safety
/// Blocks `0..n` at `p` must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn tree_scales(p: *const u8, n: usize) -> __m512 {
    let h = |i: usize| {
        if i >= n {
            return 0;
        }
        // SAFETY: forwarded to the caller (i < n).
        unsafe { u64::from(p.add(i * Q8_0_BYTES).cast::<u16>().read_unaligned()) }
    };
    let even = h(0) | h(2) << 16 | h(4) << 32 | h(6) << 48;
    let odd = h(1) | h(3) << 16 | h(5) << 32 | h(7) << 48;
    // Blocks 0, 2, 4, 6, 1, 3, 5, 7.
    let v = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi64x(odd as i64, even as i64)));
    _mm512_shuffle_f32x4::<0b01_01_00_00>(v, v)
}

/// The integer sums of eight blocks from the `vpdpbusd` lanes `v[i]` of
/// blocks `2i` (low half) and `2i + 1` (high half): lane `4 * l + j` of the
/// result holds the sum of the four lanes of `v[j]`'s quarter `l`, a quarter
/// of the sum of block `2 * j + l / 2` (six shuffles and three adds instead
/// of a conversion and a multiply-add per pair of blocks).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn block_sums(v: [__m512i; 4]) -> __m512i {
    let a01 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(v[0], v[1]),
        _mm512_unpackhi_epi32(v[0], v[1]),
    );
    let a23 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(v[2], v[3]),
        _mm512_unpackhi_epi32(v[2], v[3]),
    );
    _mm512_add_epi32(
        _mm512_unpacklo_epi64(a01, a23),
        _mm512_unpackhi_epi64(a01, a23),
    )
}

/// Q8_0 rows x Q8_0 columns, two blocks per register, the lanes of eight
/// blocks reduced to their block sums ([`block_sums`]) before the scales.
///
/// # Safety
/// Every row and column must hold `nb` Q8_0 blocks; AVX-512F/BW/VL/VNNI,
/// AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q8_0_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    // The quants of blocks 2i and 2i + 1 at p, one per 256-bit half.
    let pair = |p: *const u8, i: usize| -> __m512i {
        // SAFETY: the callers pass p with blocks 2i and 2i + 1 after it.
        unsafe {
            let p = p.add(2 * i * Q8_0_BYTES);
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(p.add(2).cast())),
                _mm256_loadu_si256(p.add(Q8_0_BYTES + 2).cast()),
            )
        }
    };
    let zero = _mm512_setzero_si512();
    let flip = _mm512_set1_epi8(-128);
    let mut b = 0;
    // Groups of eight blocks, then one of four if that many are left (the
    // four-block tail of Gemma 3's 20-block rows; its other pairs are
    // zeros, as are its scales past the fourth block).
    while b + 4 <= nb {
        let g = if b + SB <= nb { SB } else { 4 };
        let mut y = [[zero; 4]; C];
        let mut init = [[zero; 4]; C];
        let mut dy = [_mm512_setzero_ps(); C];
        for c in 0..C {
            // SAFETY: blocks b..b + g <= nb exist in every column.
            let p = unsafe { ys[c].add(b * Q8_0_BYTES) };
            // SAFETY: as above.
            dy[c] = unsafe { tree_scales(p, g) };
            for i in 0..g / 2 {
                y[c][i] = pair(p, i);
                // -128 * (the sum of each lane's four y), once per column.
                init[c][i] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, y[c][i]));
            }
        }
        for x in xs {
            prefetch(x.wrapping_add(b * Q8_0_BYTES), g * Q8_0_BYTES + 63);
        }
        for r in 0..R {
            // SAFETY: blocks b..b + g <= nb exist in every row.
            let p = unsafe { xs[r].add(b * Q8_0_BYTES) };
            // SAFETY: as above.
            let dx = unsafe { tree_scales(p, g) };
            // x + 128 as unsigned bytes: sum (x + 128) y - 128 sum y.
            let xu: [__m512i; 4] = std::array::from_fn(|i| {
                if 2 * i < g {
                    _mm512_xor_si512(pair(p, i), flip)
                } else {
                    zero
                }
            });
            for c in 0..C {
                let v = std::array::from_fn(|i| {
                    if 2 * i < g {
                        _mm512_dpbusd_epi32(init[c][i], xu[i], y[c][i])
                    } else {
                        zero
                    }
                });
                let s = _mm512_cvtepi32_ps(block_sums(v));
                acc[c][r] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, dy[c]), acc[c][r]);
            }
        }
        b += g;
    }
    let mut out = sums(&acc);
    // The last blocks (fewer than four) by the AVX2 tile, which takes them
    // as one partial group.
    let n = nb - b;
    if n > 0 {
        // SAFETY: blocks b..nb of every row and column (the caller's
        // contract); AVX2, FMA and F16C present.
        let t = unsafe {
            super::gemv_avx2_q8::q8_0_tile::<R, C>(
                xs.map(|x| x.add(b * Q8_0_BYTES)),
                ys.map(|y| y.add(b * Q8_0_BYTES)),
                n,
            )
        };
        for (o, t) in out.iter_mut().zip(t) {
            for (o, t) in o.iter_mut().zip(t) {
                *o += t;
            }
        }
    }
    out
}

/// `f16 at x * f16 at y`.
///
/// # Safety
/// Two bytes at `x` and at `y` must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn f16c_pair(x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded to the caller.
    let (a, b) = unsafe {
        (
            x.cast::<u16>().read_unaligned(),
            y.cast::<u16>().read_unaligned(),
        )
    };
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(a) | (i32::from(b) << 16)));
    _mm_cvtss_f32(v) * _mm_cvtss_f32(_mm_movehdup_ps(v))
}

/// 16 bytes at `p + off` of four consecutive blocks of `bytes` each, one
/// per 128-bit quarter.
///
/// # Safety
/// Blocks 0..4 at `p` hold `off + 16` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn quad(p: *const u8, bytes: usize, off: usize) -> __m512i {
    // SAFETY: forwarded to the caller.
    unsafe {
        let v = _mm512_castsi128_si512(_mm_loadu_si128(p.add(off).cast()));
        let v = _mm512_inserti32x4::<1>(v, _mm_loadu_si128(p.add(bytes + off).cast()));
        let v = _mm512_inserti32x4::<2>(v, _mm_loadu_si128(p.add(2 * bytes + off).cast()));
        _mm512_inserti32x4::<3>(v, _mm_loadu_si128(p.add(3 * bytes + off).cast()))
    }
}

/// Lane indices putting block scale `i + q` (of eight in the low lanes)
/// in every lane of quarter `q`: the scales of the four blocks [`quad`]
/// loads from block `i` on.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn quarter_index(i: usize) -> __m512i {
    let i = i as i32;
    per_quarter([i, i + 1, i + 2, i + 3])
}

/// `v[q]` in every 32-bit lane of quarter `q`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn per_quarter(v: [i32; 4]) -> __m512i {
    let lanes: [i32; 16] = std::array::from_fn(|k| v[k / 4]);
    // SAFETY: 64 readable bytes.
    unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
}

/// Q4_0 rows x Q8_0 columns, four blocks per register.
///
/// # Safety
/// Every row must hold `nb` Q4_0 blocks and every column `nb` Q8_0
/// blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q4_0_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let m4 = _mm512_set1_epi8(0xf);
    let eight = _mm512_set1_epi8(8);
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    let mut b = 0;
    // Groups of eight blocks, then one of four if that many are left (rows
    // of 20 or 28 blocks: 640 and 896 values).
    while b + 4 <= nb {
        let g = if b + SB <= nb { SB } else { 4 };
        // SAFETY: blocks b..b + g <= nb exist in every row and column.
        let ds = unsafe { block_scales(&xs, &ys, b, Q4_0_BYTES, g) };
        for x in xs {
            prefetch(x.wrapping_add(b * Q4_0_BYTES), g * Q4_0_BYTES + 63);
        }
        for i in (0..g).step_by(4) {
            let idx = quarter_index(i);
            let mut ylo = [zero; C];
            let mut yhi = [zero; C];
            let mut yc = [zero; C];
            for c in 0..C {
                // SAFETY: blocks b + i..b + i + 4 <= nb of column c.
                let p = unsafe { ys[c].add((b + i) * Q8_0_BYTES) };
                // SAFETY: as above.
                (ylo[c], yhi[c]) = unsafe { (quad(p, Q8_0_BYTES, 2), quad(p, Q8_0_BYTES, 18)) };
                // -8 * (sum of each 4 activations), the nibbles' offset.
                let s8 =
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, eight, ylo[c]), eight, yhi[c]);
                yc[c] = _mm512_sub_epi32(zero, s8);
            }
            for r in 0..R {
                // SAFETY: blocks b + i..b + i + 4 <= nb of row r.
                // SAFETY: blocks b + i..b + i + 4 <= nb of row r.
                let v = unsafe { quad(xs[r].add((b + i) * Q4_0_BYTES), Q4_0_BYTES, 2) };
                let lo = _mm512_and_si512(v, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                for c in 0..C {
                    let s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(yc[c], lo, ylo[c]), hi, yhi[c]);
                    let d = _mm512_permutexvar_ps(idx, ds[c][r]);
                    acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[c][r]);
                }
            }
        }
        b += g;
    }
    let mut out = sums(&acc);
    for b in b..nb {
        for c in 0..C {
            for r in 0..R {
                // SAFETY: block b < nb of row r and column c.
                unsafe {
                    out[c][r] += block_dot_q4(xs[r].add(b * Q4_0_BYTES), ys[c].add(b * Q8_0_BYTES));
                }
            }
        }
    }
    out
}

/// One Q4_0 x Q8_0 block product.
///
/// # Safety
/// Both blocks must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn block_dot_q4(x: *const u8, y: *const u8) -> f32 {
    // SAFETY: forwarded to the caller.
    unsafe {
        let q = _mm_loadu_si128(x.add(2).cast());
        let xu = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0xf),
        );
        let qy = _mm256_loadu_si256(y.add(2).cast());
        let s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), xu, qy);
        let c = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), qy);
        let s = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(_mm256_sub_epi32(s, c))) as f32;
        s * f16c_pair(x, y)
    }
}
