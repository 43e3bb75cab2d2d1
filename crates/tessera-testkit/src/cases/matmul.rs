//! MUL_MAT cases: every weight type of `MUL_MAT_WEIGHT_TYPES`, as
//! matrix-vector and matrix-matrix products, with the weights broadcast over
//! dims 2-3, permuted operands (test-backend-ops' `per`), a transposed
//! (strided) activation matrix, and odd row lengths for the plain types.

use tessera::{DType, MUL_MAT_WEIGHT_TYPES};

use super::{Case, CaseGraph, fmt_ne, fmt_perm, permuted_leaf};

/// One MUL_MAT shape in test-backend-ops terms.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    /// Weight batches (dims 2, 3).
    bs: [usize; 2],
    /// Repeats of the weights over the activations' batches.
    nr: [usize; 2],
    per: Option<[usize; 4]>,
    /// `b` is stored as `[n, k]` and transposed (rows not contiguous).
    b_transposed: bool,
}

const fn shape(m: usize, n: usize, k: usize, bs: [usize; 2], nr: [usize; 2]) -> Shape {
    Shape {
        m,
        n,
        k,
        bs,
        nr,
        per: None,
        b_transposed: false,
    }
}

pub(super) fn cases(v: &mut Vec<Case>) {
    for t in MUL_MAT_WEIGHT_TYPES {
        // One or two blocks per row for quantized types.
        let k = if t.block_size() == 256 { 256 } else { 64 };
        let mut shapes = vec![
            shape(7, 1, k, [1, 1], [1, 1]),
            shape(16, 9, k, [1, 1], [1, 1]),
            shape(7, 3, k, [2, 1], [2, 3]),
            Shape {
                per: Some([0, 2, 1, 3]),
                ..shape(5, 3, k, [2, 3], [1, 1])
            },
            Shape {
                b_transposed: true,
                ..shape(4, 6, k, [1, 1], [1, 1])
            },
        ];
        // Larger than one 16 x 16 tile in both directions, several blocks per row.
        shapes.push(shape(67, 33, 4 * k, [1, 1], [1, 1]));
        // Rows longer than one pass of a GPU matrix-vector workgroup (128
        // invocations x 8 values).
        let long = if t.block_size() == 256 { 2048 } else { 2560 };
        shapes.push(shape(5, 1, long, [1, 1], [1, 1]));
        shapes.push(shape(5, 2, long, [1, 1], [1, 1]));
        // The GPU's row-group matrix-vector kernel: a row count no
        // workgroup's rows divide, broadcast weights, one and several
        // columns; and strided activations, which it leaves to another.
        shapes.push(shape(37, 1, 512, [2, 1], [1, 2]));
        shapes.push(shape(37, 5, 512, [2, 1], [1, 2]));
        shapes.push(Shape {
            b_transposed: true,
            ..shape(37, 3, 512, [1, 1], [1, 1])
        });
        // GPU tile edges: two 64 x 64 output tiles each way with broadcast
        // weights, and a strided activation matrix with more than 8 columns.
        shapes.push(shape(70, 72, k, [2, 1], [1, 2]));
        shapes.push(Shape {
            b_transposed: true,
            ..shape(9, 20, k, [1, 1], [1, 1])
        });
        if matches!(t, DType::IQ4NL | DType::IQ4XS) {
            // Enough columns for the CPU's packed GEMM (40 and more).
            shapes.push(shape(19, 45, 2 * k, [1, 1], [1, 1]));
        }
        if !t.is_quantized() {
            shapes.push(shape(5, 3, 33, [1, 1], [1, 1]));
            shapes.push(shape(5, 17, 33, [1, 1], [1, 1]));
            shapes.push(shape(3, 2, 129, [1, 2], [3, 1]));
            shapes.push(shape(4, 4, 1, [1, 1], [1, 1]));
        }
        for s in shapes {
            push(v, t, s);
        }
    }
}

fn push(v: &mut Vec<Case>, t: DType, s: Shape) {
    let name = format!(
        "MUL_MAT(type_a={t},type_b=f32,m={},n={},k={},bs={},nr={}{}{})",
        s.m,
        s.n,
        s.k,
        fmt_ne(&s.bs),
        fmt_ne(&s.nr),
        fmt_perm("per", s.per),
        if s.b_transposed { ",b=transposed" } else { "" }
    );
    v.push(Case::new("MUL_MAT", name, move || {
        let mut g = CaseGraph::new();
        let ne_a = [s.k, s.m, s.bs[0], s.bs[1]];
        let ne_b = [s.k, s.n, s.bs[0] * s.nr[0], s.bs[1] * s.nr[1]];
        let a = permuted_leaf(&mut g, "a", t, ne_a, s.per, None)?;
        let b = if s.b_transposed {
            let leaf = g.leaf("b", DType::F32, &[ne_b[1], ne_b[0], ne_b[2], ne_b[3]])?;
            g.transpose(leaf)?
        } else {
            permuted_leaf(&mut g, "b", DType::F32, ne_b, s.per, None)?
        };
        let out = g.mul_mat(a, b)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}
