//! AVX2 tiles of Q4_0, Q5_0, Q8_0 and IQ4_NL weights against several
//! columns of activations in the [`Q8Tiled`] layout (see
//! [`super::q8_tiled`] for why), which MUL_MAT uses on CPUs without the
//! AVX-512 tiles whenever it multiplies more than one column.
//!
//! Per block of a row, the codes are decoded once (Q4_0, Q5_0: unsigned,
//! 0..16 or 0..32; Q8_0 and IQ4_NL: signed, widened to i16), then for each
//! column: Q4_0/Q5_0 `vpmaddubsw` codes x activations (pairs at most
//! 2 * 31 * 127 = 7874: no saturation), minus the layout's `offset * (y_i +
//! y_j)` (at most 16 * 254), `vpmaddwd` by ones; Q8_0/IQ4_NL two
//! `vpmaddwd` of the i16 codes and activations, added. Every activation
//! operand is one memory load. The exact i32 block sums are converted and
//! added into the (row, column) accumulator scaled by `dx * dy`, taken
//! from a table of the group's eight blocks (`dx` gathered per row, `dy`
//! read as f32 from the layout, one multiply per row, column and group).
//!
//! The `unsafe` kernels take raw row pointers and a block count; the safe
//! [`TileFn`]s returned by [`tile_fn`] check the rows' lengths first, and
//! [`tile_fn`] returns them only after checking the CPU.

use tessera::DType;

use super::dot::{TILE_COLS, TILE_ROWS, TileFn};
use super::q8_tiled::Q8Tiled;

/// The AVX2 tile of `weights` with activations in the returned layout, if
/// there is one and the CPU has AVX2, FMA and F16C.
pub fn tile_fn(weights: DType) -> Option<(Q8Tiled, TileFn)> {
    let layout = Q8Tiled::for_weights(weights)?;
    imp::tile_fn(weights).map(|t| (layout, t))
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub fn tile_fn(_weights: DType) -> Option<TileFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::dot::for_each_subtile_n;
    use crate::kernels::gemv_avx2::imp::{dispatch, hsums};
    use crate::kernels::gemv_avx2_q5::imp::bytes_from_bits;
    use crate::kernels::gemv_avx2_q8::{prefetch, scales_upto, scales8};
    use crate::kernels::q8_tiled::{BLOCK_BYTES, GROUP_BLOCKS, GROUP_BYTES, SCALE_BYTES};

    const Q4_0: usize = 0;
    const Q5_0: usize = 1;
    const Q8_0: usize = 2;
    const IQ4_NL: usize = 3;

    /// Bytes of one weight block of kind `K`.
    const fn block_bytes(k: usize) -> usize {
        match k {
            Q4_0 | IQ4_NL => 18,
            Q5_0 => 22,
            _ => 34,
        }
    }

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q4_0 => q4_0_tile,
            DType::Q5_0 => q5_0_tile,
            DType::Q8_0 => q8_0_tile,
            DType::IQ4NL => iq4_nl_tile,
            _ => return None,
        })
    }

    /// The block's codes: unsigned in one register (Q4_0, Q5_0; the second
    /// is unused), or signed and widened to i16, values 0..16 and 16..32.
    ///
    /// # Safety
    /// The weight block of kind `K` at `p` must be readable; the CPU must
    /// have AVX2.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes<const K: usize>(p: *const u8, table: __m256i) -> (__m256i, __m256i) {
        if K == Q8_0 {
            // SAFETY: the 32 codes at 2.
            let (lo, hi) = unsafe {
                (
                    _mm_loadu_si128(p.add(2).cast()),
                    _mm_loadu_si128(p.add(18).cast()),
                )
            };
            return (_mm256_cvtepi8_epi16(lo), _mm256_cvtepi8_epi16(hi));
        }
        let qs = if K == Q5_0 { 6 } else { 2 };
        // SAFETY: the 16 nibble bytes at `qs`.
        let q = unsafe { _mm_loadu_si128(p.add(qs).cast()) };
        let nib = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0xf),
        );
        match K {
            Q5_0 => {
                // SAFETY: the 4 bytes of `qh` at 2.
                let hi = unsafe { bytes_from_bits(p.add(2)) };
                let u = _mm256_or_si256(nib, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
                (u, u)
            }
            IQ4_NL => {
                let v = _mm256_shuffle_epi8(table, nib);
                (
                    _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                    _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(v)),
                )
            }
            _ => (nib, nib),
        }
    }

    /// Weight rows of kind `K` x columns in the [`Q8Tiled`] layout of `K`:
    /// `out[c][r] = dot(xs[r], ys[c])` over `nb` blocks.
    ///
    /// # Safety
    /// Every `xs[r]` must hold `nb` weight blocks of kind `K`, every `ys[c]`
    /// `nb` blocks of the layout (from the start of a group); the CPU must
    /// have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const K: usize, const R: usize, const C: usize>(
        xs: [*const u8; R],
        ys: [*const u8; C],
        nb: usize,
    ) -> [[f32; R]; C] {
        let xb = block_bytes(K);
        let unsigned = K == Q4_0 || K == Q5_0;
        let ones = _mm256_set1_epi16(1);
        // SAFETY: the 16 bytes of the table.
        let table = unsafe {
            _mm256_broadcastsi128_si256(_mm_loadu_si128(
                tessera::quant::KVALUES_IQ4NL.as_ptr().cast(),
            ))
        };
        let mut acc = [[_mm256_setzero_ps(); R]; C];
        let mut ds = [[[0f32; GROUP_BLOCKS]; R]; C];
        let (mut b, mut g) = (0, 0);
        while b < nb {
            let n = GROUP_BLOCKS.min(nb - b);
            // SAFETY: group g of every column holds its n blocks.
            let yg: [*const u8; C] = std::array::from_fn(|c| unsafe { ys[c].add(g * GROUP_BYTES) });
            for r in 0..R {
                // SAFETY: blocks b..b + n < nb of row r.
                let dx = unsafe {
                    let p = xs[r].add(b * xb);
                    if n == GROUP_BLOCKS {
                        scales8(p, xb)
                    } else {
                        scales_upto(p, xb, n)
                    }
                };
                for c in 0..C {
                    // SAFETY: the group's 32 bytes of scales; `ds[c][r]` holds 8 f32.
                    unsafe {
                        let dy = _mm256_loadu_ps(yg[c].cast());
                        _mm256_storeu_ps(ds[c][r].as_mut_ptr(), _mm256_mul_ps(dx, dy));
                    }
                }
            }
            for x in xs {
                prefetch(x.wrapping_add(b * xb), GROUP_BLOCKS * xb + 63);
            }
            // (A counted loop: `j` indexes the rows, the columns and the table.)
            let mut j = 0;
            while j < n {
                // The rows' codes, then each column's activations once for
                // every row (a column's two operands live in registers only
                // while its rows use them: AVX2's sixteen registers hold the
                // accumulators, the codes and little more).
                let mut cx = [(_mm256_setzero_si256(), _mm256_setzero_si256()); R];
                for (r, cx) in cx.iter_mut().enumerate() {
                    // SAFETY: block b + j < nb of row r.
                    *cx = unsafe { codes::<K>(xs[r].add((b + j) * xb), table) };
                }
                for c in 0..C {
                    // SAFETY: block j < n of column c's group: 64 bytes.
                    let (y0, y1) = unsafe {
                        let yp = yg[c].add(SCALE_BYTES + j * BLOCK_BYTES);
                        (
                            _mm256_loadu_si256(yp.cast()),
                            _mm256_loadu_si256(yp.add(32).cast()),
                        )
                    };
                    for (r, &(lo, hi)) in cx.iter().enumerate() {
                        let s = if unsigned {
                            let p = _mm256_sub_epi16(_mm256_maddubs_epi16(lo, y0), y1);
                            _mm256_madd_epi16(p, ones)
                        } else {
                            _mm256_add_epi32(_mm256_madd_epi16(lo, y0), _mm256_madd_epi16(hi, y1))
                        };
                        let d = _mm256_set1_ps(ds[c][r][j]);
                        acc[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[c][r]);
                    }
                }
                j += 1;
            }
            b += n;
            g += 1;
        }
        hsums(&acc)
    }

    /// Defines the safe [`TileFn`] `$safe` of kind `$k` (its kernel
    /// `$kernel`): sub-tiles of at most 2 rows by 4 columns (the registers
    /// hold 8 accumulators and two rows' codes), four rows for one column.
    macro_rules! safe_tile {
        ($safe:ident, $kernel:ident, $k:expr) => {
            unsafe fn $kernel<const R: usize, const C: usize>(
                xs: [*const u8; R],
                ys: [*const u8; C],
                nb: usize,
            ) -> [[f32; R]; C] {
                // SAFETY: forwarded to the caller.
                unsafe { tile::<{ $k }, R, C>(xs, ys, nb) }
            }

            fn $safe(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                // Whole blocks in every row and column.
                let n = xs
                    .iter()
                    .take(TILE_ROWS)
                    .map(|x| x.len() / block_bytes($k))
                    .chain(
                        ys.iter()
                            .take(TILE_COLS)
                            .map(|y| Q8Tiled::blocks_in(y.len())),
                    )
                    .min()
                    .unwrap_or(0);
                for_each_subtile_n(
                    xs,
                    ys,
                    out,
                    n,
                    |cols| if cols == 1 { (4, 1) } else { (2, 4) },
                    |xc, yc, o, off, n| dispatch!($kernel, xc, yc, o, off, n),
                );
            }
        };
    }
    safe_tile!(q4_0_tile, q4_0_kernel, Q4_0);
    safe_tile!(q5_0_tile, q5_0_kernel, Q5_0);
    safe_tile!(q8_0_tile, q8_0_kernel, Q8_0);
    safe_tile!(iq4_nl_tile, iq4_nl_kernel, IQ4_NL);
}
