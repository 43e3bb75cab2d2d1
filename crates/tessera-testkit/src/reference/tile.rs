//! Tiling and sorting ops of the reference: REPEAT, PAD, ARGSORT, TOP_K.

use std::cmp::Ordering;

use tessera::{Error, Result, SortOrder};

use super::memory::{Dense, unflatten};

/// `a` tiled to extents `ne` (each a multiple of `a`'s).
pub fn repeat(a: &Dense, ne: [usize; 4]) -> Result<Dense> {
    let mut out = Dense::zeros(ne)?;
    if out.data.is_empty() {
        return Ok(out);
    }
    if (0..4).any(|d| a.ne[d] == 0 || !ne[d].is_multiple_of(a.ne[d])) {
        return Err(Error::op(
            "REPEAT",
            format!("{:?} cannot be tiled to {ne:?}", a.ne),
        ));
    }
    for (k, o) in out.data.iter_mut().enumerate() {
        let i = unflatten(ne, k);
        *o = a.data[a.flat([
            i[0] % a.ne[0],
            i[1] % a.ne[1],
            i[2] % a.ne[2],
            i[3] % a.ne[3],
        ])];
    }
    Ok(out)
}

/// `a` with `lp[d]` zeros before and `rp[d]` after it along each dimension.
pub fn pad(a: &Dense, lp: [usize; 4], rp: [usize; 4]) -> Result<Dense> {
    let mut ne = a.ne;
    for d in 0..4 {
        ne[d] = a.ne[d] + lp[d] + rp[d];
    }
    let mut out = Dense::zeros(ne)?;
    for (k, o) in out.data.iter_mut().enumerate() {
        let i = unflatten(ne, k);
        if (0..4).all(|d| i[d] >= lp[d] && i[d] - lp[d] < a.ne[d]) {
            *o = a.data[a.flat([i[0] - lp[0], i[1] - lp[1], i[2] - lp[2], i[3] - lp[3]])];
        }
    }
    Ok(out)
}

/// Indices of each row in sorted order (stable: equal values keep index
/// order; NaN sorts above every number), the first `k` of each row.
fn sorted_rows(a: &Dense, desc: bool, k: usize) -> Result<Dense> {
    let n = a.ne[0];
    let mut out = Dense::zeros([k, a.ne[1], a.ne[2], a.ne[3]])?;
    if n == 0 || k == 0 {
        return Ok(out);
    }
    let asc = |x: f64, y: f64| match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    };
    for (row, dst) in a.data.chunks(n).zip(out.data.chunks_mut(k)) {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&i, &j| {
            if desc {
                asc(row[j], row[i])
            } else {
                asc(row[i], row[j])
            }
        });
        for (o, &i) in dst.iter_mut().zip(&idx) {
            *o = i as f64;
        }
    }
    Ok(out)
}

/// ARGSORT: the indices that sort each row.
pub fn argsort(a: &Dense, order: SortOrder) -> Result<Dense> {
    sorted_rows(a, order == SortOrder::Desc, a.ne[0])
}

/// TOP_K: the indices of the `k` largest values of each row, largest first.
pub fn top_k(a: &Dense, k: usize) -> Result<Dense> {
    if k > a.ne[0] {
        return Err(Error::op(
            "TOP_K",
            format!("k = {k} > row length {}", a.ne[0]),
        ));
    }
    sorted_rows(a, true, k)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn d(ne: [usize; 4], v: &[f64]) -> Dense {
        Dense::from_vec(ne, v.to_vec()).unwrap()
    }

    #[test]
    fn tiles_pads_and_sorts() {
        let a = d([2, 1, 1, 1], &[1., 2.]);
        assert_eq!(
            repeat(&a, [4, 2, 1, 1]).unwrap().data,
            [1., 2., 1., 2., 1., 2., 1., 2.]
        );
        assert!(repeat(&a, [3, 1, 1, 1]).is_err());
        let p = pad(&a, [1, 0, 0, 0], [0, 1, 0, 0]).unwrap();
        assert_eq!(p.ne, [3, 2, 1, 1]);
        assert_eq!(p.data, [0., 1., 2., 0., 0., 0.]);
        let x = d([5, 1, 1, 1], &[3., 1., 3., f64::NAN, -2.]);
        assert_eq!(
            argsort(&x, SortOrder::Asc).unwrap().data,
            [4., 1., 0., 2., 3.]
        );
        assert_eq!(
            argsort(&x, SortOrder::Desc).unwrap().data,
            [3., 0., 2., 1., 4.]
        );
        assert_eq!(top_k(&x, 2).unwrap().data, [3., 0.]);
    }
}
