//! Row-wise ops of the reference: RMS_NORM, NORM, L2_NORM, SUM_ROWS, ARGMAX
//! and SOFT_MAX (scale, broadcast mask, ALiBi), in f64.

use tessera::{Error, Result};

use super::memory::Dense;
use super::scalar::alibi_slope;

fn map_rows(a: &Dense, mut f: impl FnMut(&[f64], &mut [f64])) -> Result<Dense> {
    let mut out = Dense::zeros(a.ne)?;
    let n = a.ne[0];
    if n == 0 {
        return Ok(out);
    }
    for (src, dst) in a.data.chunks(n).zip(out.data.chunks_mut(n)) {
        f(src, dst);
    }
    Ok(out)
}

/// `x / sqrt(mean(x^2) + eps)` per row.
pub fn rms_norm(a: &Dense, eps: f64) -> Result<Dense> {
    map_rows(a, |x, y| {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let s = 1.0 / (ms + eps).sqrt();
        y.iter_mut().zip(x).for_each(|(o, v)| *o = v * s);
    })
}

/// `(x - mean) / sqrt(var + eps)` per row (population variance).
pub fn norm(a: &Dense, eps: f64) -> Result<Dense> {
    map_rows(a, |x, y| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let s = 1.0 / (var + eps).sqrt();
        y.iter_mut().zip(x).for_each(|(o, v)| *o = (v - mean) * s);
    })
}

/// `x / max(sqrt(sum x^2), eps)` per row.
pub fn l2_norm(a: &Dense, eps: f64) -> Result<Dense> {
    map_rows(a, |x, y| {
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        let s = 1.0 / norm.max(eps);
        y.iter_mut().zip(x).for_each(|(o, v)| *o = v * s);
    })
}

/// Sum of each row: `[1, ne1, ne2, ne3]`.
pub fn sum_rows(a: &Dense) -> Result<Dense> {
    let mut out = Dense::zeros([1, a.ne[1], a.ne[2], a.ne[3]])?;
    let n = a.ne[0];
    if n > 0 {
        for (o, row) in out.data.iter_mut().zip(a.data.chunks(n)) {
            *o = row.iter().sum();
        }
    }
    Ok(out)
}

/// Index of the largest element of each row of a matrix, with ggml's rule
/// (`ggml_vec_argmax_f32`): a running `max = MAX(max, x)` from `-inf`, and
/// the index moves to every element equal to the running max, so among
/// equal maxima the **last** wins.
pub fn argmax(a: &Dense) -> Result<Dense> {
    if a.ne[2] != 1 || a.ne[3] != 1 {
        return Err(Error::op("ARGMAX", format!("a {:?} is not a matrix", a.ne)));
    }
    let mut out = Dense::zeros([a.ne[1], 1, 1, 1])?;
    let n = a.ne[0];
    for (i1, o) in out.data.iter_mut().enumerate() {
        let row = a.data.get(i1 * n..(i1 + 1) * n).unwrap_or(&[]);
        let mut max = f64::NEG_INFINITY;
        let mut idx = 0usize;
        for (i, &x) in row.iter().enumerate() {
            // C's MAX(a, b) is `a > b ? a : b`.
            max = if max > x { max } else { x };
            if max == x {
                idx = i;
            }
        }
        *o = idx as f64;
    }
    Ok(out)
}

/// `softmax(a * scale + slope * mask)` per row. The mask row for row
/// `(i1, i2, i3)` is `mask[:, i1, i2 % m2, i3 % m3]`; the ALiBi slope is that
/// of head `i2` of `a.ne[2]` heads (1 when `max_bias` is 0).
pub fn soft_max(a: &Dense, mask: Option<&Dense>, scale: f64, max_bias: f64) -> Result<Dense> {
    soft_max_sinks(a, mask, None, scale, max_bias)
}

/// [`soft_max`] with attention sinks (ggml's `ggml_soft_max_add_sinks`):
/// head `i2`'s sink `s` joins each row's maximum and adds `exp(s - max)` to
/// its sum, unscaled and unmasked, with no output element.
pub fn soft_max_sinks(
    a: &Dense,
    mask: Option<&Dense>,
    sinks: Option<&Dense>,
    scale: f64,
    max_bias: f64,
) -> Result<Dense> {
    if let Some(s) = sinks.filter(|s| s.data.len() != a.ne[2]) {
        return Err(Error::op(
            "SOFT_MAX",
            format!(
                "sinks {:?} must hold one logit per head of a {:?}",
                s.ne, a.ne
            ),
        ));
    }
    let fits = |m: &Dense| {
        m.ne[0] == a.ne[0]
            && m.ne[1] >= a.ne[1]
            && m.ne[2] > 0
            && m.ne[3] > 0
            && a.ne[2].is_multiple_of(m.ne[2])
            && a.ne[3].is_multiple_of(m.ne[3])
    };
    if let Some(m) = mask.filter(|m| !fits(m)) {
        return Err(Error::op(
            "SOFT_MAX",
            format!("mask {:?} does not fit a {:?}", m.ne, a.ne),
        ));
    }
    let mut out = Dense::zeros(a.ne)?;
    let n = a.ne[0];
    let mut w = vec![0.0; n];
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            let slope = alibi_slope(max_bias, a.ne[2], i2);
            for i1 in 0..a.ne[1] {
                let x = a.row(i1, i2, i3);
                let mrow = mask.map(|m| m.row(i1, i2 % m.ne[2], i3 % m.ne[3]));
                for (i, wi) in w.iter_mut().enumerate() {
                    let mv = mrow.map_or(0.0, |m| slope * m[i]);
                    *wi = x[i] * scale + mv;
                }
                let sink = sinks.map(|s| s.data[i2]);
                let max = w
                    .iter()
                    .copied()
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let start = out.flat([0, i1, i2, i3]);
                let y = &mut out.data[start..start + n];
                let mut sum = sink.map_or(0.0, |s| (s - max).exp());
                for (o, &wi) in y.iter_mut().zip(&w) {
                    *o = (wi - max).exp();
                    sum += *o;
                }
                y.iter_mut().for_each(|o| *o /= sum);
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
    fn softmax_row_from_the_definition() {
        let a = d([3, 1, 1, 1], &[1.0, 2.0, 3.0]);
        let s = soft_max(&a, None, 1.0, 0.0).unwrap();
        let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
        for (i, v) in s.data.iter().enumerate() {
            assert!((v - ((i + 1) as f64).exp() / z).abs() < 1e-15);
        }
        // A -inf mask entry removes an element; scale 2 doubles the logits.
        let m = d([3, 1, 1, 1], &[0.0, f64::NEG_INFINITY, 0.0]);
        let s = soft_max(&a, Some(&m), 2.0, 0.0).unwrap();
        let z = 2f64.exp() + 6f64.exp();
        assert_eq!(s.data[1], 0.0);
        assert!((s.data[0] - 2f64.exp() / z).abs() < 1e-15);
        assert!((s.data[2] - 6f64.exp() / z).abs() < 1e-15);
    }

    #[test]
    fn softmax_alibi_scales_the_mask_per_head() {
        // Two heads (dim 2), max_bias 2: slopes 2^-1 and 2^-2.
        let a = Dense::zeros([2, 1, 2, 1]).unwrap();
        let m = d([2, 1, 1, 1], &[0.0, -4.0]);
        let s = soft_max(&a, Some(&m), 1.0, 2.0).unwrap();
        for (h, slope) in [(0usize, 0.5f64), (1, 0.25)] {
            let p1 = (-4.0 * slope).exp() / (1.0 + (-4.0 * slope).exp());
            assert!((s.get([1, 0, h, 0]).unwrap() - p1).abs() < 1e-15);
        }
    }

    #[test]
    fn norms_and_reductions() {
        let a = d([2, 2, 1, 1], &[3.0, 4.0, 1.0, 1.0]);
        let r = rms_norm(&a, 0.0).unwrap();
        let k = (12.5f64).sqrt();
        assert!((r.data[0] - 3.0 / k).abs() < 1e-15 && (r.data[1] - 4.0 / k).abs() < 1e-15);
        let n = norm(&a, 0.0).unwrap();
        assert_eq!(&n.data[..2], &[-1.0, 1.0]);
        assert_eq!(sum_rows(&a).unwrap().data, vec![7.0, 2.0]);
        // Ties: the last maximum wins (ggml).
        let t = d(
            [4, 3, 1, 1],
            &[1., 5., 5., 2., -1., -3., -2., -1., 0., 0., 0., 0.],
        );
        assert_eq!(argmax(&t).unwrap().data, vec![2.0, 3.0, 3.0]);
    }

    #[test]
    fn sinks_join_the_denominator_only() {
        // Two equal logits and a sink of 0: each gets 1 / (1 + 1 + 1).
        let a = d([2, 1, 1, 1], &[0.0, 0.0]);
        let s = soft_max_sinks(&a, None, Some(&d([1, 1, 1, 1], &[0.0])), 1.0, 0.0).unwrap();
        assert!(
            s.data.iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-15),
            "{:?}",
            s.data
        );
        // Per head (dim 2): a sink of ln 2 counts twice; ln 6 above both
        // logits makes the sink the maximum.
        let a = d([2, 1, 2, 1], &[0.0, 0.0, 0.0, 0.0]);
        let sk = d([2, 1, 1, 1], &[2f64.ln(), 6f64.ln()]);
        let s = soft_max_sinks(&a, None, Some(&sk), 1.0, 0.0).unwrap();
        let want = [0.25, 0.25, 0.125, 0.125];
        for (v, w) in s.data.iter().zip(want) {
            assert!((v - w).abs() < 1e-15, "{:?}", s.data);
        }
        // The wrong number of sinks is an error, not a panic.
        assert!(soft_max_sinks(&a, None, Some(&d([3, 1, 1, 1], &[0.0; 3])), 1.0, 0.0).is_err());
    }
}
