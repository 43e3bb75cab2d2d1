//! AVX-512 VNNI micro-kernels of the packed GEMM's integer path
//! ([`super::gemm_q8`]): 16 weight rows (one zmm of 32-bit lanes) by NR = 12
//! or 8 columns. Per 4 values of `k`: one load of the A codes (16 rows x 4
//! bytes) and, per column, a 32-bit broadcast of its 4 activation codes and a
//! `vpdpbusd` into that column's integer sum. Per sub-block of `S` values the
//! sums are scaled into f32 accumulators: `acc += f32(isum) * (w * dy) + o *
//! (dy * sum q)` — exact integer sums, one rounding per sub-block.
//!
//! [`kernels`] hands the set out only on [`Isa::Avx512`] (AVX-512F/BW/VL/VNNI
//! and AVX2 for the shared transposer), not when `isa=avx2` keeps the GEMM
//! on AVX2.

use super::gemm_q8::Q8Kernels;
use crate::isa::Isa;

/// The VNNI kernel set, on [`Isa::Avx512`] (where the CPU has it).
pub(crate) fn kernels(isa: Isa) -> Option<&'static Q8Kernels> {
    imp::kernels(isa)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::Q8Kernels;

    pub(crate) fn kernels(_isa: crate::isa::Isa) -> Option<&'static Q8Kernels> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod imp {
    use std::arch::x86_64::*;

    use super::Q8Kernels;
    use crate::isa::Isa;
    use tessera::DType;

    use crate::kernels::gemm_avx2::imp::transpose;
    use crate::kernels::gemm_pack::{prefetch_out, store_tile};
    use crate::kernels::gemm_q8::QKernelFn;
    use crate::kernels::gemm_q8::QTile;
    use crate::kernels::gemm_q8_avx2::imp::unpack;
    use crate::kernels::gemm_sb::{SB, Sb, rec_dwords};

    /// Rows per panel: 16 lanes of 4 codes.
    const MR: usize = 16;

    static KERNELS: Q8Kernels = Q8Kernels {
        mr: MR,
        nr: [12, 8],
        kernel: [
            [kernel::<12, 32, false>, kernel::<8, 32, false>],
            [kernel::<12, 16, false>, kernel::<8, 16, false>],
        ],
        kernel_sym: [
            [kernel::<12, 32, true>, kernel::<8, 32, true>],
            [kernel::<12, 16, true>, kernel::<8, 16, true>],
        ],
        transpose,
        unpack: vnni_unpack,
        sub: vnni_sub,
        types: &[
            DType::Q4_0,
            DType::Q8_0,
            DType::Q4K,
            DType::Q6K,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q2K,
            DType::Q3K,
            DType::Q5K,
            DType::IQ4NL,
            DType::IQ4XS,
        ],
        sb: Some((sb_kernel, SB_NR)),
    };

    /// The super-block kernel for offset kind `kind` and sub-blocks of `s`.
    fn sb_kernel(kind: Sb, s: usize) -> QKernelFn {
        match (kind, s) {
            (Sb::Sym(_), 32) => kernel_sb::<SB_NR, 32, false>,
            (Sb::Sym(_), _) => kernel_sb::<SB_NR, 16, false>,
            (Sb::Mins, 32) => kernel_sb::<SB_NR, 32, true>,
            (Sb::Mins, _) => kernel_sb::<SB_NR, 16, true>,
            (Sb::Scaled, _) => kernel_sb_scaled::<SB_NR>,
        }
    }

    /// Columns per B panel of the super-block kernels: three sets of
    /// accumulators (outputs, the super-block's sums, the sub-block's
    /// integer sums) of 12 columns would not fit in 32 registers.
    const SB_NR: usize = 8;

    pub(crate) fn kernels(isa: Isa) -> Option<&'static Q8Kernels> {
        isa.has_avx512().then_some(&KERNELS)
    }

    /// Sub-blocks of 32 for Q5_0, Q5_1 and Q5_K too (their scales come in
    /// pairs of 16; `vpdpbusd`'s 32-bit sums cannot overflow): one scaling
    /// step per 32 values instead of two.
    fn vnni_sub(t: DType) -> Option<usize> {
        match t {
            DType::Q5_0 | DType::Q5_1 | DType::Q5K => Some(32),
            _ => crate::kernels::gemm_q8::sub_size(t),
        }
    }

    /// The unpackers for [`vnni_sub`]'s sub-blocks.
    fn vnni_unpack(t: DType) -> Option<crate::kernels::gemm_q8::UnpackFn> {
        crate::kernels::gemm_q8_unpack::unpack_s32(t).or_else(|| unpack(t))
    }

    /// `isum[j] += A . B[j]` over one sub-block of `S` values (`S / 4`
    /// steps of 4): per step one load of the A codes (16 rows x 4 bytes) and
    /// per column a 32-bit broadcast of its 4 codes and a `vpdpbusd`.
    /// Returns both panels' positions after the sub-block.
    ///
    /// # Safety
    /// `a` holds `S * 16` bytes (64-byte aligned), `b` `S * NR`;
    /// AVX-512F/BW/VNNI present.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn sub_block<const NR: usize, const S: usize>(
        mut a: *const u8,
        mut b: *const u8,
        isum: &mut [__m512i; NR],
    ) -> (*const u8, *const u8) {
        for _ in 0..S / 4 {
            // SAFETY: one step (4 values) of both code panels: 64 bytes of
            // A (64-byte aligned), 4 * NR bytes of B.
            unsafe {
                let av = _mm512_load_si512(a.cast());
                for (j, s) in isum.iter_mut().enumerate() {
                    let bv = _mm512_set1_epi32(b.add(4 * j).cast::<i32>().read_unaligned());
                    *s = _mm512_dpbusd_epi32(*s, av, bv);
                }
                a = a.add(4 * MR);
                b = b.add(4 * NR);
            }
        }
        (a, b)
    }

    /// `C (+)= A B` for one 16 x NR tile over sub-blocks of `S` values;
    /// with `SYM` the B records hold `c * sum q` (i32) and each integer sum
    /// starts there (`acc += f32(isum) * (w * dy)`, one FMA per column and
    /// sub-block instead of two: [`crate::kernels::gemm_q8`]'s constant
    /// offsets).
    ///
    /// # Safety
    /// See [`crate::kernels::gemm_q8::QKernelFn`]; AVX-512F/BW/VNNI present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn kernel<const NR: usize, const S: usize, const SYM: bool>(t: &QTile) {
        prefetch_out(t.c, t.row, t.mr);
        let mut acc = [_mm512_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        let (mut asc, mut bsc) = (t.a_scales, t.b_scales);
        for _ in 0..t.kc / S {
            let mut isum = [_mm512_setzero_si512(); NR];
            if SYM {
                for (j, s) in isum.iter_mut().enumerate() {
                    // SAFETY: word 1 of column j's record of this sub-block.
                    *s = _mm512_set1_epi32(unsafe { bsc.add(2 * j + 1).cast::<i32>().read() });
                }
            }
            // SAFETY: one sub-block of both code panels (forwarded contract).
            (a, b) = unsafe { sub_block::<NR, S>(a, b, &mut isum) };
            // SAFETY: one sub-block of scales: 2 * 16 f32 of A (64-byte
            // aligned), 2 * NR words of B.
            unsafe {
                let w = _mm512_load_ps(asc);
                // The offsets `o` only without SYM (their part is in the sum).
                let o = (!SYM).then(|| _mm512_load_ps(asc.add(MR)));
                for (j, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                    let dy = _mm512_set1_ps(*bsc.add(2 * j));
                    let v = match o {
                        Some(o) => _mm512_fmadd_ps(o, _mm512_set1_ps(*bsc.add(2 * j + 1)), *acc),
                        None => *acc,
                    };
                    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w, dy), v);
                }
                asc = asc.add(2 * MR);
                bsc = bsc.add(2 * NR);
            }
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_zmm_tile(t, acc) };
    }

    /// `C (+)= A B` for one 16 x NR tile over super-block activations
    /// ([`crate::kernels::gemm_sb`]): per sub-block of `S` values the
    /// integer sums (started at `c * sum q` for the symmetric types) are
    /// added to the super-block's sums as `f32(isum) * w` (and `o * sum q`
    /// with `MINS`), which are scaled by `dy` once per 256 values.
    ///
    /// # Safety
    /// See [`crate::kernels::gemm_q8::QKernelFn`] (`b_scales` at the slice's
    /// first record, `kc` a multiple of 256); AVX-512F/BW/VNNI present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn kernel_sb<const NR: usize, const S: usize, const MINS: bool>(t: &QTile) {
        prefetch_out(t.c, t.row, t.mr);
        let rec = rec_dwords(S);
        let mut acc = [_mm512_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        let mut asc = t.a_scales;
        let mut recs = t.b_scales;
        for _ in 0..t.kc / SB {
            let mut accb = [_mm512_setzero_ps(); NR];
            for h in 0..SB / S {
                let mut isum = [_mm512_setzero_si512(); NR];
                if !MINS {
                    for (j, s) in isum.iter_mut().enumerate() {
                        // SAFETY: word 1 + h of column j's record.
                        *s = _mm512_set1_epi32(unsafe {
                            recs.add(j * rec + 1 + h).cast::<i32>().read()
                        });
                    }
                }
                // SAFETY: one sub-block of both code panels (forwarded contract).
                (a, b) = unsafe { sub_block::<NR, S>(a, b, &mut isum) };
                // SAFETY: one sub-block of A scales: 2 * 16 f32 (64-byte
                // aligned); word 1 + h of each column's record.
                unsafe {
                    let w = _mm512_load_ps(asc);
                    if MINS {
                        let o = _mm512_load_ps(asc.add(MR));
                        for (j, (ab, s)) in accb.iter_mut().zip(isum).enumerate() {
                            let bs = _mm512_set1_ps(*recs.add(j * rec + 1 + h));
                            *ab = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), w, *ab);
                            *ab = _mm512_fmadd_ps(o, bs, *ab);
                        }
                    } else {
                        for (ab, s) in accb.iter_mut().zip(isum) {
                            *ab = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), w, *ab);
                        }
                    }
                    asc = asc.add(2 * MR);
                }
            }
            for (j, (acc, ab)) in acc.iter_mut().zip(accb).enumerate() {
                // SAFETY: word 0 (`dy`) of column j's record.
                let dy = _mm512_set1_ps(unsafe { *recs.add(j * rec) });
                *acc = _mm512_fmadd_ps(ab, dy, *acc);
            }
            // SAFETY: the next super-block's records (or one past the last).
            recs = unsafe { recs.add(NR * rec) };
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_zmm_tile(t, acc) };
    }

    /// `C (+)= A B` for one 16 x NR tile of [`Sb::Scaled`] panels (Q2_K
    /// codes times their scales, `w = d`, mins per 16 values): one integer
    /// sum per 256 values, times `d`, plus `o * sum q` per sub-block of 16,
    /// scaled by `dy`.
    ///
    /// # Safety
    /// See [`crate::kernels::gemm_q8::QKernelFn`] (`b_scales` at the slice's
    /// first record, `kc` a multiple of 256, A scales per 16 values);
    /// AVX-512F/BW/VNNI present.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    unsafe fn kernel_sb_scaled<const NR: usize>(t: &QTile) {
        prefetch_out(t.c, t.row, t.mr);
        const S: usize = 16;
        let rec = rec_dwords(S);
        let mut acc = [_mm512_setzero_ps(); NR];
        let (mut a, mut b) = (t.a, t.b);
        let mut asc = t.a_scales;
        let mut recs = t.b_scales;
        for _ in 0..t.kc / SB {
            let mut isum = [_mm512_setzero_si512(); NR];
            // SAFETY: one super-block of both code panels (forwarded contract).
            (a, b) = unsafe { sub_block::<NR, SB>(a, b, &mut isum) };
            // SAFETY: the super-block's 16 sub-blocks of A scales (2 * 16
            // f32 each, 64-byte aligned) and each column's record.
            unsafe {
                let d = _mm512_load_ps(asc);
                let mut accb = isum.map(|s| _mm512_mul_ps(_mm512_cvtepi32_ps(s), d));
                for h in 0..SB / S {
                    let o = _mm512_load_ps(asc.add(h * 2 * MR + MR));
                    for (j, ab) in accb.iter_mut().enumerate() {
                        let bs = _mm512_set1_ps(*recs.add(j * rec + 1 + h));
                        *ab = _mm512_fmadd_ps(o, bs, *ab);
                    }
                }
                for (j, (acc, ab)) in acc.iter_mut().zip(accb).enumerate() {
                    let dy = _mm512_set1_ps(*recs.add(j * rec));
                    *acc = _mm512_fmadd_ps(ab, dy, *acc);
                }
                asc = asc.add(SB / S * 2 * MR);
                recs = recs.add(NR * rec);
            }
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_zmm_tile(t, acc) };
    }

    /// Write (or add) a 16 x NR tile of accumulators to the tile's outputs:
    /// whole columns directly, an edge tile through [`store_tile`].
    ///
    /// # Safety
    /// As for [`crate::kernels::gemm_q8::QKernelFn`]'s outputs; AVX-512F
    /// present.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn store_zmm_tile<const NR: usize>(t: &QTile, acc: [__m512; NR]) {
        if t.mr == MR && t.c.len() == NR {
            for (&col, v) in t.c.iter().zip(acc) {
                // SAFETY: rows row..row + 16 of each column are the tile's.
                unsafe {
                    let p = col.add(t.row);
                    let v = if t.accumulate {
                        _mm512_add_ps(v, _mm512_loadu_ps(p))
                    } else {
                        v
                    };
                    _mm512_storeu_ps(p, v);
                }
            }
            return;
        }
        let mut buf = [[0f32; MR]; NR];
        for (o, v) in buf.iter_mut().zip(acc) {
            // SAFETY: each column of `buf` holds 16 f32.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), v) };
        }
        // SAFETY: forwarded contract (the tile's outputs).
        unsafe { store_tile(&t.as_f32_tile(), buf.as_flattened(), MR) };
    }
}
