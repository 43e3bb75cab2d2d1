//! AVX2/F16C activation conversion, bit-identical to the portable one in
//! [`super::act_quant`] (and so to ggml's reference quantizers and
//! `tessera::quant::from_f32`): Q8_0, Q8K, F16 and BF16 rows.
//!
//! MUL_MAT converts every activation row once per node; with many columns
//! (prompt processing) that is millions of values, and the portable
//! per-value rounding and saturation is slower than the products it feeds.
//! Exactness notes: the scales are computed with the same scalar f32
//! operations as the portable code; Q8_0 rounds half away from zero (as
//! `f32::round`, not the FPU's ties-to-even), Q8K rounds ties to even; NaN
//! lanes become 0 and values saturate as Rust's `as` casts do.
//!
//! [`convert_fn`] hands out the safe entry points only after checking the
//! CPU.

use tessera::DType;

/// `dst = convert(src)` for whole blocks; `dst` is exactly
/// `dst_type.row_size(src.len())` bytes (checked by the caller).
pub(crate) type ConvertFn = fn(src: &[f32], dst: &mut [u8]);

/// The AVX2 conversion to `dst_type`, if there is one and the CPU has AVX2,
/// FMA and F16C.
pub(crate) fn convert_fn(dst_type: DType) -> Option<ConvertFn> {
    imp::convert_fn(dst_type)
}

/// Quantizes blocks of 32 values (`x`, `d.len()` blocks) to `q = round(x /
/// d)` (half away from zero, saturating, NaN to 0) with `d = max|x| / 127`
/// per block: the integer GEMM's activation panels (`pack_b_q8`),
/// bit-identical to its portable loop. `q` holds `x.len()` codes.
pub(crate) type QuantBlocksFn = fn(x: &[f32], q: &mut [i8], d: &mut [f32]);

/// The AVX2 [`QuantBlocksFn`], if the CPU has AVX2, FMA and F16C.
pub(crate) fn quant_blocks_fn() -> Option<QuantBlocksFn> {
    imp::quant_blocks_fn()
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub fn convert_fn(_dst_type: DType) -> Option<ConvertFn> {
        None
    }

    pub fn quant_blocks_fn() -> Option<QuantBlocksFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::*;
    use crate::isa::Isa;

    pub fn convert_fn(dst_type: DType) -> Option<ConvertFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(match dst_type {
            DType::Q8_0 => q8_0_safe,
            DType::Q8K => q8k_safe,
            DType::F16 => f16_safe,
            DType::BF16 => bf16_safe,
            _ => return None,
        })
    }

    pub fn quant_blocks_fn() -> Option<QuantBlocksFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        Some(quant_blocks_safe)
    }

    fn quant_blocks_safe(x: &[f32], q: &mut [i8], d: &mut [f32]) {
        // SAFETY: only handed out by `quant_blocks_fn` after checking AVX2,
        // FMA and F16C.
        unsafe { quant_blocks(x, q, d) }
    }

    /// Eight blocks at a time: their scales and inverses in one vector
    /// division each (the same IEEE operations as the scalar code).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quant_blocks(x: &[f32], q: &mut [i8], d: &mut [f32]) {
        let nb = d.len().min(x.len() / 32).min(q.len() / 32);
        let mut b0 = 0;
        while b0 < nb {
            let g = (nb - b0).min(8);
            let mut amax = [0f32; 8];
            for (j, a) in amax.iter_mut().enumerate().take(g) {
                *a = abs_max(&x[32 * (b0 + j)..32 * (b0 + j + 1)]);
            }
            // SAFETY: `amax` holds 8 f32.
            let vd = _mm256_div_ps(
                unsafe { _mm256_loadu_ps(amax.as_ptr()) },
                _mm256_set1_ps(127.0),
            );
            let nz = _mm256_cmp_ps::<_CMP_NEQ_OQ>(vd, _mm256_setzero_ps());
            let vid = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0), vd), nz);
            let (mut ds, mut ids) = ([0f32; 8], [0f32; 8]);
            // SAFETY: both arrays hold 8 f32.
            unsafe {
                _mm256_storeu_ps(ds.as_mut_ptr(), vd);
                _mm256_storeu_ps(ids.as_mut_ptr(), vid);
            }
            for j in 0..g {
                let b = b0 + j;
                d[b] = ds[j];
                let xb = &x[32 * b..32 * b + 32];
                let vid = _mm256_set1_ps(ids[j]);
                let v = |i: usize| to_i32_sat(round_away(_mm256_mul_ps(load8(&xb[8 * i..]), vid)));
                let packed = pack32(v(0), v(1), v(2), v(3));
                let qb = &mut q[32 * b..32 * b + 32];
                // SAFETY: `qb` is 32 bytes.
                unsafe { _mm256_storeu_si256(qb.as_mut_ptr().cast(), packed) };
            }
            b0 += g;
        }
    }

    macro_rules! safe_wrapper {
        ($safe:ident, $imp:ident) => {
            fn $safe(src: &[f32], dst: &mut [u8]) {
                // SAFETY: only handed out by `convert_fn` after checking
                // AVX2, FMA and F16C.
                unsafe { $imp(src, dst) }
            }
        };
    }
    safe_wrapper!(q8_0_safe, q8_0_row);
    safe_wrapper!(q8k_safe, q8k_row);
    safe_wrapper!(f16_safe, f16_row);
    safe_wrapper!(bf16_safe, bf16_row);

    /// Eight f32 at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load8(p: &[f32]) -> __m256 {
        // SAFETY: `p` holds at least 8 values (every caller slices 8).
        unsafe { _mm256_loadu_ps(p[..8].as_ptr()) }
    }

    /// The largest `|v|` of `x` (a multiple of 8 values), ignoring NaNs as
    /// `f32::max` does.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn abs_max(x: &[f32]) -> f32 {
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            // max_ps returns its second operand when either is NaN.
            m = _mm256_max_ps(_mm256_andnot_ps(sign, load8(c)), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)))
    }

    /// Whole numbers in f32 lanes to i32, NaN lanes to 0, clamped to the i8
    /// range (what `as i8` does to a rounded f32).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn to_i32_sat(r: __m256) -> __m256i {
        let ord = _mm256_cmp_ps::<_CMP_ORD_Q>(r, r);
        let r = _mm256_min_ps(
            _mm256_max_ps(r, _mm256_set1_ps(-128.0)),
            _mm256_set1_ps(127.0),
        );
        let r = _mm256_and_ps(r, ord);
        _mm256_cvttps_epi32(r)
    }

    /// Four vectors of eight i32 (each in -128..=127) to 32 i8 in order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn pack32(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m256i {
        let ab = _mm256_packs_epi32(a, b);
        let cd = _mm256_packs_epi32(c, d);
        let q = _mm256_packs_epi16(ab, cd);
        _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// `f32::round`: half away from zero.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn round_away(x: __m256) -> __m256 {
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
        let frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(x, t));
        let step = _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
        _mm256_add_ps(t, _mm256_and_ps(up, step))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn q8_0_row(src: &[f32], dst: &mut [u8]) {
        for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(34)) {
            let amax = abs_max(x);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
            let vid = _mm256_set1_ps(id);
            let q = |i: usize| to_i32_sat(round_away(_mm256_mul_ps(load8(&x[8 * i..]), vid)));
            let v = pack32(q(0), q(1), q(2), q(3));
            // SAFETY: `out` is a 34-byte block; the quants are bytes 2..34.
            unsafe { _mm256_storeu_si256(out[2..34].as_mut_ptr().cast(), v) };
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn q8k_row(src: &[f32], dst: &mut [u8]) {
        for (x, out) in src.chunks_exact(256).zip(dst.chunks_exact_mut(292)) {
            let amax = abs_max(x);
            if amax == 0.0 {
                out.fill(0);
                continue;
            }
            // The first value of largest magnitude (as the portable scan).
            let va = _mm256_set1_ps(amax);
            let sign = _mm256_set1_ps(-0.0);
            let mut max = amax;
            for (i, c) in x.chunks_exact(8).enumerate() {
                let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, load8(c)), va);
                let mask = _mm256_movemask_ps(eq);
                if mask != 0 {
                    max = x[8 * i + mask.trailing_zeros() as usize];
                    break;
                }
            }
            let iscale = -127.0 / max;
            let vs = _mm256_set1_ps(iscale);
            let ones = _mm256_set1_epi8(1);
            let ones16 = _mm256_set1_epi16(1);
            for (g, xs) in x.chunks_exact(32).enumerate() {
                let q = |i: usize| {
                    let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm256_mul_ps(load8(&xs[8 * i..]), vs),
                    );
                    to_i32_sat(r)
                };
                let v = pack32(q(0), q(1), q(2), q(3));
                // SAFETY: quants 32g..32g + 32 are bytes 4 + 32g.. of the block.
                unsafe { _mm256_storeu_si256(out[4 + 32 * g..36 + 32 * g].as_mut_ptr().cast(), v) };
                // Sums of each 16 quants: lanes 0..4 and 4..8 after madd.
                let s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, v), ones16);
                let s = _mm256_hadd_epi32(s, s);
                let s = _mm256_hadd_epi32(s, s);
                let lo = _mm256_extract_epi32::<0>(s) as i16;
                let hi = _mm256_extract_epi32::<4>(s) as i16;
                out[260 + 4 * g..262 + 4 * g].copy_from_slice(&lo.to_le_bytes());
                out[262 + 4 * g..264 + 4 * g].copy_from_slice(&hi.to_le_bytes());
            }
            out[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_row(src: &[f32], dst: &mut [u8]) {
        let mut sc = src.chunks_exact(8);
        let mut dc = dst.chunks_exact_mut(16);
        for (x, out) in (&mut sc).zip(&mut dc) {
            let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(load8(x));
            // SAFETY: `out` holds 16 bytes.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), h) };
        }
        for (&x, out) in sc
            .remainder()
            .iter()
            .zip(dc.into_remainder().chunks_exact_mut(2))
        {
            out.copy_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes());
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn bf16_row(src: &[f32], dst: &mut [u8]) {
        let mut sc = src.chunks_exact(8);
        let mut dc = dst.chunks_exact_mut(16);
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let inf = _mm256_set1_epi32(0x7f80_0000);
        for (x, out) in (&mut sc).zip(&mut dc) {
            let u = _mm256_castps_si256(load8(x));
            // Round to nearest even: u + 0x7fff + bit 16.
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(1));
            let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(
                u,
                _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)),
            ));
            // NaN: the upper half with the quiet bit set.
            let nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
            let q = _mm256_or_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(64));
            let v = _mm256_blendv_epi8(r, q, nan);
            // 8 x u32 (each < 2^16) to 8 x u16.
            let p = _mm256_packus_epi32(v, v);
            let p = _mm256_permute4x64_epi64::<0b1000>(p);
            // SAFETY: `out` holds 16 bytes.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm256_castsi256_si128(p)) };
        }
        for (&x, out) in sc
            .remainder()
            .iter()
            .zip(dc.into_remainder().chunks_exact_mut(2))
        {
            out.copy_from_slice(&crate::kernels::act_quant::f32_to_bf16_bits(x).to_le_bytes());
        }
    }
}
