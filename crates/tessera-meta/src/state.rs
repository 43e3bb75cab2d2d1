//! Split states: how one logical tensor is held by the devices of a meta
//! device (ggml-backend-meta's `split_state`).
//!
//! - [`SplitState::Mirrored`]: every device holds the whole tensor.
//! - [`SplitState::Split`]: the tensor is cut along one axis; device `j`
//!   holds `sizes[j]` consecutive indices of that axis (possibly none),
//!   stored compact (a contiguous tensor of its own extents).
//! - [`SplitState::Partial`]: every device holds a whole tensor and the
//!   value is their sum (the result of a product whose contraction
//!   dimension was split); an all-reduce makes it mirrored.
//!
//! The byte mapping between a whole contiguous tensor and the devices'
//! pieces ([`Split::runs`]) is what host reads and writes, gathers and
//! scatters use.

use tessera::{Error, Layout, MAX_DIMS, Result};

/// A cut of one axis over the devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    /// The axis cut (0..4).
    pub axis: usize,
    /// Indices of that axis each device holds, in device order; they add
    /// up to the axis' extent.
    pub sizes: Vec<usize>,
}

/// How a tensor is held by the devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SplitState {
    /// Every device holds the whole tensor.
    Mirrored,
    /// Cut along one axis.
    Split(Split),
    /// Every device holds a whole tensor; the value is their sum.
    Partial,
}

impl Split {
    /// A split of `axis` into `sizes`, checked against `layout`: the sizes
    /// add up to the extent and, along dimension 0 of a block type, are
    /// whole blocks.
    pub fn new(layout: &Layout, axis: usize, sizes: Vec<usize>) -> Result<Split> {
        if axis >= MAX_DIMS {
            return Err(Error::InvalidLayout(format!("split axis {axis}")));
        }
        let total = sizes
            .iter()
            .try_fold(0usize, |a, &s| a.checked_add(s))
            .ok_or_else(|| Error::Overflow("split sizes".into()))?;
        if total != layout.ne[axis] {
            return Err(Error::InvalidLayout(format!(
                "split sizes {sizes:?} add up to {total}, but axis {axis} of {layout} has {}",
                layout.ne[axis]
            )));
        }
        let bs = layout.dtype.block_size();
        if axis == 0 && sizes.iter().any(|s| s % bs != 0) {
            return Err(Error::InvalidLayout(format!(
                "split sizes {sizes:?} of axis 0 of {layout} are not whole blocks of {bs}"
            )));
        }
        Ok(Split { axis, sizes })
    }

    /// First index of each device's piece.
    pub fn starts(&self) -> Vec<usize> {
        let mut acc = 0;
        self.sizes
            .iter()
            .map(|s| {
                let start = acc;
                acc += s;
                start
            })
            .collect()
    }

    /// Device `j`'s piece of `layout`: contiguous, with its own extent
    /// along the axis; `None` when the piece is empty.
    pub fn piece_layout(&self, layout: &Layout, j: usize) -> Result<Option<Layout>> {
        let size = self.sizes.get(j).copied().unwrap_or(0);
        if size == 0 || layout.nelements() == 0 {
            return Ok(None);
        }
        let mut ne = layout.ne;
        ne[self.axis] = size;
        Layout::contiguous4(layout.dtype, ne).map(Some)
    }

    /// Bytes of one index along the axis (for axis 0: of one block) and
    /// the sizes and starts in those units, for a contiguous `layout`.
    fn units(&self, layout: &Layout) -> (usize, Vec<usize>, Vec<usize>) {
        let bs = if self.axis == 0 {
            layout.dtype.block_size()
        } else {
            1
        };
        let unit = layout.nb[self.axis];
        let sizes = self.sizes.iter().map(|s| s / bs).collect();
        let starts = self.starts().iter().map(|s| s / bs).collect();
        (unit, sizes, starts)
    }

    /// The bytes of a contiguous whole tensor of `layout` that device
    /// pieces hold, as strided runs: for device `j`, `rows` runs of
    /// `piece` bytes, the first at byte `whole_start` of the whole tensor
    /// and `whole_stride` apart; in the piece they are packed (`piece`
    /// apart from 0).
    pub fn runs(&self, layout: &Layout) -> Result<Vec<Runs>> {
        if !layout.is_contiguous() {
            return Err(Error::InvalidLayout(format!(
                "a split tensor must be contiguous, {layout} is not"
            )));
        }
        let (unit, sizes, starts) = self.units(layout);
        let n_units = if self.axis == 0 {
            layout.ne[0] / layout.dtype.block_size()
        } else {
            layout.ne[self.axis]
        };
        let whole_stride = unit
            .checked_mul(n_units)
            .ok_or_else(|| Error::Overflow("split row".into()))?;
        let rows = layout
            .checked_nbytes()?
            .checked_div(whole_stride)
            .unwrap_or(0);
        Ok(sizes
            .iter()
            .zip(&starts)
            .map(|(&s, &st)| Runs {
                rows,
                piece: s * unit,
                whole_start: st * unit,
                whole_stride,
            })
            .collect())
    }
}

/// Where one device's piece lies in the bytes of the whole tensor (see
/// [`Split::runs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    /// Number of runs.
    pub rows: usize,
    /// Bytes of each run.
    pub piece: usize,
    /// Byte of the whole tensor where the first run starts.
    pub whole_start: usize,
    /// Bytes between runs in the whole tensor.
    pub whole_stride: usize,
}

impl Runs {
    /// Bytes of the piece.
    pub fn piece_bytes(&self) -> usize {
        self.rows * self.piece
    }

    /// The parts of the byte range `lo..hi` of the whole tensor that this
    /// piece holds, as `(whole offset, piece offset, length)`.
    pub fn intersect(&self, lo: usize, hi: usize) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        if self.piece == 0 || self.whole_stride == 0 || lo >= hi {
            return out;
        }
        let first = lo / self.whole_stride;
        let last = (hi - 1) / self.whole_stride;
        for r in first..=last.min(self.rows.saturating_sub(1)) {
            let a = r * self.whole_stride + self.whole_start;
            let b = a + self.piece;
            let (s, e) = (a.max(lo), b.min(hi));
            if s < e {
                out.push((s, r * self.piece + (s - a), e - s));
            }
        }
        out
    }
}

/// `n_units` indivisible units shared out over devices in proportion to
/// `ratios` (largest remainders first), with the leftover units handed
/// out starting at device `rotate % n` so that no device always gets them.
/// A ratio of 0 gives a device nothing.
pub fn share(n_units: usize, ratios: &[f64], rotate: usize) -> Result<Vec<usize>> {
    let n = ratios.len();
    if n == 0 {
        return Err(Error::InvalidLayout("a split over no devices".into()));
    }
    if ratios.iter().any(|r| !r.is_finite() || *r < 0.0) {
        return Err(Error::InvalidLayout(format!(
            "split ratios {ratios:?} must be finite and not negative"
        )));
    }
    let total: f64 = ratios.iter().sum();
    if total <= 0.0 {
        return Err(Error::InvalidLayout(format!(
            "split ratios {ratios:?} give every device nothing"
        )));
    }
    let exact: Vec<f64> = ratios.iter().map(|r| r / total * n_units as f64).collect();
    let mut sizes: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut left = n_units.saturating_sub(sizes.iter().sum());
    // Hand the leftovers to devices with a share, by rotation.
    let mut k = 0;
    while left > 0 && k < 4 * n {
        let j = (rotate + k) % n;
        if ratios[j] > 0.0 {
            sizes[j] += 1;
            left -= 1;
        }
        k += 1;
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera::DType;

    #[test]
    fn shares_add_up_and_rotate() {
        let a = share(10, &[1.0, 1.0, 1.0], 0).unwrap();
        let b = share(10, &[1.0, 1.0, 1.0], 1).unwrap();
        assert_eq!(a.iter().sum::<usize>(), 10);
        assert_eq!(a, vec![4, 3, 3]);
        assert_eq!(b, vec![3, 4, 3]);
        assert_eq!(share(4, &[0.0, 1.0], 0).unwrap(), vec![0, 4]);
        assert!(share(4, &[0.0, 0.0], 0).is_err());
        assert!(share(4, &[f64::NAN, 1.0], 0).is_err());
    }

    #[test]
    fn runs_cover_the_whole_tensor_once() {
        let l = Layout::contiguous(DType::F32, &[6, 3, 2]).unwrap();
        for axis in 0..3 {
            let n = l.ne[axis];
            let s = Split::new(&l, axis, vec![n / 2, 0, n - n / 2]).unwrap();
            let mut seen = vec![0u8; l.nbytes()];
            for r in s.runs(&l).unwrap() {
                for (w, _, len) in r.intersect(0, l.nbytes()) {
                    for b in &mut seen[w..w + len] {
                        *b += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "axis {axis}");
        }
    }

    #[test]
    fn quantized_axis_zero_takes_whole_blocks() {
        let l = Layout::contiguous(DType::Q8_0, &[64, 2]).unwrap();
        assert!(Split::new(&l, 0, vec![16, 48]).is_err());
        let s = Split::new(&l, 0, vec![32, 32]).unwrap();
        let r = s.runs(&l).unwrap();
        assert_eq!(r[1].whole_start, 34);
        assert_eq!(r[1].piece, 34);
        assert_eq!(r[1].rows, 2);
    }
}
