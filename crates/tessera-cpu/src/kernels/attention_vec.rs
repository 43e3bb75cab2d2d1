//! The vector steps of flash attention, portable and AVX2: the softmax
//! weights of a block of scores (`p = exp(s - max)`) and the accumulation of
//! a block of V rows (F16 or F32 bytes) into the f32 accumulators of a group
//! of query rows (`acc_g += sum_j p_gj v_j`).
//!
//! The V step takes several query rows at once so that a V row is loaded
//! (and converted from f16) once for the whole group of query heads that
//! share its KV head, and keeps a slice of each accumulator in registers over
//! the whole block of keys. ggml accumulates F16 V rows in an F16
//! accumulator; Tessera accumulates in f32 for every V type. The AVX2 `exp`
//! is ggml's `ggml_v_expf` (about 1.5 ulp). As in [`super::dot_avx2`], the
//! AVX2 functions are only reachable through [`exp_fn`] and [`vacc_fn`],
//! which check the CPU first.

use tessera::DType;

use crate::isa::Isa;

/// `s[j] = exp(s[j] - max)` for every `j` (0 where `s[j]` is -inf, 1 where
/// `s[j] == max`, even infinite), returning the sum of the new values.
pub(crate) type ExpFn = fn(s: &mut [f32], max: f32) -> f32;

/// `acc[g * dv + i] += sum_j p[g * p_stride + j] * v[j][i]` for every query
/// row `g < acc.len() / dv`, key `j < v.len()` and `i < dv`; every `v[j]`
/// must hold `dv` values (shorter rows are skipped).
pub(crate) type VaccFn = fn(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]);

/// `dst[i] = f16 value i of src` for `i < min(dst.len(), src.len() / 2)`.
pub(crate) type F16RowFn = fn(src: &[u8], dst: &mut [f32]);

/// The f16 row conversion (of mask rows) for `isa`.
pub(crate) fn f16_row_fn(isa: Isa) -> F16RowFn {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx2() {
            return avx2::f16_row_safe;
        }
    }
    let _ = isa;
    f16_row_scalar
}

fn f16_row_scalar(src: &[u8], dst: &mut [f32]) {
    for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

/// The softmax step for `isa`.
pub(crate) fn exp_fn(isa: Isa) -> ExpFn {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx2() {
            return avx2::exp_safe;
        }
    }
    let _ = isa;
    exp_scalar
}

/// The V step for V rows of `v_type` (F16 or F32) on `isa`.
pub(crate) fn vacc_fn(v_type: DType, isa: Isa) -> Option<VaccFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx2()
            && let Some(f) =
                super::attention_vec512::vacc_fn(v_type, isa).or_else(|| avx2::vacc_fn(v_type))
        {
            return Some(f);
        }
    }
    let _ = isa;
    match v_type {
        DType::F32 => Some(vacc_f32),
        DType::F16 => Some(vacc_f16),
        DType::Q8_0 => Some(vacc_q8_0),
        _ => None,
    }
}

/// One weight: `exp(s - max)`, 1 at the maximum, 0 for -inf.
#[inline(always)]
fn weight(s: f32, max: f32) -> f32 {
    if s == max { 1.0 } else { (s - max).exp() }
}

fn exp_scalar(s: &mut [f32], max: f32) -> f32 {
    let mut sum = 0f32;
    for v in s.iter_mut() {
        *v = weight(*v, max);
        sum += *v;
    }
    sum
}

/// The portable V step; `val` reads value `i` of a row.
#[inline(always)]
fn vacc_with(
    acc: &mut [f32],
    dv: usize,
    p: &[f32],
    p_stride: usize,
    v: &[&[u8]],
    w: usize,
    val: impl Fn(&[u8], usize) -> f32,
) {
    if dv == 0 {
        return;
    }
    for (g, a) in acc.chunks_exact_mut(dv).enumerate() {
        let Some(pg) = p.get(g * p_stride..) else {
            return;
        };
        for (row, &pj) in v.iter().zip(pg) {
            if row.len() < dv * w {
                continue;
            }
            for (i, a) in a.iter_mut().enumerate() {
                *a += pj * val(row, i);
            }
        }
    }
}

pub(super) fn vacc_f32(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
    vacc_with(acc, dv, p, p_stride, v, 4, |r, i| {
        f32::from_le_bytes([r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]])
    });
}

pub(super) fn vacc_f16(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
    let t = super::dot::f16_table();
    vacc_with(acc, dv, p, p_stride, v, 2, |r, i| {
        t[usize::from(u16::from_le_bytes([r[2 * i], r[2 * i + 1]]))]
    });
}

/// Q8_0 V rows (a quantized cache): each block's 32 codes times its f16
/// scale, ggml's `dequantize_row_q8_0`, accumulated in f32.
pub(super) fn vacc_q8_0(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
    const BLOCK: usize = 34;
    if dv == 0 {
        return;
    }
    let row_bytes = dv / 32 * BLOCK;
    for (g, a) in acc.chunks_exact_mut(dv).enumerate() {
        let Some(pg) = p.get(g * p_stride..) else {
            return;
        };
        for (row, &pj) in v.iter().zip(pg) {
            let Some(row) = row.get(..row_bytes) else {
                continue;
            };
            for (blk, a) in row.chunks_exact(BLOCK).zip(a.chunks_exact_mut(32)) {
                let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32() * pj;
                for (a, &q) in a.iter_mut().zip(&blk[2..]) {
                    *a += d * f32::from(q as i8);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    /// Query rows whose accumulators one pass keeps in registers.
    const G: usize = 4;

    pub(super) fn vacc_fn(v_type: DType) -> Option<VaccFn> {
        if !Isa::Avx2.available() {
            return None;
        }
        match v_type {
            DType::F32 => Some(vacc_f32_safe),
            DType::F16 => Some(vacc_f16_safe),
            _ => None,
        }
    }

    pub(super) fn f16_row_safe(src: &[u8], dst: &mut [f32]) {
        // SAFETY: only handed out by `f16_row_fn` after checking AVX2/FMA/F16C.
        unsafe { f16_row(src, dst) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_row(src: &[u8], dst: &mut [f32]) {
        let n = dst.len().min(src.len() / 2);
        let (src, dst) = (&src[..2 * n], &mut dst[..n]);
        let mut dc = dst.chunks_exact_mut(8);
        let mut sc = src.chunks_exact(16);
        for (d, s) in (&mut dc).zip(&mut sc) {
            // SAFETY: `s` holds 16 bytes and `d` 8 f32; unaligned load/store.
            unsafe {
                _mm256_storeu_ps(
                    d.as_mut_ptr(),
                    _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast())),
                )
            };
        }
        super::f16_row_scalar(sc.remainder(), dc.into_remainder());
    }

    pub(super) fn exp_safe(s: &mut [f32], max: f32) -> f32 {
        // SAFETY: only handed out by `exp_fn` after checking AVX2/FMA/F16C.
        unsafe { exp_block(s, max) }
    }

    fn vacc_f32_safe(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
        vacc_checked(acc, dv, p, p_stride, v, 4, false);
    }

    fn vacc_f16_safe(acc: &mut [f32], dv: usize, p: &[f32], p_stride: usize, v: &[&[u8]]) {
        vacc_checked(acc, dv, p, p_stride, v, 2, true);
    }

    /// Checks the slices, then runs the AVX2 V step on the rows that hold
    /// `dv` values of `w` bytes.
    fn vacc_checked(
        acc: &mut [f32],
        dv: usize,
        p: &[f32],
        p_stride: usize,
        v: &[&[u8]],
        w: usize,
        f16: bool,
    ) {
        if dv == 0 || v.iter().any(|r| r.len() < dv * w) {
            if f16 {
                super::vacc_f16(acc, dv, p, p_stride, v);
            } else {
                super::vacc_f32(acc, dv, p, p_stride, v);
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
        // SAFETY: AVX2/FMA/F16C were checked by `vacc_fn`; `acc` holds
        // `rows * dv` values, every V row `dv` values of `w` bytes, and `p`
        // `(rows - 1) * p_stride + v.len()` weights (checked above).
        unsafe { vacc_block(acc.as_mut_ptr(), rows, dv, p.as_ptr(), p_stride, v, f16) }
    }

    /// Eight values of a V row at element `i`, widened to f32.
    ///
    /// # Safety
    /// Elements `i..i + 8` of the row must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8<const F16: bool>(row: *const u8, i: usize) -> __m256 {
        // SAFETY: forwarded to the caller.
        unsafe {
            if F16 {
                _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * i).cast()))
            } else {
                _mm256_loadu_ps(row.add(4 * i).cast())
            }
        }
    }

    /// One value of a V row, widened to f32.
    ///
    /// # Safety
    /// Element `e` of the row must be readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load1<const F16: bool>(row: *const u8, e: usize) -> f32 {
        // SAFETY: forwarded to the caller.
        unsafe {
            if F16 {
                let h = row.add(2 * e).cast::<u16>().read_unaligned();
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
            } else {
                row.add(4 * e).cast::<f32>().read_unaligned()
            }
        }
    }

    /// # Safety
    /// See [`vacc_checked`]: `acc` holds `rows * dv` f32, `p` the weights,
    /// every `v[j]` `dv` values; the CPU has AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn vacc_block(
        acc: *mut f32,
        rows: usize,
        dv: usize,
        p: *const f32,
        p_stride: usize,
        v: &[&[u8]],
        f16: bool,
    ) {
        let mut g0 = 0;
        while g0 < rows {
            let ng = (rows - g0).min(G);
            // SAFETY: rows g0..g0 + ng < rows (the caller's guarantees).
            unsafe {
                let (a, pg) = (acc.add(g0 * dv), p.add(g0 * p_stride));
                match (ng, f16) {
                    (1, true) => vacc_rows::<1, true>(a, dv, pg, p_stride, v),
                    (2, true) => vacc_rows::<2, true>(a, dv, pg, p_stride, v),
                    (3, true) => vacc_rows::<3, true>(a, dv, pg, p_stride, v),
                    (_, true) => vacc_rows::<4, true>(a, dv, pg, p_stride, v),
                    (1, false) => vacc_rows::<1, false>(a, dv, pg, p_stride, v),
                    (2, false) => vacc_rows::<2, false>(a, dv, pg, p_stride, v),
                    (3, false) => vacc_rows::<3, false>(a, dv, pg, p_stride, v),
                    (_, false) => vacc_rows::<4, false>(a, dv, pg, p_stride, v),
                }
            }
            g0 += ng;
        }
    }

    /// The V step for `NG` rows (accumulators at `acc`, weights at `p`).
    ///
    /// # Safety
    /// As [`vacc_block`], for `NG` rows.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn vacc_rows<const NG: usize, const F16: bool>(
        acc: *mut f32,
        dv: usize,
        p: *const f32,
        p_stride: usize,
        v: &[&[u8]],
    ) {
        let mut i = 0;
        // 16 values of the NG accumulators stay in registers over the
        // whole block of keys.
        while i + 16 <= dv {
            let mut a = [[_mm256_setzero_ps(); 2]; NG];
            for (j, row) in v.iter().enumerate() {
                // SAFETY: elements i..i + 16 <= dv of the row.
                let (v0, v1) = unsafe {
                    (
                        load8::<F16>(row.as_ptr(), i),
                        load8::<F16>(row.as_ptr(), i + 8),
                    )
                };
                for (g, ag) in a.iter_mut().enumerate() {
                    // SAFETY: weight j of row g < NG.
                    let pj = _mm256_set1_ps(unsafe { *p.add(g * p_stride + j) });
                    ag[0] = _mm256_fmadd_ps(pj, v0, ag[0]);
                    ag[1] = _mm256_fmadd_ps(pj, v1, ag[1]);
                }
            }
            for (g, ag) in a.iter().enumerate() {
                // SAFETY: values i..i + 16 <= dv of accumulator g.
                unsafe {
                    let d = acc.add(g * dv + i);
                    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), ag[0]));
                    let d = d.add(8);
                    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), ag[1]));
                }
            }
            i += 16;
        }
        // The tail, one value at a time.
        for e in i..dv {
            for g in 0..NG {
                let mut s = 0f32;
                for (j, row) in v.iter().enumerate() {
                    // SAFETY: element e < dv of the row, weight j of row g.
                    unsafe { s += *p.add(g * p_stride + j) * load1::<F16>(row.as_ptr(), e) };
                }
                // SAFETY: value e < dv of accumulator g.
                unsafe { *acc.add(g * dv + e) += s };
            }
        }
    }

    /// ggml's `ggml_v_expf`: `e^x` for eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn v_expf(x: __m256) -> __m256 {
        let r = _mm256_set1_ps(f32::from_bits(0x4b40_0000)); // 0x1.8p23
        let z = _mm256_fmadd_ps(x, _mm256_set1_ps(f32::from_bits(0x3fb8_aa3b)), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(f32::from_bits(0x35bf_be8e)),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(f32::from_bits(0x3f31_7200)), x),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(
            e,
            _mm256_castps_si256(_mm256_set1_ps(1.0)),
        ));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3c07_2010)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3d2b_9f17)),
                ),
                u,
                _mm256_fmadd_ps(
                    _mm256_set1_ps(f32::from_bits(0x3e2a_af33)),
                    b,
                    _mm256_set1_ps(f32::from_bits(0x3eff_fedb)),
                ),
            ),
            u,
            _mm256_mul_ps(_mm256_set1_ps(f32::from_bits(0x3f7f_fff6)), b),
        );
        if _mm256_movemask_ps(c) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        _mm256_or_ps(
            _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
            _mm256_andnot_ps(
                d,
                _mm256_or_ps(
                    _mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                    _mm256_andnot_ps(c, _mm256_fmadd_ps(k, j, k)),
                ),
            ),
        )
    }

    /// `s[j] = exp(s[j] - max)` in place, with the sum.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exp_block(s: &mut [f32], max: f32) -> f32 {
        let vmax = _mm256_set1_ps(max);
        let mut sum = _mm256_setzero_ps();
        let mut chunks = s.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 f32; unaligned load and store.
            unsafe {
                let x = _mm256_loadu_ps(c.as_ptr());
                // s == max gives exactly 1 (also for an infinite maximum).
                let at_max = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, vmax);
                let d = _mm256_andnot_ps(at_max, _mm256_sub_ps(x, vmax));
                let y = v_expf(d);
                _mm256_storeu_ps(c.as_mut_ptr(), y);
                sum = _mm256_add_ps(sum, y);
            }
        }
        let s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
        let s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let mut total = _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
        for v in chunks.into_remainder() {
            *v = weight(*v, max);
            total += *v;
        }
        total
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Every implementation of each step against the portable one or an f64
    //! reference, on odd sizes (vector tails) and special values.

    use super::*;

    /// Every V step usable here, by name.
    fn vacc_impls(t: DType) -> Vec<(&'static str, VaccFn)> {
        let mut v: Vec<(&'static str, VaccFn)> = Vec::new();
        v.extend(vacc_fn(t, Isa::Scalar).map(|f| ("scalar", f)));
        #[cfg(target_arch = "x86_64")]
        v.extend(avx2::vacc_fn(t).map(|f| ("avx2", f)));
        v.extend(super::super::attention_vec512::vacc_fn(t, Isa::Avx512).map(|f| ("avx512", f)));
        v
    }

    #[test]
    fn v_steps_match_f64_on_odd_sizes() {
        let mut seed = 1u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for t in [DType::F32, DType::F16] {
            for dv in [1usize, 7, 16, 40, 64, 130] {
                for keys in [0usize, 1, 5, 37] {
                    for rows in [1usize, 3, 4, 6] {
                        let vals: Vec<Vec<f32>> = (0..keys)
                            .map(|_| (0..dv).map(|_| rnd()).collect())
                            .collect();
                        let bytes: Vec<Vec<u8>> = vals
                            .iter()
                            .map(|r| match t {
                                DType::F32 => r.iter().flat_map(|x| x.to_le_bytes()).collect(),
                                _ => r
                                    .iter()
                                    .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
                                    .collect(),
                            })
                            .collect();
                        let stride = keys + 3;
                        let p: Vec<f32> = (0..rows * stride).map(|_| rnd() + 0.5).collect();
                        let init: Vec<f32> = (0..rows * dv).map(|_| rnd()).collect();
                        let v: Vec<&[u8]> = bytes.iter().map(|b| b.as_slice()).collect();
                        for (name, f) in vacc_impls(t) {
                            let mut acc = init.clone();
                            f(&mut acc, dv, &p, stride, &v);
                            for g in 0..rows {
                                for i in 0..dv {
                                    let mut want = f64::from(init[g * dv + i]);
                                    let mut mag = want.abs();
                                    for (j, row) in vals.iter().enumerate() {
                                        let x = match t {
                                            DType::F32 => row[i],
                                            _ => half::f16::from_f32(row[i]).to_f32(),
                                        };
                                        let term = f64::from(p[g * stride + j]) * f64::from(x);
                                        want += term;
                                        mag += term.abs();
                                    }
                                    let got = f64::from(acc[g * dv + i]);
                                    assert!(
                                        (got - want).abs() <= 1e-6 * mag,
                                        "{name} {t} dv={dv} keys={keys} rows={rows} [{g}][{i}]: {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn exp_steps_match_the_portable_one() {
        let mut s: Vec<f32> = (0..203).map(|i| -(i as f32) * 0.73).collect();
        s.extend([
            f32::NEG_INFINITY,
            0.0,
            -87.0,
            -103.0,
            -150.0,
            f32::NAN,
            -1e-7,
        ]);
        for max in [0.0f32, 1.5, f32::INFINITY] {
            let mut want = s.clone();
            if max == f32::INFINITY {
                want[3] = f32::INFINITY;
            }
            let input = want.clone();
            let sw = exp_scalar(&mut want, max);
            for isa in Isa::all_available() {
                let mut got = input.clone();
                let sg = exp_fn(isa)(&mut got, max);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    if w.is_nan() {
                        assert!(g.is_nan(), "{isa:?} max={max} [{i}]");
                    } else {
                        // ggml's vector exp: within 2 ulp (and exact 0, 1).
                        assert!(
                            (g - w).abs() <= 2.5e-7 * w.abs() + f32::MIN_POSITIVE,
                            "{isa:?} max={max} [{i}]: exp({}) = {g} vs {w}",
                            input[i]
                        );
                    }
                }
                assert!(sw.is_nan() == sg.is_nan(), "{isa:?} sum");
            }
        }
    }

    #[test]
    fn f16_rows_match_the_portable_conversion() {
        let src: Vec<u8> = (0..37u16)
            .flat_map(|i| (i.wrapping_mul(2477) ^ 0x3c00).to_le_bytes())
            .collect();
        let mut want = vec![0f32; 37];
        f16_row_scalar(&src, &mut want);
        for isa in Isa::all_available() {
            let mut got = vec![0f32; 37];
            f16_row_fn(isa)(&src, &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{isa:?}"
                );
            }
        }
    }
}
