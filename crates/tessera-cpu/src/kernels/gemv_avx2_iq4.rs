//! AVX2 dot products and tiles for IQ4_NL (x Q8_0) and IQ4_XS (x Q8_K)
//! weights (see [`super::gemv_avx2`] for the tile contract and
//! [`super::dot_iq4`] for the layouts and the portable versions).
//!
//! As in ggml's AVX2 kernels, the 32 indices of a (sub-)block are looked up
//! in `kvalues_iq4nl` with one `vpshufb` (the table in both lanes), giving
//! signed bytes `w`; `maddubs(|w|, sign(y, w))` multiplies them with the
//! signed activations (pairs of at most 2 * 127 * 127 = 32258: no
//! saturation) and `madd` widens to exact 32-bit sums: by ones for IQ4_NL
//! (scaled by `dx * dy` per block in f32), by the sub-block scale
//! `ls - 32` for IQ4_XS (exact in 32 bits over a super-block, scaled by
//! `dx * dy` once per super-block). The one-row dot products are the 1 x 1
//! tile.
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

    use tessera::quant::KVALUES_IQ4NL;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::gemv_avx2::imp::{f16_at, hsums};
    use crate::kernels::gemv_avx2_q8::prefetch;

    /// The kinds of weights (`K`).
    pub(crate) const NL: usize = 0;
    pub(crate) const XS: usize = 1;

    /// `(weight block bytes, activation block bytes)` of kind `K`.
    const fn layout(k: usize) -> (usize, usize) {
        match k {
            NL => (18, 34),
            _ => (136, 292),
        }
    }

    pub fn dot_fn(weights: DType) -> Option<DotFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::IQ4NL => nl_dot,
            DType::IQ4XS => xs_dot,
            _ => return None,
        })
    }

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::IQ4NL => nl_tile,
            DType::IQ4XS => xs_tile,
            _ => return None,
        })
    }

    pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::IQ4NL => crate::kernels::gemv_avx2_q4_0::iq4_nl_gemv,
            DType::IQ4XS => xs_gemv,
            _ => return None,
        })
    }

    /// The safe many-row product of kind `$k`, four rows per call.
    macro_rules! gemv_wrapper {
        ($gemv:ident, $k:expr) => {
            fn $gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
                let yp = [y.as_ptr()];
                crate::kernels::dot::gemv_rows::<4>(
                    a,
                    stride,
                    y,
                    out,
                    layout($k),
                    // SAFETY: `gemv_rows` passes rows of `n` whole blocks,
                    // and `y` holds `n` blocks; `gemv_fn` checked the CPU.
                    |xp, n| unsafe { tile::<{ $k }, 4, 1>(xp, yp, n)[0] },
                    // SAFETY: as above.
                    |x, n| unsafe { tile::<{ $k }, 1, 1>([x], yp, n)[0][0] },
                );
            }
        };
    }
    gemv_wrapper!(xs_gemv, XS);

    /// Safe one-row dot product and tile wrappers of kind `$k`.
    macro_rules! wrappers {
        ($dot:ident, $tile:ident, $k:expr) => {
            fn $dot(x: &[u8], y: &[u8]) -> f32 {
                let (xb, yb) = layout($k);
                let nb = (x.len() / xb).min(y.len() / yb);
                // SAFETY: both rows hold `nb` whole blocks; `dot_fn` hands
                // this wrapper out only after checking AVX2, FMA and F16C.
                unsafe { tile::<{ $k }, 1, 1>([x.as_ptr()], [y.as_ptr()], nb)[0][0] }
            }

            fn $tile(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                let (xb, yb) = layout($k);
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
    wrappers!(nl_dot, nl_tile, NL);
    wrappers!(xs_dot, xs_tile, XS);

    /// The table `kvalues_iq4nl` in both 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn table() -> __m256i {
        // SAFETY: 16 readable bytes (the table).
        let t = unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) };
        _mm256_set_m128i(t, t)
    }

    /// The 32 signed values of the 16 index bytes at `p` (values 0..16 from
    /// the low nibbles, 16..32 from the high ones).
    ///
    /// # Safety
    /// 16 bytes at `p` must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(p: *const u8, lut: __m256i) -> __m256i {
        // SAFETY: forwarded.
        let q = unsafe { _mm_loadu_si128(p.cast()) };
        let idx = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0xf),
        );
        _mm256_shuffle_epi8(lut, idx)
    }

    /// Pairwise 16-bit products `w * y` of signed bytes (no saturation:
    /// `|w|, |y| <= 127`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn mul_pairs(aw: __m256i, w: __m256i, y: __m256i) -> __m256i {
        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w))
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
        let (xb, _) = layout(K);
        let lut = table();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); R]; C];
        let mut acc2 = [[_mm256_setzero_ps(); R]; C];
        if K == NL {
            // Small tiles alternate two accumulator sets by block (the
            // one-row product would otherwise wait on one FMA chain).
            let pair = R * C <= 2;
            let mut b = 0;
            while b < nb {
                if b % 8 == 0 {
                    for x in xs {
                        prefetch(x.wrapping_add(b * xb), 8 * xb + 63);
                    }
                }
                // SAFETY: block b < nb of every row and column.
                unsafe { nl_block::<R, C>(&xs, &ys, b, lut, ones, &mut acc) };
                if pair && b + 1 < nb {
                    // SAFETY: block b + 1 < nb likewise.
                    unsafe { nl_block::<R, C>(&xs, &ys, b + 1, lut, ones, &mut acc2) };
                    b += 2;
                } else {
                    b += 1;
                }
            }
        }
        for b in (0..nb).filter(|_| K == XS) {
            for x in xs {
                prefetch(x.wrapping_add(b * xb), xb + 63);
            }
            // SAFETY: super-block b < nb of every row and column.
            unsafe { xs_block::<R, C>(&xs, &ys, b, lut, &mut acc) };
        }
        if R * C <= 2 {
            for (a, a2) in acc.iter_mut().zip(&acc2) {
                for (a, &a2) in a.iter_mut().zip(a2) {
                    *a = _mm256_add_ps(*a, a2);
                }
            }
        }
        hsums(&acc)
    }

    /// The eight sub-block scales `ls - 32` of an IQ4_XS super-block (its
    /// `scales_h` and `scales_l`) as i16, in both 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn xs_scales(h: u16, sl: u32) -> __m256i {
        let lo = _mm256_srlv_epi32(
            _mm256_set1_epi32(sl as i32),
            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
        );
        let hi = _mm256_srlv_epi32(
            _mm256_set1_epi32(i32::from(h)),
            _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
        );
        let ls = _mm256_or_si256(
            _mm256_and_si256(lo, _mm256_set1_epi32(0xf)),
            _mm256_slli_epi32::<4>(_mm256_and_si256(hi, _mm256_set1_epi32(3))),
        );
        let ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        // Eight i32 to eight i16, then the same in both lanes.
        let w = _mm_packs_epi32(
            _mm256_castsi256_si128(ls),
            _mm256_extracti128_si256::<1>(ls),
        );
        _mm256_set_m128i(w, w)
    }

    /// One IQ4_XS super-block `b` of every row against every column, into
    /// `acc`. Sub-blocks go two at a time: one 32-byte load holds both
    /// sub-blocks' index bytes, whose low nibbles are values 0..16 of each
    /// (one per 128-bit lane) and high nibbles 16..32; the activations are
    /// arranged to match once per column and pair, for all rows.
    ///
    /// # Safety
    /// As [`tile`]: super-block `b` of every row and column is readable;
    /// AVX2, FMA and F16C present.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn xs_block<const R: usize, const C: usize>(
        xs: &[*const u8; R],
        ys: &[*const u8; C],
        b: usize,
        lut: __m256i,
        acc: &mut [[__m256; R]; C],
    ) {
        let (xb, yb) = layout(XS);
        let m4 = _mm256_set1_epi8(0xf);
        let mut scales = [_mm256_setzero_si256(); R];
        let mut dx = [0f32; R];
        for r in 0..R {
            // SAFETY: super-block b of row r (136 bytes): d at 0, scales_h
            // at 2, scales_l at 4.
            unsafe {
                let p = xs[r].add(b * xb);
                dx[r] = f16_at(p);
                scales[r] = xs_scales(
                    p.add(2).cast::<u16>().read_unaligned(),
                    p.add(4).cast::<u32>().read_unaligned(),
                );
            }
        }
        let mut isum = [[_mm256_setzero_si256(); R]; C];
        for pair in 0..4i16 {
            // The scale (word) of sub-block 2 pair in the low lane, 2 pair + 1
            // in the high one, for `vpmaddwd`: byte indices 2w, 2w + 1 of
            // word w, repeated over the lane.
            let word = |w: i16| _mm_set1_epi16(((2 * w + 1) << 8) | (2 * w));
            let pick = _mm256_set_m128i(word(2 * pair + 1), word(2 * pair));
            let mut yv = [[_mm256_setzero_si256(); 2]; C];
            for (c, y) in yv.iter_mut().enumerate() {
                // SAFETY: sub-blocks 2 pair and 2 pair + 1 of block b of
                // column c: 64 quants at 4 + 64 pair.
                let (a, e) = unsafe {
                    let q = ys[c].add(b * yb + 4 + 64 * pair as usize);
                    (
                        _mm256_loadu_si256(q.cast()),
                        _mm256_loadu_si256(q.add(32).cast()),
                    )
                };
                *y = [
                    _mm256_permute2x128_si256::<0x20>(a, e),
                    _mm256_permute2x128_si256::<0x31>(a, e),
                ];
            }
            for r in 0..R {
                let at = b * xb + 8 + 32 * pair as usize;
                // SAFETY: the two sub-blocks' 32 index bytes at 8 + 32 pair
                // of super-block b of row r.
                let q = unsafe { _mm256_loadu_si256(xs[r].add(at).cast()) };
                let w = [
                    _mm256_shuffle_epi8(lut, _mm256_and_si256(q, m4)),
                    _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4)),
                ];
                let aw = [_mm256_sign_epi8(w[0], w[0]), _mm256_sign_epi8(w[1], w[1])];
                let scale = _mm256_shuffle_epi8(scales[r], pick);
                for c in 0..C {
                    let p0 = mul_pairs(aw[0], w[0], yv[c][0]);
                    let p1 = mul_pairs(aw[1], w[1], yv[c][1]);
                    // Each pair sum reaches 2 * 127 * 127: widen before adding.
                    let p = _mm256_add_epi32(
                        _mm256_madd_epi16(p0, scale),
                        _mm256_madd_epi16(p1, scale),
                    );
                    isum[c][r] = _mm256_add_epi32(isum[c][r], p);
                }
            }
        }
        for c in 0..C {
            // SAFETY: block b of column c: the f32 scale at 0.
            let dy = unsafe { ys[c].add(b * yb).cast::<f32>().read_unaligned() };
            for r in 0..R {
                let s = _mm256_cvtepi32_ps(isum[c][r]);
                acc[c][r] = _mm256_fmadd_ps(s, _mm256_set1_ps(dx[r] * dy), acc[c][r]);
            }
        }
    }

    /// One IQ4_NL block `b` of every row against every column, into `acc`.
    ///
    /// # Safety
    /// As [`tile`]: block `b` of every row and column is readable; AVX2,
    /// FMA and F16C present.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nl_block<const R: usize, const C: usize>(
        xs: &[*const u8; R],
        ys: &[*const u8; C],
        b: usize,
        lut: __m256i,
        ones: __m256i,
        acc: &mut [[__m256; R]; C],
    ) {
        const { assert!(R <= 4, "four rows' scales per conversion") };
        let (xb, yb) = layout(NL);
        // The rows' scales, four f16 at once (as ggml's tinyBLAS): one
        // conversion per block instead of one per row, and each product
        // `dx * dy` is a lane shuffle of one vector per column.
        let mut hx = 0u64;
        for (r, x) in xs.iter().enumerate() {
            // SAFETY: block b of row r: the f16 scale at 0.
            let h = unsafe { x.add(b * xb).cast::<u16>().read_unaligned() };
            hx |= u64::from(h) << (16 * r);
        }
        let dx = _mm_cvtph_ps(_mm_cvtsi64_si128(hx as i64));
        let mut w = [_mm256_setzero_si256(); R];
        let mut aw = [_mm256_setzero_si256(); R];
        for r in 0..R {
            // SAFETY: block b of row r: 16 index bytes at 2.
            w[r] = unsafe { values(xs[r].add(b * xb + 2), lut) };
            aw[r] = _mm256_sign_epi8(w[r], w[r]);
        }
        for c in 0..C {
            // SAFETY: block b of column c: the f16 scale at 0, 32 quants at 2.
            let (y, dy) = unsafe {
                let p = ys[c].add(b * yb);
                (_mm256_loadu_si256(p.add(2).cast()), f16_at(p))
            };
            let d = _mm_mul_ps(dx, _mm_set1_ps(dy));
            let d = _mm256_set_m128(d, d);
            for r in 0..R {
                let p = mul_pairs(aw[r], w[r], y);
                let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                let dr = match r {
                    0 => _mm256_shuffle_ps::<0x00>(d, d),
                    1 => _mm256_shuffle_ps::<0x55>(d, d),
                    2 => _mm256_shuffle_ps::<0xaa>(d, d),
                    _ => _mm256_shuffle_ps::<0xff>(d, d),
                };
                acc[c][r] = _mm256_fmadd_ps(s, dr, acc[c][r]);
            }
        }
    }
}
