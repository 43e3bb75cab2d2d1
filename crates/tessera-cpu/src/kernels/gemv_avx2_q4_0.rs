//! The one-column Q4_0 and IQ4_NL products on AVX2 (token generation's
//! MUL_MAT of those weights), with the activation column prepared once per
//! call.
//!
//! The tile kernel ([`super::gemv_avx2_q8::q4_0_tile`]) rebuilds, for every
//! row, what only depends on the activations: the pairs of half-blocks
//! loaded into one register and the offset `8 * (y_i + y_j)` the unsigned
//! nibbles need removed. With one column, that is the same for every row,
//! so [`q4_0_gemv`] lays it out once per call (a chunk of rows) and each
//! row then costs its own loads, unpacking and products only. The blocks'
//! i32 sums of four pairs (eight blocks) are added into one vector by two
//! horizontal adds, so one conversion and one multiply-add with the eight
//! scales serve eight blocks. Blocks past the last group of eight go to the
//! tile kernel. Four rows advance together, one from each quarter of the
//! call's rows (`dot::gemv_rows`): four sequential streams in flight instead
//! of one (with `TESSERA_CPU_ISA=avx2`, `benches/gemv_short.rs`: 9.4 -> 14.3
//! GB/s of weights at 640 values a row, 13.0 -> 20.0 at 2,048, 13.4 -> 20.9
//! at 8,192; three alternated runs each).
//!
//! IQ4_NL has Q4_0's block layout (an f16 scale, 16 bytes of nibbles) with
//! the nibbles indexing `kvalues_iq4nl`: the same loop looks the 64 values
//! of two blocks up with two `vpshufb` and multiplies them by sign
//! (`maddubs(|w|, sign(y, w))`, each product pair at most 2 * 127 * 127),
//! widening each half to 32 bits on its own (their sum could pass i16).
//! That is half the instructions of the IQ4_NL tile it replaces for one
//! column (`gemv_avx2_iq4`), which converted and scaled every block.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use tessera::quant::KVALUES_IQ4NL;

use super::dot::gemv_rows;
use super::dot_quant::{Q4_0_BYTES, Q8_0_BYTES};
use super::gemv_avx2::imp::hsums;
use super::gemv_avx2_iq4::imp::{NL, tile as iq4_tile};
use super::gemv_avx2_q8::{prefetch, q4_0_tile, scales8};

/// The weights' kinds (`K`): Q4_0 or IQ4_NL (both 18-byte blocks).
const Q4_0: usize = 0;
const IQ4_NL: usize = 1;

/// Blocks per group.
const SB: usize = 8;

/// The activation column, laid out for the rows: per pair of blocks
/// `[lo, hi, offset]` (values 0..16 of both blocks, values 16..32 of both,
/// `8 * (y_i + y_j)` per pair of values), and per group the activations'
/// scales in the order the horizontal adds leave the blocks
/// (`hadd(hadd(v0, v1), hadd(v2, v3))` of the four pairs' sums: blocks
/// `[0, 2, 4, 6 | 1, 3, 5, 7]`).
struct Column {
    pairs: Vec<[__m256i; 3]>,
    scales: Vec<__m256>,
}

thread_local! {
    /// Each thread's column, reused from call to call (a call covers one
    /// chunk of rows: allocating per call showed in profiles).
    static COLUMN: std::cell::RefCell<Column> = const {
        std::cell::RefCell::new(Column {
            pairs: Vec::new(),
            scales: Vec::new(),
        })
    };
}

impl Column {
    /// Lay out the first `groups * 8` blocks of the Q8_0 column at `y`.
    ///
    /// # Safety
    /// `y` must hold `groups * 8` Q8_0 blocks; the CPU must have AVX2, FMA
    /// and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fill(&mut self, y: *const u8, groups: usize) {
        let eight = _mm256_set1_epi8(8);
        let order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
        let (pairs, scales) = (&mut self.pairs, &mut self.scales);
        pairs.clear();
        scales.clear();
        for g in 0..groups {
            for i in (0..SB).step_by(2) {
                // SAFETY: blocks g * 8 + i and g * 8 + i + 1 < groups * 8
                // exist; their 32 quants start at byte 2.
                let (lo, hi) = unsafe {
                    let p0 = y.add((g * SB + i) * Q8_0_BYTES + 2);
                    let p1 = p0.add(Q8_0_BYTES);
                    (
                        _mm256_loadu2_m128i(p1.cast(), p0.cast()),
                        _mm256_loadu2_m128i(p1.add(16).cast(), p0.add(16).cast()),
                    )
                };
                let offset = _mm256_add_epi16(
                    _mm256_maddubs_epi16(eight, lo),
                    _mm256_maddubs_epi16(eight, hi),
                );
                pairs.push([lo, hi, offset]);
            }
            // SAFETY: blocks g * 8 .. g * 8 + 8 exist.
            let d = unsafe { scales8(y.add(g * SB * Q8_0_BYTES), Q8_0_BYTES) };
            scales.push(_mm256_permutevar8x32_ps(d, order));
        }
    }
}

/// `R` Q4_0 rows at `xs` (`nb` blocks each) times the column `y` (`nb`
/// Q8_0 blocks), of which `col` holds the first `col.scales.len()` groups.
/// The rows advance group by group together: `R` sequential streams.
///
/// # Safety
/// Every `xs[r]` must hold `nb` Q4_0 blocks and `y` `nb` Q8_0 blocks, `col`
/// built from `y` with at most `nb / 8` groups; the CPU must have AVX2, FMA
/// and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<const K: usize, const R: usize>(
    xs: [*const u8; R],
    y: *const u8,
    nb: usize,
    col: &Column,
) -> [f32; R] {
    let m4 = _mm256_set1_epi8(0xf);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: the table's 16 bytes.
    let lut = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
    let lut = _mm256_set_m128i(lut, lut);
    let order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    let mut acc = [_mm256_setzero_ps(); R];
    for (g, (pairs, &dy)) in col.pairs.chunks_exact(SB / 2).zip(&col.scales).enumerate() {
        for (x, acc) in xs.iter().zip(acc.iter_mut()) {
            // SAFETY: group g's blocks exist in the row.
            let xg = unsafe { x.add(g * SB * Q4_0_BYTES) };
            prefetch(xg, SB * Q4_0_BYTES + 63);
            let mut v = [_mm256_setzero_si256(); SB / 2];
            for (i, (v, [lo_y, hi_y, offset])) in v.iter_mut().zip(pairs).enumerate() {
                // SAFETY: the 16 quant bytes of blocks 2i and 2i + 1 of the group.
                let q = unsafe {
                    let p0 = xg.add(2 * i * Q4_0_BYTES + 2);
                    _mm256_loadu2_m128i(p0.add(Q4_0_BYTES).cast(), p0.cast())
                };
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                *v = if K == IQ4_NL {
                    let (lo, hi) = (_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
                    let sl =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(*lo_y, lo));
                    let sh =
                        _mm256_maddubs_epi16(_mm256_sign_epi8(hi, hi), _mm256_sign_epi8(*hi_y, hi));
                    _mm256_add_epi32(_mm256_madd_epi16(sl, ones), _mm256_madd_epi16(sh, ones))
                } else {
                    // Four products of at most 15 * 127 per lane: no overflow.
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, *lo_y),
                        _mm256_maddubs_epi16(hi, *hi_y),
                    );
                    _mm256_madd_epi16(_mm256_sub_epi16(p, *offset), ones)
                };
            }
            let s = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            // SAFETY: as above.
            let dx = unsafe { scales8(xg, Q4_0_BYTES) };
            let d = _mm256_mul_ps(_mm256_permutevar8x32_ps(dx, order), dy);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *acc);
        }
    }
    let mut sums = hsums(&[acc])[0];
    let done = col.scales.len() * SB;
    if done < nb {
        // SAFETY: blocks done..nb of the rows and the column exist.
        let tail = unsafe {
            let (xs, y) = (
                xs.map(|x| x.add(done * Q4_0_BYTES)),
                [y.add(done * Q8_0_BYTES)],
            );
            if K == IQ4_NL {
                iq4_tile::<NL, R, 1>(xs, y, nb - done)[0]
            } else {
                q4_0_tile::<R, 1>(xs, y, nb - done)[0]
            }
        };
        for (s, t) in sums.iter_mut().zip(tail) {
            *s += t;
        }
    }
    sums
}

/// The one-column product of Q4_0 rows ([`super::dot::GemvFn`]; only
/// handed out on CPUs with AVX2, FMA and F16C).
///
/// (Not re-entrant on one thread: kernels do not call kernels.)
pub(crate) fn q4_0_gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
    gemv::<Q4_0>(a, stride, y, out);
}

/// The one-column product of IQ4_NL rows, as [`q4_0_gemv`].
pub(crate) fn iq4_nl_gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
    gemv::<IQ4_NL>(a, stride, y, out);
}

fn gemv<const K: usize>(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
    let nb = y.len() / Q8_0_BYTES;
    let yp = y.as_ptr();
    COLUMN.with_borrow_mut(|col| {
        // SAFETY: `y` holds `nb` blocks, so `nb / 8` groups; the caller
        // (`gemv_fn`) checked the CPU features.
        unsafe { col.fill(yp, nb / SB) };
        gemv_rows::<4>(
            a,
            stride,
            y,
            out,
            (Q4_0_BYTES, Q8_0_BYTES),
            // SAFETY: `gemv_rows` passes rows of `n` whole blocks (the
            // column's count, so `col` fits); the CPU was checked by
            // `gemv_fn`.
            |xp, n| unsafe { rows::<K, 4>(xp, yp, n, col) },
            // SAFETY: as above.
            |x, n| unsafe { rows::<K, 1>([x], yp, n, col)[0] },
        );
    });
}
