//! Copy and layout cases: DUP, CONT, CPY (every conversion the builder
//! accepts, strided sources and destinations, a write into a view of a larger
//! tensor) and CONCAT along every dimension.

use tessera::{DType, Result};

use super::{Case, CaseGraph, fmt_ne, fmt_perm, permuted_leaf};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const QUANTS: [DType; 12] = [
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
];
const SWAP12: Option<[usize; 4]> = Some([0, 2, 1, 3]);
const ROTATE: Option<[usize; 4]> = Some([1, 2, 0, 3]);
const TRANSPOSE: Option<[usize; 4]> = Some([1, 0, 2, 3]);

pub(super) fn cases(v: &mut Vec<Case>) {
    dup_cont_cases(v);
    cpy_cases(v);
    view_cases(v);
    concat_cases(v);
}

/// A quantized row of whole blocks (two blocks).
fn qrow(t: DType) -> usize {
    2 * t.block_size()
}

fn dup_cont_cases(v: &mut Vec<Case>) {
    let mut push = |op: &'static str, t: DType, ne: [usize; 4], axes: Option<[usize; 4]>| {
        let name = format!(
            "{op}(type={t},ne={}{})",
            fmt_ne(&ne),
            fmt_perm("permute", axes)
        );
        v.push(Case::new(op, name, move || {
            let mut g = CaseGraph::new();
            let a = permuted_leaf(&mut g, "a", t, ne, axes, None)?;
            let out = if op == "DUP" { g.dup(a)? } else { g.cont(a)? };
            g.check(out)?;
            Ok(g.finish())
        }));
    };
    for t in FLOATS {
        push("DUP", t, [7, 3, 2, 1], None);
        push("DUP", t, [7, 3, 2, 1], SWAP12);
        push("CONT", t, [5, 7, 1, 1], TRANSPOSE);
        push("CONT", t, [4, 5, 3, 2], ROTATE);
    }
    for t in [DType::Q8_0, DType::Q4K] {
        push("DUP", t, [qrow(t), 3, 1, 1], None);
        push("CONT", t, [qrow(t), 3, 2, 1], SWAP12);
    }
    push("CONT", DType::I32, [5, 7, 1, 1], TRANSPOSE);
    // CONT that reshapes (ggml_cont_4d), e.g. merging heads after a permute.
    let mut reshape = |t: DType, ne: [usize; 4], axes: Option<[usize; 4]>, to: [usize; 4]| {
        let name = format!(
            "CONT(type={t},ne={}{},to={})",
            fmt_ne(&ne),
            fmt_perm("permute", axes),
            fmt_ne(&to)
        );
        v.push(Case::new("CONT", name, move || {
            let mut g = CaseGraph::new();
            let a = permuted_leaf(&mut g, "a", t, ne, axes, None)?;
            let out = g.cont_4d(a, to)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    };
    for t in [DType::F32, DType::F16] {
        reshape(t, [8, 4, 6, 1], SWAP12, [32, 6, 1, 1]);
        reshape(t, [6, 5, 2, 1], TRANSPOSE, [2, 30, 1, 1]);
    }
    reshape(
        DType::Q8_0,
        [qrow(DType::Q8_0), 3, 2, 1],
        None,
        [qrow(DType::Q8_0), 6, 1, 1],
    );
}

fn push_cpy(
    v: &mut Vec<Case>,
    ts: DType,
    td: DType,
    ne: [usize; 4],
    ps: Option<[usize; 4]>,
    pd: Option<[usize; 4]>,
) {
    let name = format!(
        "CPY(type_src={ts},type_dst={td},ne={}{}{})",
        fmt_ne(&ne),
        fmt_perm("permute_src", ps),
        fmt_perm("permute_dst", pd)
    );
    v.push(Case::new("CPY", name, move || {
        let mut g = CaseGraph::new();
        let src = permuted_leaf(&mut g, "src", ts, ne, ps, None)?;
        let dst = permuted_leaf(&mut g, "dst", td, ne, pd, None)?;
        let out = g.cpy(src, dst)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}

fn cpy_cases(v: &mut Vec<Case>) {
    // Same type: exact copies.
    for t in FLOATS {
        push_cpy(v, t, t, [33, 3, 2, 1], None, None);
        push_cpy(v, t, t, [7, 3, 2, 1], SWAP12, None);
    }
    push_cpy(v, DType::I32, DType::I32, [7, 3, 2, 1], ROTATE, None);
    for t in QUANTS {
        push_cpy(v, t, t, [qrow(t), 3, 1, 1], None, None);
    }
    // Between float types, contiguous and strided on either side.
    for ts in FLOATS {
        for td in FLOATS.into_iter().filter(|&td| td != ts) {
            push_cpy(v, ts, td, [33, 3, 2, 1], None, None);
            push_cpy(v, ts, td, [7, 5, 3, 1], ROTATE, None);
        }
    }
    push_cpy(v, DType::F32, DType::F16, [5, 7, 2, 1], TRANSPOSE, SWAP12);
    push_cpy(v, DType::F16, DType::F32, [6, 4, 3, 1], None, ROTATE);
    // Quantize on copy and dequantize.
    for t in QUANTS {
        push_cpy(v, DType::F32, t, [qrow(t), 3, 2, 1], None, None);
        push_cpy(v, t, DType::F32, [qrow(t), 3, 2, 1], None, None);
    }
    push_cpy(v, DType::F32, DType::Q8_0, [64, 3, 2, 1], SWAP12, None);
    push_cpy(v, DType::Q4_0, DType::F32, [64, 3, 2, 1], None, SWAP12);
    // A KV-cache style write: rows 2..5 of an [16, 8] F16 cache.
    for td in [DType::F16, DType::F32, DType::Q8_0] {
        let ne0 = if td.is_quantized() { 32 } else { 16 };
        let name =
            format!("CPY(type_src=f32,type_dst={td},ne=[{ne0},3,1,1],dst=view_rows_2_5_of_8)");
        v.push(Case::new("CPY", name, move || {
            let mut g = CaseGraph::new();
            let src = g.leaf("src", DType::F32, &[ne0, 3])?;
            let cache = g.leaf("cache", td, &[ne0, 8])?;
            let row = td.row_size(ne0)?;
            let view = g.view_2d(cache, ne0, 3, row, 2 * row)?;
            let out = g.cpy(src, view)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

/// Copies out of and into RESHAPE and VIEW results (views need no kernel,
/// but the copy must read and write through them).
fn view_cases(v: &mut Vec<Case>) {
    for td in [DType::F32, DType::F16] {
        let name = format!("CPY(type_src=f32,type_dst={td},ne=[8,3,1,1],src=reshape_of_[6,4])");
        v.push(Case::new("CPY", name, move || {
            let mut g = CaseGraph::new();
            let a = g.leaf("a", DType::F32, &[6, 4])?;
            let r = g.reshape(a, &[8, 3])?;
            let dst = g.leaf("dst", td, &[8, 3])?;
            let out = g.cpy(r, dst)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
    // Every other row of a [5, 6, 2] tensor, starting at row 1, made contiguous.
    v.push(Case::new(
        "CONT",
        "CONT(type=f32,ne=[5,3,2,1],src=view_of_odd_rows)".to_string(),
        || {
            let mut g = CaseGraph::new();
            let a = g.leaf("a", DType::F32, &[5, 6, 2])?;
            let l = g.layout(a)?;
            let view = g.view(a, [5, 3, 2, 1], [2 * l.nb[1], l.nb[2], l.nb[3]], l.nb[1])?;
            let out = g.cont(view)?;
            g.check(out)?;
            Ok(g.finish())
        },
    ));
}

fn concat_cases(v: &mut Vec<Case>) {
    let mut push = |t: DType, dim: usize, axes: Option<[usize; 4]>| {
        let ne_a = [7, 3, 2, 2];
        let mut ne_b = ne_a;
        ne_b[dim] = 1 + dim;
        let name = format!(
            "CONCAT(type={t},ne_a={},ne_b={},dim={dim}{})",
            fmt_ne(&ne_a),
            fmt_ne(&ne_b),
            fmt_perm("permute_a", axes)
        );
        v.push(Case::new("CONCAT", name, move || -> Result<_> {
            let mut g = CaseGraph::new();
            let a = permuted_leaf(&mut g, "a", t, ne_a, axes, None)?;
            let b = g.leaf("b", t, &ne_b)?;
            let out = g.concat(a, b, dim)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    };
    for dim in 0..4 {
        push(DType::F32, dim, None);
    }
    push(DType::F16, 1, None);
    push(DType::BF16, 0, None);
    push(DType::F32, 2, SWAP12);
    push(DType::I32, 1, None);
}
