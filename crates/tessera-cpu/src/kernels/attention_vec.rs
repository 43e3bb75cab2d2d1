//! The vector step of flash attention: `acc += p * v` for one V row (F16 or
//! F32 bytes) into an f32 accumulator, portable and AVX2.
//!
//! ggml accumulates F16 V rows in an F16 accumulator; Tessera accumulates in
//! f32 for every V type (more accurate, same cost with F16C). As in
//! [`super::dot_avx2`], the AVX2 functions are only reachable through
//! [`axpy_fn`], which checks the CPU first.

use tessera::DType;

use crate::isa::Isa;

/// `acc[i] += p * v[i]` for `i < min(acc.len(), values in v)`.
pub(crate) type AxpyFn = fn(acc: &mut [f32], v: &[u8], p: f32);

/// The accumulate step for V rows of `v_type` (F16 or F32) on `isa`.
pub(crate) fn axpy_fn(v_type: DType, isa: Isa) -> Option<AxpyFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if isa == Isa::Avx2 && isa.available() {
            return avx2::axpy_fn(v_type);
        }
    }
    let _ = isa;
    match v_type {
        DType::F32 => Some(axpy_f32),
        DType::F16 => Some(axpy_f16),
        _ => None,
    }
}

fn axpy_f32(acc: &mut [f32], v: &[u8], p: f32) {
    for (a, b) in acc.iter_mut().zip(v.chunks_exact(4)) {
        *a += p * f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

fn axpy_f16(acc: &mut [f32], v: &[u8], p: f32) {
    let t = super::dot::f16_table();
    for (a, b) in acc.iter_mut().zip(v.chunks_exact(2)) {
        *a += p * t[usize::from(u16::from_le_bytes([b[0], b[1]]))];
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    pub(super) fn axpy_fn(v_type: DType) -> Option<AxpyFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        match v_type {
            DType::F32 => Some(f32_safe),
            DType::F16 => Some(f16_safe),
            _ => None,
        }
    }

    fn f32_safe(acc: &mut [f32], v: &[u8], p: f32) {
        // SAFETY: only handed out by `axpy_fn` after checking AVX2/FMA/F16C.
        unsafe { axpy_f32_avx2(acc, v, p) }
    }

    fn f16_safe(acc: &mut [f32], v: &[u8], p: f32) {
        // SAFETY: only handed out by `axpy_fn` after checking AVX2/FMA/F16C.
        unsafe { axpy_f16_avx2(acc, v, p) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn axpy_f32_avx2(acc: &mut [f32], v: &[u8], p: f32) {
        let n = acc.len().min(v.len() / 4);
        let (acc, v) = (&mut acc[..n], &v[..n * 4]);
        let vp = _mm256_set1_ps(p);
        let mut ac = acc.chunks_exact_mut(8);
        let mut vc = v.chunks_exact(32);
        for (a, b) in (&mut ac).zip(&mut vc) {
            // SAFETY: `a` holds 8 f32 and `b` 32 bytes; unaligned loads/stores.
            unsafe {
                let x = _mm256_loadu_ps(b.as_ptr().cast());
                let y = _mm256_loadu_ps(a.as_ptr());
                _mm256_storeu_ps(a.as_mut_ptr(), _mm256_fmadd_ps(vp, x, y));
            }
        }
        axpy_f32(ac.into_remainder(), vc.remainder(), p);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn axpy_f16_avx2(acc: &mut [f32], v: &[u8], p: f32) {
        let n = acc.len().min(v.len() / 2);
        let (acc, v) = (&mut acc[..n], &v[..n * 2]);
        let vp = _mm256_set1_ps(p);
        let mut ac = acc.chunks_exact_mut(8);
        let mut vc = v.chunks_exact(16);
        for (a, b) in (&mut ac).zip(&mut vc) {
            // SAFETY: `a` holds 8 f32 and `b` 16 bytes; unaligned loads/stores.
            unsafe {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().cast()));
                let y = _mm256_loadu_ps(a.as_ptr());
                _mm256_storeu_ps(a.as_mut_ptr(), _mm256_fmadd_ps(vp, x, y));
            }
        }
        axpy_f16(ac.into_remainder(), vc.remainder(), p);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_path_accumulates_the_same() {
        for n in [1usize, 7, 8, 9, 40] {
            let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let v32: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let v16: Vec<u8> = v
                .iter()
                .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
                .collect();
            for isa in Isa::all_available() {
                for (t, bytes) in [(DType::F32, &v32), (DType::F16, &v16)] {
                    let f = axpy_fn(t, isa).unwrap();
                    let mut acc: Vec<f32> = (0..n).map(|i| i as f32).collect();
                    f(&mut acc, bytes, 2.0);
                    for (i, a) in acc.iter().enumerate() {
                        // Half steps times 2 plus integers: exact in f32.
                        assert_eq!(*a, i as f32 + 2.0 * v[i], "{t} {isa:?} n={n} i={i}");
                    }
                }
            }
        }
        assert!(axpy_fn(DType::Q8_0, Isa::Scalar).is_none());
    }
}
