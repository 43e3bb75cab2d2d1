//! Tensor layouts: element type, extents and byte strides.
//!
//! A [`Layout`] is ggml's `type`, `ne[4]` and `nb[4]` as one value: `ne[i]`
//! is the number of elements along dimension `i` (dimension 0 is the
//! fastest-moving one, a row), `nb[i]` the byte stride between consecutive
//! indices along it. For quantized types `nb[0]` is the block size in bytes
//! and rows are whole blocks. Every size is computed with overflow checks,
//! because shapes can come from files and peers.

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Maximum number of dimensions (as in ggml).
pub const MAX_DIMS: usize = 4;

/// Element type, extents and byte strides of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Elements per dimension; dimension 0 is the row.
    pub ne: [usize; MAX_DIMS],
    /// Byte stride per dimension.
    pub nb: [usize; MAX_DIMS],
}

impl Layout {
    /// A contiguous layout of `dtype` with extents `ne` (missing trailing
    /// dimensions are 1). Errors if a row is not whole blocks, if there are
    /// more than four dimensions, or if the size overflows.
    pub fn contiguous(dtype: DType, ne: &[usize]) -> Result<Self> {
        if ne.len() > MAX_DIMS {
            return Err(Error::InvalidLayout(format!(
                "{} dimensions given, at most {MAX_DIMS} are supported",
                ne.len()
            )));
        }
        let mut full = [1usize; MAX_DIMS];
        full[..ne.len()].copy_from_slice(ne);
        Self::contiguous4(dtype, full)
    }

    /// [`Layout::contiguous`] with all four extents given.
    pub fn contiguous4(dtype: DType, ne: [usize; MAX_DIMS]) -> Result<Self> {
        let row = dtype.row_size(ne[0])?;
        let mut nb = [0usize; MAX_DIMS];
        nb[0] = dtype.type_size();
        nb[1] = row;
        for i in 2..MAX_DIMS {
            nb[i] = nb[i - 1]
                .checked_mul(ne[i - 1])
                .ok_or_else(|| overflow(dtype, &ne))?;
        }
        let layout = Layout { dtype, ne, nb };
        layout.checked_nbytes()?;
        Ok(layout)
    }

    /// Total number of elements (0 if any extent is 0); saturates at
    /// `usize::MAX` when the product overflows, which broadcast layouts
    /// (zero strides) can reach. [`Layout::checked_nelements`] says so.
    pub fn nelements(&self) -> usize {
        self.checked_nelements().unwrap_or(usize::MAX)
    }

    /// Checked element count: 0 if any extent is 0, else the product or an
    /// [`Error::Overflow`].
    pub fn checked_nelements(&self) -> Result<usize> {
        product(&self.ne).ok_or_else(|| overflow(self.dtype, &self.ne))
    }

    /// Number of rows (`ne1 * ne2 * ne3`, 0 if one is 0), saturating at
    /// `usize::MAX` like [`Layout::nelements`].
    pub fn nrows(&self) -> usize {
        product(&self.ne[1..]).unwrap_or(usize::MAX)
    }

    /// Bytes of one row of `ne0` elements (saturating at `usize::MAX` for a
    /// row longer than memory).
    pub fn row_bytes(&self) -> usize {
        (self.ne[0] / self.dtype.block_size()).saturating_mul(self.dtype.type_size())
    }

    /// Bytes spanned by the tensor, from its first byte to one past its last
    /// (0 if any extent is 0): ggml's `ggml_nbytes` for the layouts ggml
    /// makes. Assumes a layout that passed [`Layout::checked_nbytes`], as
    /// every constructor ensures.
    pub fn nbytes(&self) -> usize {
        self.checked_nbytes().unwrap_or(usize::MAX)
    }

    /// [`Layout::nbytes`] with overflow and block checks. The last block of
    /// a row of a quantized type ends `type_size` bytes after its start,
    /// whatever `nb[0]` says (a row of one block ignores `nb[0]`; ggml's
    /// `ne0 / block * nb0` would miss the block's bytes when `nb[0]` is
    /// smaller than a block).
    pub fn checked_nbytes(&self) -> Result<usize> {
        if self.ne.contains(&0) {
            return Ok(0);
        }
        let bs = self.dtype.block_size();
        if !self.ne[0].is_multiple_of(bs) {
            return Err(Error::BlockSize {
                dtype: self.dtype.name(),
                ne0: self.ne[0],
                block: bs,
            });
        }
        let ovf = || overflow(self.dtype, &self.ne);
        let mut bytes = if bs == 1 {
            self.dtype.type_size()
        } else {
            (self.ne[0] / bs - 1)
                .checked_mul(self.nb[0])
                .and_then(|b| b.checked_add(self.dtype.type_size()))
                .ok_or_else(ovf)?
        };
        let start = if bs == 1 { 0 } else { 1 };
        for i in start..MAX_DIMS {
            let span = (self.ne[i] - 1).checked_mul(self.nb[i]).ok_or_else(ovf)?;
            bytes = bytes.checked_add(span).ok_or_else(ovf)?;
        }
        Ok(bytes)
    }

    /// Dimensions `0..n` are laid out without gaps (ggml's `ggml_is_contiguous_n`
    /// generalised): true for `n = 4` means the whole tensor is contiguous.
    /// Extents of 1 may have any stride.
    pub fn is_contiguous_dims(&self, n: usize) -> bool {
        let mut next = self.dtype.type_size();
        if self.ne[0] != self.dtype.block_size() && self.nb[0] != next {
            return false;
        }
        next = next.saturating_mul(self.ne[0] / self.dtype.block_size());
        for i in 1..n.min(MAX_DIMS) {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next = next.saturating_mul(self.ne[i]);
            }
        }
        true
    }

    /// The whole tensor is contiguous in memory (ggml's `ggml_is_contiguous`).
    pub fn is_contiguous(&self) -> bool {
        self.is_contiguous_dims(MAX_DIMS)
    }

    /// Each row is contiguous (`nb0` is the element/block size); rows may be
    /// anywhere (ggml's `ggml_is_contiguous_rows`).
    pub fn is_contiguous_rows(&self) -> bool {
        self.ne[0] == self.dtype.block_size() || self.nb[0] == self.dtype.type_size()
    }

    /// Dimension 0 and 1 are swapped in memory (ggml's `ggml_is_transposed`).
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }

    /// Dimensions are permuted relative to the contiguous order.
    pub fn is_permuted(&self) -> bool {
        self.nb[0] > self.nb[1] || self.nb[1] > self.nb[2] || self.nb[2] > self.nb[3]
    }

    /// Same type, extents and strides (ggml's `ggml_are_same_layout`).
    pub fn same_layout(&self, other: &Layout) -> bool {
        self == other
    }

    /// Same extents (ggml's `ggml_are_same_shape`).
    pub fn same_shape(&self, other: &Layout) -> bool {
        self.ne == other.ne
    }

    /// `self` can be broadcast to `target` by repeating whole copies along
    /// each dimension (ggml's `ggml_can_repeat(self, target)`).
    pub fn can_repeat_to(&self, target: &Layout) -> bool {
        if self.ne.contains(&0) {
            return target.ne.contains(&0) || self.ne == target.ne;
        }
        (0..MAX_DIMS).all(|i| target.ne[i].is_multiple_of(self.ne[i]))
    }

    /// True if the layout has one row (ggml's `ggml_is_vector` relaxed to any ne0).
    pub fn is_matrix(&self) -> bool {
        self.ne[2] == 1 && self.ne[3] == 1
    }

    /// No two elements share a byte: with the dimensions sorted by stride,
    /// each stride is at least the span of all faster dimensions. A result
    /// written through a layout that is not self-disjoint (a broadcast view,
    /// interleaved strides) would race with itself.
    pub fn is_self_disjoint(&self) -> bool {
        if self.ne.contains(&0) || self.is_contiguous() {
            return true;
        }
        let bs = self.dtype.block_size();
        // (stride, extent) of the dimensions with more than one element.
        let mut dims = [(0usize, 0usize); MAX_DIMS];
        let mut k = 0;
        for i in 0..MAX_DIMS {
            let n = if i == 0 { self.ne[0] / bs } else { self.ne[i] };
            if n > 1 {
                dims[k] = (self.nb[i], n);
                k += 1;
            }
        }
        let dims = &mut dims[..k];
        dims.sort_unstable();
        let mut span = self.dtype.type_size();
        for &mut (nb, n) in dims {
            if nb < span {
                return false;
            }
            match (n - 1).checked_mul(nb).and_then(|x| x.checked_add(span)) {
                Some(s) => span = s,
                None => return false,
            }
        }
        true
    }

    /// Byte offset of element (i0, i1, i2, i3); `i0` must be a block start for
    /// quantized types.
    pub fn offset_of(&self, idx: [usize; MAX_DIMS]) -> usize {
        idx[0] / self.dtype.block_size() * self.nb[0]
            + idx[1] * self.nb[1]
            + idx[2] * self.nb[2]
            + idx[3] * self.nb[3]
    }

    /// Short human form, e.g. `f32[4096,512,1,1]`.
    pub fn describe(&self) -> String {
        format!(
            "{}[{},{},{},{}]",
            self.dtype.name(),
            self.ne[0],
            self.ne[1],
            self.ne[2],
            self.ne[3]
        )
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The product of `ne`: 0 if any is 0 (even when the others overflow),
/// `None` on overflow.
fn product(ne: &[usize]) -> Option<usize> {
    if ne.contains(&0) {
        return Some(0);
    }
    ne.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n))
}

fn overflow(dtype: DType, ne: &[usize; MAX_DIMS]) -> Error {
    Error::Overflow(format!(
        "{} tensor of extents {:?} is larger than the address space",
        dtype.name(),
        ne
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_and_sizes() {
        let l = Layout::contiguous(DType::F32, &[3, 4, 5]).unwrap();
        assert_eq!(l.ne, [3, 4, 5, 1]);
        assert_eq!(l.nb, [4, 12, 48, 240]);
        assert_eq!(l.nbytes(), 240);
        assert!(l.is_contiguous());
        let q = Layout::contiguous(DType::Q4_0, &[64, 2]).unwrap();
        assert_eq!(q.nb, [18, 36, 72, 72]);
        assert_eq!(q.nbytes(), 72);
    }

    #[test]
    fn nbytes_of_a_permuted_view_spans_the_memory() {
        let l = Layout::contiguous(DType::F32, &[3, 4]).unwrap();
        let t = Layout {
            ne: [4, 3, 1, 1],
            nb: [12, 4, 48, 48],
            ..l
        };
        assert_eq!(t.nbytes(), 48);
        assert!(t.is_transposed());
        assert!(!t.is_contiguous());
    }

    #[test]
    fn errors_instead_of_panics() {
        assert!(matches!(
            Layout::contiguous(DType::Q4K, &[255]),
            Err(Error::BlockSize { .. })
        ));
        assert!(matches!(
            Layout::contiguous(DType::F32, &[usize::MAX / 2, 4]),
            Err(Error::Overflow(_))
        ));
        assert!(Layout::contiguous(DType::F32, &[1, 1, 1, 1, 1]).is_err());
        assert_eq!(Layout::contiguous(DType::F32, &[0, 7]).unwrap().nbytes(), 0);
    }

    #[test]
    fn counts_of_huge_or_empty_layouts_never_overflow() {
        // Found by the bad-input suite: these panicked with overflow checks on.
        let empty = Layout::contiguous(DType::Q4K, &[0, 1 << 62, 32]).unwrap();
        assert_eq!((empty.nelements(), empty.nrows()), (0, usize::MAX));
        assert_eq!(empty.checked_nelements().unwrap(), 0);
        let bcast = Layout {
            dtype: DType::F32,
            ne: [usize::MAX, 1 << 40, 1 << 30, 3],
            nb: [4, 0, 0, 0],
        };
        assert_eq!(bcast.nelements(), usize::MAX);
        assert_eq!(bcast.nrows(), usize::MAX);
        assert_eq!(bcast.row_bytes(), usize::MAX);
        assert!(bcast.checked_nelements().is_err());
    }

    #[test]
    fn a_quantized_span_covers_its_last_block_whatever_nb0_says() {
        // Found by the bad-input suite: with nb0 < the block size, the span
        // stopped short of the last block and the CPU kernels wrote past
        // the tensor's memory.
        for nb0 in [0, 2, 17, 18, 40] {
            let l = Layout {
                dtype: DType::Q4_0,
                ne: [32, 3, 1, 1],
                nb: [nb0, 18, 54, 54],
            };
            assert_eq!(l.nbytes(), 2 * 18 + 18, "nb0 {nb0}");
        }
        let two_blocks = Layout {
            dtype: DType::Q8_0,
            ne: [64, 1, 1, 1],
            nb: [40, 80, 80, 80],
        };
        assert_eq!(two_blocks.nbytes(), 40 + 34);
        let c = Layout::contiguous(DType::Q6K, &[512, 3]).unwrap();
        assert_eq!(c.nbytes(), 6 * 210);
    }

    #[test]
    fn self_disjoint_layouts() {
        let c = Layout::contiguous(DType::F32, &[3, 4, 5]).unwrap();
        assert!(c.is_self_disjoint());
        let t = Layout {
            ne: [4, 3, 5, 1],
            nb: [12, 4, 48, 240],
            ..c
        };
        assert!(t.is_self_disjoint());
        let bcast = Layout {
            nb: [4, 0, 48, 240],
            ..c
        };
        assert!(!bcast.is_self_disjoint());
        let interleaved = Layout {
            nb: [4, 8, 48, 240],
            ..c
        };
        assert!(!interleaved.is_self_disjoint());
        let q = Layout::contiguous(DType::Q4_0, &[64, 3]).unwrap();
        assert!(q.is_self_disjoint());
    }

    #[test]
    fn repeat_rules() {
        let a = Layout::contiguous(DType::F32, &[8, 6, 2]).unwrap();
        let b = Layout::contiguous(DType::F32, &[8, 1, 2]).unwrap();
        let c = Layout::contiguous(DType::F32, &[4, 3]).unwrap();
        assert!(b.can_repeat_to(&a));
        assert!(c.can_repeat_to(&a));
        assert!(!a.can_repeat_to(&b));
    }
}
