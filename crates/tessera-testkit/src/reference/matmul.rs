//! MUL_MAT in the reference: `dst[i, j, i2, i3] = sum_k a[k, i, i2 / r2, i3 / r3] * b[k, j, i2, i3]`
//! with `r2 = ne12 / ne02`, `r3 = ne13 / ne03` (ggml's broadcast of the
//! weights over dims 2-3), accumulated in f64 from the stored (dequantized)
//! weights and the exact activations.

use tessera::{Error, Result};

use super::memory::Dense;

/// `a^T b` per matrix, with `a` broadcast over dims 2 and 3.
pub fn mul_mat(a: &Dense, b: &Dense) -> Result<Dense> {
    if a.ne[0] != b.ne[0]
        || a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
    {
        return Err(Error::op(
            "MUL_MAT",
            format!("a {:?} and b {:?} do not fit", a.ne, b.ne),
        ));
    }
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let mut out = Dense::zeros([a.ne[1], b.ne[1], b.ne[2], b.ne[3]])?;
    let mut k = 0;
    for i3 in 0..b.ne[3] {
        for i2 in 0..b.ne[2] {
            for j in 0..b.ne[1] {
                let y = b.row(j, i2, i3);
                for i in 0..a.ne[1] {
                    let x = a.row(i, i2 / r2, i3 / r3);
                    out.data[k] = x.iter().zip(y).map(|(p, q)| p * q).sum();
                    k += 1;
                }
            }
        }
    }
    Ok(out)
}

/// The expert id at `(i, j)` of `ids`, if it is an integer in `0..n`.
fn expert(op: &str, ids: &Dense, i: usize, j: usize, n: usize) -> Result<usize> {
    let v = ids.get([i, j, 0, 0])?;
    if v.fract() == 0.0 && v >= 0.0 && v < n as f64 {
        Ok(v as usize)
    } else {
        Err(Error::OutOfBounds(format!(
            "{op}: id {v} at ids[{i}, {j}] is outside 0..{n}"
        )))
    }
}

/// MUL_MAT_ID: `dst[:, e, t] = as[:, :, ids[e, t]]^T b[:, e % ne11, t]`.
pub fn mul_mat_id(a: &Dense, b: &Dense, ids: &Dense) -> Result<Dense> {
    let n_used = ids.ne[0];
    if a.ne[0] != b.ne[0]
        || ids.ne[1] != b.ne[2]
        || b.ne[1] == 0
        || !n_used.is_multiple_of(b.ne[1])
        || a.ne[3] != 1
        || b.ne[3] != 1
    {
        return Err(Error::op(
            "MUL_MAT_ID",
            format!(
                "as {:?}, b {:?} and ids {:?} do not fit",
                a.ne, b.ne, ids.ne
            ),
        ));
    }
    let mut out = Dense::zeros([a.ne[1], n_used, b.ne[2], 1])?;
    let mut k = 0;
    for t in 0..b.ne[2] {
        for e in 0..n_used {
            let x = expert("MUL_MAT_ID", ids, e, t, a.ne[2])?;
            let y = b.row(e % b.ne[1], t, 0);
            for i in 0..a.ne[1] {
                out.data[k] = a.row(i, x, 0).iter().zip(y).map(|(p, q)| p * q).sum();
                k += 1;
            }
        }
    }
    Ok(out)
}

/// ADD_ID: `dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]]`.
pub fn add_id(a: &Dense, b: &Dense, ids: &Dense) -> Result<Dense> {
    if a.ne[0] != b.ne[0] || a.ne[1] != ids.ne[0] || a.ne[2] != ids.ne[1] || a.ne[3] != 1 {
        return Err(Error::op(
            "ADD_ID",
            format!("a {:?}, b {:?} and ids {:?} do not fit", a.ne, b.ne, ids.ne),
        ));
    }
    let mut out = a.clone();
    let ne0 = a.ne[0];
    for i2 in 0..a.ne[2] {
        for i1 in 0..a.ne[1] {
            let r = expert("ADD_ID", ids, i1, i2, b.ne[1])?;
            let start = out.flat([0, i1, i2, 0]);
            for (o, y) in out.data[start..start + ne0].iter_mut().zip(b.row(r, 0, 0)) {
                *o += y;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn two_by_three_product_by_hand() {
        // a holds the rows of A (2 x 3), b the columns of B (3 x 2); dst is
        // (A B)^T laid out as [m, n]: dst[i, j] = row i of A . column j of B.
        let a = Dense::from_vec([3, 2, 1, 1], vec![1., 2., 3., 4., 5., 6.]).unwrap();
        let b = Dense::from_vec([3, 2, 1, 1], vec![7., 8., 9., 10., 11., 12.]).unwrap();
        let c = mul_mat(&a, &b).unwrap();
        assert_eq!(c.ne, [2, 2, 1, 1]);
        let dot = |r: [f64; 3], s: [f64; 3]| r[0] * s[0] + r[1] * s[1] + r[2] * s[2];
        assert_eq!(c.data[0], dot([1., 2., 3.], [7., 8., 9.]));
        assert_eq!(c.data[1], dot([4., 5., 6.], [7., 8., 9.]));
        assert_eq!(c.data[2], dot([1., 2., 3.], [10., 11., 12.]));
        assert_eq!(c.data[3], dot([4., 5., 6.], [10., 11., 12.]));
    }

    #[test]
    fn experts_are_picked_by_id() {
        // Two experts of one row each: [1, 2] and [3, 4]; b broadcast.
        let a = Dense::from_vec([2, 1, 2, 1], vec![1., 2., 3., 4.]).unwrap();
        let b = Dense::from_vec([2, 1, 2, 1], vec![1., 1., 1., 10.]).unwrap();
        let ids = Dense::from_vec([2, 2, 1, 1], vec![1., 0., 0., 0.]).unwrap();
        let c = mul_mat_id(&a, &b, &ids).unwrap();
        assert_eq!(c.ne, [1, 2, 2, 1]);
        assert_eq!(c.data, vec![7., 3., 21., 21.]);
        let bad = Dense::from_vec([2, 2, 1, 1], vec![2., 0., 0., 0.]).unwrap();
        assert!(matches!(
            mul_mat_id(&a, &b, &bad),
            Err(Error::OutOfBounds(_))
        ));
        let bias = Dense::from_vec([1, 2, 1, 1], vec![100., 200.]).unwrap();
        let d = add_id(&c, &bias, &ids).unwrap();
        assert_eq!(d.data, vec![207., 103., 121., 121.]);
    }

    #[test]
    fn weights_broadcast_over_batches() {
        // Two weight matrices (dim 2), four activation batches: batch i2 uses
        // weight i2 / 2.
        let a = Dense::from_vec([1, 1, 2, 1], vec![2., 3.]).unwrap();
        let b = Dense::from_vec([1, 1, 4, 1], vec![1., 1., 1., 1.]).unwrap();
        assert_eq!(mul_mat(&a, &b).unwrap().data, vec![2., 2., 3., 3.]);
        let bad = Dense::zeros([1, 1, 3, 1]).unwrap();
        assert!(mul_mat(&a, &bad).is_err());
    }
}
