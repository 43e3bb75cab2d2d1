//! AVX-512 tile kernels (F/BW/VL/VNNI) for MUL_MAT with few columns and the
//! scores of flash attention: the same contract as [`super::gemv_avx2`]
//! (see [`super::dot::TileFn`]), on 16-lane registers, with `vpdpbusd`
//! doing the 8-bit products and their sums in one instruction.
//!
//! Why: where the CPU has AVX-512, ggml uses it, and the AVX2 kernels are
//! port-bound below it for F16 weights with several columns and for Q8_0.
//! These kernels are used on [`Isa::Avx512`] (AVX-512F/BW/VL/VNNI);
//! `TESSERA_CPU_ISA=avx2` or a stream's `isa=avx2` selects the plain AVX2
//! kernels on the same CPU.
//!
//! - Floats (F32, F16 x F32, BF16 x F32, F16 x F16, BF16 x BF16): `R x C`
//!   accumulators of 16 lanes; the last `n % 16` values use masked loads.
//! - Q8_0 and Q4_0 with `vpdpbusd`, in [`super::gemv_avx512_q8`]; Q4_1,
//!   Q5_0, Q5_1 and IQ4_NL likewise in [`super::gemv_avx512_q5`], IQ4_XS
//!   in [`super::gemv_avx512_iq4xs`].
//! - Q2K and Q3K with `vpmaddubsw`/`vpmaddwd` on whole super-blocks, in
//!   [`super::gemv_avx512_k`]; Q6K likewise in [`super::gemv_avx512_q6k`],
//!   Q4K and Q5K in [`super::gemv_avx512_q4k`].
//!
//! The horizontal sums of the accumulators go sixteen at a time through a
//! transposing add tree ([`imp::sums`]).

use tessera::DType;

use super::dot::{GemvFn, TILE_COLS, TILE_ROWS, TileFn};
use crate::isa::Isa;

/// The AVX-512 tile kernel for `weights` (activations in its dot type), on
/// [`Isa::Avx512`].
pub fn tile_fn(weights: DType, isa: Isa) -> Option<TileFn> {
    if !isa.has_avx512() {
        return None;
    }
    imp::tile_fn(weights)
}

/// The AVX-512 many-row product of `weights` (activations in their dot
/// type, or f32 where `f32_act` and the weights are F16 or BF16), on
/// [`Isa::Avx512`]: the one-column products go four rows a call straight to
/// the tile kernel, one row from each quarter of the rows (four streams),
/// without the tile wrappers' per call cutting and dispatching (which cost
/// a fifth of the kernels' time on the short rows of Gemma 3 270M).
pub fn gemv_fn(weights: DType, isa: Isa, f32_act: bool) -> Option<GemvFn> {
    if !isa.has_avx512() {
        return None;
    }
    imp::gemv_fn(weights, f32_act)
}

/// The AVX-512 tile kernel for `weights` with f32 activations (F16, BF16),
/// on [`Isa::Avx512`].
pub fn tile_f32_fn(weights: DType, isa: Isa) -> Option<TileFn> {
    if !isa.has_avx512() {
        return None;
    }
    imp::tile_f32_fn(weights)
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
    pub fn gemv_fn(_weights: DType, _f32_act: bool) -> Option<GemvFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::kernels::dot_iq4::IQ4_XS_BYTES;
    use crate::kernels::dot_kquant::Q5K_BYTES;
    use crate::kernels::dot_quant::Q8K_BYTES;
    use crate::kernels::dot_quant::{Q4_0_BYTES, Q4K_BYTES, Q6K_BYTES, Q8_0_BYTES};
    use crate::kernels::gemv_avx2_float::L2_AHEAD_VALUES;
    use crate::kernels::gemv_avx2_q8::{prefetch, prefetch_l2};
    use crate::kernels::gemv_avx512_iq4xs::iq4_xs_tile;
    use crate::kernels::gemv_avx512_k::{
        Q2K as K23_Q2K, Q3K as K23_Q3K, block_bytes as k23b, k23_tile,
    };
    use crate::kernels::gemv_avx512_q4k::{q4_k_tile, q5_k_tile};
    use crate::kernels::gemv_avx512_q5::{
        IQ4_NL as Q5K_IQ4_NL, Q4_1 as Q5K_Q4_1, Q5_0 as Q5K_Q5_0, Q5_1 as Q5K_Q5_1,
        block_bytes as q5b, q5_tile,
    };
    use crate::kernels::gemv_avx512_q6k::q6_k_tile;
    use crate::kernels::gemv_avx512_q8::{q4_0_tile, q8_0_tile};

    pub fn tile_fn(weights: DType) -> Option<TileFn> {
        Some(match weights {
            DType::F32 => f32_safe,
            DType::F16 => f16_safe,
            DType::BF16 => bf16_safe,
            DType::Q8_0 => q8_0_safe,
            DType::Q4_0 => q4_0_safe,
            DType::Q4_1 => q4_1_safe,
            DType::Q5_0 => q5_0_safe,
            DType::Q5_1 => q5_1_safe,
            DType::IQ4NL => iq4_nl_safe,
            DType::IQ4XS => iq4_xs_safe,
            DType::Q2K => q2_k_safe,
            DType::Q3K => q3_k_safe,
            DType::Q4K => q4_k_safe,
            DType::Q5K => q5_k_safe,
            DType::Q6K => q6_k_safe,
            _ => return None,
        })
    }

    pub fn tile_f32_fn(weights: DType) -> Option<TileFn> {
        Some(match weights {
            DType::F16 => f16_f32_safe,
            DType::BF16 => bf16_f32_safe,
            _ => return None,
        })
    }

    pub fn gemv_fn(weights: DType, f32_act: bool) -> Option<GemvFn> {
        if f32_act {
            return Some(match weights {
                DType::F16 => f16_f32_gemv,
                DType::BF16 => bf16_f32_gemv,
                _ => return None,
            });
        }
        Some(match weights {
            DType::F32 => f32_gemv,
            DType::F16 => f16_gemv,
            DType::BF16 => bf16_gemv,
            DType::Q8_0 => q8_0_gemv,
            DType::Q4_0 => q4_0_gemv,
            DType::Q4_1 => q4_1_gemv,
            DType::Q5_0 => q5_0_gemv,
            DType::Q5_1 => q5_1_gemv,
            DType::IQ4NL => iq4_nl_gemv,
            DType::IQ4XS => iq4_xs_gemv,
            DType::Q2K => q2_k_gemv,
            DType::Q3K => q3_k_gemv,
            DType::Q4K => q4_k_gemv,
            DType::Q5K => q5_k_gemv,
            DType::Q6K => q6_k_gemv,
            _ => return None,
        })
    }

    /// The many-row product `$gemv` of `$kernel` (units of `$xu` / `$yu`
    /// bytes): four rows a call, one from each quarter of the rows
    /// ([`crate::kernels::dot::gemv_rows`]), the rest one at a time.
    macro_rules! safe_gemv {
        ($gemv:ident, $kernel:ident, $xu:expr, $yu:expr) => {
            fn $gemv(a: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
                let yp = [y.as_ptr()];
                crate::kernels::dot::gemv_rows::<4>(
                    a,
                    stride,
                    y,
                    out,
                    ($xu, $yu),
                    // SAFETY: `gemv_rows` passes rows of `n` whole units and
                    // `y` holds `n` units; `gemv_fn` checked the CPU
                    // features (`Isa::has_avx512`).
                    |xp, n| unsafe { $kernel::<4, 1>(xp, yp, n)[0] },
                    // SAFETY: as above.
                    |x, n| unsafe { $kernel::<1, 1>([x], yp, n)[0][0] },
                );
            }
        };
    }

    /// Calls `$kernel::<R, C>` for the shape of `$xs` x `$ys` on `$n` units
    /// and stores the results in rows `$off..` of `$out`.
    macro_rules! dispatch {
        ($kernel:ident, $xs:expr, $ys:expr, $out:expr, $off:expr, $n:expr) => {{
            macro_rules! call {
                ($r:literal, $c:literal) => {{
                    let xp: [*const u8; $r] = std::array::from_fn(|i| $xs[i].as_ptr());
                    let yp: [*const u8; $c] = std::array::from_fn(|i| $ys[i].as_ptr());
                    // SAFETY: the wrapper checked that every row holds `$n`
                    // units; `tile_fn` checked the CPU features (`Isa::has_avx512`).
                    let res = unsafe { $kernel::<$r, $c>(xp, yp, $n) };
                    for (o, r) in $out.iter_mut().zip(res.iter()) {
                        if let Some(o) = o.get_mut($off..$off + $r) {
                            o.copy_from_slice(r);
                        }
                    }
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
                (3, 3) => call!(3, 3),
                (4, 3) => call!(4, 3),
                (1, 4) => call!(1, 4),
                (2, 4) => call!(2, 4),
                (3, 4) => call!(3, 4),
                (4, 4) => call!(4, 4),
                (1, 5) => call!(1, 5),
                (2, 5) => call!(2, 5),
                (1, 6) => call!(1, 6),
                (2, 6) => call!(2, 6),
                (1, 7) => call!(1, 7),
                (2, 7) => call!(2, 7),
                (1, 8) => call!(1, 8),
                (2, 8) => call!(2, 8),
                _ => {}
            }
        }};
    }

    /// The safe wrapper `$safe` of `$kernel` (units of `$xu` / `$yu` bytes),
    /// called on at most `$rn` rows by `$cn` columns, or `$rw` by `$cw` when
    /// there are more than `$cn` columns.
    macro_rules! safe_tile {
        ($safe:ident, $kernel:ident, $xu:expr, $yu:expr, $rn:expr, $cn:expr, $rw:expr, $cw:expr) => {
            fn $safe(xs: &[&[u8]], ys: &[&[u8]], out: &mut [[f32; TILE_ROWS]; TILE_COLS]) {
                crate::kernels::dot::for_each_subtile(
                    xs,
                    ys,
                    out,
                    ($xu, $yu),
                    |cols| if cols > $cn { ($rw, $cw) } else { ($rn, $cn) },
                    |xc, yc, o, off, n| dispatch!($kernel, xc, yc, o, off, n),
                );
            }
        };
    }
    // Floats: 4 x 4 sub-tiles at every width, so four weight rows are read
    // at once (eight columns go as two passes over the same four rows, the
    // second from cache). 2 x 8 tiles (fewer loads per FMA) kept two rows in
    // flight, and that, not the FMAs, bound `n = 8` on AMD Zen 4: F32 13.8
    // -> 10.8 ms, F16 8.0 -> 6.0 ms at m = 4096, k = 14336 (alternated).
    safe_tile!(f32_safe, f32_tile, 4, 4, 4, 4, 4, 4);
    safe_tile!(f16_safe, f16_tile, 2, 2, 4, 4, 4, 4);
    safe_tile!(bf16_safe, bf16_tile, 2, 2, 4, 4, 4, 4);
    safe_tile!(f16_f32_safe, f16_f32_tile, 2, 4, 4, 4, 4, 4);
    safe_tile!(bf16_f32_safe, bf16_f32_tile, 2, 4, 4, 4, 4, 4);
    safe_gemv!(f32_gemv, f32_tile, 4, 4);
    safe_gemv!(f16_gemv, f16_tile, 2, 2);
    safe_gemv!(bf16_gemv, bf16_tile, 2, 2);
    safe_gemv!(f16_f32_gemv, f16_f32_tile, 2, 4);
    safe_gemv!(bf16_f32_gemv, bf16_f32_tile, 2, 4);
    // Q8_0: 4 x 4 tiles past two columns (the per-row and per-column work
    // of the block-sum tree shared by more products; measured -15 % at n = 8).
    safe_tile!(q8_0_safe, q8_0_tile, Q8_0_BYTES, Q8_0_BYTES, 4, 2, 4, 4);
    safe_tile!(q4_0_safe, q4_0_tile, Q4_0_BYTES, Q8_0_BYTES, 4, 2, 4, 2);
    safe_gemv!(q8_0_gemv, q8_0_tile, Q8_0_BYTES, Q8_0_BYTES);
    safe_gemv!(q4_0_gemv, q4_0_tile, Q4_0_BYTES, Q8_0_BYTES);

    /// `$kernel` (generic over a kind `K`) of kind `$k`, in the shape
    /// [`safe_tile`] calls.
    macro_rules! kind_of {
        ($name:ident, $kernel:ident, $k:expr) => {
            /// # Safety
            /// The contract of the generic kernel.
            #[inline]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
            unsafe fn $name<const R: usize, const C: usize>(
                xs: [*const u8; R],
                ys: [*const u8; C],
                nb: usize,
            ) -> [[f32; R]; C] {
                // SAFETY: forwarded contract.
                unsafe { $kernel::<{ $k }, R, C>(xs, ys, nb) }
            }
        };
    }
    kind_of!(q2_k_tile, k23_tile, K23_Q2K);
    kind_of!(q3_k_tile, k23_tile, K23_Q3K);
    safe_tile!(q2_k_safe, q2_k_tile, k23b(K23_Q2K), Q8K_BYTES, 4, 2, 4, 2);
    safe_tile!(q3_k_safe, q3_k_tile, k23b(K23_Q3K), Q8K_BYTES, 4, 2, 4, 2);
    safe_tile!(q4_k_safe, q4_k_tile, Q4K_BYTES, Q8K_BYTES, 4, 2, 4, 2);
    safe_tile!(q5_k_safe, q5_k_tile, Q5K_BYTES, Q8K_BYTES, 4, 2, 4, 2);
    safe_tile!(q6_k_safe, q6_k_tile, Q6K_BYTES, Q8K_BYTES, 4, 2, 4, 2);
    safe_gemv!(q2_k_gemv, q2_k_tile, k23b(K23_Q2K), Q8K_BYTES);
    safe_gemv!(q3_k_gemv, q3_k_tile, k23b(K23_Q3K), Q8K_BYTES);
    safe_gemv!(q4_k_gemv, q4_k_tile, Q4K_BYTES, Q8K_BYTES);
    safe_gemv!(q5_k_gemv, q5_k_tile, Q5K_BYTES, Q8K_BYTES);
    safe_gemv!(q6_k_gemv, q6_k_tile, Q6K_BYTES, Q8K_BYTES);

    kind_of!(q4_1_tile, q5_tile, Q5K_Q4_1);
    kind_of!(q5_0_tile, q5_tile, Q5K_Q5_0);
    kind_of!(q5_1_tile, q5_tile, Q5K_Q5_1);
    kind_of!(iq4_nl_tile, q5_tile, Q5K_IQ4_NL);
    /// Weight and activation block bytes of the [`q5_tile`] kinds.
    const B41: (usize, usize) = q5b(Q5K_Q4_1);
    const B50: (usize, usize) = q5b(Q5K_Q5_0);
    const B51: (usize, usize) = q5b(Q5K_Q5_1);
    const BNL: (usize, usize) = q5b(Q5K_IQ4_NL);
    safe_tile!(q4_1_safe, q4_1_tile, B41.0, B41.1, 4, 2, 4, 2);
    safe_tile!(q5_0_safe, q5_0_tile, B50.0, B50.1, 4, 2, 4, 2);
    safe_tile!(q5_1_safe, q5_1_tile, B51.0, B51.1, 4, 2, 4, 2);
    safe_tile!(iq4_nl_safe, iq4_nl_tile, BNL.0, BNL.1, 4, 2, 4, 2);
    safe_gemv!(q4_1_gemv, q4_1_tile, B41.0, B41.1);
    safe_gemv!(q5_0_gemv, q5_0_tile, B50.0, B50.1);
    safe_gemv!(q5_1_gemv, q5_1_tile, B51.0, B51.1);
    safe_gemv!(iq4_nl_gemv, iq4_nl_tile, BNL.0, BNL.1);
    safe_gemv!(iq4_xs_gemv, iq4_xs_tile, IQ4_XS_BYTES, Q8K_BYTES);
    safe_tile!(
        iq4_xs_safe,
        iq4_xs_tile,
        IQ4_XS_BYTES,
        Q8K_BYTES,
        4,
        2,
        4,
        2
    );

    /// The sum of the lanes of every accumulator (sixteen at a time through
    /// a transposing add tree when there are several: 45 instructions for
    /// sixteen sums instead of about 150).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(crate) fn sums<const R: usize, const C: usize>(acc: &[[__m512; R]; C]) -> [[f32; R]; C] {
        let mut out = [[0f32; R]; C];
        if R * C < 4 {
            for (o, a) in out.iter_mut().zip(acc) {
                for (o, a) in o.iter_mut().zip(a) {
                    *o = _mm512_reduce_add_ps(*a);
                }
            }
            return out;
        }
        let mut i = 0;
        while i < R * C {
            let v: [__m512; 16] = std::array::from_fn(|k| {
                let j = i + k;
                if j < R * C {
                    acc[j / R][j % R]
                } else {
                    _mm512_setzero_ps()
                }
            });
            let s = sum16(&v);
            for (k, &x) in s.iter().enumerate() {
                let j = i + k;
                if j < R * C {
                    out[j / R][j % R] = x;
                }
            }
            i += 16;
        }
        out
    }

    /// The sums of sixteen vectors.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn sum16(v: &[__m512; 16]) -> [f32; 16] {
        // t[k]: 8 partial sums of v[2k], then 8 of v[2k + 1].
        let t: [__m512; 8] = std::array::from_fn(|k| {
            let (a, b) = (v[2 * k], v[2 * k + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xee>(a, b),
            )
        });
        // u[k]: quarter i holds 4 partial sums of v[4k + i].
        let u: [__m512; 4] = std::array::from_fn(|k| {
            let (a, b) = (t[2 * k], t[2 * k + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xdd>(a, b),
            )
        });
        // w[m]: quarter i holds 2 partial sums of v[8m + i], then of v[8m + 4 + i].
        let w: [__m512; 2] = std::array::from_fn(|m| {
            let (a, b) = (u[2 * m], u[2 * m + 1]);
            _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b))
        });
        // Quarter i: the sums of v[i], v[4 + i], v[8 + i], v[12 + i].
        let (a, b) = (_mm512_castps_pd(w[0]), _mm512_castps_pd(w[1]));
        let x = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
        );
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 f32.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), x) };
        // Lane 4i + k holds the sum of v[4k + i].
        std::array::from_fn(|j| lanes[4 * (j % 4) + j / 4])
    }

    /// Sixteen values at `p` as f32, of which the first `m` (mask) are read.
    macro_rules! loaders {
        ($full:ident, $masked:ident, |$p:ident| $f:expr, |$q:ident, $k:ident| $g:expr) => {
            /// # Safety
            /// The sixteen values at `p` must be readable.
            #[inline]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
            unsafe fn $full($p: *const u8) -> __m512 {
                // SAFETY: forwarded to the caller.
                unsafe { $f }
            }
            /// # Safety
            /// The values at `p` selected by `k` must be readable (masked-out
            /// lanes are not accessed).
            #[inline]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
            unsafe fn $masked($q: *const u8, $k: __mmask16) -> __m512 {
                // SAFETY: forwarded to the caller; masked loads do not touch
                // the other lanes.
                unsafe { $g }
            }
        };
    }
    loaders!(ld_f32, ldm_f32, |p| _mm512_loadu_ps(p.cast()), |p, k| {
        _mm512_maskz_loadu_ps(k, p.cast())
    });
    loaders!(
        ld_f16,
        ldm_f16,
        |p| _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
        |p, k| _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p.cast()))
    );
    loaders!(
        ld_bf16,
        ldm_bf16,
        |p| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256(p.cast())
        ))),
        |p, k| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
            _mm256_maskz_loadu_epi16(k, p.cast())
        )))
    );

    /// Defines float tile `$name`: weights of `$wx` bytes loaded by `$lx` /
    /// `$lxm`, activations of `$wy` bytes by `$ly` / `$lym`.
    macro_rules! float_tile {
        ($name:ident, $wx:expr, $lx:ident, $lxm:ident, $wy:expr, $ly:ident, $lym:ident) => {
            /// # Safety
            /// Every row and column must hold `n` elements; the CPU must have
            /// AVX-512F/BW/VL/VNNI, AVX2, FMA and F16C.
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
            unsafe fn $name<const R: usize, const C: usize>(
                xs: [*const u8; R],
                ys: [*const u8; C],
                n: usize,
            ) -> [[f32; R]; C] {
                const WX: usize = $wx;
                const WY: usize = $wy;
                let mut acc = [[_mm512_setzero_ps(); R]; C];
                let mut i = 0;
                // Two steps per iteration when there are few chains.
                if R * C <= 4 {
                    let mut acc2 = [[_mm512_setzero_ps(); R]; C];
                    while i + 32 <= n {
                        for x in xs {
                            prefetch(x.wrapping_add(i * WX), 32 * WX);
                        }
                        for r in 0..R {
                            // SAFETY: elements i..i + 32 < n of every row and column.
                            let x0 = unsafe { $lx(xs[r].add(i * WX)) };
                            // SAFETY: as above.
                            let x1 = unsafe { $lx(xs[r].add((i + 16) * WX)) };
                            for c in 0..C {
                                // SAFETY: as above.
                                let y0 = unsafe { $ly(ys[c].add(i * WY)) };
                                // SAFETY: as above.
                                let y1 = unsafe { $ly(ys[c].add((i + 16) * WY)) };
                                acc[c][r] = _mm512_fmadd_ps(x0, y0, acc[c][r]);
                                acc2[c][r] = _mm512_fmadd_ps(x1, y1, acc2[c][r]);
                            }
                        }
                        i += 32;
                    }
                    for (a, b) in acc.iter_mut().zip(&acc2) {
                        for (a, b) in a.iter_mut().zip(b) {
                            *a = _mm512_add_ps(*a, *b);
                        }
                    }
                }
                while i + 16 <= n {
                    if (i * WX) % 64 == 0 {
                        for x in xs {
                            prefetch(x.wrapping_add(i * WX), 1);
                            if C > 1 {
                                // The rows' next k slice into L2 (see
                                // `gemv_avx2_float::L2_AHEAD_VALUES`): on Zen 4,
                                // n = 8, one thread, F32 18.8 -> 15.5 ms, F16
                                // 12.4 -> 11.2 ms (alternated).
                                prefetch_l2(x.wrapping_add((i + L2_AHEAD_VALUES) * WX), 1);
                            }
                        }
                    }
                    let mut y = [_mm512_setzero_ps(); C];
                    for c in 0..C {
                        // SAFETY: elements i..i + 16 <= n.
                        y[c] = unsafe { $ly(ys[c].add(i * WY)) };
                    }
                    for r in 0..R {
                        // SAFETY: elements i..i + 16 <= n.
                        let x = unsafe { $lx(xs[r].add(i * WX)) };
                        for c in 0..C {
                            acc[c][r] = _mm512_fmadd_ps(x, y[c], acc[c][r]);
                        }
                    }
                    i += 16;
                }
                if i < n {
                    let k: __mmask16 = (1u16 << (n - i)) - 1;
                    let mut y = [_mm512_setzero_ps(); C];
                    for c in 0..C {
                        // SAFETY: elements i..n of the column (masked).
                        y[c] = unsafe { $lym(ys[c].add(i * WY), k) };
                    }
                    for r in 0..R {
                        // SAFETY: elements i..n of the row (masked).
                        let x = unsafe { $lxm(xs[r].add(i * WX), k) };
                        for c in 0..C {
                            acc[c][r] = _mm512_fmadd_ps(x, y[c], acc[c][r]);
                        }
                    }
                }
                sums(&acc)
            }
        };
    }
    float_tile!(f32_tile, 4, ld_f32, ldm_f32, 4, ld_f32, ldm_f32);
    float_tile!(f16_tile, 2, ld_f16, ldm_f16, 2, ld_f16, ldm_f16);
    float_tile!(bf16_tile, 2, ld_bf16, ldm_bf16, 2, ld_bf16, ldm_bf16);
    float_tile!(f16_f32_tile, 2, ld_f16, ldm_f16, 4, ld_f32, ldm_f32);
    float_tile!(bf16_f32_tile, 2, ld_bf16, ldm_bf16, 4, ld_f32, ldm_f32);
}
