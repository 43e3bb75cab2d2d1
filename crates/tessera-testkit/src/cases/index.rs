//! Indexing and reduction cases: GET_ROWS of every type (batched, strided),
//! SET_ROWS into every destination type with I64 and I32 ids (broadcast ids,
//! a strided source), ARGMAX (with ties) and SUM_ROWS.

use tessera::DType;

use super::{Case, CaseGraph, Init, fmt_ne, fmt_perm, permuted_leaf};

const ROW_TYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::I32,
];

pub(super) fn cases(v: &mut Vec<Case>) {
    get_rows_cases(v);
    set_rows_cases(v);
    argmax_cases(v);
    sum_rows_cases(v);
}

/// A row length valid for `t` (odd for plain types).
fn row_len(t: DType, plain: usize) -> usize {
    if t.is_quantized() {
        t.block_size()
    } else {
        plain
    }
}

fn get_rows_cases(v: &mut Vec<Case>) {
    // (a extents, number of ids per matrix, permute a)
    let shapes: [([usize; 4], usize, Option<[usize; 4]>); 3] = [
        ([0, 10, 1, 1], 5, None),
        ([0, 6, 2, 3], 4, None),
        ([0, 5, 3, 1], 7, Some([0, 2, 1, 3])),
    ];
    for t in ROW_TYPES {
        for (i, (shape, n, axes)) in shapes.into_iter().enumerate() {
            let mut ne = shape;
            ne[0] = row_len(t, if i == 0 { 7 } else { 33 });
            let name = format!(
                "GET_ROWS(type={t},ne={},n={n}{})",
                fmt_ne(&ne),
                fmt_perm("permute", axes)
            );
            v.push(Case::new("GET_ROWS", name, move || {
                let mut g = CaseGraph::new();
                let a = permuted_leaf(&mut g, "a", t, ne, axes, None)?;
                let ids = g.leaf_init(
                    "ids",
                    DType::I32,
                    &[n, ne[2], ne[3]],
                    Init::RowIds {
                        rows: ne[1],
                        distinct: false,
                    },
                )?;
                let out = g.get_rows(a, ids)?;
                g.check(out)?;
                Ok(g.finish())
            }));
        }
    }
}

fn set_rows_cases(v: &mut Vec<Case>) {
    for t in ROW_TYPES.into_iter().filter(|t| !t.is_int()) {
        for ti in [DType::I64, DType::I32] {
            // (dst extents, rows written per matrix, ids broadcast [r2, r3], strided src)
            let shapes: [([usize; 4], usize, [usize; 2], bool); 3] = [
                ([row_len(t, 7), 10, 1, 1], 4, [1, 1], false),
                ([row_len(t, 33), 6, 4, 2], 3, [2, 1], false),
                ([row_len(t, 16), 8, 2, 1], 5, [2, 1], true),
            ];
            for (ne, n, r, strided) in shapes {
                let name = format!(
                    "SET_ROWS(type={t},type_idx={ti},ne={},n={n},ids_b=[{},{}]{})",
                    fmt_ne(&ne),
                    r[0],
                    r[1],
                    if strided { ",src=view" } else { "" }
                );
                v.push(Case::new("SET_ROWS", name, move || {
                    let mut g = CaseGraph::new();
                    let dst = g.leaf("dst", t, &ne)?;
                    let src_ne = [ne[0], n, ne[2], ne[3]];
                    let src = if strided {
                        // The first n rows of a source with 2n rows per matrix.
                        let full = g.leaf("src", DType::F32, &[ne[0], 2 * n, ne[2], ne[3]])?;
                        let l = g.layout(full)?;
                        g.view(full, src_ne, [l.nb[1], l.nb[2], l.nb[3]], 0)?
                    } else {
                        g.leaf("src", DType::F32, &src_ne)?
                    };
                    let ids = g.leaf_init(
                        "ids",
                        ti,
                        &[n, r[0], r[1]],
                        Init::RowIds {
                            rows: ne[1],
                            distinct: true,
                        },
                    )?;
                    let out = g.set_rows(dst, src, ids)?;
                    g.check(out)?;
                    Ok(g.finish())
                }));
            }
        }
    }
}

fn argmax_cases(v: &mut Vec<Case>) {
    let uniform = Init::Uniform { lo: -1.0, hi: 1.0 };
    // Few distinct values: every row has ties, which ggml resolves to the last.
    let ties = Init::Ints { lo: 0, hi: 3 };
    let shapes = [
        ([7, 3], uniform.clone(), "random"),
        ([129, 5], uniform.clone(), "random"),
        ([1, 4], uniform, "random"),
        ([33, 6], ties.clone(), "ties"),
        ([5, 9], ties, "ties"),
    ];
    for (ne, init, what) in shapes {
        let name = format!(
            "ARGMAX(type=f32,ne=[{},{},1,1],values={what})",
            ne[0], ne[1]
        );
        v.push(Case::new("ARGMAX", name, move || {
            let mut g = CaseGraph::new();
            let a = g.leaf_init("a", DType::F32, &ne, init.clone())?;
            let out = g.argmax(a)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

fn sum_rows_cases(v: &mut Vec<Case>) {
    let shapes: [([usize; 4], Option<[usize; 4]>); 4] = [
        ([7, 3, 1, 1], None),
        ([129, 2, 3, 2], None),
        ([1, 5, 1, 1], None),
        ([6, 4, 3, 1], Some([1, 2, 0, 3])),
    ];
    for (ne, axes) in shapes {
        let name = format!(
            "SUM_ROWS(type=f32,ne={}{})",
            fmt_ne(&ne),
            fmt_perm("permute", axes)
        );
        v.push(Case::new("SUM_ROWS", name, move || {
            let mut g = CaseGraph::new();
            let a = permuted_leaf(&mut g, "a", DType::F32, ne, axes, None)?;
            let out = g.sum_rows(a)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}
