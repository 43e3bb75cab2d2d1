//! Mixture-of-experts cases: MUL_MAT_ID for every weight type of
//! `MUL_MAT_WEIGHT_TYPES` (8 experts; 1, 2 or 4 used; 1 and 32 tokens; `b`
//! per expert or broadcast; ids from a leaf of distinct experts per token, or
//! the strided top-k view of an ARGSORT as a model builds them), ADD_ID and
//! gpt-oss's SWIGLU_OAI.

use tessera::{DType, MUL_MAT_WEIGHT_TYPES, SortOrder};

use super::{Case, CaseGraph, Init, fmt_ne};

/// One MUL_MAT_ID shape (test-backend-ops' `test_mul_mat_id` terms).
#[derive(Clone, Copy)]
struct Shape {
    n_as: usize,
    n_used: usize,
    /// `b` has one row per token (broadcast to every expert used).
    b_bcast: bool,
    m: usize,
    n_tokens: usize,
    /// The ids are the top-`n_used` view of an ARGSORT of router logits.
    from_argsort: bool,
}

pub(super) fn cases(v: &mut Vec<Case>) {
    let sh = |n_used, b_bcast, m, n_tokens| Shape {
        n_as: 8,
        n_used,
        b_bcast,
        m,
        n_tokens,
        from_argsort: false,
    };
    for t in MUL_MAT_WEIGHT_TYPES {
        let k = if t.block_size() == 256 { 256 } else { 64 };
        for s in [
            sh(1, false, 16, 1),
            sh(2, true, 16, 1),
            sh(4, false, 7, 1),
            sh(2, false, 33, 32),
            sh(4, true, 19, 32),
            Shape {
                from_argsort: true,
                ..sh(2, true, 16, 32)
            },
        ] {
            push_mul_mat_id(v, t, k, s);
        }
    }
    for (n_used, n_tokens) in [(1, 1), (2, 5), (4, 32)] {
        push_add_id(v, 33, 8, n_used, n_tokens);
    }
    // gpt-oss's constants (alpha 1.702, limit 7) over values that cross the
    // limits, a tight limit, and a negative one (every g clamps to -limit).
    for (alpha, limit, range) in [(1.702, 7.0, 10.0), (1.0, 0.5, 1.0), (1.702, -0.25, 1.0)] {
        push_swiglu_oai(v, [33, 4, 3], alpha, limit, range);
    }
}

fn push_swiglu_oai(v: &mut Vec<Case>, ne: [usize; 3], alpha: f32, limit: f32, range: f32) {
    let name = format!(
        "SWIGLU_OAI(type=f32,ne={},alpha={alpha},limit={limit},range={range})",
        fmt_ne(&ne)
    );
    v.push(Case::new("SWIGLU_OAI", name, move || {
        let mut g = CaseGraph::new();
        let init = || Init::Uniform {
            lo: -range,
            hi: range,
        };
        let x = g.leaf_init("x", DType::F32, &ne, init())?;
        let y = g.leaf_init("g", DType::F32, &ne, init())?;
        let out = g.swiglu_oai(x, y, alpha, limit)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}

fn push_mul_mat_id(v: &mut Vec<Case>, t: DType, k: usize, s: Shape) {
    let name = format!(
        "MUL_MAT_ID(type_a={t},type_b=f32,n_mats={},n_used={},b={},m={},n={},k={}{})",
        s.n_as,
        s.n_used,
        s.b_bcast,
        s.m,
        s.n_tokens,
        k,
        if s.from_argsort { ",ids=argsort" } else { "" }
    );
    v.push(Case::new("MUL_MAT_ID", name, move || {
        let mut g = CaseGraph::new();
        let a = g.leaf("as", t, &[k, s.m, s.n_as])?;
        let nb = if s.b_bcast { 1 } else { s.n_used };
        let b = g.leaf("b", DType::F32, &[k, nb, s.n_tokens])?;
        let ids = if s.from_argsort {
            let logits = g.leaf("logits", DType::F32, &[s.n_as, s.n_tokens])?;
            let order = g.argsort(logits, SortOrder::Desc)?;
            g.view_2d(order, s.n_used, s.n_tokens, s.n_as * 4, 0)?
        } else {
            g.leaf_init(
                "ids",
                DType::I32,
                &[s.n_used, s.n_tokens],
                Init::RowIds {
                    rows: s.n_as,
                    distinct: true,
                },
            )?
        };
        let out = g.mul_mat_id(a, b, ids)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}

fn push_add_id(v: &mut Vec<Case>, ne0: usize, n_as: usize, n_used: usize, n_tokens: usize) {
    let name = format!(
        "ADD_ID(type_a=f32,type_b=f32,ne={},n_mats={n_as})",
        fmt_ne(&[ne0, n_used, n_tokens])
    );
    v.push(Case::new("ADD_ID", name, move || {
        let mut g = CaseGraph::new();
        let a = g.leaf("a", DType::F32, &[ne0, n_used, n_tokens])?;
        let b = g.leaf("b", DType::F32, &[ne0, n_as])?;
        let ids = g.leaf_init(
            "ids",
            DType::I32,
            &[n_used, n_tokens],
            Init::RowIds {
                rows: n_as,
                distinct: true,
            },
        )?;
        let out = g.add_id(a, b, ids)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}
