//! AVX2 pieces of the GEMM's integer path ([`super::gemm_q8`]): the row
//! unpackers (codes and sub-block scales, shared with the VNNI kernels) and
//! integer micro-kernels for CPUs without VNNI.
//!
//! The micro-kernel multiplies 8 weight rows (one ymm of 32-bit lanes, 4
//! codes each) by NR = 6 or 4 columns with `vpmaddubsw` (unsigned codes
//! times signed activation bytes, pairs summed to 16 bits) and widens with
//! `vpmaddwd` by ones. The 16-bit sums cannot overflow: Q4_0 and Q4_K codes
//! are at most 15, so a pair is at most 2 * 15 * 127 = 3810 and eight steps
//! (a whole 32-value sub-block) add up to 30480; Q6_K codes are at most 63
//! (pairs up to 16002), so they widen every two steps, and so do Q5_0's
//! and Q5_1's codes (at most 31, pairs up to 7874; 16-value sub-blocks;
//! Q4_1's nibbles are Q4_0's; Q5_K's codes are also at most 31, Q2_K's 3
//! and Q3_K's 7, all on 16-value sub-blocks). Q8_0 (codes up to
//! 255 would saturate) stays on the f32 path on these CPUs. Per sub-block
//! the exact integer sums are scaled into f32 as in the VNNI kernels.
//!
//! [`kernels`] hands the set out only on CPUs with AVX2, FMA and F16C.

use super::gemm_q8::Q8Kernels;

/// The AVX2 integer kernel set, if the CPU has AVX2, FMA and F16C.
pub(crate) fn kernels() -> Option<&'static Q8Kernels> {
    imp::kernels()
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::Q8Kernels;

    pub(crate) fn kernels() -> Option<&'static Q8Kernels> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use tessera::DType;

    use super::Q8Kernels;
    use crate::isa::Isa;
    use crate::kernels::gemm_avx2::imp::{f16_at, transpose};
    use crate::kernels::gemm_pack::store_tile;
    use crate::kernels::gemm_q8::{QTile, UnpackFn};
    use crate::kernels::gemv_avx2::imp::q4k_scales_mins;

    /// Rows per panel: 8 lanes of 4 codes.
    const MR: usize = 8;

    static KERNELS: Q8Kernels = Q8Kernels {
        mr: MR,
        nr: [6, 4],
        kernel: [
            [kernel::<6, 32, 8, false>, kernel::<4, 32, 8, false>],
            [kernel::<6, 16, 2, false>, kernel::<4, 16, 2, false>],
        ],
        kernel_sym: [
            [kernel::<6, 32, 8, true>, kernel::<4, 32, 8, true>],
            [kernel::<6, 16, 2, true>, kernel::<4, 16, 2, true>],
        ],
        transpose,
        unpack,
        sub: crate::kernels::gemm_q8::sub_size,
        types: &[
            DType::Q4_0,
            DType::Q4K,
            DType::Q6K,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q2K,
            DType::Q3K,
            DType::Q5K,
        ],
        sb: None,
    };

    pub(crate) fn kernels() -> Option<&'static Q8Kernels> {
        Isa::Avx2.available().then_some(&KERNELS)
    }

    /// `C (+)= A B` for one 8 x NR tile over sub-blocks of `S` values,
    /// widening the 16-bit sums every `G` steps of 4 values; with `SYM` the
    /// B records hold `c * sum q` (i32) and each sum starts there (one FMA
    /// per column and sub-block instead of two).
    ///
    /// # Safety
    /// See [`crate::kernels::gemm_q8::QKernelFn`]; AVX2 and FMA present;
    /// the codes are small enough for `G` (module docs).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn kernel<const NR: usize, const S: usize, const G: usize, const SYM: bool>(t: &QTile) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        let (mut asc, mut bsc) = (t.a_scales, t.b_scales);
        for _ in 0..t.kc / S {
            let mut isum = [_mm256_setzero_si256(); NR];
            if SYM {
                for (j, s) in isum.iter_mut().enumerate() {
                    // SAFETY: word 1 of column j's record of this sub-block.
                    *s = _mm256_set1_epi32(unsafe { bsc.add(2 * j + 1).cast::<i32>().read() });
                }
            }
            for _ in 0..S / (4 * G) {
                let mut s16 = [_mm256_setzero_si256(); NR];
                for _ in 0..G {
                    // SAFETY: one step (4 values) of both code panels: 32
                    // bytes of A (32-byte aligned), 4 * NR bytes of B.
                    unsafe {
                        let av = _mm256_load_si256(a.cast());
                        for (j, s) in s16.iter_mut().enumerate() {
                            let bv = _mm256_set1_epi32(b.add(4 * j).cast::<i32>().read_unaligned());
                            *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(av, bv));
                        }
                        a = a.add(4 * MR);
                        b = b.add(4 * NR);
                    }
                }
                for (i, s) in isum.iter_mut().zip(s16) {
                    *i = _mm256_add_epi32(*i, _mm256_madd_epi16(s, ones));
                }
            }
            // SAFETY: one sub-block of scales: 2 * 8 f32 of A (32-byte
            // aligned), 2 * NR words of B.
            unsafe {
                let w = _mm256_load_ps(asc);
                // The offsets `o` only without SYM (their part is in the sum).
                let o = (!SYM).then(|| _mm256_load_ps(asc.add(MR)));
                for (j, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                    let dy = _mm256_set1_ps(*bsc.add(2 * j));
                    let v = match o {
                        Some(o) => _mm256_fmadd_ps(o, _mm256_set1_ps(*bsc.add(2 * j + 1)), *acc),
                        None => *acc,
                    };
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(w, dy), v);
                }
                asc = asc.add(2 * MR);
                bsc = bsc.add(2 * NR);
            }
        }
        if t.mr == MR && t.c.len() == NR {
            for (&col, v) in t.c.iter().zip(acc) {
                // SAFETY: rows row..row + 8 of each column are the tile's.
                unsafe {
                    let p = col.add(t.row);
                    let v = if t.accumulate {
                        _mm256_add_ps(v, _mm256_loadu_ps(p))
                    } else {
                        v
                    };
                    _mm256_storeu_ps(p, v);
                }
            }
            return;
        }
        let mut buf = [[0f32; MR]; NR];
        for (o, v) in buf.iter_mut().zip(acc) {
            // SAFETY: each column of `buf` holds 8 f32.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_tile(&t.as_f32_tile(), buf.as_flattened(), MR) };
    }

    /// The AVX2 unpacker of `t`.
    pub(crate) fn unpack(t: DType) -> Option<UnpackFn> {
        Some(match t {
            DType::Q4_0 => unpack_q4_0,
            DType::Q8_0 => unpack_q8_0,
            DType::Q4K => unpack_q4k,
            DType::Q6K => unpack_q6k,
            _ => return crate::kernels::gemm_q8_unpack::unpack(t),
        })
    }

    /// # Safety
    /// See [`UnpackFn`]; AVX2 and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_q4_0(
        src: *const u8,
        nblk: usize,
        codes: *mut u8,
        w: *mut f32,
        o: *mut f32,
        st: usize,
    ) {
        let mask = _mm_set1_epi8(0x0F);
        for b in 0..nblk {
            // SAFETY: block b (18 bytes), its 32 codes and one sub-block.
            unsafe {
                let x = src.add(18 * b);
                let d = f16_at(x);
                let q = _mm_loadu_si128(x.add(2).cast());
                let out = codes.add(32 * b);
                _mm_storeu_si128(out.cast(), _mm_and_si128(q, mask));
                _mm_storeu_si128(
                    out.add(16).cast(),
                    _mm_and_si128(_mm_srli_epi16::<4>(q), mask),
                );
                *w.add(b * st) = d;
                *o.add(b * st) = -8.0 * d;
            }
        }
    }

    /// # Safety
    /// See [`UnpackFn`]; AVX2 and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_q8_0(
        src: *const u8,
        nblk: usize,
        codes: *mut u8,
        w: *mut f32,
        o: *mut f32,
        st: usize,
    ) {
        let flip = _mm256_set1_epi8(-128);
        for b in 0..nblk {
            // SAFETY: block b (34 bytes), its 32 codes and one sub-block.
            unsafe {
                let x = src.add(34 * b);
                let d = f16_at(x);
                let q = _mm256_loadu_si256(x.add(2).cast());
                _mm256_storeu_si256(codes.add(32 * b).cast(), _mm256_xor_si256(q, flip));
                *w.add(b * st) = d;
                *o.add(b * st) = -128.0 * d;
            }
        }
    }

    /// # Safety
    /// See [`UnpackFn`]; AVX2 and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_q4k(
        src: *const u8,
        nblk: usize,
        codes: *mut u8,
        w: *mut f32,
        o: *mut f32,
        st: usize,
    ) {
        let mask = _mm256_set1_epi8(0x0F);
        for b in 0..nblk {
            // SAFETY: block b (144 bytes), its 256 codes and 8 sub-blocks.
            unsafe {
                let x = src.add(144 * b);
                let (d, dmin) = (f16_at(x), f16_at(x.add(2)));
                let out = codes.add(256 * b);
                for i in 0..4 {
                    let q = _mm256_loadu_si256(x.add(16 + 32 * i).cast());
                    _mm256_storeu_si256(out.add(64 * i).cast(), _mm256_and_si256(q, mask));
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask);
                    _mm256_storeu_si256(out.add(64 * i + 32).cast(), hi);
                }
                // The eight scales and mins at once (bytes 4..20 of the
                // block), each one product as the scalar `d * sc`,
                // `-dmin * m`; then stored at their stride.
                let sm = q4k_scales_mins(x.add(4));
                let scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
                let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(sm)));
                let (mut ws, mut os) = ([0f32; 8], [0f32; 8]);
                _mm256_storeu_ps(ws.as_mut_ptr(), _mm256_mul_ps(scales, _mm256_set1_ps(d)));
                _mm256_storeu_ps(os.as_mut_ptr(), _mm256_mul_ps(mins, _mm256_set1_ps(-dmin)));
                for j in 0..8 {
                    *w.add((8 * b + j) * st) = ws[j];
                    *o.add((8 * b + j) * st) = os[j];
                }
            }
        }
    }

    /// # Safety
    /// See [`UnpackFn`]; AVX2 and F16C present.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_q6k(
        src: *const u8,
        nblk: usize,
        codes: *mut u8,
        w: *mut f32,
        o: *mut f32,
        st: usize,
    ) {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        for b in 0..nblk {
            // SAFETY: block b (210 bytes: ql 128, qh 64, scales 16, d), its
            // 256 codes and 16 sub-blocks.
            unsafe {
                let x = src.add(210 * b);
                let d = f16_at(x.add(208));
                let out = codes.add(256 * b);
                for half in 0..2 {
                    let la = _mm256_loadu_si256(x.add(64 * half).cast());
                    let lb = _mm256_loadu_si256(x.add(64 * half + 32).cast());
                    let qh = _mm256_loadu_si256(x.add(128 + 32 * half).cast());
                    let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m2));
                    let h1 =
                        _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2));
                    let h2 =
                        _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m2));
                    let h3 =
                        _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m2));
                    let la_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(la), m4);
                    let lb_hi = _mm256_and_si256(_mm256_srli_epi16::<4>(lb), m4);
                    let o128 = out.add(128 * half);
                    _mm256_storeu_si256(o128.cast(), _mm256_or_si256(_mm256_and_si256(la, m4), h0));
                    _mm256_storeu_si256(
                        o128.add(32).cast(),
                        _mm256_or_si256(_mm256_and_si256(lb, m4), h1),
                    );
                    _mm256_storeu_si256(o128.add(64).cast(), _mm256_or_si256(la_hi, h2));
                    _mm256_storeu_si256(o128.add(96).cast(), _mm256_or_si256(lb_hi, h3));
                }
                for j in 0..16 {
                    let sc = d * f32::from(x.add(192 + j).cast::<i8>().read());
                    *w.add((16 * b + j) * st) = sc;
                    *o.add((16 * b + j) * st) = -32.0 * sc;
                }
            }
        }
    }
}
