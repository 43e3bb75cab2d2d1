//! Row indexing and joining in the reference: GET_ROWS, SET_ROWS, CONCAT.
//!
//! Indices come from data, so every one is checked: an index that is not an
//! integer in range is an [`Error::OutOfBounds`] naming the position and the
//! value, never a panic.

use tessera::{Error, Result};

use super::memory::Dense;

/// The integer at `v`, if it is one in `0..n`.
fn index(op: &str, v: f64, n: usize, at: [usize; 3]) -> Result<usize> {
    if v.fract() == 0.0 && v >= 0.0 && v < n as f64 {
        Ok(v as usize)
    } else {
        Err(Error::OutOfBounds(format!(
            "{op}: index {v} at {at:?} is outside 0..{n}"
        )))
    }
}

/// GET_ROWS: `out[:, i, j, l] = a[:, ids[i, j, l], j, l]`.
pub fn get_rows(a: &Dense, ids: &Dense) -> Result<Dense> {
    if ids.ne[1] != a.ne[2] || ids.ne[2] != a.ne[3] || ids.ne[3] != 1 {
        return Err(Error::op(
            "GET_ROWS",
            format!("ids {:?} do not fit a {:?}", ids.ne, a.ne),
        ));
    }
    let mut out = Dense::zeros([a.ne[0], ids.ne[0], ids.ne[1], ids.ne[2]])?;
    let ne0 = a.ne[0];
    for l in 0..ids.ne[2] {
        for j in 0..ids.ne[1] {
            for i in 0..ids.ne[0] {
                let r = index("GET_ROWS", ids.get([i, j, l, 0])?, a.ne[1], [i, j, l])?;
                let start = out.flat([0, i, j, l]);
                out.data[start..start + ne0].copy_from_slice(a.row(r, j, l));
            }
        }
    }
    Ok(out)
}

/// SET_ROWS: where each row of `src` (`[ne0, n, ne2, ne3]`) goes in a
/// destination with `dst_rows` rows per matrix: a list of
/// `(destination row (i1, i2, i3), source row (i, i2, i3))`. `ids` is
/// `[n, r2, r3]`, broadcast over dims 2 and 3 (`ids[i, i2 % r2, i3 % r3]`).
pub fn set_rows_targets(
    src: &Dense,
    ids: &Dense,
    dst_rows: usize,
) -> Result<Vec<([usize; 3], [usize; 3])>> {
    let (r2, r3) = (ids.ne[1], ids.ne[2]);
    if ids.ne[0] != src.ne[1]
        || r2 == 0
        || r3 == 0
        || !src.ne[2].is_multiple_of(r2)
        || !src.ne[3].is_multiple_of(r3)
    {
        return Err(Error::op(
            "SET_ROWS",
            format!("ids {:?} do not fit src {:?}", ids.ne, src.ne),
        ));
    }
    let mut out = Vec::with_capacity(src.nrows());
    for i3 in 0..src.ne[3] {
        for i2 in 0..src.ne[2] {
            for i in 0..src.ne[1] {
                let at = [i, i2 % r2, i3 % r3];
                let r = index("SET_ROWS", ids.get([at[0], at[1], at[2], 0])?, dst_rows, at)?;
                out.push(([r, i2, i3], [i, i2, i3]));
            }
        }
    }
    Ok(out)
}

/// CONCAT: `a` and `b` joined along `dim`.
pub fn concat(a: &Dense, b: &Dense, dim: usize) -> Result<Dense> {
    if dim >= 4 || (0..4).any(|d| d != dim && a.ne[d] != b.ne[d]) {
        return Err(Error::op(
            "CONCAT",
            format!("a {:?} and b {:?} cannot be joined along {dim}", a.ne, b.ne),
        ));
    }
    let mut ne = a.ne;
    ne[dim] += b.ne[dim];
    let mut out = Dense::zeros(ne)?;
    let mut k = 0;
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    let i = [i0, i1, i2, i3];
                    out.data[k] = if i[dim] < a.ne[dim] {
                        a.get(i)?
                    } else {
                        let mut j = i;
                        j[dim] -= a.ne[dim];
                        b.get(j)?
                    };
                    k += 1;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn d(ne: [usize; 4], v: &[f64]) -> Dense {
        Dense::from_vec(ne, v.to_vec()).unwrap()
    }

    #[test]
    fn get_rows_gathers_and_rejects_bad_indices() {
        // a: 3 rows of 2.
        let a = d([2, 3, 1, 1], &[0., 1., 10., 11., 20., 21.]);
        let ids = d([4, 1, 1, 1], &[2., 0., 2., 1.]);
        let g = get_rows(&a, &ids).unwrap();
        assert_eq!(g.ne, [2, 4, 1, 1]);
        assert_eq!(g.data, vec![20., 21., 0., 1., 20., 21., 10., 11.]);
        for bad in [3.0, -1.0, 0.5, f64::NAN] {
            let ids = d([1, 1, 1, 1], &[bad]);
            assert!(
                matches!(get_rows(&a, &ids), Err(Error::OutOfBounds(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn set_rows_broadcasts_ids_over_dims_2_and_3() {
        // src: 2 rows in each of 4 matrices (dim 2); ids: [2, 2] broadcast over dim 2.
        let src = Dense::zeros([3, 2, 4, 1]).unwrap();
        let ids = d([2, 2, 1, 1], &[5., 1., 0., 3.]);
        let t = set_rows_targets(&src, &ids, 6).unwrap();
        assert_eq!(t.len(), 8);
        // Matrix 2 uses ids column 0 (2 % 2), matrix 3 uses column 1.
        assert_eq!(t[4], ([5, 2, 0], [0, 2, 0]));
        assert_eq!(t[7], ([3, 3, 0], [1, 3, 0]));
        assert!(set_rows_targets(&src, &ids, 5).is_err());
    }

    #[test]
    fn concat_along_each_dim() {
        let a = d([2, 1, 1, 1], &[1., 2.]);
        let b = d([2, 1, 1, 1], &[3., 4.]);
        assert_eq!(concat(&a, &b, 0).unwrap().data, vec![1., 2., 3., 4.]);
        let c = concat(&a, &b, 1).unwrap();
        assert_eq!((c.ne, c.data), ([2, 2, 1, 1], vec![1., 2., 3., 4.]));
        let c = concat(&a, &b, 3).unwrap();
        assert_eq!(c.ne, [2, 1, 1, 2]);
        assert!(concat(&a, &d([3, 1, 1, 1], &[0.; 3]), 1).is_err());
    }
}
