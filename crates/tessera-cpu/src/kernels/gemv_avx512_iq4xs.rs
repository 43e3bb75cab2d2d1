//! AVX-512 VNNI tile kernel for IQ4_XS weights x Q8K activations (see
//! [`super::gemv_avx512`] for when it runs, [`super::dot_iq4`] for the
//! layouts and the portable version, [`super::gemv_avx2_iq4`] for AVX2).
//!
//! Why: the AVX2 kernel (one 32-value sub-block per register, its scale
//! decoded by scalar code and broadcast per sub-block) was about 0.9x of
//! ggml's with one column on an AVX-512 Xeon.
//!
//! A super-block of 256 values is two halves of four 32-value sub-blocks;
//! one register holds a half's 64 index bytes, sub-block `4 h + j` in
//! quarter `j`. Low and high nibbles become unsigned codes
//! `kvalues_iq4nl + 128` by `vpshufb` (the table in every quarter) and meet
//! the activations' matching 16-byte runs (loaded per quarter) in
//! `vpdpbusd`: exact 32-bit sums per lane, from which `128 * sum(y)`
//! (`vpdpbusd` of 128s with the activations, once per column) is removed.
//! Each lane's sum is then multiplied by its sub-block's `ls - 32` (the
//! eight 6-bit scales decoded with variable shifts, one vector per half)
//! and summed exactly in 32 bits over the super-block (at most
//! `2 * 8 * 127 * 127 * 32 < 2^23` per lane), converted once and scaled by
//! `dx * dy`.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::dot_iq4::IQ4_XS_BYTES;
use super::dot_quant::Q8K_BYTES;
use super::gemv_avx2_q8::prefetch;
use super::gemv_avx512::imp::sums;
use super::gemv_avx512_q5::iq4_codes;
use super::gemv_avx512_q8::{per_quarter, quad};

/// Byte offsets in a weight super-block: `scales_h` (u16), `scales_l`
/// (4 bytes), the 128 index bytes.
const SCALES_H: usize = 2;
const SCALES_L: usize = 4;
const QS: usize = 8;
/// Byte offset of the 256 quants in an activation block (after `d`).
const YQ: usize = 4;

/// Weight rows x activation columns: `out[c][r] = dot(xs[r], ys[c])` over
/// `nb` super-blocks.
///
/// # Safety
/// Every row must hold `nb` IQ4_XS super-blocks and every column `nb` Q8K
/// blocks; AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn iq4_xs_tile<const R: usize, const C: usize>(
    xs: [*const u8; R],
    ys: [*const u8; C],
    nb: usize,
) -> [[f32; R]; C] {
    let m4 = _mm512_set1_epi8(0xf);
    let m2 = _mm512_set1_epi32(3);
    let m4d = _mm512_set1_epi32(0xf);
    let bias = _mm512_set1_epi32(32);
    // 0x80 as an unsigned byte: the codes' offset 128.
    let offset = _mm512_set1_epi8(-128);
    let table = iq4_codes();
    // The shifts that bring sub-block `4 h + j`'s scale bits down, per lane
    // of quarter `j` of half `h`: 4 bits each in `scales_l`, 2 in `scales_h`.
    let quarters = |h: i32, bits: i32| per_quarter([0, 1, 2, 3].map(|j| (4 * h + j) * bits));
    let shift_l = [quarters(0, 4), quarters(1, 4)];
    let shift_h = [quarters(0, 2), quarters(1, 2)];
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); R]; C];
    for b in 0..nb {
        let mut ylo = [[zero; 2]; C];
        let mut yhi = [[zero; 2]; C];
        let mut yc = [[zero; 2]; C];
        let mut dy = [0f32; C];
        for c in 0..C {
            // SAFETY: block b < nb of column c: `d` at 0, 256 quants at 4.
            unsafe {
                let p = ys[c].add(b * Q8K_BYTES);
                dy[c] = p.cast::<f32>().read_unaligned();
                for h in 0..2 {
                    let q = p.add(YQ + 128 * h);
                    ylo[c][h] = quad(q, 32, 0);
                    yhi[c][h] = quad(q, 32, 16);
                }
            }
            for h in 0..2 {
                // -128 * (sum of each lane's 8 activations).
                let s = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(zero, offset, ylo[c][h]),
                    offset,
                    yhi[c][h],
                );
                yc[c][h] = _mm512_sub_epi32(zero, s);
            }
        }
        for r in 0..R {
            // SAFETY: super-block b < nb of row r (136 bytes).
            let (p, dx, sh, sl) = unsafe {
                let p = xs[r].add(b * IQ4_XS_BYTES);
                let h = p.cast::<u16>().read_unaligned();
                (
                    p,
                    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))),
                    p.add(SCALES_H).cast::<u16>().read_unaligned(),
                    p.add(SCALES_L).cast::<u32>().read_unaligned(),
                )
            };
            prefetch(p, IQ4_XS_BYTES + 63);
            let (vl, vh) = (
                _mm512_set1_epi32(sl as i32),
                _mm512_set1_epi32(i32::from(sh)),
            );
            let mut isum = [zero; C];
            for h in 0..2 {
                // Each lane's sub-block scale `ls - 32`.
                let lo4 = _mm512_and_si512(_mm512_srlv_epi32(vl, shift_l[h]), m4d);
                let hi2 = _mm512_and_si512(_mm512_srlv_epi32(vh, shift_h[h]), m2);
                let ls = _mm512_sub_epi32(_mm512_or_si512(lo4, _mm512_slli_epi32::<4>(hi2)), bias);
                // SAFETY: sub-blocks 4 h..4 h + 4: 64 index bytes at 8 + 64 h.
                let q = unsafe { _mm512_loadu_si512(p.add(QS + 64 * h).cast()) };
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
                let hi =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4));
                for c in 0..C {
                    let s = _mm512_dpbusd_epi32(
                        _mm512_dpbusd_epi32(yc[c][h], lo, ylo[c][h]),
                        hi,
                        yhi[c][h],
                    );
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s, ls));
                }
            }
            for c in 0..C {
                let d = _mm512_set1_ps(dx * dy[c]);
                acc[c][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), d, acc[c][r]);
            }
        }
    }
    sums(&acc)
}
