//! Views of split tensors: which axis a RESHAPE, PERMUTE, TRANSPOSE or VIEW
//! of a split tensor is split along, and each device's extents, strides and
//! offset for its piece. A view that cuts across the pieces in a way no
//! per-device view can express answers `None` (the caller gathers first).

use tessera::{Layout, MAX_DIMS};

use crate::state::Split;

/// The split of `RESHAPE(src → out)` for a split `src` (both contiguous).
pub(crate) fn reshape(src: &Layout, split: &Split, out: &Layout) -> Option<Split> {
    let a = split.axis;
    let s = &src.ne;
    let o = &out.ne;
    let inner: usize = s[..a].iter().product();
    let outer: usize = s[a + 1..].iter().product();
    for b in 0..MAX_DIMS {
        let lo: usize = o[..b].iter().product();
        let hi: usize = o[b + 1..].iter().product();
        if hi != outer || o[b] == 0 {
            continue;
        }
        let sizes: Option<Vec<usize>> = if lo == inner && o[b] == s[a] {
            Some(split.sizes.clone())
        } else if lo < inner && lo > 0 && inner.is_multiple_of(lo) && o[b] == inner / lo * s[a] {
            let m = inner / lo;
            Some(split.sizes.iter().map(|x| x * m).collect())
        } else if lo > inner && inner > 0 && lo.is_multiple_of(inner) && o[b] * (lo / inner) == s[a]
        {
            let d = lo / inner;
            split
                .sizes
                .iter()
                .map(|x| x.is_multiple_of(d).then_some(x / d))
                .collect()
        } else {
            None
        };
        if let Some(sizes) = sizes {
            if b == 0 && sizes.iter().any(|x| x % out.dtype.block_size() != 0) {
                continue;
            }
            return Some(Split { axis: b, sizes });
        }
    }
    None
}

/// The split of a PERMUTE by `axes` (source dimension `i` becomes `axes[i]`).
pub(crate) fn permute(split: &Split, axes: [u8; MAX_DIMS]) -> Split {
    Split {
        axis: axes[split.axis] as usize,
        sizes: split.sizes.clone(),
    }
}

/// A VIEW of a split tensor, mapped onto the devices' pieces.
#[derive(Clone, Debug)]
pub(crate) struct ViewMap {
    /// The view's split.
    pub split: Split,
    /// Per view dimension: the step it makes in the source's coordinates.
    deltas: [[usize; MAX_DIMS]; MAX_DIMS],
    /// The view's first element in the source's coordinates.
    base: [usize; MAX_DIMS],
}

impl ViewMap {
    /// Device `j`'s view over its piece of layout `piece`: extents,
    /// strides of dimensions 1.. and byte offset.
    pub fn piece(
        &self,
        out: &Layout,
        piece: &Layout,
        j: usize,
    ) -> ([usize; MAX_DIMS], [usize; MAX_DIMS - 1], usize) {
        let mut ne = out.ne;
        ne[self.split.axis] = self.split.sizes[j];
        let bytes = |c: &[usize; MAX_DIMS]| -> usize {
            let bs = piece.dtype.block_size();
            c[0] / bs * piece.nb[0] + c[1] * piece.nb[1] + c[2] * piece.nb[2] + c[3] * piece.nb[3]
        };
        let mut nb = [0; MAX_DIMS - 1];
        for (k, slot) in nb.iter_mut().enumerate() {
            *slot = bytes(&self.deltas[k + 1]);
        }
        // Dimensions of extent 1 need no stride of their own: keep them
        // packed after the previous one so the view stays in its piece.
        for k in 1..MAX_DIMS {
            if ne[k] <= 1 {
                nb[k - 1] = if k == 1 {
                    piece.dtype.row_size(ne[0]).unwrap_or(0)
                } else {
                    nb[k - 2] * ne[k - 1].max(1)
                };
            }
        }
        (ne, nb, bytes(&self.base))
    }
}

/// The split of `VIEW(src; out at byte rel)` for a split `src`, when every
/// view dimension steps along one source axis and the dimensions stepping
/// along the split axis cover it whole, from its start.
pub(crate) fn view(src: &Layout, split: &Split, out: &Layout, rel: usize) -> Option<ViewMap> {
    let a = split.axis;
    let mut deltas = [[0usize; MAX_DIMS]; MAX_DIMS];
    deltas[0][0] = 1;
    if out.nb[0] != src.nb[0] {
        return None;
    }
    for (k, d) in deltas.iter_mut().enumerate().skip(1) {
        if out.ne[k] > 1 {
            *d = coords(src, out.nb[k])?;
        }
    }
    let base = coords(src, rel)?;
    if base[a] != 0 {
        return None;
    }
    // The view dimensions stepping along axis a, innermost first.
    let mut along: Vec<(usize, usize)> = Vec::new();
    for (k, d) in deltas.iter().enumerate() {
        if out.ne[k] <= 1 || d[a] == 0 {
            continue;
        }
        if d.iter().enumerate().any(|(m, &c)| m != a && c != 0) {
            return None;
        }
        along.push((d[a], k));
    }
    along.sort_unstable();
    let mut expect = 1;
    for &(c, k) in &along {
        if c != expect {
            return None;
        }
        expect = c.checked_mul(out.ne[k])?;
    }
    if expect != src.ne[a] {
        return None;
    }
    let &(c, k) = along.last()?;
    let sizes = split
        .sizes
        .iter()
        .map(|x| x.is_multiple_of(c).then_some(x / c))
        .collect::<Option<Vec<_>>>()?;
    Some(ViewMap {
        split: Split { axis: k, sizes },
        deltas,
        base,
    })
}

/// A byte distance in `src` as a step in its coordinates (dimension 0 in
/// elements), when it is one.
fn coords(src: &Layout, bytes: usize) -> Option<[usize; MAX_DIMS]> {
    let mut order: Vec<usize> = (0..MAX_DIMS).filter(|&m| src.ne[m] > 1).collect();
    order.sort_by_key(|&m| std::cmp::Reverse(src.nb[m]));
    let mut left = bytes;
    let mut c = [0usize; MAX_DIMS];
    for m in order {
        let nb = src.nb[m];
        if nb == 0 {
            continue;
        }
        c[m] = left / nb;
        left -= c[m] * nb;
    }
    if left != 0 {
        return None;
    }
    c[0] *= src.dtype.block_size();
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera::DType;

    #[test]
    fn reshapes_move_the_split() {
        let src = Layout::contiguous(DType::F32, &[8, 4, 3]).unwrap();
        let sp = Split {
            axis: 1,
            sizes: vec![1, 3],
        };
        // Merge heads into rows: [32, 3], split in rows of 8.
        let out = Layout::contiguous(DType::F32, &[32, 3]).unwrap();
        assert_eq!(reshape(&src, &sp, &out).unwrap().sizes, vec![8, 24]);
        // And back.
        let sp0 = Split {
            axis: 0,
            sizes: vec![8, 24],
        };
        let back = reshape(&out, &sp0, &src).unwrap();
        assert_eq!((back.axis, back.sizes), (1, vec![1, 3]));
        // A cut inside a head cannot be expressed.
        let bad = Split {
            axis: 0,
            sizes: vec![4, 28],
        };
        assert!(reshape(&out, &bad, &src).is_none());
    }

    #[test]
    fn per_head_views_of_a_cache() {
        // Cache [hd * n_kv, slots] split by heads; view [hd, n_kv, n].
        let cache = Layout::contiguous(DType::F16, &[4 * 3, 10]).unwrap();
        let sp = Split {
            axis: 0,
            sizes: vec![4, 8],
        };
        let out = Layout {
            dtype: DType::F16,
            ne: [4, 3, 6, 1],
            nb: [2, 8, 24, 144],
        };
        let m = view(&cache, &sp, &out, 0).unwrap();
        assert_eq!((m.split.axis, m.split.sizes.clone()), (1, vec![1, 2]));
        let piece = Layout::contiguous(DType::F16, &[8, 10]).unwrap();
        let (ne, nb, off) = m.piece(&out, &piece, 1);
        assert_eq!(ne, [4, 2, 6, 1]);
        assert_eq!(&nb[..2], &[8, 16]);
        assert_eq!(off, 0);
    }
}
