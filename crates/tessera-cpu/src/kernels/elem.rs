//! Element types and row indexing as the kernels see them.
//!
//! Kernels compute in f32 whatever the storage type is (as ggml does), so the
//! float storage types share one small trait, [`Float`], and each kernel is a
//! generic function monomorphised per type combination by `with_float!`.
//! Narrowing uses `tessera::quant`'s ggml-exact conversions: F16 rounds to
//! nearest even with NaNs made the canonical `0x7E00` (ggml's
//! `GGML_FP32_TO_FP16`), BF16 is `ggml_compute_fp32_to_bf16`.
//!
//! The executor guarantees every tensor pointer and every stride of a
//! dimension with more than one element is a multiple of [`elem_align`], so
//! kernels may read and write elements through typed, aligned pointers.

use half::{bf16, f16};
use tessera::{DType, quant};

/// A float storage type: F32, F16 or BF16.
pub trait Float: Copy + Send + Sync + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// Widen to f32 (exact).
    fn to_f32(self) -> f32;
    /// Narrow from f32 (rounding as ggml).
    fn from_f32(v: f32) -> Self;
}

impl Float for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Float for f16 {
    const DTYPE: DType = DType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        quant::f32_to_f16(v)
    }
}

impl Float for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_bits(quant::f32_to_bf16(v))
    }
}

/// Run `$body` with the type alias `$t` bound to the Rust type of the float
/// dtype `$dt`, or evaluate `$other` for any other dtype.
macro_rules! with_float {
    ($dt:expr, $t:ident => $body:expr, _ => $other:expr) => {
        match $dt {
            tessera::DType::F32 => {
                type $t = f32;
                $body
            }
            tessera::DType::F16 => {
                type $t = half::f16;
                $body
            }
            tessera::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use with_float;

/// Required alignment of a tensor's pointer and strides of `dtype`: the
/// alignment of its element (or block) type.
pub const fn elem_align(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::I32 => 4,
        DType::I64 => 8,
        DType::F16 | DType::BF16 => 2,
        // Blocks start with f16 scales; Q8_K with an f32 scale.
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::Q8_1 => 2,
        DType::Q2K
        | DType::Q3K
        | DType::Q4K
        | DType::Q5K
        | DType::Q6K
        | DType::IQ4NL
        | DType::IQ4XS => 2,
        DType::Q8K => 4,
    }
}

/// Row `ir` (in `0..ne1*ne2*ne3`) as its indices `(i1, i2, i3)`.
#[inline(always)]
pub fn unravel_row(ir: usize, ne: &[usize; 4]) -> (usize, usize, usize) {
    let i1 = ir % ne[1];
    let rest = ir / ne[1];
    (i1, rest % ne[2], rest / ne[2])
}

/// The rows `range` (row numbers in `0..ne1*ne2*ne3`) of a tensor with
/// extents `ne`, as `(i1, i2, i3)` in order. Only the first row is found by
/// division; the others by counting, which matters for small rows.
#[inline]
pub fn rows(range: std::ops::Range<usize>, ne: &[usize; 4]) -> Rows {
    let start = if range.start == 0 || range.is_empty() {
        (0, 0, 0)
    } else {
        unravel_row(range.start, ne)
    };
    Rows {
        i: [start.0, start.1, start.2],
        n: [ne[1], ne[2]],
        left: range.len(),
    }
}

/// Iterator of [`rows`].
#[derive(Clone, Debug)]
pub struct Rows {
    i: [usize; 3],
    n: [usize; 2],
    left: usize,
}

impl Iterator for Rows {
    type Item = (usize, usize, usize);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let out = (self.i[0], self.i[1], self.i[2]);
        self.i[0] += 1;
        if self.i[0] == self.n[0] {
            self.i[0] = 0;
            self.i[1] += 1;
            if self.i[1] == self.n[1] {
                self.i[1] = 0;
                self.i[2] += 1;
            }
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// `i % n` for a broadcast index, without a division in the common cases
/// (`n == 1`: broadcast; `i < n`: no repetition). `n` must not be 0.
#[inline(always)]
pub fn wrap(i: usize, n: usize) -> usize {
    if n == 1 {
        0
    } else if i < n {
        i
    } else {
        i % n
    }
}

/// This thread's part of `n` items split into `nth` contiguous ranges whose
/// starts are multiples of `quantum` items (choose 64 bytes' worth, so two
/// threads never write the same cache line of a 64-byte aligned output).
/// Threads past the end get empty ranges.
#[inline]
pub fn split_aligned(ith: usize, nth: usize, n: usize, quantum: usize) -> std::ops::Range<usize> {
    let q = quantum.max(1);
    let units = n.div_ceil(q);
    let per = units.div_ceil(nth.max(1));
    let start = (per * ith * q).min(n);
    let end = (start + per * q).min(n);
    start..end
}

/// Load element `i` of a row of `T` with byte stride `nb0`.
///
/// # Safety
/// `row + i * nb0` must point to a valid, aligned `T`.
#[inline(always)]
pub unsafe fn load<T: Float>(row: *const u8, i: usize, nb0: usize) -> f32 {
    // SAFETY: forwarded precondition.
    unsafe { (row.add(i * nb0) as *const T).read().to_f32() }
}

/// Store `v` as element `i` of a row of `T` with byte stride `nb0`.
///
/// # Safety
/// `row + i * nb0` must point to a valid, aligned, writable `T`.
#[inline(always)]
pub unsafe fn store<T: Float>(row: *mut u8, i: usize, nb0: usize, v: f32) {
    // SAFETY: forwarded precondition.
    unsafe { (row.add(i * nb0) as *mut T).write(T::from_f32(v)) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// ggml's reference f32 -> bf16 conversion, written out from its
    /// documented rule (round to nearest even, quiet NaNs).
    fn ggml_bf16(x: f32) -> u16 {
        let u = x.to_bits();
        if u & 0x7fff_ffff > 0x7f80_0000 {
            return ((u >> 16) | 64) as u16;
        }
        ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
    }

    #[test]
    fn bf16_rounding_matches_ggml() {
        let mut x = 0x0123_4567u32;
        for _ in 0..100_000 {
            // xorshift over all bit patterns, NaNs and infinities included
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            assert_eq!(
                <bf16 as Float>::from_f32(f).to_bits(),
                ggml_bf16(f),
                "bits {x:#x}"
            );
            // half's own rounding agrees too, NaNs included.
            assert_eq!(bf16::from_f32(f).to_bits(), ggml_bf16(f), "bits {x:#x}");
        }
        for f in [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::MAX,
            1.0 + f32::EPSILON,
            3.0e38,
        ] {
            assert_eq!(<bf16 as Float>::from_f32(f).to_bits(), ggml_bf16(f));
        }
        // ggml makes every f16 NaN the canonical quiet NaN, keeping the sign.
        assert_eq!(
            <f16 as Float>::from_f32(f32::from_bits(0xffc0_0001)).to_bits(),
            0xfe00
        );
        assert_eq!(<f16 as Float>::from_f32(65520.0).to_bits(), 0x7c00);
    }

    #[test]
    fn row_iterator_counts_like_unravel() {
        let ne = [5, 3, 2, 4];
        for start in 0..24 {
            for end in start..=24 {
                let want: Vec<_> = (start..end).map(|ir| unravel_row(ir, &ne)).collect();
                let got: Vec<_> = rows(start..end, &ne).collect();
                assert_eq!(got, want, "{start}..{end}");
            }
        }
        assert_eq!(wrap(7, 3), 1);
        assert_eq!(wrap(2, 3), 2);
        assert_eq!(wrap(9, 1), 0);
    }

    #[test]
    fn aligned_split_covers_everything_once() {
        for n in [0usize, 1, 15, 16, 17, 100, 4096, 4097] {
            for nth in 1..5 {
                let mut next = 0;
                for ith in 0..nth {
                    let r = split_aligned(ith, nth, n, 16);
                    assert!(r.is_empty() || r.start == next, "n {n} nth {nth} ith {ith}");
                    assert!(r.start.is_multiple_of(16) || r.is_empty());
                    next = next.max(r.end);
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn unravel_walks_rows_in_order() {
        let ne = [5, 3, 2, 4];
        let mut ir = 0;
        for i3 in 0..4 {
            for i2 in 0..2 {
                for i1 in 0..3 {
                    assert_eq!(unravel_row(ir, &ne), (i1, i2, i3));
                    ir += 1;
                }
            }
        }
    }
}
