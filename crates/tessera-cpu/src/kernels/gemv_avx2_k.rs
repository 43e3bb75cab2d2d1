//! AVX2 dot products and tiles for Q2_K, Q3_K and Q5_K weights with Q8K
//! activations (see [`super::gemv_avx2`] for the tile contract and
//! [`super::dot_kquant`] for the layouts and the portable versions).
//!
//! One body serves the three types (the const parameter `K`). A block's
//! codes are unpacked 32 at a time to unsigned bytes (2, 3 or 5 bits) and
//! multiplied with the signed activations by `maddubs` (pairs of at most
//! 2 * 31 * 127 = 7874: no saturation), then weighted by the sub-block
//! scales with `madd` (16-value sub-blocks: one scale per 128-bit half):
//! exact integer sums, as in the portable code. Q3_K's codes are stored as
//! `q + 4` (0..8) and its offset `-4 sc_s sum(y)` comes from the Q8K
//! `bsums`; Q2_K's and Q5_K's mins are `bsums` times the mins, also by
//! `madd`. Each block adds `d dy * sum` (and `dmin dy * mins`) in f32.
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
mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::dot_kquant::{Q2K_BYTES, Q3K_BYTES, Q5K_BYTES, q3k_scales16};
    use crate::kernels::dot_quant::Q8K_BYTES;
    use crate::kernels::gemv_avx2::imp::{f16_at, hsums, q4k_scales_mins};
    use crate::kernels::gemv_avx2_q8::prefetch;

    /// The kinds of weights (`K`).
    const Q2K: usize = 0;
    const Q3K: usize = 1;
    const Q5K: usize = 2;

    /// Blocks per prefetch step.
    const SB: usize = 2;

    /// Weight block bytes of kind `K`.
    const fn block_bytes(k: usize) -> usize {
        match k {
            Q2K => Q2K_BYTES,
            Q3K => Q3K_BYTES,
            _ => Q5K_BYTES,
        }
    }

    pub fn dot_fn(weights: DType) -> Option<DotFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q2K => q2k_dot,
            DType::Q3K => q3k_dot,
            DType::Q5K => q5k_dot,
            _ => return None,
        })
    }

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q2K => q2k_tile,
            DType::Q3K => q3k_tile,
            DType::Q5K => q5k_tile,
            _ => return None,
        })
    }

    pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::Q2K => q2k_gemv,
            DType::Q3K => q3k_gemv,
            DType::Q5K => q5k_gemv,
            _ => return None,
        })
    }

    /// The safe many-row product of kind `$k`, one row per call (the
    /// K-quants stream one row at a time best).
    macro_rules! gemv_wrapper {
        ($gemv:ident, $k:expr) => {
            fn $gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
                let yp = [y.as_ptr()];
                crate::kernels::dot::gemv_rows::<1>(
                    a,
                    stride,
                    y,
                    out,
                    (block_bytes($k), Q8K_BYTES),
                    // SAFETY: `gemv_rows` passes rows of `n` whole blocks,
                    // and `y` holds `n` blocks; `gemv_fn` checked the CPU.
                    |xp, n| unsafe { [tile::<{ $k }, 1>(xp[0], yp, n)[0]] },
                    // SAFETY: as above.
                    |x, n| unsafe { tile::<{ $k }, 1>(x, yp, n)[0] },
                );
            }
        };
    }
    gemv_wrapper!(q2k_gemv, Q2K);
    gemv_wrapper!(q3k_gemv, Q3K);
    gemv_wrapper!(q5k_gemv, Q5K);

    /// Safe one-row dot product and tile wrappers of kind `$k`.
    macro_rules! wrappers {
        ($dot:ident, $tile:ident, $k:expr) => {
            fn $dot(x: &[u8], y: &[u8]) -> f32 {
                let nb = (x.len() / block_bytes($k)).min(y.len() / Q8K_BYTES);
                // SAFETY: both rows hold `nb` whole blocks; `dot_fn` hands
                // this wrapper out only after checking AVX2, FMA and F16C.
                unsafe { tile::<{ $k }, 1>(x.as_ptr(), [y.as_ptr()], nb)[0] }
            }

            fn $tile(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                crate::kernels::dot::for_each_subtile(
                    xs,
                    ys,
                    out,
                    (block_bytes($k), Q8K_BYTES),
                    |cols| if cols == 1 { (1, 1) } else { (1, 4) },
                    |xc, yc, o, off, n| {
                        macro_rules! call {
                            ($c:literal) => {{
                                let yp: [*const u8; $c] = std::array::from_fn(|i| yc[i].as_ptr());
                                // SAFETY: `for_each_subtile` passes the number of
                                // whole blocks of the shortest row; `tile_fn`
                                // checked the CPU features.
                                let res = unsafe { tile::<{ $k }, $c>(xc[0].as_ptr(), yp, n) };
                                for (o, r) in o.iter_mut().zip(res) {
                                    if let Some(o) = o.get_mut(off) {
                                        *o = r;
                                    }
                                }
                            }};
                        }
                        match (xc.len(), yc.len()) {
                            (1, 1) => call!(1),
                            (1, 2) => call!(2),
                            (1, 3) => call!(3),
                            (1, 4) => call!(4),
                            _ => {}
                        }
                    },
                );
            }
        };
    }
    wrappers!(q2k_dot, q2k_tile, Q2K);
    wrappers!(q3k_dot, q3k_tile, Q3K);
    wrappers!(q5k_dot, q5k_tile, Q5K);

    /// Byte-shuffle masks over a 256-bit vector whose two 128-bit lanes
    /// hold the same eight i16 scales: `pairs[j]` puts word `2j` in every
    /// i16 of the low lane and word `2j + 1` in every one of the high lane
    /// (two 16-value sub-blocks against one `maddubs` result); `words[w]`
    /// puts word `w` everywhere.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn scale_masks() -> ([__m256i; 4], [__m256i; 8]) {
        let pair = |j: usize| {
            let mut m = [0u8; 32];
            for (i, b) in m.iter_mut().enumerate() {
                let w = if i < 16 { 2 * j } else { 2 * j + 1 };
                *b = (2 * w + i % 2) as u8;
            }
            m
        };
        let word = |w: usize| std::array::from_fn::<u8, 32, _>(|i| (2 * w + i % 2) as u8);
        // SAFETY: each array holds 32 bytes.
        let load = |m: [u8; 32]| unsafe { _mm256_loadu_si256(m.as_ptr().cast()) };
        (
            std::array::from_fn(|j| load(pair(j))),
            std::array::from_fn(|w| load(word(w))),
        )
    }

    /// Both lanes of `v` set to its lane `h` (0 or 1).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn lane(v: __m256i, h: usize) -> __m256i {
        if h == 0 {
            _mm256_permute2x128_si256::<0x00>(v, v)
        } else {
            _mm256_permute2x128_si256::<0x11>(v, v)
        }
    }

    /// The 16 i16 `bsums` of the Q8K block at `y`.
    ///
    /// # Safety
    /// The 292-byte block at `y` must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn bsums(y: *const u8) -> __m256i {
        // SAFETY: bytes 260..292 of the block.
        unsafe { _mm256_loadu_si256(y.add(260).cast()) }
    }

    /// One weight row of kind `K` x `C` Q8K columns: `out[c] = dot(x, ys[c])`
    /// over `nb` blocks.
    ///
    /// # Safety
    /// `x` must hold `nb` weight blocks of kind `K` and every `ys[c]` `nb`
    /// Q8K blocks; the CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const K: usize, const C: usize>(
        x: *const u8,
        ys: [*const u8; C],
        nb: usize,
    ) -> [f32; C] {
        let xb = block_bytes(K);
        let m4 = _mm256_set1_epi8(0xf);
        let m3 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let two = _mm256_set1_epi8(2);
        let (pairs, words) = scale_masks();
        let mut acc = [[_mm256_setzero_ps(); 1]; C];
        let mut accm = [[_mm256_setzero_ps(); 1]; C];
        for b in 0..nb {
            if b % SB == 0 {
                prefetch(x.wrapping_add(b * xb), SB * xb + 63);
            }
            // SAFETY: block b < nb of the row.
            let p = unsafe { x.add(b * xb) };
            let mut sumi = [_mm256_setzero_si256(); C];
            let mut summ = [_mm256_setzero_si256(); C];
            let (d, dmin);
            match K {
                Q2K => {
                    // SAFETY: scales at 0..16, qs at 16..80, d and dmin at
                    // 80 and 82 of the 84-byte block.
                    let q = unsafe {
                        d = f16_at(p.add(80));
                        dmin = f16_at(p.add(82));
                        [
                            _mm256_loadu_si256(p.add(16).cast()),
                            _mm256_loadu_si256(p.add(48).cast()),
                        ]
                    };
                    // SAFETY: as above.
                    let scv = unsafe { _mm_loadu_si128(p.cast()) };
                    let mins = _mm256_cvtepu8_epi16(_mm_and_si128(
                        _mm_srli_epi16::<4>(scv),
                        _mm_set1_epi8(0xf),
                    ));
                    let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(scv, _mm_set1_epi8(0xf)));
                    for (h, &qh) in q.iter().enumerate() {
                        let codes = [
                            _mm256_and_si256(qh, m3),
                            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3),
                            _mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3),
                        ];
                        // Scales 8h..8h + 8 in both lanes; sub-blocks 8h + 2j
                        // and 8h + 2j + 1 against codes[j].
                        let base = lane(sc16, h);
                        for (j, &u) in codes.iter().enumerate() {
                            let scale = _mm256_shuffle_epi8(base, pairs[j]);
                            for c in 0..C {
                                // SAFETY: 32 activation bytes at 4 + 128h + 32j (< 260).
                                let q8 = unsafe {
                                    _mm256_loadu_si256(
                                        ys[c].add(b * Q8K_BYTES + 4 + 128 * h + 32 * j).cast(),
                                    )
                                };
                                let prod = _mm256_maddubs_epi16(u, q8);
                                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(prod, scale));
                            }
                        }
                    }
                    for c in 0..C {
                        // SAFETY: block b < nb of column c.
                        let bs = unsafe { bsums(ys[c].add(b * Q8K_BYTES)) };
                        summ[c] = _mm256_madd_epi16(bs, mins);
                    }
                }
                Q3K => {
                    // SAFETY: hmask at 0..32, qs at 32..96, scales at
                    // 96..108, d at 108 of the 110-byte block.
                    let (hm, q, s12) = unsafe {
                        d = f16_at(p.add(108));
                        (
                            _mm256_loadu_si256(p.cast()),
                            [
                                _mm256_loadu_si256(p.add(32).cast()),
                                _mm256_loadu_si256(p.add(64).cast()),
                            ],
                            p.add(96).cast::<[u8; 12]>().read_unaligned(),
                        )
                    };
                    dmin = 0.0;
                    let sc = q3k_scales16(&s12);
                    // SAFETY: `sc` holds 16 i16.
                    let scv = unsafe { _mm256_loadu_si256(sc.as_ptr().cast()) };
                    let mut hs = hm;
                    for (h, &qh) in q.iter().enumerate() {
                        let base = lane(scv, h);
                        let low = [
                            _mm256_and_si256(qh, m3),
                            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m3),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(qh), m3),
                            _mm256_and_si256(_mm256_srli_epi16::<6>(qh), m3),
                        ];
                        for (j, &l) in low.iter().enumerate() {
                            // Bit 4h + j of hmask is bit 2 of the code.
                            let u = _mm256_or_si256(
                                l,
                                _mm256_slli_epi16::<2>(_mm256_and_si256(hs, one)),
                            );
                            hs = _mm256_srli_epi16::<1>(hs);
                            let scale = _mm256_shuffle_epi8(base, pairs[j]);
                            for c in 0..C {
                                // SAFETY: 32 activation bytes at 4 + 128h + 32j (< 260).
                                let q8 = unsafe {
                                    _mm256_loadu_si256(
                                        ys[c].add(b * Q8K_BYTES + 4 + 128 * h + 32 * j).cast(),
                                    )
                                };
                                let prod = _mm256_maddubs_epi16(u, q8);
                                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(prod, scale));
                            }
                        }
                    }
                    for c in 0..C {
                        // SAFETY: block b < nb of column c.
                        let bs = unsafe { bsums(ys[c].add(b * Q8K_BYTES)) };
                        // The codes are q + 4: remove 4 sc_s sum(y_s).
                        let off = _mm256_slli_epi32::<2>(_mm256_madd_epi16(bs, scv));
                        sumi[c] = _mm256_sub_epi32(sumi[c], off);
                    }
                }
                _ => {
                    // SAFETY: d, dmin at 0, 2, scales at 4..16, qh at
                    // 16..48, qs at 48..176 of the 176-byte block.
                    let (qh, scmn) = unsafe {
                        d = f16_at(p);
                        dmin = f16_at(p.add(2));
                        (
                            _mm256_loadu_si256(p.add(16).cast()),
                            // Scales (bytes 0..8) and mins (8..16): 16 bytes
                            // read at 4 (of 176).
                            q4k_scales_mins(p.add(4)),
                        )
                    };
                    // As i16: the scales in both lanes, the mins one per
                    // 16-value half.
                    let base = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
                    let m32 = _mm256_cvtepu16_epi32(_mm_cvtepu8_epi16(_mm_srli_si128::<8>(scmn)));
                    let mins = _mm256_or_si256(m32, _mm256_slli_epi32::<16>(m32));
                    let mut hs = qh;
                    for j in 0..4 {
                        // SAFETY: 32 quant bytes at 48 + 32j (< 176).
                        let q4 = unsafe { _mm256_loadu_si256(p.add(48 + 32 * j).cast()) };
                        let lo = _mm256_or_si256(
                            _mm256_and_si256(q4, m4),
                            _mm256_slli_epi16::<4>(_mm256_and_si256(hs, one)),
                        );
                        let hi = _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(q4), m4),
                            _mm256_slli_epi16::<3>(_mm256_and_si256(hs, two)),
                        );
                        hs = _mm256_srli_epi16::<2>(hs);
                        let sl = _mm256_shuffle_epi8(base, words[2 * j]);
                        let sh = _mm256_shuffle_epi8(base, words[2 * j + 1]);
                        for c in 0..C {
                            // SAFETY: 64 activation bytes at 4 + 64j (< 260).
                            let (q8l, q8h) = unsafe {
                                let y = ys[c].add(b * Q8K_BYTES + 4 + 64 * j);
                                (
                                    _mm256_loadu_si256(y.cast()),
                                    _mm256_loadu_si256(y.add(32).cast()),
                                )
                            };
                            let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, q8l));
                            let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, q8h));
                            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
                        }
                    }
                    for c in 0..C {
                        // SAFETY: block b < nb of column c.
                        let bs = unsafe { bsums(ys[c].add(b * Q8K_BYTES)) };
                        summ[c] = _mm256_madd_epi16(bs, mins);
                    }
                }
            }
            for c in 0..C {
                // SAFETY: the f32 scale at 0 of block b of column c.
                let dy = unsafe { ys[c].add(b * Q8K_BYTES).cast::<f32>().read_unaligned() };
                acc[c][0] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * dy),
                    _mm256_cvtepi32_ps(sumi[c]),
                    acc[c][0],
                );
                if K != Q3K {
                    accm[c][0] = _mm256_fmadd_ps(
                        _mm256_set1_ps(dmin * dy),
                        _mm256_cvtepi32_ps(summ[c]),
                        accm[c][0],
                    );
                }
            }
        }
        let s = hsums(&acc);
        let m = hsums(&accm);
        std::array::from_fn(|c| s[c][0] - m[c][0])
    }
}
