//! Element-wise ops of the reference: ADD/SUB/MUL/DIV with broadcasting,
//! SCALE, SQR, SQRT, CLAMP, UNARY and GLU (fused, swapped and split), in f64.

use tessera::{Error, GluOp, Result, UnaryOp};

use super::memory::Dense;
use super::scalar::{gelu, gelu_erf, relu, sigmoid, silu};

/// Which binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// `a + b`.
    Add,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a - b`.
    Sub,
}

/// `a op b` with `b` repeated to `a`'s extents (ggml's `ggml_can_repeat`:
/// element `i` of `a` meets element `i % b.ne` of `b` in every dimension).
pub fn binary(op: Binary, a: &Dense, b: &Dense) -> Result<Dense> {
    let mut out = Dense::zeros(a.ne)?;
    if out.data.is_empty() {
        return Ok(out);
    }
    if (0..4).any(|d| b.ne[d] == 0 || !a.ne[d].is_multiple_of(b.ne[d])) {
        return Err(Error::op(
            "binary",
            format!("b {:?} cannot be broadcast to a {:?}", b.ne, a.ne),
        ));
    }
    let mut k = 0;
    for i3 in 0..a.ne[3] {
        for i2 in 0..a.ne[2] {
            for i1 in 0..a.ne[1] {
                let brow = b.row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
                for i0 in 0..a.ne[0] {
                    let x = a.data[k];
                    let y = brow[i0 % b.ne[0]];
                    out.data[k] = match op {
                        Binary::Add => x + y,
                        Binary::Mul => x * y,
                        Binary::Div => x / y,
                        Binary::Sub => x - y,
                    };
                    k += 1;
                }
            }
        }
    }
    Ok(out)
}

/// `a * scale + bias`.
pub fn scale(a: &Dense, scale: f64, bias: f64) -> Dense {
    map(a, |x| x * scale + bias)
}

/// The value of unary function `f` at `x`.
pub fn unary_fn(f: UnaryOp, x: f64) -> f64 {
    match f {
        UnaryOp::Silu => silu(x),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluErf => gelu_erf(x),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => relu(x),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Exp => x.exp(),
        // ggml's constant is the f32 -1.702f.
        UnaryOp::GeluQuick => x / (1.0 + (f64::from(-1.702f32) * x).exp()),
    }
}

/// `x^2` element-wise.
pub fn sqr(a: &Dense) -> Dense {
    map(a, |x| x * x)
}

/// `sqrt(x)` element-wise.
pub fn sqrt(a: &Dense) -> Dense {
    map(a, f64::sqrt)
}

/// ggml's `MAX(MIN(x, max), min)` with C's comparisons element-wise.
pub fn clamp(a: &Dense, min: f64, max: f64) -> Dense {
    map(a, |x| {
        let t = if x < max { x } else { max };
        if t > min { t } else { min }
    })
}

/// `f(a)` element-wise.
pub fn unary(f: UnaryOp, a: &Dense) -> Dense {
    map(a, |x| unary_fn(f, x))
}

/// Fused GLU: each row of `a` is `[x, g]` (`[g, x]` when `swapped`), the
/// result row is `act(x) * g`, half as long.
pub fn glu_fused(f: GluOp, a: &Dense, swapped: bool) -> Result<Dense> {
    if !a.ne[0].is_multiple_of(2) {
        return Err(Error::op(
            f.name(),
            format!("fused input {:?} has an odd row length", a.ne),
        ));
    }
    let nc = a.ne[0] / 2;
    let mut ne = a.ne;
    ne[0] = nc;
    let mut out = Dense::zeros(ne)?;
    let act = f.activation();
    for r in 0..a.nrows() {
        let row = &a.data[r * a.ne[0]..(r + 1) * a.ne[0]];
        let (first, second) = row.split_at(nc);
        let (x, g) = if swapped {
            (second, first)
        } else {
            (first, second)
        };
        for (i, o) in out.data[r * nc..(r + 1) * nc].iter_mut().enumerate() {
            *o = unary_fn(act, x[i]) * g[i];
        }
    }
    Ok(out)
}

/// Split GLU: `act(x) * g` element-wise.
pub fn glu_split(f: GluOp, x: &Dense, g: &Dense) -> Result<Dense> {
    if x.ne != g.ne {
        return Err(Error::op(
            f.name(),
            format!("x {:?} and g {:?} differ", x.ne, g.ne),
        ));
    }
    let act = f.activation();
    let data = x
        .data
        .iter()
        .zip(&g.data)
        .map(|(&a, &b)| unary_fn(act, a) * b)
        .collect();
    Dense::from_vec(x.ne, data)
}

/// SWIGLU_OAI: `x = min(x, limit)`, `g = clamp(g, -limit, limit)`,
/// `x / (1 + e^(-alpha x)) * (g + 1)` (ggml's comparisons).
pub fn swiglu_oai(x: &Dense, g: &Dense, alpha: f64, limit: f64) -> Result<Dense> {
    if x.ne != g.ne {
        return Err(Error::op(
            "SWIGLU_OAI",
            format!("x {:?} and g {:?} differ", x.ne, g.ne),
        ));
    }
    let data = x
        .data
        .iter()
        .zip(&g.data)
        .map(|(&a, &b)| {
            let a = if limit < a { limit } else { a };
            let b = if b < -limit {
                -limit
            } else if limit < b {
                limit
            } else {
                b
            };
            a / (1.0 + (-alpha * a).exp()) * (b + 1.0)
        })
        .collect();
    Dense::from_vec(x.ne, data)
}

fn map(a: &Dense, f: impl Fn(f64) -> f64) -> Dense {
    Dense {
        ne: a.ne,
        data: a.data.iter().map(|&x| f(x)).collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn d(ne: [usize; 4], v: &[f64]) -> Dense {
        Dense::from_vec(ne, v.to_vec()).unwrap()
    }

    #[test]
    fn broadcast_repeats_whole_copies() {
        let a = d([4, 2, 1, 1], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let b = d([2, 1, 1, 1], &[10., 20.]);
        let s = binary(Binary::Add, &a, &b).unwrap();
        assert_eq!(s.data, vec![11., 22., 13., 24., 15., 26., 17., 28.]);
        let col = d([1, 2, 1, 1], &[2., 4.]);
        let q = binary(Binary::Div, &a, &col).unwrap();
        let m = binary(Binary::Sub, &a, &col).unwrap();
        assert_eq!(m.data, vec![-1., 0., 1., 2., 1., 2., 3., 4.]);
        assert_eq!(q.data, vec![0.5, 1., 1.5, 2., 1.25, 1.5, 1.75, 2.]);
        assert!(binary(Binary::Mul, &a, &d([3, 1, 1, 1], &[1., 1., 1.])).is_err());
    }

    #[test]
    fn glu_halves_and_swaps() {
        // Row [x0, x1, g0, g1]: reglu = relu(x) * g.
        let a = d([4, 1, 1, 1], &[-1., 2., 3., 5.]);
        let r = glu_fused(GluOp::ReGlu, &a, false).unwrap();
        assert_eq!(r.ne, [2, 1, 1, 1]);
        assert_eq!(r.data, vec![0., 10.]);
        // Swapped: x = [3, 5], g = [-1, 2].
        let s = glu_fused(GluOp::ReGlu, &a, true).unwrap();
        assert_eq!(s.data, vec![-3., 10.]);
        // SwiGLU split at x = 1: silu(1) = 1 / (1 + e^-1).
        let x = d([1, 1, 1, 1], &[1.0]);
        let g = d([1, 1, 1, 1], &[3.0]);
        let v = glu_split(GluOp::SwiGlu, &x, &g).unwrap();
        assert!((v.data[0] - 3.0 / (1.0 + (-1f64).exp())).abs() < 1e-15);
    }

    #[test]
    fn unary_functions_at_known_points() {
        assert_eq!(unary_fn(UnaryOp::Relu, -0.5), 0.0);
        assert_eq!(unary_fn(UnaryOp::Sigmoid, 0.0), 0.5);
        assert_eq!(unary_fn(UnaryOp::GeluQuick, 0.0), 0.0);
        let gq = 2.0 / (1.0 + (-1.702f32 as f64 * 2.0).exp());
        assert!((unary_fn(UnaryOp::GeluQuick, 2.0) - gq).abs() < 1e-15);
        let c = clamp(&d([4, 1, 1, 1], &[-2., 0.5, 3., f64::NAN]), -1.0, 1.0);
        assert_eq!(c.data, vec![-1., 0.5, 1., 1.]);
        // gelu(x) -> x for large x, and gelu_erf(1) = 0.5 (1 + erf(1/sqrt 2)).
        assert!((unary_fn(UnaryOp::Gelu, 8.0) - 8.0).abs() < 1e-12);
        let ge = 0.5 * (1.0 + 0.682_689_492_137_085_9);
        assert!((unary_fn(UnaryOp::GeluErf, 1.0) - ge).abs() < 1e-15);
        // tanh-GELU and erf-GELU agree to ~1e-3 on [-3, 3].
        for i in -30..=30 {
            let x = f64::from(i) / 10.0;
            assert!((unary_fn(UnaryOp::Gelu, x) - unary_fn(UnaryOp::GeluErf, x)).abs() < 2e-3);
        }
    }
}
