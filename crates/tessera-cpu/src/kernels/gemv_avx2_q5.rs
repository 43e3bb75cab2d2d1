//! AVX2 dot products and tiles for Q5_0 (x Q8_0), Q4_1 and Q5_1 (x Q8_1)
//! weights (see [`super::gemv_avx2`] for the tile contract and
//! [`super::dot_quant5`] for the layouts and the portable versions).
//!
//! One body serves the three types (the const parameter `K`): a block's 32
//! codes are unpacked to unsigned bytes (nibbles, plus bit 4 from `qh`
//! expanded by a byte shuffle and compare, ggml's `bytes_from_bits_32`) and
//! multiplied with the signed activations by `maddubs` (pairs of at most
//! 2 * 31 * 127 = 7874: no saturation), then widened by `madd` with ones:
//! exact integer block sums. Q5_0's offset 16 is removed by subtracting
//! `16 * (y_i + y_j)` per pair, computed once per column and block and
//! shared by the rows; Q4_1/Q5_1 add `m * s` per block (the Q8_1 block's
//! `s = dy * sum(qy)`), summed in f32 beside the products. Blocks go in
//! groups of eight (the last one partial) whose integer sums are gathered
//! into one vector, so one conversion and one multiply-add serve a group
//! and the scales are read eight at a time. The one-row dot products are
//! the 1 x 1 tile.
//!
//! [`dot_fn`] and [`tile_fn`] hand the kernels out only on CPUs with AVX2,
//! FMA and F16C.

use tessera::DType;

use super::dot::{DotFn, GemvFn, TILE_COLS, TILE_ROWS, TileFn};

/// The AVX2 one-row dot product of `weights`, if this module has one and
/// the CPU has AVX2, FMA and F16C.
pub fn dot_fn(weights: DType) -> Option<DotFn> {
    imp::dot_fn(weights)
}

/// The AVX2 tile of `weights`, if this module has one and the CPU has AVX2,
/// FMA and F16C.
pub fn tile_fn(weights: DType) -> Option<TileFn> {
    imp::tile_fn(weights)
}

/// The AVX2 many-row product of `weights` ([`GemvFn`]), if this module has
/// one and the CPU has AVX2, FMA and F16C.
pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
    imp::gemv_fn(weights)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub fn dot_fn(_weights: DType) -> Option<DotFn> {
        None
    }
    pub fn tile_fn(_weights: DType) -> Option<TileFn> {
        None
    }
    pub fn gemv_fn(_weights: DType) -> Option<GemvFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::dot::gemv_rows;
    use crate::kernels::gemv_avx2::imp::hsums;
    use crate::kernels::gemv_avx2_q8::{block_sums, prefetch, scales_upto, scales8};

    /// The kinds of weights (`K`).
    pub(crate) const Q5_0: usize = 0;
    pub(crate) const Q4_1: usize = 1;
    pub(crate) const Q5_1: usize = 2;

    /// Blocks per prefetch step.
    const SB: usize = 8;

    /// `(weight block bytes, qs offset, qh offset (0: none), has a min,
    /// activation block bytes, activation qs offset)` of kind `K`.
    const fn layout(k: usize) -> (usize, usize, usize, bool, usize, usize) {
        match k {
            Q5_0 => (22, 6, 2, false, 34, 2),
            Q4_1 => (20, 4, 0, true, 36, 4),
            // Q5_1 (x Q8_1, as Q4_1).
            _ => (24, 8, 4, true, 36, 4),
        }
    }

    pub fn dot_fn(weights: DType) -> Option<DotFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q5_0 => q5_0_dot,
            DType::Q4_1 => q4_1_dot,
            DType::Q5_1 => q5_1_dot,
            _ => return None,
        })
    }

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q5_0 => q5_0_tile,
            DType::Q4_1 => q4_1_tile,
            DType::Q5_1 => q5_1_tile,
            _ => return None,
        })
    }

    pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q5_0 => q5_0_gemv,
            DType::Q4_1 => q4_1_gemv,
            DType::Q5_1 => q5_1_gemv,
            _ => return None,
        })
    }

    /// The safe many-row product of kind `$k`: four rows per call, one
    /// from each quarter of the call's rows (`gemv_rows`: four sequential
    /// streams at once). Measured with `TESSERA_CPU_ISA=avx2`,
    /// `benches/gemv_short.rs`, alternated in one process: Q5_0 13.6 ->
    /// 15.3 GB/s of weights (2,048 values a row), 14.3 -> 17.5 (8,192)
    /// against one row per call; short rows (Gemma 3's 640 values) took
    /// four per call before already.
    macro_rules! gemv_wrapper {
        ($gemv:ident, $k:expr) => {
            fn $gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
                let (xb, .., yb, _) = layout($k);
                let yp = [y.as_ptr()];
                // SAFETY: `gemv_rows` passes rows of `n` whole blocks, and
                // `y` holds `n` blocks; `gemv_fn` checked the CPU.
                let one = |x, n| unsafe { tile::<{ $k }, 1, 1>([x], yp, n)[0][0] };
                // SAFETY: as for `one`.
                let four = |xp, n| unsafe { tile::<{ $k }, 4, 1>(xp, yp, n)[0] };
                gemv_rows::<4>(a, stride, y, out, (xb, yb), four, one);
            }
        };
    }
    gemv_wrapper!(q5_0_gemv, Q5_0);
    gemv_wrapper!(q4_1_gemv, Q4_1);
    gemv_wrapper!(q5_1_gemv, Q5_1);

    /// Safe one-row dot product and tile wrappers of kind `$k`.
    macro_rules! wrappers {
        ($dot:ident, $tile:ident, $k:expr) => {
            fn $dot(x: &[u8], y: &[u8]) -> f32 {
                let (xb, .., yb, _) = layout($k);
                let nb = (x.len() / xb).min(y.len() / yb);
                // SAFETY: both rows hold `nb` whole blocks; `dot_fn` hands
                // this wrapper out only after checking AVX2, FMA and F16C.
                unsafe { tile::<{ $k }, 1, 1>([x.as_ptr()], [y.as_ptr()], nb)[0][0] }
            }

            fn $tile(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                let (xb, .., yb, _) = layout($k);
                crate::kernels::dot::for_each_subtile(
                    xs,
                    ys,
                    out,
                    (xb, yb),
                    |cols| if cols == 1 { (4, 1) } else { (4, 2) },
                    |xc, yc, o, off, n| {
                        macro_rules! call {
                            ($r:literal, $c:literal) => {{
                                let xp: [*const u8; $r] = std::array::from_fn(|i| xc[i].as_ptr());
                                let yp: [*const u8; $c] = std::array::from_fn(|i| yc[i].as_ptr());
                                // SAFETY: `for_each_subtile` passes the number of
                                // whole blocks of the shortest row; `tile_fn`
                                // checked the CPU features.
                                let res = unsafe { tile::<{ $k }, $r, $c>(xp, yp, n) };
                                for (o, r) in o.iter_mut().zip(res.iter()) {
                                    if let Some(o) = o.get_mut(off..off + $r) {
                                        o.copy_from_slice(r);
                                    }
                                }
                            }};
                        }
                        match (xc.len(), yc.len()) {
                            (1, 1) => call!(1, 1),
                            (2, 1) => call!(2, 1),
                            (3, 1) => call!(3, 1),
                            (4, 1) => call!(4, 1),
                            (1, 2) => call!(1, 2),
                            (2, 2) => call!(2, 2),
                            (3, 2) => call!(3, 2),
                            (4, 2) => call!(4, 2),
                            _ => {}
                        }
                    },
                );
            }
        };
    }
    wrappers!(q5_0_dot, q5_0_tile, Q5_0);
    wrappers!(q4_1_dot, q4_1_tile, Q4_1);
    wrappers!(q5_1_dot, q5_1_tile, Q5_1);

    /// Byte `j` of the result is `0xFF` where bit `j` of the u32 at `p` is
    /// set, else 0 (ggml's `bytes_from_bits_32`).
    ///
    /// # Safety
    /// Four bytes at `p` must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
        // SAFETY: forwarded to the caller; read_unaligned needs no alignment.
        let x = unsafe { p.cast::<i32>().read_unaligned() };
        let shuf = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x), shuf);
        let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }

    /// The 32 unsigned codes of the weight block at `p` of kind `K`.
    ///
    /// # Safety
    /// The block must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block_codes<const K: usize>(p: *const u8) -> __m256i {
        let (_, qs, qh, ..) = layout(K);
        // SAFETY: 16 nibble bytes at `qs` inside the block.
        let q = unsafe { _mm_loadu_si128(p.add(qs).cast()) };
        let nib = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0xf),
        );
        if qh == 0 {
            return nib;
        }
        // SAFETY: the 4 bytes of qh at `qh` inside the block.
        let hi = unsafe { bytes_from_bits(p.add(qh)) };
        _mm256_or_si256(nib, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)))
    }

    /// Weight rows of kind `K` x activation columns: `out[c][r] = dot(xs[r], ys[c])`
    /// over `nb` blocks.
    ///
    /// # Safety
    /// Every `xs[r]` must hold `nb` weight blocks and every `ys[c]` `nb`
    /// activation blocks of kind `K`; the CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn tile<const K: usize, const R: usize, const C: usize>(
        xs: [*const u8; R],
        ys: [*const u8; C],
        nb: usize,
    ) -> [[f32; R]; C] {
        let (xb, _, _, has_min, yb, yq) = layout(K);
        let ones = _mm256_set1_epi16(1);
        let sixteen = _mm256_set1_epi8(16);
        let mut acc = [[_mm256_setzero_ps(); R]; C];
        // Per (column, row): the blocks' min terms `m * s`, eight lanes.
        let mut mins = [[_mm256_setzero_ps(); R]; C];
        // The scales (f16) of `n` blocks from `p`, `stride` bytes apart.
        let scales = |p: *const u8, stride: usize, n: usize| {
            if n == SB {
                // SAFETY: the callers pass `p` with `n` blocks after it.
                unsafe { scales8(p, stride) }
            } else {
                // SAFETY: as above.
                unsafe { scales_upto(p, stride, n) }
            }
        };
        // Groups of eight blocks (the last one partial): the blocks' integer
        // sums are gathered by `block_sums`, so that one conversion and one
        // multiply-add serve the group, with the scales of its blocks read
        // eight at a time.
        // The group of `$n` blocks from block `$b` (a macro, so that full
        // groups get a constant count and loops without bound checks).
        macro_rules! group {
            ($b:expr, $n:expr) => {{
                let (b, n): (usize, usize) = ($b, $n);
                for x in xs {
                    prefetch(x.wrapping_add(b * xb), SB * xb + 63);
                }
                let mut yp = [std::ptr::null::<u8>(); C];
                let mut dy = [_mm256_setzero_ps(); C];
                let mut sy = [_mm256_setzero_ps(); C];
                // The group's activations and (Q5_0) their `16 * (y_i + y_j)`
                // pair sums, shared by the rows.
                let mut yv = [[_mm256_setzero_si256(); SB]; C];
                let mut yo = [[_mm256_setzero_si256(); SB]; C];
                for c in 0..C {
                    // SAFETY: blocks b..b + n <= nb exist in column c; the scale
                    // is at 0 and (Q8_1) the sum at 2.
                    yp[c] = unsafe { ys[c].add(b * yb) };
                    dy[c] = scales(yp[c], yb, n);
                    if has_min {
                        sy[c] = scales(yp[c].wrapping_add(2), yb, n);
                    }
                    for j in 0..n {
                        // SAFETY: block b + j < nb of column c: 32 quants at `yq`.
                        yv[c][j] = unsafe { _mm256_loadu_si256(yp[c].add(j * yb + yq).cast()) };
                        if K == Q5_0 {
                            yo[c][j] = _mm256_maddubs_epi16(sixteen, yv[c][j]);
                        }
                    }
                }
                for r in 0..R {
                    // SAFETY: blocks b..b + n <= nb exist in row r.
                    let xp = unsafe { xs[r].add(b * xb) };
                    let dx = scales(xp, xb, n);
                    let mut v = [[_mm256_setzero_si256(); C]; SB];
                    for (j, vj) in v.iter_mut().enumerate().take(n) {
                        // SAFETY: block b + j < nb of row r.
                        let u = unsafe { block_codes::<K>(xp.add(j * xb)) };
                        for (c, v) in vj.iter_mut().enumerate() {
                            let mut p = _mm256_maddubs_epi16(u, yv[c][j]);
                            if K == Q5_0 {
                                p = _mm256_sub_epi16(p, yo[c][j]);
                            }
                            *v = _mm256_madd_epi16(p, ones);
                        }
                    }
                    for c in 0..C {
                        let s = _mm256_cvtepi32_ps(block_sums(std::array::from_fn(|j| v[j][c])));
                        acc[c][r] = _mm256_fmadd_ps(s, _mm256_mul_ps(dx, dy[c]), acc[c][r]);
                        if has_min {
                            let mx = scales(xp.wrapping_add(2), xb, n);
                            mins[c][r] = _mm256_fmadd_ps(mx, sy[c], mins[c][r]);
                        }
                    }
                }
            }};
        }
        let mut b = 0;
        while b + SB <= nb {
            group!(b, SB);
            b += SB;
        }
        if b < nb {
            group!(b, nb - b);
        }
        if has_min {
            for (a, m) in acc.iter_mut().zip(&mins) {
                for (a, m) in a.iter_mut().zip(m) {
                    *a = _mm256_add_ps(*a, *m);
                }
            }
        }
        hsums(&acc)
    }
}
