//! AVX-512 tile kernel for Q2K and Q3K weights x Q8K activations (see
//! [`super::gemv_avx512`] for when it runs, [`super::dot_kquant`] for the
//! layouts and the portable version, [`super::gemv_avx2_k`] for AVX2).
//!
//! Why: with one column these types ran the AVX2 kernel on AVX-512
//! machines, at 0.9-1.06x of ggml's: a 256-bit register holds half a
//! super-block's 2-bit codes, so every step ran twice.
//!
//! A super-block's 64 code bytes fill one register; plane `j` (bits
//! `2j..2j+2` of each byte) holds values `32 j + i` in its low half and
//! `128 + 32 j + i` in its high half, so one `vpmaddubsw` with the
//! activations of those two runs (two 256-bit loads, once per column and
//! super-block) covers four 16-value sub-blocks: `2j`, `2j + 1`, `8 + 2j`,
//! `9 + 2j`, one per 128-bit lane. `vpmaddwd` with the sub-blocks' scales
//! (the 16 scales as i16 in lanes 0-1 = scales 0-7 and 2-3 = 8-15, one
//! word picked per lane by `vpshufb`) gives exact 32-bit sums per lane.
//! Q2K's mins meet the activations' block sums (`bsums`) the same way as
//! in the AVX2 kernel; Q3K's codes are `q + 4` (the `hmask` bit as bit 2,
//! selected per half by a variable shift) and `4 * sum(scale * bsum)` is
//! removed once per super-block.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_kquant::{Q2K_BYTES, Q3K_BYTES, q3k_scales16};
use super::dot_quant::Q8K_BYTES;
use super::gemv_avx2::imp::f16_at;
use super::gemv_avx2_q8::prefetch;
use super::gemv_avx512::imp::sums;

/// The kinds of weights (`K`).
pub(crate) const Q2K: usize = 0;
pub(crate) const Q3K: usize = 1;

/// Weight block bytes of kind `k`.
pub(crate) const fn block_bytes(k: usize) -> usize {
    if k == Q2K { Q2K_BYTES } else { Q3K_BYTES }
}

/// Byte offsets in an activation block: the 256 quants, the 16 block sums.
const YQ: usize = 4;
const BSUMS: usize = 260;

/// Per plane `j`: the `vpshufb` mask that puts scale word `2j` in every i16
/// of 128-bit lanes 0 and 2 and word `2j + 1` in lanes 1 and 3.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn plane_masks() -> [__m512i; 4] {
    std::array::from_fn(|j| {
        let m: [u8; 64] = std::array::from_fn(|i| {
            let w = 2 * j + (i / 16) % 2;
            (2 * w + i % 2) as u8
        });
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(m.as_ptr().cast()) }
    })
}

/// The four 2-bit planes of 64 code bytes (`m3`: 3 in every byte).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn planes(q: __m512i, m3: __m512i) -> [__m512i; 4] {
    [
        _mm512_and_si512(q, m3),
        _mm512_and_si512(_mm512_srli_epi16::<2>(q), m3),
        _mm512_and_si512(_mm512_srli_epi16::<4>(q), m3),
        _mm512_and_si512(_mm512_srli_epi16::<6>(q), m3),
    ]
}

/// The 16 i16 `scales` as a 512-bit register: scales 0-7 in 128-bit lanes
/// 0 and 1, 8-15 in lanes 2 and 3.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scale_lanes(scales: __m256i) -> __m512i {
    let lo = _mm256_permute2x128_si256::<0x00>(scales, scales);
    let hi = _mm256_permute2x128_si256::<0x11>(scales, scales);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The order of a Q8K block's quants in [`q8k_columns`]' four registers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum YOrder {
    /// Register `t`: values `64 t..64 t + 64`.
    Consecutive,
    /// Register `j`: values `32 j..+32` and `128 + 32 j..+32` (the Q2K/Q3K
    /// planes).
    Halves,
    /// Register `2p + h`: values `128 p + 32 h..+32` and `128 p + 64 + 32
    /// h..+32` (Q4K/Q5K's low and high nibbles of two code chunks).
    Nibbles,
}

/// Block `b` of every Q8K column: its scale, its 256 quants as four
/// registers in `order`, and its 16 block sums.
///
/// # Safety
/// Block `b` of every column must be readable (292 bytes each); AVX-512F/BW
/// present.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q8k_columns<const C: usize>(
    ys: &[*const u8; C],
    b: usize,
    order: YOrder,
) -> ([f32; C], [[__m512i; 4]; C], [__m256i; C]) {
    let mut yv = [[_mm512_setzero_si512(); 4]; C];
    let mut bs = [_mm256_setzero_si256(); C];
    let mut dy = [0f32; C];
    for c in 0..C {
        // SAFETY: block b of column c: `d` at 0, the quants at 4, the block
        // sums at 260 of its 292 bytes (the caller's promise).
        unsafe {
            let p = ys[c].add(b * Q8K_BYTES);
            dy[c] = p.cast::<f32>().read_unaligned();
            for (t, y) in yv[c].iter_mut().enumerate() {
                let (lo, hi) = match order {
                    YOrder::Consecutive => {
                        *y = _mm512_loadu_si512(p.add(YQ + 64 * t).cast());
                        continue;
                    }
                    YOrder::Halves => (32 * t, 128 + 32 * t),
                    YOrder::Nibbles => {
                        let at = 128 * (t / 2) + 32 * (t % 2);
                        (at, at + 64)
                    }
                };
                let lo = _mm256_loadu_si256(p.add(YQ + lo).cast());
                let hi = _mm256_loadu_si256(p.add(YQ + hi).cast());
                *y = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            }
            bs[c] = _mm256_loadu_si256(p.add(BSUMS).cast());
        }
    }
    (dy, yv, bs)
}

/// Weight rows of kind `K` x Q8K columns: `out[c][r] = dot(xs[r], ys[c])`
/// over `nb` super-blocks.
///
/// # Safety
/// Every row must hold `nb` weight blocks of kind `K` and every column
/// `nb` Q8K blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn k23_tile<const K: usize, const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let xb = block_bytes(K);
    let m3 = _mm512_set1_epi8(3);
    let one = _mm512_set1_epi8(1);
    let masks = plane_masks();
    // Q3K: the hmask bit of plane j is bit j (low half) or 4 + j (high half).
    let hshift: [__m512i; 4] = std::array::from_fn(|j| {
        let lo = _mm256_set1_epi16(j as i16);
        let hi = _mm256_set1_epi16(4 + j as i16);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    });
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    for b in 0..nb {
        // SAFETY: block b < nb of every column.
        let (dy, yv, bs) = unsafe { q8k_columns(&ys, b, YOrder::Halves) };
        for r in 0..R {
            // SAFETY: block b < nb of row r.
            let p = unsafe { xs[r].add(b * xb) };
            prefetch(p, xb + 63);
            let (d, dmin, codes, sc16, mins);
            if K == Q2K {
                // SAFETY: scales at 0..16, qs at 16..80, d and dmin at 80
                // and 82 of the 84-byte block.
                let (q, scv) = unsafe {
                    d = f16_at(p.add(80));
                    dmin = f16_at(p.add(82));
                    (
                        _mm512_loadu_si512(p.add(16).cast()),
                        _mm_loadu_si128(p.cast()),
                    )
                };
                sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(scv, _mm_set1_epi8(0xf)));
                mins = _mm256_cvtepu8_epi16(_mm_and_si128(
                    _mm_srli_epi16::<4>(scv),
                    _mm_set1_epi8(0xf),
                ));
                codes = planes(q, m3);
            } else {
                // SAFETY: hmask at 0..32, qs at 32..96, scales at 96..108,
                // d at 108 of the 110-byte block.
                let (hm, q, s12) = unsafe {
                    d = f16_at(p.add(108));
                    (
                        _mm256_loadu_si256(p.cast()),
                        _mm512_loadu_si512(p.add(32).cast()),
                        p.add(96).cast::<[u8; 12]>().read_unaligned(),
                    )
                };
                dmin = 0.0;
                let sc = q3k_scales16(&s12);
                // SAFETY: `sc` holds 16 i16.
                sc16 = unsafe { _mm256_loadu_si256(sc.as_ptr().cast()) };
                mins = _mm256_setzero_si256();
                let hmz = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(hm), hm);
                let low = planes(q, m3);
                codes = std::array::from_fn(|j| {
                    let high = _mm512_and_si512(_mm512_srlv_epi16(hmz, hshift[j]), one);
                    _mm512_or_si512(low[j], _mm512_slli_epi16::<2>(high))
                });
            }
            let scz = scale_lanes(sc16);
            let scales: [__m512i; 4] = std::array::from_fn(|j| _mm512_shuffle_epi8(scz, masks[j]));
            for c in 0..C {
                let mut isum = zero;
                for j in 0..4 {
                    let prod = _mm512_maddubs_epi16(codes[j], yv[c][j]);
                    isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, scales[j]));
                }
                let dxy = d * dy[c];
                if K == Q2K {
                    let m = _mm512_zextsi256_si512(_mm256_madd_epi16(bs[c], mins));
                    acc[c][r] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(m),
                        _mm512_set1_ps(-dmin * dy[c]),
                        acc[c][r],
                    );
                } else {
                    // The codes are q + 4: remove 4 sum(scale * bsum).
                    let off = _mm256_slli_epi32::<2>(_mm256_madd_epi16(bs[c], sc16));
                    isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(off));
                }
                acc[c][r] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dxy), acc[c][r]);
            }
        }
    }
    sums(&acc)
}
