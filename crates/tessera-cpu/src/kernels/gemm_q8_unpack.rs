//! Fast unpackers of the integer GEMM's A panels ([`super::gemm_q8`]) for
//! Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS: the weights'
//! codes as one byte per value and each sub-block's `(w, o)`.
//!
//! Packing the weights is the GEMM's overhead on top of the multiply; with
//! the portable, bounds-checked unpacker it cost Q2_K/Q3_K/Q5_K half the
//! speed of Q4_K at 512 columns. Here each block is a fixed-size array and
//! the loops run over whole 32-value groups, so the compiler vectorizes
//! them in the AVX2 context of [`unpack`]'s functions; the IQ4 tables are
//! one byte shuffle per 16 values.

use tessera::DType;
use tessera::quant::{KVALUES_IQ4NL, get_scale_min_k4};

use super::gemm_q8::UnpackFn;

/// One block's codes (`BS` bytes) and sub-block `(w, o)`s from its bytes.
trait Unpack {
    /// Bytes and values per block, sub-blocks per block.
    const TS: usize;
    const BS: usize;
    const NSUB: usize;
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]);
}

/// The little-endian f16 at byte `i` of `x`, as f32.
#[inline(always)]
fn f16(x: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([x[i], x[i + 1]]).to_f32()
}

/// Low nibbles to `lo`, high nibbles to `hi`, each or-ed with bit `j`
/// (and `j + 16`) of `qh` shifted to bit 4 when `qh` is given.
#[inline(always)]
fn nibbles(qs: &[u8], qh: Option<u32>, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(h) = qh
        && std::arch::is_x86_feature_detected!("avx2")
        && qs.len() >= 16
        && out.len() >= 32
    {
        // SAFETY: AVX2 is present (checked); 16 bytes are read from `qs`
        // and 32 written to `out` (lengths checked).
        unsafe { nibbles5_avx2(qs.as_ptr(), h, out.as_mut_ptr()) };
        return;
    }
    let (lo, hi) = out.split_at_mut(16);
    let h = qh.unwrap_or(0);
    for j in 0..16 {
        lo[j] = (qs[j] & 0x0F) | ((((h >> j) & 1) as u8) << 4);
        hi[j] = (qs[j] >> 4) | ((((h >> (j + 16)) & 1) as u8) << 4);
    }
}

/// [`nibbles`] with a fifth bit from `h`: byte `i` of `h`'s bits spread
/// over 32 bytes (shuffle, bit test), or-ed as bit 4 into the nibbles.
///
/// # Safety
/// AVX2 present; `qs` holds 16 bytes, `out` 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nibbles5_avx2(qs: *const u8, h: u32, out: *mut u8) {
    use std::arch::x86_64::*;
    let bytes = _mm256_shuffle_epi8(
        _mm256_set1_epi32(h as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    let high = _mm256_and_si256(set, _mm256_set1_epi8(0x10));
    // SAFETY: the caller's lengths; unaligned load and store.
    unsafe {
        let q = _mm_loadu_si128(qs.cast());
        let nib = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(q), q),
            _mm256_set1_epi8(0x0F),
        );
        _mm256_storeu_si256(out.cast(), _mm256_or_si256(nib, high));
    }
}

struct Q4_1;
impl Unpack for Q4_1 {
    const TS: usize = 20;
    const BS: usize = 32;
    const NSUB: usize = 1;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        nibbles(&x[4..20], None, codes);
        sc[0] = (f16(x, 0), f16(x, 2));
    }
}

/// Q5_0 and Q5_1 (`MIN`: the block has a minimum; sub-blocks of 16).
struct Q5<const MIN: bool>;
impl<const MIN: bool> Unpack for Q5<MIN> {
    const TS: usize = if MIN { 24 } else { 22 };
    const BS: usize = 32;
    const NSUB: usize = 2;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        let at = if MIN { 4 } else { 2 };
        let qh = u32::from_le_bytes([x[at], x[at + 1], x[at + 2], x[at + 3]]);
        nibbles(&x[at + 4..at + 20], Some(qh), codes);
        let d = f16(x, 0);
        let wo = if MIN { (d, f16(x, 2)) } else { (d, -16.0 * d) };
        sc[0] = wo;
        sc[1] = wo;
    }
}

struct Q2K;
impl Unpack for Q2K {
    const TS: usize = 84;
    const BS: usize = 256;
    const NSUB: usize = 16;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        let qs = &x[16..80];
        for h in 0..2 {
            for sh in 0..4 {
                let out = &mut codes[h * 128 + sh * 32..][..32];
                for i in 0..32 {
                    out[i] = (qs[h * 32 + i] >> (2 * sh)) & 3;
                }
            }
        }
        let (d, dmin) = (f16(x, 80), f16(x, 82));
        for j in 0..16 {
            sc[j] = (d * f32::from(x[j] & 0xF), -dmin * f32::from(x[j] >> 4));
        }
    }
}

struct Q3K;
impl Unpack for Q3K {
    const TS: usize = 110;
    const BS: usize = 256;
    const NSUB: usize = 16;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        let (hm, qs) = (&x[..32], &x[32..96]);
        for h in 0..2 {
            for sh in 0..4 {
                let g = h * 4 + sh;
                let out = &mut codes[g * 32..][..32];
                for i in 0..32 {
                    out[i] = ((qs[h * 32 + i] >> (2 * sh)) & 3) | (((hm[i] >> g) & 1) << 2);
                }
            }
        }
        let d = f16(x, 108);
        let s12 = &x[96..108];
        for (j, s) in sc.iter_mut().enumerate().take(16) {
            let lo = if j < 8 { s12[j] & 0xF } else { s12[j - 8] >> 4 };
            let hi = (s12[8 + j % 4] >> (2 * (j / 4))) & 3;
            let w = d * f32::from(i16::from(lo | (hi << 4)) - 32);
            *s = (w, -4.0 * w);
        }
    }
}

struct Q5K;
impl Unpack for Q5K {
    const TS: usize = 176;
    const BS: usize = 256;
    const NSUB: usize = 16;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        let (qh, qs) = (&x[16..48], &x[48..176]);
        for c in 0..4 {
            let q = &qs[c * 32..][..32];
            let (lo, hi) = codes[c * 64..][..64].split_at_mut(32);
            for i in 0..32 {
                lo[i] = (q[i] & 0xF) | (((qh[i] >> (2 * c)) & 1) << 4);
                hi[i] = (q[i] >> 4) | (((qh[i] >> (2 * c + 1)) & 1) << 4);
            }
        }
        let (d, dmin) = (f16(x, 0), f16(x, 2));
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&x[4..16]);
        for j in 0..8 {
            let (scale, min) = get_scale_min_k4(j, &packed);
            let wo = (d * f32::from(scale), -dmin * f32::from(min));
            sc[2 * j] = wo;
            sc[2 * j + 1] = wo;
        }
    }
}

/// IQ4_NL (`XS` false) and IQ4_XS: table values as codes `kv + 128`.
struct Iq4<const XS: bool>;
impl<const XS: bool> Unpack for Iq4<XS> {
    const TS: usize = if XS { 136 } else { 18 };
    const BS: usize = if XS { 256 } else { 32 };
    const NSUB: usize = Self::BS / 32;
    #[inline(always)]
    fn block(x: &[u8], codes: &mut [u8], sc: &mut [(f32, f32)]) {
        let d = f16(x, 0);
        let qs = &x[if XS { 8 } else { 2 }..];
        let sh = u16::from_le_bytes([x[2], x[3]]);
        for ib in 0..Self::BS / 32 {
            iq4_codes(&qs[16 * ib..][..16], &mut codes[32 * ib..][..32]);
            let w = if XS {
                let l = (x[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F;
                let h = ((sh >> (2 * ib)) & 3) as u8;
                d * f32::from(i16::from(l | (h << 4)) - 32)
            } else {
                d
            };
            sc[ib] = (w, -128.0 * w);
        }
    }
}

/// `KVALUES_IQ4NL` as unsigned codes `kv + 128`.
const IQ4_CODES: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_IQ4NL[i] as u8) ^ 0x80;
        i += 1;
    }
    t
};

/// 32 IQ4 codes (`kv + 128`) from 16 bytes of nibbles.
#[inline(always)]
fn iq4_codes(q: &[u8], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") && q.len() >= 16 && out.len() >= 32 {
        // SAFETY: SSSE3 is present (checked); 16 bytes are read from `q`
        // and 32 written to `out` (lengths checked).
        unsafe { iq4_codes_ssse3(q.as_ptr(), out.as_mut_ptr()) };
        return;
    }
    let code = |n: u8| IQ4_CODES[usize::from(n & 0x0F)];
    let (lo, hi) = out.split_at_mut(16);
    for j in 0..16 {
        lo[j] = code(q[j]);
        hi[j] = code(q[j] >> 4);
    }
}

/// # Safety
/// SSSE3 present; `q` holds 16 bytes, `out` 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn iq4_codes_ssse3(q: *const u8, out: *mut u8) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's lengths; unaligned loads and stores.
    unsafe {
        let t = _mm_loadu_si128(IQ4_CODES.as_ptr().cast());
        let v = _mm_loadu_si128(q.cast());
        let m = _mm_set1_epi8(0x0F);
        let lo = _mm_shuffle_epi8(t, _mm_and_si128(v, m));
        let hi = _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16::<4>(v), m));
        _mm_storeu_si128(out.cast(), lo);
        _mm_storeu_si128(out.add(16).cast(), hi);
    }
}

/// Unpack `nblk` blocks of `U` (the [`UnpackFn`] contract), one `(w, o)`
/// per `S` values (`S` a multiple of `U`'s own sub-block whose scales are
/// equal within each `S`).
///
/// # Safety
/// See [`UnpackFn`]: `src` holds the blocks, `codes` their values, `w` and
/// `o` each sub-block at stride `st`.
#[inline(always)]
unsafe fn run<U: Unpack, const S: usize>(
    src: *const u8,
    nblk: usize,
    codes: *mut u8,
    w: *mut f32,
    o: *mut f32,
    st: usize,
) {
    let mut sc = [(0f32, 0f32); 16];
    let step = S / (U::BS / U::NSUB);
    let nsub = U::BS / S;
    for b in 0..nblk {
        // SAFETY: block b's bytes and its codes (the caller's contract).
        let (x, out) = unsafe {
            (
                std::slice::from_raw_parts(src.add(b * U::TS), U::TS),
                std::slice::from_raw_parts_mut(codes.add(b * U::BS), U::BS),
            )
        };
        U::block(x, out, &mut sc);
        for (j, &(ws, os)) in sc.iter().step_by(step).enumerate().take(nsub) {
            // SAFETY: sub-block b * nsub + j of the caller's scales.
            unsafe {
                *w.add((b * nsub + j) * st) = ws;
                *o.add((b * nsub + j) * st) = os;
            }
        }
    }
}

macro_rules! unpackers {
    ($($name:ident: $ty:ty, $s:literal);* $(;)?) => {
        $(
            /// # Safety
            /// See [`UnpackFn`]; AVX2 present.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $name(
                src: *const u8,
                nblk: usize,
                codes: *mut u8,
                w: *mut f32,
                o: *mut f32,
                st: usize,
            ) {
                // SAFETY: forwarded contract.
                unsafe { run::<$ty, $s>(src, nblk, codes, w, o, st) }
            }
        )*
    };
}

unpackers!(
    q4_1: Q4_1, 32;
    q5_0: Q5<false>, 16;
    q5_1: Q5<true>, 16;
    q2k: Q2K, 16;
    q3k: Q3K, 16;
    q5k: Q5K, 16;
    iq4nl: Iq4<false>, 32;
    iq4xs: Iq4<true>, 32;
    q5_0_s32: Q5<false>, 32;
    q5_1_s32: Q5<true>, 32;
    q5k_s32: Q5K, 32;
);

/// The AVX2-compiled unpacker of `t`, for the types this module has.
#[cfg(target_arch = "x86_64")]
pub(crate) fn unpack(t: DType) -> Option<UnpackFn> {
    Some(match t {
        DType::Q4_1 => q4_1,
        DType::Q5_0 => q5_0,
        DType::Q5_1 => q5_1,
        DType::Q2K => q2k,
        DType::Q3K => q3k,
        DType::Q5K => q5k,
        DType::IQ4NL => iq4nl,
        DType::IQ4XS => iq4xs,
        _ => return None,
    })
}

/// The unpackers with one `(w, o)` per 32 values for Q5_0, Q5_1 and Q5_K
/// (the VNNI kernels' sub-blocks).
#[cfg(target_arch = "x86_64")]
pub(crate) fn unpack_s32(t: DType) -> Option<UnpackFn> {
    Some(match t {
        DType::Q5_0 => q5_0_s32,
        DType::Q5_1 => q5_1_s32,
        DType::Q5K => q5k_s32,
        _ => return None,
    })
}
