//! AVX2/FMA/F16C multi-row dot products ("tiles") for MUL_MAT with few
//! columns: up to [`TILE_ROWS`] weight rows against up to [`TILE_COLS`]
//! activation rows per call, for Q4_0, Q8_0, Q4K, Q6K, F32, F16 and BF16.
//!
//! Why tiles: at n = 1 (token generation) MUL_MAT streams the weights once
//! from DRAM, and a one-row dot product leaves too few loads in flight and
//! spends its time on per-block overhead. Several rows per call share the
//! activation loads and their per-block preparation (the Q8 scale, the sums
//! for the Q4_0 offset, the K-quant `bsums`), give the core independent
//! accumulator chains, and take one horizontal sum per row and call. With
//! several columns the weight unpacking is shared as well.
//!
//! The integer sums per block are exact and equal to those of
//! [`super::dot_quant`]; only the f32 scaling and the order of the f32 sums
//! differ from the one-row kernels. Q4_0 uses the unsigned nibbles directly
//! in `maddubs` and subtracts `8 * (y0 + y1)` per pair (computed once per
//! activation block) instead of ggml's sign trick.
//!
//! The `unsafe` kernels take raw row pointers and a block count; the safe
//! [`TileFn`] wrappers handed out by [`tile_fn`] check the slices first, and
//! [`tile_fn`] returns them only after checking the CPU.

use tessera::DType;

use super::dot::{GemvFn, TILE_COLS, TILE_ROWS, TileFn};

/// The AVX2 tile kernel for `weights`, if there is one and the CPU has AVX2,
/// FMA and F16C (activations in the weights' dot type).
pub fn tile_fn(weights: DType) -> Option<TileFn> {
    imp::tile_fn(weights)
}

/// The AVX2 tile kernel for `weights` with f32 activations, where there is
/// one (F16 and BF16 weights).
pub fn tile_f32_fn(weights: DType) -> Option<TileFn> {
    imp::tile_f32_fn(weights)
}

/// The AVX2 many-row product for `weights` ([`GemvFn`]), where there is one.
pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
    imp::gemv_fn(weights)
}

/// The AVX2 many-row product for `weights` with f32 activations.
pub fn gemv_f32_fn(weights: DType) -> Option<GemvFn> {
    imp::gemv_f32_fn(weights)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub fn tile_fn(_weights: DType) -> Option<TileFn> {
        None
    }

    pub fn tile_f32_fn(_weights: DType) -> Option<TileFn> {
        None
    }

    pub fn gemv_fn(_weights: DType) -> Option<GemvFn> {
        None
    }

    pub fn gemv_f32_fn(_weights: DType) -> Option<GemvFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;
    use crate::kernels::dot_quant::{Q4_0_BYTES, Q4K_BYTES, Q6K_BYTES, Q8_0_BYTES, Q8K_BYTES};
    use crate::kernels::gemv_avx2_float::{
        bf16_f32_tile, bf16_tile, f16_f32_tile, f16_f32_tile_4x3, f16_tile, f32_tile, f32_tile_4x3,
    };
    use crate::kernels::gemv_avx2_q8::{prefetch_far, q4_0_tile, q8_0_tile};

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::F32 => f32_safe,
            DType::F16 => f16_safe,
            DType::BF16 => bf16_safe,
            DType::Q4_0 => q4_0_safe,
            DType::Q8_0 => q8_0_safe,
            DType::Q4K => q4k_safe,
            DType::Q6K => q6k_safe,
            _ => return None,
        })
    }

    pub fn tile_f32_fn(weights: DType) -> Option<TileFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::F16 => f16_f32_safe,
            DType::BF16 => bf16_f32_safe,
            _ => return None,
        })
    }

    /// Calls `$kernel::<R, C>` for the row and column counts of `$xs` and
    /// `$ys`, on `$n` units (blocks or elements), and stores its results in
    /// rows `$off..` of `$out`.
    macro_rules! dispatch {
        ($kernel:ident, $xs:expr, $ys:expr, $out:expr, $off:expr, $n:expr) => {{
            macro_rules! call {
                ($r:literal, $c:literal) => {{
                    let xp: [*const u8; $r] = std::array::from_fn(|i| $xs[i].as_ptr());
                    let yp: [*const u8; $c] = std::array::from_fn(|i| $ys[i].as_ptr());
                    // SAFETY: the wrapper checked that every row holds `$n`
                    // units and the CPU features (see `tile_fn`).
                    let res = unsafe { $kernel::<$r, $c>(xp, yp, $n) };
                    $crate::kernels::gemv_avx2::imp::store_tile(&res, &mut $out[..], $off);
                }};
            }
            match ($xs.len(), $ys.len()) {
                (1, 1) => call!(1, 1),
                (2, 1) => call!(2, 1),
                (3, 1) => call!(3, 1),
                (4, 1) => call!(4, 1),
                (1, 2) => call!(1, 2),
                (2, 2) => call!(2, 2),
                (3, 2) => call!(3, 2),
                (4, 2) => call!(4, 2),
                (1, 3) => call!(1, 3),
                (2, 3) => call!(2, 3),
                (1, 4) => call!(1, 4),
                (2, 4) => call!(2, 4),
                _ => {}
            }
        }};
    }
    pub(crate) use dispatch;

    /// A sub-tile's results `res` into rows `off..` of the columns `out`.
    #[inline]
    pub(crate) fn store_tile<const R: usize, const C: usize>(
        res: &[[f32; R]; C],
        out: &mut [[f32; TILE_ROWS]],
        off: usize,
    ) {
        for (o, r) in out.iter_mut().zip(res.iter()) {
            if let Some(o) = o.get_mut(off..off + R) {
                o.copy_from_slice(r);
            }
        }
    }

    /// Defines the safe wrapper `$safe` of tile kernel `$kernel`, whose
    /// weight rows are made of units of `$xu` bytes and activation rows of
    /// units of `$yu` bytes. The kernel is called on at most `$r1` rows for
    /// one column, and on at most `$rn` rows by `$cn` columns otherwise:
    /// shapes whose accumulators and shared values fit in the 16 registers.
    /// (The K-quants stream one row at a time best: their per-row work is
    /// large, and one sequential stream prefetches better than four.)
    macro_rules! safe_tile {
        ($safe:ident, $kernel:ident, $xu:expr, $yu:expr, $r1:expr, $rn:expr, $cn:expr) => {
            fn $safe(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                crate::kernels::dot::for_each_subtile(
                    xs,
                    ys,
                    out,
                    ($xu, $yu),
                    |cols| if cols == 1 { ($r1, 1) } else { ($rn, $cn) },
                    |xc, yc, o, off, n| dispatch!($kernel, xc, yc, o, off, n),
                );
            }
        };
    }
    pub fn gemv_fn(weights: DType) -> Option<GemvFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::F32 => f32_gemv,
            DType::F16 => f16_gemv,
            DType::BF16 => bf16_gemv,
            DType::Q4_0 => crate::kernels::gemv_avx2_q4_0::q4_0_gemv,
            DType::Q8_0 => q8_0_gemv,
            DType::Q4K => q4k_gemv,
            DType::Q6K => q6k_gemv,
            _ => return None,
        })
    }

    pub fn gemv_f32_fn(weights: DType) -> Option<GemvFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match weights {
            DType::F16 => f16_f32_gemv,
            DType::BF16 => bf16_f32_gemv,
            _ => return None,
        })
    }

    /// Defines the safe [`GemvFn`] `$safe` of tile kernel `$kernel` (units
    /// as for `safe_tile`), `$r` rows per call.
    macro_rules! safe_gemv {
        ($safe:ident, $kernel:ident, $xu:expr, $yu:expr, $r:literal) => {
            fn $safe(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
                let yp = [y.as_ptr()];
                crate::kernels::dot::gemv_rows::<$r>(
                    a,
                    stride,
                    y,
                    out,
                    ($xu, $yu),
                    // SAFETY: `gemv_rows` passes rows holding `n` whole
                    // units, and `y` holds `n` units; `gemv_fn` checked the
                    // CPU features.
                    |xp, n| unsafe { $kernel::<$r, 1>(xp, yp, n)[0] },
                    // SAFETY: as above.
                    |x, n| unsafe { $kernel::<1, 1>([x], yp, n)[0][0] },
                );
            }
        };
    }
    // Four rows per call, one from each quarter of the call's rows (see
    // `dot::gemv_rows`): four sequential streams read at once. (Four
    // adjacent rows per call had lost to one row per call — 1B-shaped Q8_0
    // file, 9.4 vs 14.9 tokens/s; one row per call in quarter order does
    // not help long rows, each row is read whole before the next.) Measured
    // with `TESSERA_CPU_ISA=avx2`, `benches/gemv_short.rs`, alternated in
    // one process, GB/s of weights, one row -> four rows per call: Q8_0
    // 15.9 -> 23.0 (640 values a row), 17.6 -> 28.0 (2,048), 16.7 -> 29.3
    // (8,192); Q4_K 19.9 -> 19.7 (2,048), 22.2 -> 24.0 (8,192); Q6_K 19.1
    // -> 19.5, 21.4 -> 24.7.
    safe_gemv!(q8_0_gemv, q8_0_tile, Q8_0_BYTES, Q8_0_BYTES, 4);
    safe_gemv!(q4k_gemv, q4k_tile, Q4K_BYTES, Q8K_BYTES, 4);
    safe_gemv!(q6k_gemv, q6k_tile, Q6K_BYTES, Q8K_BYTES, 4);
    safe_gemv!(f32_gemv, f32_tile, 4, 4, 4);
    safe_gemv!(f16_gemv, f16_tile, 2, 2, 4);
    safe_gemv!(bf16_gemv, bf16_tile, 2, 2, 4);
    safe_gemv!(f16_f32_gemv, f16_f32_tile, 2, 4, 4);
    safe_gemv!(bf16_f32_gemv, bf16_f32_tile, 2, 4, 4);

    safe_tile!(q4_0_safe, q4_0_tile, Q4_0_BYTES, Q8_0_BYTES, 4, 4, 2);
    safe_tile!(q8_0_safe, q8_0_tile, Q8_0_BYTES, Q8_0_BYTES, 4, 4, 2);
    safe_tile!(q4k_safe, q4k_tile, Q4K_BYTES, Q8K_BYTES, 1, 1, 4);
    safe_tile!(q6k_safe, q6k_tile, Q6K_BYTES, Q8K_BYTES, 1, 1, 4);
    /// Defines the safe wrapper `$safe` of a float tile: 4 x 3 sub-tiles
    /// past one column by `$k43` (assembly, see `float_tile_4x3`), the
    /// smaller ones by `$kernel` (units as for `safe_tile`).
    macro_rules! safe_tile_4x3 {
        ($safe:ident, $k43:ident, $kernel:ident, $xu:expr, $yu:expr) => {
            fn $safe(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                crate::kernels::dot::for_each_subtile(
                    xs,
                    ys,
                    out,
                    ($xu, $yu),
                    |cols| if cols == 1 { (4, 1) } else { (4, 3) },
                    |xc, yc, o, off, n| match (xc.len(), yc.len()) {
                        (4, 3) => {
                            let xp: [*const u8; 4] = std::array::from_fn(|i| xc[i].as_ptr());
                            let yp: [*const u8; 3] = std::array::from_fn(|i| yc[i].as_ptr());
                            // SAFETY: the wrapper checked that every row holds
                            // `n` units and the CPU features (see `tile_fn`).
                            let res = unsafe { $k43(xp, yp, n) };
                            store_tile(&res, o, off);
                        }
                        (_, 3) => {
                            dispatch!($kernel, xc, yc[..2], o, off, n);
                            dispatch!($kernel, xc, yc[2..], o[2..], off, n);
                        }
                        _ => dispatch!($kernel, xc, yc, o, off, n),
                    },
                );
            }
        };
    }
    // Floats past one column: F32 and F16 x F32 (MUL_MAT's) in 4 x 3
    // sub-tiles in assembly (ggml's tinyBLAS shape on AVX2: twelve
    // accumulators; on Zen 4 with `isa=avx2`, `n = 8`, one thread, with the
    // L2 prefetch of the next slice: F32 22.0 -> 17.3 ms, F16 14.8 -> 12.9);
    // the others in 4 x 2, four weight rows in flight (as the AVX-512 tiles;
    // 2 x 4 kept two: F16 `n = 8` 7.9 -> 7.1 ms, F32 12.1 -> 11.5 ms).
    safe_tile_4x3!(f32_safe, f32_tile_4x3, f32_tile, 4, 4);
    safe_tile!(f16_safe, f16_tile, 2, 2, 4, 4, 2);
    safe_tile!(bf16_safe, bf16_tile, 2, 2, 4, 4, 2);
    safe_tile_4x3!(f16_f32_safe, f16_f32_tile_4x3, f16_f32_tile, 2, 4);
    safe_tile!(bf16_f32_safe, bf16_f32_tile, 2, 4, 4, 4, 2);

    /// Sum of the eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Horizontal sums of every accumulator (eight at a time through a
    /// transposing add tree when there are several: 21 instructions for
    /// eight sums instead of 40).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn hsums<const R: usize, const C: usize>(acc: &[[__m256; R]; C]) -> [[f32; R]; C] {
        let mut out = [[0f32; R]; C];
        if R * C < 4 {
            for (o, a) in out.iter_mut().zip(acc) {
                for (o, a) in o.iter_mut().zip(a) {
                    *o = hsum(*a);
                }
            }
            return out;
        }
        let mut i = 0;
        while i < R * C {
            let v: [__m256; 8] = std::array::from_fn(|k| {
                let j = i + k;
                if j < R * C {
                    acc[j / R][j % R]
                } else {
                    _mm256_setzero_ps()
                }
            });
            let s = hsum8(&v);
            for (k, &x) in s.iter().enumerate() {
                let j = i + k;
                if j < R * C {
                    out[j / R][j % R] = x;
                }
            }
            i += 8;
        }
        out
    }

    /// The sums of eight vectors.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum8(v: &[__m256; 8]) -> [f32; 8] {
        // Halves: t[k] = [v[2k] lo + hi | v[2k + 1] lo + hi].
        let t: [__m256; 4] = std::array::from_fn(|k| {
            let (a, b) = (v[2 * k], v[2 * k + 1]);
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(a, b),
                _mm256_permute2f128_ps::<0x31>(a, b),
            )
        });
        // Pairs of lanes: u[k] per 128-bit half = [x0+x2, y0+y2, x1+x3, y1+y3].
        let u: [__m256; 2] = std::array::from_fn(|k| {
            let (a, b) = (t[2 * k], t[2 * k + 1]);
            _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b))
        });
        // Lanes: half h of w = sums of v[h], v[2 + h], v[4 + h], v[6 + h].
        let (a, b) = (_mm256_castps_pd(u[0]), _mm256_castps_pd(u[1]));
        let w = _mm256_add_ps(
            _mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
            _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)),
        );
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), w) };
        // Lane 4h + k holds the sum of v[2k + h].
        std::array::from_fn(|j| lanes[4 * (j % 2) + j / 2])
    }

    /// The f16 at `p` as f32.
    ///
    /// # Safety
    /// Two bytes at `p` must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
        // SAFETY: the caller guarantees the two bytes; unaligned read.
        let h = unsafe { p.cast::<u16>().read_unaligned() };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
    }

    /// The eight 6-bit scales (bytes 0..8) and eight mins (bytes 8..16) of a
    /// Q4K block (ggml's `get_scale_min_k4`, done with two byte shuffles).
    ///
    /// # Safety
    /// 16 bytes at `s` must be readable (the 12 scale bytes and 4 more).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn q4k_scales_mins(s: *const u8) -> __m128i {
        // SAFETY: the caller guarantees 16 bytes.
        let v = unsafe { _mm_loadu_si128(s.cast()) };
        // Low parts: sc0-3 = s0-3 & 63, sc4-7 = s8-11 & 15,
        // mn0-3 = s4-7 & 63, mn4-7 = s8-11 >> 4.
        let lo = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
        );
        let lo = _mm_srlv_epi32(lo, _mm_setr_epi32(0, 0, 0, 4));
        let lo = _mm_and_si128(
            lo,
            _mm_setr_epi8(
                63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15,
            ),
        );
        // High parts: bits 4-5 of sc4-7 = s0-3 >> 6, of mn4-7 = s4-7 >> 6.
        let hi = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7),
        );
        let hi = _mm_srli_epi16::<2>(_mm_and_si128(hi, _mm_set1_epi8(0xc0u8 as i8)));
        _mm_or_si128(lo, hi)
    }

    /// Q4K rows x Q8K columns: per block `d dy sum_j sc_j sum(q4 q8) -
    /// dmin dy sum_j m_j bsum_j`.
    ///
    /// # Safety
    /// Every row must hold `nb` Q4K blocks and every column `nb` Q8K blocks;
    /// the CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4k_tile<const R: usize, const C: usize>(
        xs: [*const u8; R],
        ys: [*const u8; C],
        nb: usize,
    ) -> [[f32; R]; C] {
        let m4 = _mm256_set1_epi8(0xf);
        let mut acc = [[_mm256_setzero_ps(); R]; C];
        let mut accm = [[_mm256_setzero_ps(); R]; C];
        // Each scale (then min) as an i32 holding it in both 16-bit halves:
        // broadcasting one from memory is a load, with no shuffle; the
        // opaque pointer keeps the compiler from turning the loads back into
        // shuffles of the register the values were stored from.
        let mut pairs = [0i32; 16];
        let pairs_ptr = pairs.as_mut_ptr();
        for b in 0..nb {
            for x in xs {
                prefetch_far(x.wrapping_add(b * Q4K_BYTES), Q4K_BYTES + 63);
            }
            for r in 0..R {
                // SAFETY: block b < nb of row r: 144 bytes; d, dmin at 0, 2,
                // scales at 4..16.
                let (p, dm, sm) = unsafe {
                    let p = xs[r].add(b * Q4K_BYTES);
                    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()));
                    (p, dm, q4k_scales_mins(p.add(4)))
                };
                let dup = |v: __m256i| _mm256_or_si256(v, _mm256_slli_epi32::<16>(v));
                let sc = dup(_mm256_cvtepu8_epi32(sm));
                let mn = dup(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(sm)));
                // SAFETY: `pairs` holds 16 i32; only this function uses it.
                unsafe {
                    _mm256_storeu_si256(pairs_ptr.cast(), sc);
                    _mm256_storeu_si256(pairs_ptr.add(8).cast(), mn);
                }
                let pairs_ptr = std::hint::black_box(pairs_ptr);
                let (d, dmin) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
                let mut sumi = [_mm256_setzero_si256(); C];
                for j in 0..4 {
                    // SAFETY: 32 quant bytes at 16 + 32j of block b (< 144);
                    // pairs 2j, 2j + 1 < 8.
                    let (q4, sl, sh) = unsafe {
                        (
                            _mm256_loadu_si256(p.add(16 + 32 * j).cast()),
                            _mm256_set1_epi32(pairs_ptr.add(2 * j).read()),
                            _mm256_set1_epi32(pairs_ptr.add(2 * j + 1).read()),
                        )
                    };
                    let q4l = _mm256_and_si256(q4, m4);
                    let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4), m4);
                    for c in 0..C {
                        // SAFETY: 64 activation bytes at 4 + 64j (< 260) of block b.
                        let (q8l, q8h) = unsafe {
                            let y = ys[c].add(b * Q8K_BYTES + 4 + 64 * j);
                            (
                                _mm256_loadu_si256(y.cast()),
                                _mm256_loadu_si256(y.add(32).cast()),
                            )
                        };
                        let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(q4l, q8l));
                        let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(q4h, q8h));
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
                    }
                }
                for c in 0..C {
                    // SAFETY: block b < nb of column c: d at 0, bsums at 260;
                    // `pairs` holds the mins at 8..16.
                    let (dy, pm) = unsafe {
                        let y = ys[c].add(b * Q8K_BYTES);
                        let mn = _mm256_loadu_si256(pairs_ptr.add(8).cast());
                        // m_j (b_2j + b_2j+1) per lane: the mins times the
                        // sums of each 32 activations.
                        let pm = _mm256_madd_epi16(mn, _mm256_loadu_si256(y.add(260).cast()));
                        (y.cast::<f32>().read_unaligned(), pm)
                    };
                    let vd = _mm256_set1_ps(d * dy);
                    acc[c][r] = _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(sumi[c]), acc[c][r]);
                    let vm = _mm256_set1_ps(dmin * dy);
                    accm[c][r] = _mm256_fmadd_ps(vm, _mm256_cvtepi32_ps(pm), accm[c][r]);
                }
            }
        }
        let mut out = hsums(&acc);
        let mins = hsums(&accm);
        for (o, m) in out.iter_mut().zip(&mins) {
            for (o, m) in o.iter_mut().zip(m) {
                *o -= m;
            }
        }
        out
    }

    /// Q6K rows x Q8K columns: per block `d dy sum_s sc_s sum((q - 32) q8)`.
    ///
    /// # Safety
    /// Every row must hold `nb` Q6K blocks and every column `nb` Q8K blocks;
    /// the CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q6k_tile<const R: usize, const C: usize>(
        xs: [*const u8; R],
        ys: [*const u8; C],
        nb: usize,
    ) -> [[f32; R]; C] {
        let m4 = _mm256_set1_epi8(0xf);
        let m2 = _mm256_set1_epi8(3);
        let m32 = _mm256_set1_epi8(32);
        let mut acc = [[_mm256_setzero_ps(); R]; C];
        for b in 0..nb {
            let mut dy = [0f32; C];
            for c in 0..C {
                // SAFETY: block b < nb of column c.
                dy[c] = unsafe { ys[c].add(b * Q8K_BYTES).cast::<f32>().read_unaligned() };
            }
            for x in xs {
                prefetch_far(x.wrapping_add(b * Q6K_BYTES), Q6K_BYTES + 63);
            }
            for r in 0..R {
                // SAFETY: block b < nb of row r (210 bytes).
                let xb = unsafe { xs[r].add(b * Q6K_BYTES) };
                let mut sumi = [_mm256_setzero_si256(); C];
                for h in 0..2 {
                    // SAFETY: ql of 128 values is 64 bytes at 64h, qh 32 bytes
                    // at 128 + 32h (< 192), scales 8 bytes at 192 + 8h.
                    let (l1, l2, qh, sc) = unsafe {
                        (
                            _mm256_loadu_si256(xb.add(64 * h).cast()),
                            _mm256_loadu_si256(xb.add(64 * h + 32).cast()),
                            _mm256_loadu_si256(xb.add(128 + 32 * h).cast()),
                            _mm_loadl_epi64(xb.add(192 + 8 * h).cast()),
                        )
                    };
                    let hi = |bits: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(bits, m2));
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(l1, m4), hi(qh)),
                        _mm256_or_si256(_mm256_and_si256(l2, m4), hi(_mm256_srli_epi16::<2>(qh))),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4),
                            hi(_mm256_srli_epi16::<4>(qh)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(l2), m4),
                            hi(_mm256_srli_epi16::<6>(qh)),
                        ),
                    ];
                    // The eight i8 scales as i16: sub-block 2n in the low
                    // half of quarter n, 2n + 1 in the high half.
                    let sc16 = _mm_cvtepi8_epi16(sc);
                    for (n, qn) in q.iter().enumerate() {
                        let s = _mm256_set_m128i(
                            _mm_shuffle_epi8(sc16, pair_shuffle(2 * n + 1)),
                            _mm_shuffle_epi8(sc16, pair_shuffle(2 * n)),
                        );
                        for c in 0..C {
                            // SAFETY: 32 activation bytes at 4 + 128h + 32n (< 260).
                            let q8 = unsafe {
                                _mm256_loadu_si256(
                                    ys[c].add(b * Q8K_BYTES + 4 + 128 * h + 32 * n).cast(),
                                )
                            };
                            // q in 0..64 times q8, minus 32 q8: (q - 32) q8 in pairs.
                            let p = _mm256_sub_epi16(
                                _mm256_maddubs_epi16(*qn, q8),
                                _mm256_maddubs_epi16(m32, q8),
                            );
                            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, s));
                        }
                    }
                }
                // SAFETY: d is the f16 at 208 of the block.
                let d = unsafe { f16_at(xb.add(208)) };
                for c in 0..C {
                    let vd = _mm256_set1_ps(d * dy[c]);
                    acc[c][r] = _mm256_fmadd_ps(vd, _mm256_cvtepi32_ps(sumi[c]), acc[c][r]);
                }
            }
        }
        hsums(&acc)
    }

    /// A byte shuffle broadcasting 16-bit lane `i` (0..8) of a 128-bit vector.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn pair_shuffle(i: usize) -> __m128i {
        let lo = (2 * i) as u8;
        _mm_set1_epi16(i16::from_le_bytes([lo, lo + 1]))
    }
}
