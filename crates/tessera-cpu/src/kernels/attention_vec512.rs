//! The V step of flash attention on AVX-512 (`acc_g += sum_j p_gj v_j` for a
//! group of query rows, see [`super::attention_vec::VaccFn`]): 64 values of
//! four accumulators stay in 16 registers over a block of keys, so the step
//! does half the instructions of the AVX2 one. Used on
//! [`Isa::Avx512`].

use tessera::DType;

use super::attention_vec::VaccFn;
use crate::isa::Isa;

/// The AVX-512 V step for V rows of `v_type` (F16 or F32), if usable here.
pub(crate) fn vacc_fn(v_type: DType, isa: Isa) -> Option<VaccFn> {
    if !isa.has_avx512() {
        return None;
    }
    imp::vacc_fn(v_type)
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub(super) fn vacc_fn(_v_type: DType) -> Option<VaccFn> {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::*;

    pub(super) fn vacc_fn(v_type: DType) -> Option<VaccFn> {
        match v_type {
            DType::F32 => Some(f32_safe),
            DType::F16 => Some(f16_safe),
            _ => None,
        }
    }

    fn f32_safe(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
        checked::<false>(acc, dv, p, p_stride, v);
    }

    fn f16_safe(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
        checked::<true>(acc, dv, p, p_stride, v);
    }

    /// Checks the slices, then runs the step on `acc.len() / dv` rows.
    fn checked<const F16: bool>(
        acc: &mut [f32],
        dv: usize,
        p: &[f32],
        p_stride: usize,
        v: &[&[u8]],
    ) {
        let w = if F16 { 2 } else { 4 };
        if dv == 0 || v.iter().any(|r| r.len() < dv * w) {
            // Short rows are skipped, as the portable step does.
            if F16 {
                crate::kernels::attention_vec::vacc_f16(acc, dv, p, p_stride, v);
            } else {
                crate::kernels::attention_vec::vacc_f32(acc, dv, p, p_stride, v);
            }
            return;
        }
        let rows = acc.len() / dv;
        let need = match rows {
            0 => 0,
            r => (r - 1) * p_stride + v.len(),
        };
        if p.len() < need {
            return;
        }
        let mut g0 = 0;
        while g0 < rows {
            let ng = (rows - g0).min(4);
            // SAFETY: `vacc_fn` (`Isa::has_avx512`) checked AVX-512F/BW/VL/VNNI, AVX2, FMA, F16C;
            // rows g0..g0 + ng of `acc` (dv values each) and of `p` (v.len()
            // weights from row * p_stride) exist, every V row holds dv values
            // (checked above).
            unsafe {
                let (a, pg) = (acc.as_mut_ptr().add(g0 * dv), p.as_ptr().add(g0 * p_stride));
                match ng {
                    1 => rows_step::<1, F16>(a, dv, pg, p_stride, v),
                    2 => rows_step::<2, F16>(a, dv, pg, p_stride, v),
                    3 => rows_step::<3, F16>(a, dv, pg, p_stride, v),
                    _ => rows_step::<4, F16>(a, dv, pg, p_stride, v),
                }
            }
            g0 += ng;
        }
    }

    /// Sixteen values of a V row from element `i`, lanes outside `k` zero.
    ///
    /// # Safety
    /// The selected elements of the row must be readable.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn load16<const F16: bool>(row: *const u8, i: usize, k: __mmask16) -> __m512 {
        // SAFETY: forwarded to the caller; masked loads skip other lanes.
        unsafe {
            if F16 {
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, row.add(2 * i).cast()))
            } else {
                _mm512_maskz_loadu_ps(k, row.add(4 * i).cast())
            }
        }
    }

    /// `NZ` vectors of 16 values from element `i` (masks `k`) of `NG` rows.
    ///
    /// # Safety
    /// As [`rows_step`], for the selected elements.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn pass<const NG: usize, const NZ: usize, const F16: bool>(
        acc: *mut f32,
        dv: usize,
        p: *const f32,
        p_stride: usize,
        v: &[&[u8]],
        i: usize,
        k: [__mmask16; NZ],
    ) {
        let mut a = [[_mm512_setzero_ps(); NZ]; NG];
        for (j, row) in v.iter().enumerate() {
            let mut x = [_mm512_setzero_ps(); NZ];
            for (z, xz) in x.iter_mut().enumerate() {
                // SAFETY: the selected elements of chunk z are < dv.
                *xz = unsafe { load16::<F16>(row.as_ptr(), i + 16 * z, k[z]) };
            }
            for (g, ag) in a.iter_mut().enumerate() {
                // SAFETY: weight j of row g < NG.
                let pj = _mm512_set1_ps(unsafe { *p.add(g * p_stride + j) });
                for (az, xz) in ag.iter_mut().zip(&x) {
                    *az = _mm512_fmadd_ps(pj, *xz, *az);
                }
            }
        }
        for (g, ag) in a.iter().enumerate() {
            for (z, az) in ag.iter().enumerate() {
                // SAFETY: the selected values of accumulator g from i + 16z.
                unsafe {
                    let d = acc.add(g * dv + i + 16 * z);
                    let old = _mm512_maskz_loadu_ps(k[z], d);
                    _mm512_mask_storeu_ps(d, k[z], _mm512_add_ps(old, *az));
                }
            }
        }
    }

    /// # Safety
    /// `acc` holds `NG * dv` f32, `p` `(NG - 1) * p_stride + v.len()`
    /// weights, every `v[j]` `dv` values; the CPU has AVX-512F/BW/VL, AVX2,
    /// FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn rows_step<const NG: usize, const F16: bool>(
        acc: *mut f32,
        dv: usize,
        p: *const f32,
        p_stride: usize,
        v: &[&[u8]],
    ) {
        let mut i = 0;
        while i + 64 <= dv {
            // SAFETY: elements i..i + 64 <= dv.
            unsafe { pass::<NG, 4, F16>(acc, dv, p, p_stride, v, i, [!0; 4]) };
            i += 64;
        }
        while i < dv {
            let n = (dv - i).min(16);
            let k: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
            // SAFETY: elements i..i + n <= dv (masked).
            unsafe { pass::<NG, 1, F16>(acc, dv, p, p_stride, v, i, [k]) };
            i += n;
        }
    }
}
