//! AVX-512 VNNI tile kernels for Q4_1, Q5_1 (x Q8_1), Q5_0 and IQ4_NL
//! (x Q8_0) weights (see [`super::gemv_avx512`] for when they run, [`super::dot_quant5`]
//! for the layouts and [`super::gemv_avx2_q5`] for the AVX2 versions).
//!
//! As the Q4_0 kernel of [`super::gemv_avx512_q8`]: four blocks per
//! register (one per 128-bit quarter), unsigned codes times signed
//! activations by `vpdpbusd`, exact 32-bit sums per lane, one conversion
//! and one multiply-add per register with `dx * dy` per block. The fifth
//! bits (Q5_0, Q5_1) go into the codes through a mask register: 16 bits of
//! each block's `qh` per quarter, `vmovdqu8` of `0x10` under that mask.
//! IQ4_NL's codes are its table values plus 128 (`vpshufb` of the
//! nibbles, the table in every quarter). Q5_0's offset 16 and IQ4_NL's
//! 128 are removed with the activations' sums (`vpdpbusd` of 16s or 128s,
//! once per column); Q4_1's and Q5_1's `m * s` per block are summed in
//! f32 eight blocks at a time. Blocks past the last whole group of eight
//! take the AVX2 tile (one partial group).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_iq4::IQ4_NL_BYTES;
use super::dot_quant::Q8_0_BYTES;
use super::dot_quant5::{Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_1_BYTES};
use super::gemv_avx2_iq4::imp as iq4_avx2;
use super::gemv_avx2_q5::imp as q5_avx2;
use super::gemv_avx2_q8::{prefetch, scales_upto, scales8};
use super::gemv_avx512::imp::sums;
use super::gemv_avx512_q8::{quad, quarter_index};

/// The kinds of weights (`K`).
pub(crate) const Q4_1: usize = 0;
pub(crate) const Q5_0: usize = 1;
pub(crate) const Q5_1: usize = 2;
pub(crate) const IQ4_NL: usize = 3;

/// Weight and activation block bytes, the offset of `qh` (if any) and of
/// `qs` in a weight block, the offset of the activation codes, and whether
/// the type has a min.
const fn layout(k: usize) -> (usize, usize, Option<usize>, usize, usize, bool) {
    match k {
        Q4_1 => (Q4_1_BYTES, Q8_1_BYTES, None, 4, 4, true),
        Q5_0 => (Q5_0_BYTES, Q8_0_BYTES, Some(2), 6, 2, false),
        IQ4_NL => (IQ4_NL_BYTES, Q8_0_BYTES, None, 2, 2, false),
        _ => (Q5_1_BYTES, Q8_1_BYTES, Some(4), 8, 4, true),
    }
}

/// Weight and activation block bytes of kind `k`.
pub(crate) const fn block_bytes(k: usize) -> (usize, usize) {
    let (xb, yb, ..) = layout(k);
    (xb, yb)
}

/// Blocks per scale gather.
const SB: usize = 8;

/// IQ4_NL's table values plus 128 as unsigned bytes, in every 128-bit
/// quarter (for `vpshufb` of the 4-bit indices).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn iq4_codes() -> __m512i {
    let mut codes = [0u8; 16];
    for (c, &v) in codes.iter_mut().zip(&tessera::quant::KVALUES_IQ4NL) {
        *c = (v as u8) ^ 0x80;
    }
    // SAFETY: 16 readable bytes.
    _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(codes.as_ptr().cast()) })
}

/// Weight rows of kind `K` x activation columns: `out[c][r] = dot(xs[r],
/// ys[c])` over `nb` blocks.
///
/// # Safety
/// Every row must hold `nb` weight blocks and every column `nb` activation
/// blocks of kind `K`; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q5_tile<const K: usize, const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let (xb, yb, qh_at, qs_at, yq_at, has_min) = layout(K);
    let m4 = _mm512_set1_epi8(0xf);
    let bit4 = _mm512_set1_epi8(0x10);
    // The codes' offset, removed with the activations' sums.
    let offset = _mm512_set1_epi8(if K == IQ4_NL { -128 } else { 16 });
    let table = iq4_codes();
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    let mut accm = [[_mm256_setzero_ps(); R]; C];
    let mut b = 0;
    // Groups of eight blocks, then one of four if that many are left (the
    // four-block tail of Gemma 3's 20-block rows, which would otherwise go
    // through the AVX2 tile and its own setup).
    while b + 4 <= nb {
        let g = if b + SB <= nb { SB } else { 4 };
        // The scales of the group's blocks (zero past them).
        let scales = |p: *const u8, stride: usize| {
            // SAFETY: the callers pass a row or column with blocks
            // b..b + g <= nb at `p`.
            unsafe {
                if g == SB {
                    scales8(p, stride)
                } else {
                    scales_upto(p, stride, g)
                }
            }
        };
        let mut ds = [[_mm512_setzero_ps(); R]; C];
        let mut dy = [_mm256_setzero_ps(); C];
        let mut sy = [_mm256_setzero_ps(); C];
        for c in 0..C {
            // SAFETY: blocks b..b + g <= nb of column c: d at 0, s at 2.
            let p = unsafe { ys[c].add(b * yb) };
            dy[c] = scales(p, yb);
            if has_min {
                sy[c] = scales(p.wrapping_add(2), yb);
            }
        }
        for r in 0..R {
            // SAFETY: blocks b..b + g of row r: d at 0, m at 2.
            let p = unsafe { xs[r].add(b * xb) };
            let dx = scales(p, xb);
            let mx = if has_min {
                scales(p.wrapping_add(2), xb)
            } else {
                _mm256_setzero_ps()
            };
            prefetch(p, g * xb + 63);
            for c in 0..C {
                ds[c][r] = _mm512_castps256_ps512(_mm256_mul_ps(dx, dy[c]));
                if has_min {
                    accm[c][r] = _mm256_fmadd_ps(mx, sy[c], accm[c][r]);
                }
            }
        }
        for i in (0..g).step_by(4) {
            let idx = quarter_index(i);
            let mut ylo = [zero; C];
            let mut yhi = [zero; C];
            let mut yc = [zero; C];
            for c in 0..C {
                // SAFETY: blocks b + i..b + i + 4 <= nb of column c.
                unsafe {
                    let p = ys[c].add((b + i) * yb);
                    ylo[c] = quad(p, yb, yq_at);
                    yhi[c] = quad(p, yb, yq_at + 16);
                }
                if K == Q5_0 || K == IQ4_NL {
                    // -offset * (sum of each 4 activations).
                    let s = _mm512_dpbusd_epi32(
                        _mm512_dpbusd_epi32(zero, offset, ylo[c]),
                        offset,
                        yhi[c],
                    );
                    yc[c] = _mm512_sub_epi32(zero, s);
                }
            }
            for r in 0..R {
                // SAFETY: blocks b + i..b + i + 4 <= nb of row r.
                let p = unsafe { xs[r].add((b + i) * xb) };
                // SAFETY: as above.
                let v = unsafe { quad(p, xb, qs_at) };
                let mut lo = _mm512_and_si512(v, m4);
                let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                if K == IQ4_NL {
                    lo = _mm512_shuffle_epi8(table, lo);
                    hi = _mm512_shuffle_epi8(table, hi);
                }
                if let Some(at) = qh_at {
                    let (mut klo, mut khi) = (0u64, 0u64);
                    for j in 0..4 {
                        // SAFETY: `qh` of block b + i + j of row r.
                        let h = unsafe { p.add(j * xb + at).cast::<u32>().read_unaligned() };
                        klo |= u64::from(h & 0xFFFF) << (16 * j);
                        khi |= u64::from(h >> 16) << (16 * j);
                    }
                    lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(klo, bit4));
                    hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(khi, bit4));
                }
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
    for c in 0..C {
        for r in 0..R {
            if has_min {
                let m = accm[c][r];
                let m = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                let m = _mm_add_ps(m, _mm_movehl_ps(m, m));
                out[c][r] += _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
            }
        }
    }
    // The blocks past the last group (fewer than four) by the AVX2 tile,
    // which takes a partial group at once.
    let n = nb - b;
    if n > 0 {
        // SAFETY: blocks b..nb of every row and column (the caller's
        // contract); AVX2, FMA and F16C present.
        let t = unsafe {
            let xt = xs.map(|x| x.add(b * xb));
            let yt = ys.map(|y| y.add(b * yb));
            match K {
                Q4_1 => q5_avx2::tile::<{ q5_avx2::Q4_1 }, R, C>(xt, yt, n),
                Q5_0 => q5_avx2::tile::<{ q5_avx2::Q5_0 }, R, C>(xt, yt, n),
                IQ4_NL => iq4_avx2::tile::<{ iq4_avx2::NL }, R, C>(xt, yt, n),
                _ => q5_avx2::tile::<{ q5_avx2::Q5_1 }, R, C>(xt, yt, n),
            }
        };
        for (o, t) in out.iter_mut().zip(t) {
            for (o, t) in o.iter_mut().zip(t) {
                *o += t;
            }
        }
    }
    out
}
