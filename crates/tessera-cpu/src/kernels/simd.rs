//! Contiguous f32 row primitives shared by the element-wise, normalisation,
//! soft-max, activation, copy and row-gather kernels, each with a portable
//! version and an AVX2/FMA/F16C one (`simd_avx2`, `exp_avx2`, `cvt_avx2`;
//! ROPE's rotation lives in `rope_avx2`); SILU, GELU and the binary ops
//! also on sixteen lanes with AVX-512 (`exp_avx512`, `simd_avx512`, bit
//! for bit the AVX2 results).
//!
//! Why a dispatcher: the kernels pick the instruction set per node
//! (`NodeCtx::isa`), and the AVX2 functions are `#[target_feature]` code that
//! is only sound on a CPU that has those features. [`Simd::new`] checks the
//! CPU once per node and every method routes to the AVX2 body only when the
//! check passed, so soundness rests on this one place; the methods stay
//! `unsafe` only for their pointer preconditions.
//!
//! Pointer rules shared by every method: `n` elements must be valid at each
//! pointer (reads for inputs, writes for outputs); an output may be *exactly*
//! an input (in place: each element is read before it is written, chunk by
//! chunk) but must not overlap one partially. No alignment beyond the
//! element's own is needed.
//!
//! Results: the binary ops, scaling, the f16 conversions and the Q8_0/Q4_0
//! (de)quantizers are bit-identical across the paths (same IEEE
//! operations per element; the quantizers byte-identical to
//! `tessera::quant`). Sums accumulate in f64 in a different order
//! (differences far below f32 resolution). The AVX2 `exp` (SOFT_MAX, SILU,
//! SWIGLU) is a polynomial within 2 ulp of the correctly rounded value (1
//! ulp measured, see `exp_avx2`); the portable one is the C library's.

use tessera::{DType, Result};

use crate::isa::Isa;

/// The row primitives for one node: AVX2 when the node asked for it and the
/// CPU has it, portable otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Simd {
    avx2: bool,
    /// SILU, GELU and the binary ops on sixteen lanes (`exp_avx512`,
    /// `simd_avx512`, bit for bit the AVX2 results).
    avx512: bool,
}

/// Rows to pull into the cache while a primitive streams through the
/// current one (the next input row and the next output row): one 64-byte
/// line of each per 64 bytes processed, up to `bytes`. Row-wise kernels
/// otherwise alternate a memory-bound pass with compute-bound ones; this
/// overlaps the next row's memory traffic with this row's compute. A hint
/// only: prefetching never faults, so any address (or null) is fine.
#[derive(Clone, Copy, Debug)]
pub struct Prefetch {
    /// Start of each row to prefetch (null: none).
    pub rows: [*const u8; 2],
    /// Bytes of each row.
    pub bytes: usize,
}

impl Prefetch {
    /// Prefetch nothing.
    pub const NONE: Prefetch = Prefetch {
        rows: [std::ptr::null(), std::ptr::null()],
        bytes: 0,
    };
}

/// An element-wise binary f32 operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinKind {
    /// `x + y`
    Add,
    /// `x * y`
    Mul,
    /// `x / y`
    Div,
    /// `x - y`
    Sub,
}

impl BinKind {
    #[inline(always)]
    fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            BinKind::Add => a + b,
            BinKind::Mul => a * b,
            BinKind::Div => a / b,
            BinKind::Sub => a - b,
        }
    }

    /// The SIMD bodies' const parameter for the op: 0 add, 1 mul, 2 div,
    /// 3 sub.
    #[cfg(target_arch = "x86_64")]
    pub(crate) const fn code(self) -> u8 {
        match self {
            BinKind::Add => 0,
            BinKind::Mul => 1,
            BinKind::Div => 2,
            BinKind::Sub => 3,
        }
    }
}

/// Dispatch to the AVX2 body when `$s.avx2` (x86-64 only), else fall through.
macro_rules! avx2_or {
    ($s:expr, $call:expr) => {
        #[cfg(target_arch = "x86_64")]
        {
            if $s.avx2 {
                // SAFETY: `avx2` is true only when `Simd::new` found AVX2, FMA
                // and F16C on this CPU (the features the body is compiled
                // for); the pointer preconditions are the caller's, forwarded.
                #[allow(unused_unsafe)]
                return unsafe { $call };
            }
        }
    };
}

/// Dispatch to the AVX-512 body when `$s.avx512` (x86-64 only), else fall
/// through.
macro_rules! avx512_or {
    ($s:expr, $call:expr) => {
        #[cfg(target_arch = "x86_64")]
        {
            if $s.avx512 {
                // The body needs AVX-512F: `avx512` is true only when
                // `Simd::new` found the AVX-512 family on this CPU.
                #[allow(unused_unsafe)]
                // SAFETY: the feature checked above; pointers: the caller's.
                return unsafe { $call };
            }
        }
    };
}

impl Simd {
    /// The primitives for `isa` (portable if the CPU lacks it).
    #[inline]
    pub fn new(isa: Isa) -> Self {
        Simd {
            avx2: isa.has_avx2(),
            avx512: isa.has_avx512(),
        }
    }

    /// The portable primitives.
    #[cfg(test)]
    pub const fn portable() -> Self {
        Simd {
            avx2: false,
            avx512: false,
        }
    }

    /// Whether the AVX2 bodies are used.
    #[inline]
    pub fn is_avx2(self) -> bool {
        self.avx2
    }

    /// `z[i] = x[i] op y[i]`.
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn binary(self, op: BinKind, z: *mut f32, x: *const f32, y: *const f32, n: usize) {
        avx512_or!(self, super::simd_avx512::binary(op, z, x, y, n));
        avx2_or!(self, super::simd_avx2::binary(op, z, x, y, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe { *z.add(i) = op.apply(*x.add(i), *y.add(i)) };
        }
    }

    /// `z[i] = x[i] op y` (a broadcast scalar).
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn binary_scalar(self, op: BinKind, z: *mut f32, x: *const f32, y: f32, n: usize) {
        avx512_or!(self, super::simd_avx512::binary_scalar(op, z, x, y, n));
        avx2_or!(self, super::simd_avx2::binary_scalar(op, z, x, y, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe { *z.add(i) = op.apply(*x.add(i), y) };
        }
    }

    /// `z[i] = x[i] * s + b` (SCALE; `b == 0` multiplies only, like ggml).
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn scale_bias(self, z: *mut f32, x: *const f32, s: f32, b: f32, n: usize) {
        avx2_or!(self, super::simd_avx2::scale_bias(z, x, s, b, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe {
                *z.add(i) = if b == 0.0 {
                    *x.add(i) * s
                } else {
                    *x.add(i) * s + b
                }
            };
        }
    }

    /// `sum x[i]` in f64.
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn sum_f64(self, x: *const f32, n: usize) -> f64 {
        avx2_or!(self, super::simd_avx2::sum_f64(x, n));
        // SAFETY: `n` readable elements (module docs).
        unsafe { (0..n).map(|i| f64::from(*x.add(i))).sum() }
    }

    /// `sum (x[i] - m)^2` in f64, the difference rounded to f32 first (as
    /// ggml's NORM); `m = 0` gives the sum of squares.
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn sum_sq_f64(self, x: *const f32, m: f32, n: usize) -> f64 {
        avx2_or!(self, super::simd_avx2::sum_sq_f64(x, m, n));
        let mut s = 0.0f64;
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            let v = f64::from(unsafe { *x.add(i) } - m);
            s += v * v;
        }
        s
    }

    /// `z[i] = (x[i] - m) * s`; `m = 0` scales only. Prefetches `pf`.
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn sub_scale(
        self,
        z: *mut f32,
        x: *const f32,
        m: f32,
        s: f32,
        n: usize,
        pf: Prefetch,
    ) {
        avx2_or!(self, super::simd_avx2::sub_scale(z, x, m, s, n, pf));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe { *z.add(i) = (*x.add(i) - m) * s };
        }
    }

    /// SOFT_MAX's first pass: `y[i] = x[i] * scale + slope * mask[i]` (mask
    /// F32 or F16 with `mask_f16`, or none), returning ggml's running
    /// `max > w ? max : w` of the `y[i]` (NaN-tolerant: a NaN anywhere makes
    /// the whole row NaN later, whatever this returns).
    ///
    /// # Safety
    /// See the module docs; `mask` (if not null) holds `n` elements of its type.
    #[inline]
    pub unsafe fn softmax_scale_max(
        self,
        y: *mut f32,
        x: *const f32,
        scale: f32,
        mask: Option<(*const u8, bool, f32)>,
        n: usize,
    ) -> f32 {
        avx2_or!(
            self,
            super::exp_avx2::softmax_scale_max(y, x, scale, mask, n)
        );
        let mut max = f32::NEG_INFINITY;
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            let mut w = unsafe { *x.add(i) } * scale;
            if let Some((m, f16, slope)) = mask {
                // SAFETY: `i < n` elements of the mask's type.
                let mv = unsafe {
                    if f16 {
                        (m as *const half::f16).add(i).read().to_f32()
                    } else {
                        (m as *const f32).add(i).read()
                    }
                };
                w += slope * mv;
            }
            // SAFETY: `i < n`.
            unsafe { *y.add(i) = w };
            max = if max > w { max } else { w };
        }
        max
    }

    /// `y[i] = exp(y[i] - max)`, returning the sum of the new values in f64.
    /// Prefetches `pf`.
    ///
    /// # Safety
    /// See the module docs.
    #[inline]
    pub unsafe fn exp_sub_sum(self, y: *mut f32, max: f32, n: usize, pf: Prefetch) -> f64 {
        avx2_or!(self, super::exp_avx2::exp_sub_sum(y, max, n, pf));
        let mut sum = 0.0f64;
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe {
                let e = (*y.add(i) - max).exp();
                sum += f64::from(e);
                *y.add(i) = e;
            }
        }
        sum
    }

    /// `y[i] = x[i] / (1 + exp(-x[i]))` (SILU), times `g[i]` when `g` is
    /// given (SWIGLU).
    ///
    /// # Safety
    /// See the module docs; `g` (if given) holds `n` elements.
    #[inline]
    pub unsafe fn silu(self, y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
        avx512_or!(self, super::exp_avx512::silu(y, x, g, n));
        avx2_or!(self, super::exp_avx2::silu(y, x, g, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe {
                let v = super::math::silu(*x.add(i));
                *y.add(i) = match g {
                    Some(g) => v * *g.add(i),
                    None => v,
                };
            }
        }
    }

    /// `y[i] = gelu(x[i])` (tanh approximation), times `g[i]` when given.
    ///
    /// # Safety
    /// See the module docs; `g` (if given) holds `n` elements.
    #[inline]
    pub unsafe fn gelu(self, y: *mut f32, x: *const f32, g: Option<*const f32>, n: usize) {
        avx512_or!(self, super::exp_avx512::gelu(y, x, g, n));
        avx2_or!(self, super::exp_avx2::gelu(y, x, g, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe {
                let v = super::math::gelu(*x.add(i));
                *y.add(i) = match g {
                    Some(g) => v * *g.add(i),
                    None => v,
                };
            }
        }
    }

    /// `y[i] = f16(x[i])`, rounding as [`tessera::quant::f32_to_f16`].
    ///
    /// # Safety
    /// See the module docs (`y` holds `n` f16 values).
    #[inline]
    pub unsafe fn f32_to_f16(self, y: *mut half::f16, x: *const f32, n: usize) {
        avx2_or!(self, super::cvt_avx2::f32_to_f16(y, x, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe { *y.add(i) = tessera::quant::f32_to_f16(*x.add(i)) };
        }
    }

    /// `y[i] = f32(x[i])` (exact).
    ///
    /// # Safety
    /// See the module docs (`x` holds `n` f16 values).
    #[inline]
    pub unsafe fn f16_to_f32(self, y: *mut f32, x: *const half::f16, n: usize) {
        avx2_or!(self, super::cvt_avx2::f16_to_f32(y, x, n));
        for i in 0..n {
            // SAFETY: `i < n` (module docs).
            unsafe { *y.add(i) = (*x.add(i)).to_f32() };
        }
    }

    /// Convert an f32 row to `dtype` (a float or quantized type), bytes
    /// identical to [`tessera::quant::from_f32`]; Q8_0, Q4_0 and F16 have
    /// AVX2 bodies.
    #[inline]
    pub fn quantize_row(self, dtype: DType, x: &[f32], out: &mut [u8]) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        {
            if self.avx2 {
                match dtype {
                    // SAFETY: `avx2` means the CPU has the features (see `new`).
                    DType::Q8_0 => return unsafe { super::cvt_avx2::quantize_q8_0(x, out) },
                    // SAFETY: as above.
                    DType::Q4_0 => return unsafe { super::cvt_avx2::quantize_q4_0(x, out) },
                    DType::F16
                        if out.len() == 2 * x.len()
                            && out.as_ptr().cast::<half::f16>().is_aligned() =>
                    {
                        // SAFETY: as above; `out` holds `x.len()` aligned
                        // f16 and does not overlap `x` (a `&mut` borrow).
                        unsafe {
                            super::cvt_avx2::f32_to_f16(
                                out.as_mut_ptr().cast(),
                                x.as_ptr(),
                                x.len(),
                            )
                        };
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        tessera::quant::from_f32(dtype, x, out)
    }

    /// Convert a row of `dtype` to f32, identical to
    /// [`tessera::quant::to_f32`]; Q8_0, Q4_0 and F16 have AVX2 bodies.
    #[inline]
    pub fn dequantize_row(self, dtype: DType, q: &[u8], y: &mut [f32]) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        {
            if self.avx2 {
                match dtype {
                    // SAFETY: `avx2` means the CPU has the features (see `new`).
                    DType::Q8_0 => return unsafe { super::cvt_avx2::dequantize_q8_0(q, y) },
                    // SAFETY: as above.
                    DType::Q4_0 => return unsafe { super::cvt_avx2::dequantize_q4_0(q, y) },
                    DType::F16
                        if q.len() == 2 * y.len()
                            && q.as_ptr().cast::<half::f16>().is_aligned() =>
                    {
                        // SAFETY: as above; `q` holds `y.len()` aligned f16
                        // and does not overlap `y` (a `&mut` borrow).
                        unsafe {
                            super::cvt_avx2::f16_to_f32(y.as_mut_ptr(), q.as_ptr().cast(), y.len())
                        };
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        tessera::quant::to_f32(dtype, q, y)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn portable_is_never_avx2() {
        assert!(!Simd::portable().is_avx2());
        assert!(!Simd::new(Isa::Scalar).is_avx2());
        assert_eq!(Simd::new(Isa::Avx2).is_avx2(), Isa::Avx2.available());
    }
}
