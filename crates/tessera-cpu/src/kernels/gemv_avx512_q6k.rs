//! AVX-512 tile kernel for Q6K weights x Q8K activations (see
//! [`super::gemv_avx512`] for when it runs, [`super::dot_quant`] for the
//! layout and the portable version, [`super::gemv_avx2`] for AVX2).
//!
//! Why: Q6K is the output matrix of every Q4_K_M file (128,256 x 2,048
//! for a Llama-3.2-1B shape, a quarter of its bytes); on AVX-512 machines
//! it ran the AVX2 kernel at about 21 GB/s of weights where Q8_0 streams
//! at 38.
//!
//! A half super-block's 64 `ql` bytes fill one register: their low nibbles
//! are values `128 h + 0..64`, their high nibbles `128 h + 64..128`, in
//! order; the two high bits come from the half's 32 `qh` bytes (in both
//! halves of a register, shifted by 0/2 and 4/6 per half with `vpsrlvw`).
//! So each register of 6-bit codes meets 64 consecutive activations (one
//! load) in `vpmaddubsw`, and `vpmaddwd` with the four 16-value
//! sub-blocks' scales (one per 128-bit lane, placed by `vpermw`) gives
//! exact 32-bit sums. The codes are `q + 32`: `32 * sum(scale * bsum)` is
//! removed once per super-block.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_quant::Q6K_BYTES;
use super::gemv_avx2::imp::f16_at;
use super::gemv_avx2_q8::prefetch;
use super::gemv_avx512::imp::sums;
use super::gemv_avx512_k::{YOrder, q8k_columns};

/// Byte offsets in a weight super-block.
const QL: usize = 0;
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// The shifts of `qh` per 16-bit word for the low (0, 2) or high (4, 6)
/// nibbles of a half super-block: the first 32 bytes, then the second.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn qh_shift(first: i16) -> __m512i {
    let lo = _mm256_set1_epi16(first);
    let hi = _mm256_set1_epi16(first + 2);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Q6K rows x Q8K columns: `out[c][r] = dot(xs[r], ys[c])` over `nb`
/// super-blocks.
///
/// # Safety
/// Every row must hold `nb` Q6K super-blocks and every column `nb` Q8K
/// blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn q6_k_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let m4 = _mm512_set1_epi8(0xf);
    let m2 = _mm512_set1_epi8(3);
    let shifts = [qh_shift(0), qh_shift(4)];
    // Register t (values 64 t..64 t + 64) takes sub-blocks 4 t..4 t + 4,
    // one per 128-bit lane.
    let pick: [__m512i; 4] = std::array::from_fn(|t| {
        let w: [i16; 32] = std::array::from_fn(|i| (4 * t + i / 8) as i16);
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(w.as_ptr().cast()) }
    });
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    for b in 0..nb {
        // SAFETY: block b < nb of every column.
        let (dy, yv, bs) = unsafe { q8k_columns(&ys, b, YOrder::Consecutive) };
        for r in 0..R {
            // SAFETY: super-block b < nb of row r (210 bytes): ql at 0,
            // qh at 128, the 16 i8 scales at 192, d at 208.
            let (p, d, sc16) = unsafe {
                let p = xs[r].add(b * Q6K_BYTES);
                (
                    p,
                    f16_at(p.add(D)),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(SCALES).cast())),
                )
            };
            prefetch(p, Q6K_BYTES + 63);
            let scz = _mm512_castsi256_si512(sc16);
            let mut codes = [zero; 4];
            for h in 0..2 {
                // SAFETY: the half's 64 ql bytes at 64 h, 32 qh bytes at 128 + 32 h.
                let (ql, qh) = unsafe {
                    let qh = _mm256_loadu_si256(p.add(QH + 32 * h).cast());
                    (
                        _mm512_loadu_si512(p.add(QL + 64 * h).cast()),
                        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh),
                    )
                };
                let nibbles = [
                    _mm512_and_si512(ql, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                ];
                for (k, &n) in nibbles.iter().enumerate() {
                    let top = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts[k]), m2);
                    codes[2 * h + k] = _mm512_or_si512(n, _mm512_slli_epi16::<4>(top));
                }
            }
            let scales: [__m512i; 4] =
                std::array::from_fn(|t| _mm512_permutexvar_epi16(pick[t], scz));
            for c in 0..C {
                let mut isum = zero;
                for t in 0..4 {
                    let prod = _mm512_maddubs_epi16(codes[t], yv[c][t]);
                    isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, scales[t]));
                }
                // The codes are q + 32: remove 32 sum(scale * bsum).
                let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs[c], sc16));
                isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(off));
                acc[c][r] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(isum),
                    _mm512_set1_ps(d * dy[c]),
                    acc[c][r],
                );
            }
        }
    }
    sums(&acc)
}
