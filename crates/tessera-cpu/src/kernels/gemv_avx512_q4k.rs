//! AVX-512 tile kernel for Q4K and Q5K weights x Q8K activations (see
//! [`super::gemv_avx512`] for when it runs, [`super::dot_quant`] for the
//! layout and the portable version, [`super::gemv_avx2`] for AVX2).
//!
//! A Q4K super-block's 128 code bytes are four 32-byte chunks; chunk `j`
//! holds values `64 j..64 j + 32` in its low nibbles and `64 j + 32..64 j +
//! 64` in its high ones. One 64-byte load takes chunks `2p` and `2p + 1`:
//! its low nibbles are values `128 p + 0..32` and `128 p + 64..96`, its high
//! nibbles `128 p + 32..64` and `128 p + 96..128`. The activations are
//! loaded in that order once per column and block (two 32-byte loads per
//! register, shared by every row of the tile), so each weight load costs
//! one mask, one shift and one more mask for 128 values, where the AVX2
//! kernel needs that per 64. `vpmaddubsw` then `vpmaddwd` with the
//! sub-blocks' scales (one per 256-bit half, placed by `vpermw`) give exact
//! 32-bit sums; the mins meet the activations' block sums in one
//! `vpmaddwd`. Q5K has the same scales and nibbles, and a fifth bit per
//! value in 32 `qh` bytes (bit `2j` for chunk `j`'s low nibbles, `2j + 1`
//! for its high ones): both halves of one register of `qh` bytes, shifted
//! per 16-bit word by `vpsrlvw`, give each code register its bits.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_kquant::Q5K_BYTES;
use super::dot_quant::Q4K_BYTES;
use super::gemv_avx2::imp::q4k_scales_mins;
use super::gemv_avx2_q8::prefetch;
use super::gemv_avx512::imp::sums;
use super::gemv_avx512_k::{YOrder, q8k_columns};

/// Q4K rows x Q8K columns: `out[c][r] = dot(xs[r], ys[c])` over `nb`
/// super-blocks.
///
/// # Safety
/// Every row must hold `nb` Q4K super-blocks and every column `nb` Q8K
/// blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q4_k_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    // SAFETY: forwarded contract.
    unsafe { k45_tile::<false, R, C>(xs, ys, nb) }
}

/// Q5K rows x Q8K columns, as [`q4_k_tile`].
///
/// # Safety
/// Every row must hold `nb` Q5K super-blocks and every column `nb` Q8K
/// blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q5_k_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    // SAFETY: forwarded contract.
    unsafe { k45_tile::<true, R, C>(xs, ys, nb) }
}

/// Q4K (`Q5 = false`: 144-byte blocks, codes at 16) or Q5K (176 bytes,
/// `qh` at 16, codes at 48).
///
/// # Safety
/// As [`q4_k_tile`] for the type.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn k45_tile<const Q5: bool, const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let (bytes, qs) = if Q5 { (Q5K_BYTES, 48) } else { (Q4K_BYTES, 16) };
    let m4 = _mm512_set1_epi8(0xf);
    let one = _mm512_set1_epi8(1);
    // Register 2p + h takes bit 4p + h of each `qh` byte (first half) and
    // bit 4p + 2 + h (second half).
    let qh_shift: [__m512i; 4] = std::array::from_fn(|t| {
        let (p, h) = (t / 2, t % 2);
        let w: [i16; 32] = std::array::from_fn(|i| (4 * p + h + 2 * (i / 16)) as i16);
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(w.as_ptr().cast()) }
    });
    // Register 2p + h meets sub-blocks 4p + h (first half) and 4p + 2 + h.
    let pick: [__m512i; 4] = std::array::from_fn(|t| {
        let (p, h) = (t / 2, t % 2);
        let w: [i16; 32] = std::array::from_fn(|i| (4 * p + h + 2 * (i / 16)) as i16);
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(w.as_ptr().cast()) }
    });
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    for b in 0..nb {
        // SAFETY: block b < nb of every column.
        let (dy, yv, bs) = unsafe { q8k_columns(&ys, b, YOrder::Nibbles) };
        for r in 0..R {
            // SAFETY: super-block b < nb of row r (`bytes`): d, dmin at 0,
            // the scales at 4..16, (Q5K: qh at 16..48), the codes at `qs`.
            let (p, dm, sm) = unsafe {
                let p = xs[r].add(b * bytes);
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()));
                (p, dm, q4k_scales_mins(p.add(4)))
            };
            prefetch(p, bytes + 63);
            let (d, dmin) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
            let scz = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
            let mut codes = [m4; 4];
            for half in 0..2 {
                // SAFETY: chunks 2 half, 2 half + 1: 64 bytes at qs + 64 half.
                let q = unsafe { _mm512_loadu_si512(p.add(qs + 64 * half).cast()) };
                codes[2 * half] = _mm512_and_si512(q, m4);
                codes[2 * half + 1] = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            }
            if Q5 {
                // SAFETY: the 32 qh bytes at 16 of a Q5K super-block.
                let qh = unsafe { _mm256_loadu_si256(p.add(16).cast()) };
                let qh = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh);
                for (c, s) in codes.iter_mut().zip(&qh_shift) {
                    let bit = _mm512_and_si512(_mm512_srlv_epi16(qh, *s), one);
                    *c = _mm512_or_si512(*c, _mm512_slli_epi16::<4>(bit));
                }
            }
            let scales: [__m512i; 4] =
                std::array::from_fn(|t| _mm512_permutexvar_epi16(pick[t], scz));
            // Each min in both 16-bit halves of its lane: `vpmaddwd` with
            // the 16 block sums gives m_j (bsum_2j + bsum_2j+1).
            let mn = _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(sm));
            let mn = _mm256_or_si256(mn, _mm256_slli_epi32::<16>(mn));
            for c in 0..C {
                let mut isum = _mm512_setzero_si512();
                for t in 0..4 {
                    let prod = _mm512_maddubs_epi16(codes[t], yv[c][t]);
                    isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, scales[t]));
                }
                let mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(mn, bs[c]));
                let a = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(isum),
                    _mm512_set1_ps(d * dy[c]),
                    acc[c][r],
                );
                acc[c][r] = _mm512_fnmadd_ps(
                    _mm512_zextps256_ps512(mins),
                    _mm512_set1_ps(dmin * dy[c]),
                    a,
                );
            }
        }
    }
    sums(&acc)
}
