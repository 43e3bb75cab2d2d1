//! AVX2/F16C type conversions: f32 <-> f16 rows, and Q8_0/Q4_0 rows to and
//! from f32, bit-identical to `tessera::quant` (the reference the tests
//! compare bytes with).
//!
//! - f32 -> f16 is `vcvtps2ph` with round-to-nearest-even (what `half` does
//!   in software), then NaNs replaced by ggml's canonical `sign | 0x7E00`.
//! - The quantizers reproduce `tessera::quant`'s scalar code operation by
//!   operation: the same f32 multiplies and divisions, `roundf` (half away
//!   from zero) as a truncation of `t + copysign(0.5 - 2^-25, t)`, and the
//!   C float-to-int casts as x86
//!   executes them (`vcvttps2dq` gives `i32::MIN` for NaN and overflow,
//!   exactly the scalar `cvttss2si`), keeping the low byte. The one order
//!   dependent step, Q8_0's NaN-propagating `MAX` of magnitudes, is left to
//!   the reference: a Q8_0 block holding a NaN or an infinity, or with a
//!   largest magnitude below 2^-120 (whose inverse scale nearly overflows),
//!   is quantized by `tessera::quant::from_f32`.
//! - Dequantization is `f32(q) * d`, as the reference.
//!
//! Every function is `#[target_feature(enable = "avx2,fma,f16c")]` and may
//! only run on a CPU with those features; `super::simd::Simd` (the only
//! caller) checks the CPU first.

use std::arch::x86_64::*;

use half::f16;
use tessera::{DType, Error, Result, quant};

/// Bytes of a Q8_0 block (f16 scale + 32 quants).
pub(crate) const Q8_0_BYTES: usize = 34;
/// Bytes of a Q4_0 block (f16 scale + 16 bytes of nibbles).
pub(crate) const Q4_0_BYTES: usize = 18;

/// Eight f32 narrowed to f16 as `tessera::quant::f32_to_f16`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn to_f16x8(v: __m256) -> __m128i {
    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
    let nan16 = _mm_packs_epi32(
        _mm256_castsi256_si128(nan),
        _mm256_extracti128_si256::<1>(nan),
    );
    let canon = _mm_or_si128(
        _mm_and_si128(h, _mm_set1_epi16(0x8000u16 as i16)),
        _mm_set1_epi16(0x7E00),
    );
    _mm_blendv_epi8(h, canon, nan16)
}

/// One f32 narrowed to f16 bits (not NaN: callers pass finite or infinite values).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_to_f16_bits(v: f32) -> u16 {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
    _mm_extract_epi16::<0>(h) as u16
}

/// `y[i] = f16(x[i])`.
///
/// # Safety
/// AVX2/FMA/F16C present; `n` elements at each pointer, not overlapping.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32_to_f16(y: *mut f16, x: *const f32, n: usize) {
    let mut i = 0;
    // SAFETY: every access is below `n` elements.
    unsafe {
        while i + 16 <= n {
            let a = to_f16x8(_mm256_loadu_ps(x.add(i)));
            let b = to_f16x8(_mm256_loadu_ps(x.add(i + 8)));
            _mm_storeu_si128(y.add(i).cast(), a);
            _mm_storeu_si128(y.add(i + 8).cast(), b);
            i += 16;
        }
        while i < n {
            *y.add(i) = quant::f32_to_f16(*x.add(i));
            i += 1;
        }
    }
}

/// `y[i] = f32(x[i])`.
///
/// # Safety
/// AVX2/FMA/F16C present; `n` elements at each pointer, not overlapping.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_to_f32(y: *mut f32, x: *const f16, n: usize) {
    let mut i = 0;
    // SAFETY: every access is below `n` elements.
    unsafe {
        while i + 16 <= n {
            let a = _mm256_cvtph_ps(_mm_loadu_si128(x.add(i).cast()));
            let b = _mm256_cvtph_ps(_mm_loadu_si128(x.add(i + 8).cast()));
            _mm256_storeu_ps(y.add(i), a);
            _mm256_storeu_ps(y.add(i + 8), b);
            i += 16;
        }
        while i < n {
            *y.add(i) = (*x.add(i)).to_f32();
            i += 1;
        }
    }
}

/// The low bytes of sixteen i32 lanes (`a` then `b`), in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn low_bytes16(a: __m256i, b: __m256i) -> __m128i {
    let m = _mm256_set1_epi32(0xFF);
    // Values 0..=255 pass both unsigned saturating packs unchanged.
    let p = _mm256_packus_epi32(_mm256_and_si256(a, m), _mm256_and_si256(b, m));
    // p = [a0-3, b0-3 | a4-7, b4-7] as u16: put a's halves first.
    let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(p);
    _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p))
}

/// Largest of eight lanes (no NaN among them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
    let m = _mm_max_ps(_mm_movehl_ps(m, m), m);
    _mm_cvtss_f32(_mm_max_ss(_mm_movehdup_ps(m), m))
}

/// The 32 values of one block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_block(x: &[f32; 32]) -> [__m256; 4] {
    let p = x.as_ptr();
    // SAFETY: the block holds 32 f32: lanes 0..8 of each of the four loads.
    unsafe {
        [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ]
    }
}

/// One Q8_0 block, or `false` when the block needs the reference: it holds
/// a NaN (the reference's NaN-propagating `MAX` depends on the order) or an
/// infinity, or its largest magnitude is so small that `1/d` (nearly)
/// overflows. Those give the x86 "integer indefinite" quants, which the
/// saturating packs below would not reproduce.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q8_0_block(x: &[f32; 32], out: &mut [u8; Q8_0_BYTES]) -> bool {
    let v = load_block(x);
    // Magnitudes as integers: for non-negative floats the integer order is
    // the float order, infinities included, and NaNs are above infinity.
    let abs = _mm256_set1_epi32(0x7fff_ffff);
    let mut m = _mm256_setzero_si256();
    for &vk in &v {
        m = _mm256_max_epi32(m, _mm256_and_si256(_mm256_castps_si256(vk), abs));
    }
    let m = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
    let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
    let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
    let amax_bits = _mm_cvtsi128_si32(m) as u32;
    // Infinite or NaN (t = inf * 0 is NaN), or 0 < amax < 2^-120 (near
    // where 1/d overflows): the reference's integer-indefinite cases.
    if amax_bits >= 0x7f80_0000 || (amax_bits != 0 && amax_bits < 0x0380_0000) {
        return false;
    }
    let amax = f32::from_bits(amax_bits);
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
    // roundf: truncate t + copysign(0.5 - 2^-25, t), exact for every finite
    // t (a tie k + 0.5 lands on k + 1 - 2^-25, which rounds to k + 1; below
    // a tie the sum stays below k + 1). |t| <= 127 here, so the i32 values
    // fit and the saturating packs keep them.
    let (sign, near_half) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(0.499_999_97));
    let q = v.map(|vk| {
        let t = _mm256_mul_ps(vk, id);
        let c = _mm256_or_ps(_mm256_and_ps(t, sign), near_half);
        _mm256_cvttps_epi32(_mm256_add_ps(t, c))
    });
    let p01 = _mm256_packs_epi32(q[0], q[1]);
    let p23 = _mm256_packs_epi32(q[2], q[3]);
    let p = _mm256_packs_epi16(p01, p23);
    // p holds 4-byte groups in the order 0 2 4 6 | 1 3 5 7 of `x`'s groups.
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    out[..2].copy_from_slice(&f32_to_f16_bits(d).to_le_bytes());
    // SAFETY: bytes 2..34 of the block: one 32-byte store.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(2).cast(), p) };
    true
}

/// One Q4_0 block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_0_block(x: &[f32; 32], out: &mut [u8; Q4_0_BYTES]) {
    let v = load_block(x);
    let sign = _mm256_set1_ps(-0.0);
    let a = v.map(|vk| _mm256_andnot_ps(sign, vk));
    // max_ps(a, m) keeps `m` when `a` is NaN: NaNs never win, as in the
    // reference's `amax < |v|`.
    let mut m = _mm256_setzero_ps();
    for &ak in &a {
        m = _mm256_max_ps(ak, m);
    }
    let amax = hmax(m);
    // The reference keeps the first value of largest magnitude.
    let max = if amax == 0.0 {
        0.0
    } else {
        let av = _mm256_set1_ps(amax);
        let mut bits = 0u32;
        for (k, &ak) in a.iter().enumerate() {
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(ak, av)) as u32;
            bits |= hit << (8 * k);
        }
        x.get(bits.trailing_zeros() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let d = max / -8.0;
    let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
    let (c85, c15) = (_mm256_set1_ps(8.5), _mm256_set1_epi32(15));
    let q = v.map(|vk| {
        // (int8_t)(x * id + 8.5), then MIN(15, .) as a byte.
        let t = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(vk, id), c85));
        let t = _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(t));
        _mm256_min_epi32(t, c15)
    });
    // byte j = nibble(x[j]) | nibble(x[j + 16]) << 4, as a u8.
    let b0 = _mm256_or_si256(q[0], _mm256_slli_epi32::<4>(q[2]));
    let b1 = _mm256_or_si256(q[1], _mm256_slli_epi32::<4>(q[3]));
    out[..2].copy_from_slice(&f32_to_f16_bits(d).to_le_bytes());
    // SAFETY: bytes 2..18 of the block: one 16-byte store.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().add(2).cast(), low_bytes16(b0, b1)) };
}

fn length_error(dtype: DType, n: usize, bytes: usize) -> Error {
    Error::op(
        "CPY",
        format!("{n} values do not fill {bytes} bytes of {dtype} blocks"),
    )
}

/// Quantize `x` to Q8_0 blocks in `out`, as `tessera::quant::from_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    let (blocks, rest) = x.as_chunks::<32>();
    if !rest.is_empty() || out.len() != blocks.len() * Q8_0_BYTES {
        return Err(length_error(DType::Q8_0, x.len(), out.len()));
    }
    for (b, o) in blocks.iter().zip(out.as_chunks_mut::<Q8_0_BYTES>().0) {
        if !q8_0_block(b, o) {
            quant::from_f32(DType::Q8_0, b, o)?;
        }
    }
    Ok(())
}

/// Quantize `x` to Q4_0 blocks in `out`, as `tessera::quant::from_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn quantize_q4_0(x: &[f32], out: &mut [u8]) -> Result<()> {
    let (blocks, rest) = x.as_chunks::<32>();
    if !rest.is_empty() || out.len() != blocks.len() * Q4_0_BYTES {
        return Err(length_error(DType::Q4_0, x.len(), out.len()));
    }
    for (b, o) in blocks.iter().zip(out.as_chunks_mut::<Q4_0_BYTES>().0) {
        q4_0_block(b, o);
    }
    Ok(())
}

/// Eight lanes of a block's f16 scale `d` (bytes 0..2 of the block).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale8(b: &[u8]) -> __m256 {
    let byte = |i: usize| b.get(i).copied().unwrap_or(0);
    let bits = u16::from_le_bytes([byte(0), byte(1)]);
    _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
}

/// Dequantize Q8_0 blocks into `y`, as `tessera::quant::to_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dequantize_q8_0(q: &[u8], y: &mut [f32]) -> Result<()> {
    let (blocks, rest) = y.as_chunks_mut::<32>();
    if !rest.is_empty() || q.len() != blocks.len() * Q8_0_BYTES {
        return Err(length_error(DType::Q8_0, y.len(), q.len()));
    }
    for (b, o) in q.as_chunks::<Q8_0_BYTES>().0.iter().zip(blocks) {
        let d = scale8(b);
        let (src, dst) = (b.as_ptr(), o.as_mut_ptr());
        for k in 0..4 {
            // SAFETY: quants 8k..8k + 8 are bytes 2 + 8k..10 + 8k of the
            // 34-byte block; `o` holds 32 f32 (lanes 8k..8k + 8 here).
            unsafe {
                let v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(src.add(2 + 8 * k).cast()));
                _mm256_storeu_ps(dst.add(8 * k), _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
            }
        }
    }
    Ok(())
}

/// Dequantize Q4_0 blocks into `y`, as `tessera::quant::to_f32`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn dequantize_q4_0(q: &[u8], y: &mut [f32]) -> Result<()> {
    let (blocks, rest) = y.as_chunks_mut::<32>();
    if !rest.is_empty() || q.len() != blocks.len() * Q4_0_BYTES {
        return Err(length_error(DType::Q4_0, y.len(), q.len()));
    }
    let (m4, eight) = (_mm_set1_epi8(0x0F), _mm256_set1_epi32(8));
    for (b, o) in q.as_chunks::<Q4_0_BYTES>().0.iter().zip(blocks) {
        let d = scale8(b);
        let p = o.as_mut_ptr();
        // SAFETY: the block has 16 quant bytes at 2..18 (one load); `o`
        // holds 32 f32 (four 8-lane stores).
        unsafe {
            let qs = _mm_loadu_si128(b.as_ptr().add(2).cast());
            let lo = _mm_and_si128(qs, m4);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), m4);
            for (k, src) in [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
                .into_iter()
                .enumerate()
            {
                let v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(src), eight);
                _mm256_storeu_ps(p.add(8 * k), _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
            }
        }
    }
    Ok(())
}
