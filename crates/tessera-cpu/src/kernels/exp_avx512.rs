//! SILU/SWIGLU and GELU/GEGLU on sixteen lanes (AVX-512F): the same
//! instruction sequence as [`super::exp_avx2`]'s eight-lane `exp256`,
//! `silu256` and `gelu256`, lane for lane, so the results are bit for bit
//! those of the AVX2 path (every step is an IEEE operation on one lane:
//! min/max, round to nearest, FMA, add, multiply, divide, integer shifts).
//! Why: on Gemma 3's prompt GELU took ~3 % of the time, at one division and
//! a polynomial per eight values; sixteen lanes halve the instructions.
//! Tails use masked loads and stores (no access past `n`).
//!
//! Every function is `#[target_feature(enable = "avx512f")]`;
//! [`super::simd::Simd`] is the only caller and checks the CPU first.
//! Pointer preconditions are those of the `simd` module docs.

use std::arch::x86_64::*;

/// `exp` of sixteen lanes: `exp256`'s steps (see `exp_avx2`).
#[inline]
#[target_feature(enable = "avx512f")]
fn exp512(x: __m512) -> __m512 {
    // Operand order as exp256's (`min(89, max(-110, x))`): NaN survives.
    let x = _mm512_min_ps(
        _mm512_set1_ps(89.0),
        _mm512_max_ps(_mm512_set1_ps(-110.0), x),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.398_199_9e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.333_452e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166_579_6e-2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.666_666_5e-1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5));
    let e = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    let ni = _mm512_cvtps_epi32(n);
    let n1 = _mm512_srai_epi32::<1>(ni);
    let n2 = _mm512_sub_epi32(ni, n1);
    let bias = _mm512_set1_epi32(127);
    let s1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n1, bias)));
    let s2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n2, bias)));
    _mm512_mul_ps(_mm512_mul_ps(e, s1), s2)
}

/// `x / (1 + exp(-x))`, as `silu256`.
#[inline]
#[target_feature(enable = "avx512f")]
fn silu512(x: __m512) -> __m512 {
    let e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// GELU in the logistic form, as `gelu256`.
#[inline]
#[target_feature(enable = "avx512f")]
fn gelu512(x: __m512) -> __m512 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const GELU_COEF_A: f32 = 0.044_715;
    let x2 = _mm512_mul_ps(x, x);
    let inner = _mm512_fmadd_ps(_mm512_set1_ps(GELU_COEF_A), x2, _mm512_set1_ps(1.0));
    let minus_2u = _mm512_mul_ps(
        _mm512_set1_ps(-2.0 * SQRT_2_OVER_PI),
        _mm512_mul_ps(x, inner),
    );
    let e = exp512(minus_2u);
    _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

/// `y[i] = silu(x[i])`, times `g[i]` when given.
///
/// # Safety
/// AVX-512F present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx512f")]
pub unsafe fn silu(y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { gated(|v| silu512(v), y, x, g, n) }
}

/// `y[i] = gelu(x[i])` (tanh approximation), times `g[i]` when given.
///
/// # Safety
/// AVX-512F present; pointers as in the `simd` module docs.
#[target_feature(enable = "avx512f")]
pub unsafe fn gelu(y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { gated(|v| gelu512(v), y, x, g, n) }
}

/// `y[i] = act(x[i])`, times `g[i]` when given.
///
/// # Safety
/// AVX-512F present; pointers as in the `simd` module docs.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn gated(
    act: impl Fn(__m512) -> __m512,
    y: *mut f32,
    x: *const f32,
    g: Option<*const f32>,
    n: usize,
) {
    let mut i = 0;
    // SAFETY: each step touches lanes i..i + k with k <= n - i (masked
    // loads and stores access only the mask's lanes). `y` may equal `x`
    // or `g`: every lane is read before it is written.
    unsafe {
        while i < n {
            let k = (n - i).min(16);
            let m: __mmask16 = if k == 16 { !0 } else { (1u16 << k) - 1 };
            let mut v = act(_mm512_maskz_loadu_ps(m, x.add(i)));
            if let Some(g) = g {
                v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, g.add(i)));
            }
            _mm512_mask_storeu_ps(y.add(i), m, v);
            i += k;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use crate::isa::Isa;

    type Act = unsafe fn(*mut f32, *const f32, Option<*const f32>, usize);

    /// Sixteen lanes equal eight, bit for bit: SILU and GELU, with and
    /// without the gate, in place and not, every length up to 40 (every
    /// tail), over values that reach both clamps, the subnormal range,
    /// infinities, NaN and signed zeros.
    #[test]
    fn sixteen_lanes_equal_the_avx2_path_bit_for_bit() {
        if !Isa::Avx512.available() || !Isa::Avx2.available() {
            return;
        }
        let mut xs: Vec<f32> = (0..20_000).map(|i| -120.0 + i as f32 * 0.0123).collect();
        xs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            -1e-40,
            88.7,
            -103.9,
        ]);
        let gs: Vec<f32> = (0..xs.len())
            .map(|i| 0.5 + (i % 11) as f32 * 0.37)
            .collect();
        let pairs: [(Act, Act, &str); 2] = [
            (super::silu, super::super::exp_avx2::silu, "silu"),
            (super::gelu, super::super::exp_avx2::gelu, "gelu"),
        ];
        for (wide, narrow, what) in pairs {
            for gate in [false, true] {
                let g = gate.then_some(gs.as_ptr());
                let mut a = vec![0f32; xs.len()];
                let mut b = vec![0f32; xs.len()];
                // SAFETY: both ISAs checked; slices of xs.len() elements.
                unsafe {
                    wide(a.as_mut_ptr(), xs.as_ptr(), g, xs.len());
                    narrow(b.as_mut_ptr(), xs.as_ptr(), g, xs.len());
                }
                for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                    assert_eq!(p.to_bits(), q.to_bits(), "{what} gate={gate} x={}", xs[i]);
                }
                for n in 0..=40 {
                    let mut c = xs[..n].to_vec();
                    let mut d = vec![7f32; n + 1];
                    // SAFETY: as above; `c` in place, `d` has n + 1 slots
                    // (the last must stay untouched).
                    unsafe {
                        wide(c.as_mut_ptr(), c.as_ptr(), g, n);
                        wide(d.as_mut_ptr(), xs.as_ptr(), g, n);
                    }
                    for i in 0..n {
                        assert_eq!(c[i].to_bits(), b[i].to_bits(), "{what} in place n={n}");
                        assert_eq!(d[i].to_bits(), b[i].to_bits(), "{what} n={n}");
                    }
                    assert_eq!(d[n], 7.0, "{what} n={n}: wrote past the end");
                }
            }
        }
    }
}
