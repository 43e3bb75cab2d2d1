//! Cases of SQR, SQRT, CLAMP, the soft cap (SCALE, TANH, SCALE), L2_NORM,
//! REPEAT, PAD, ARGSORT and TOP_K: odd sizes, broadcasts, several types,
//! strided (permuted) sources, ties.

use tessera::{DType, Op, Result, SortOrder, TensorId};

use super::{Case, CaseGraph, Init, fmt_ne, fmt_perm, permuted_leaf};

pub(super) fn cases(v: &mut Vec<Case>) {
    elementwise_cases(v);
    l2_norm_cases(v);
    repeat_cases(v);
    pad_cases(v);
    sort_cases(v);
}

/// A case named `name` testing `op`: a leaf `a` (type `t`, extents `ne`,
/// seen through `permute(axes)`, filled by `init`) and `f(a)` checked.
#[allow(clippy::too_many_arguments)]
fn push(
    v: &mut Vec<Case>,
    op: &'static str,
    name: String,
    t: DType,
    ne: [usize; 4],
    axes: Option<[usize; 4]>,
    init: Init,
    f: impl Fn(&mut CaseGraph, TensorId) -> Result<TensorId> + Send + Sync + 'static,
) {
    v.push(Case::new(op, name, move || {
        let mut g = CaseGraph::new();
        let a = permuted_leaf(&mut g, "a", t, ne, axes, Some(init.clone()))?;
        let out = f(&mut g, a)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}

const PERM: Option<[usize; 4]> = Some([1, 2, 0, 3]);

fn elementwise_cases(v: &mut Vec<Case>) {
    let wide = Init::Uniform { lo: -4.0, hi: 4.0 };
    let positive = Init::Uniform { lo: 0.01, hi: 4.0 };
    for t in [DType::F32, DType::F16, DType::BF16] {
        for (ne, axes) in [
            ([7, 3, 1, 1], None),
            ([129, 1, 2, 1], None),
            ([5, 4, 3, 1], PERM),
        ] {
            if axes.is_some() && t != DType::F32 {
                continue;
            }
            let tag = format!("type={t},ne={}{}", fmt_ne(&ne), fmt_perm("permute", axes));
            let (w, p) = (wide.clone(), positive.clone());
            push(
                v,
                "SQR",
                format!("SQR({tag})"),
                t,
                ne,
                axes,
                w.clone(),
                |g, a| g.sqr(a),
            );
            push(v, "SQRT", format!("SQRT({tag})"), t, ne, axes, p, |g, a| {
                g.sqrt(a)
            });
            for (min, max) in [(-1.5f32, 2.0f32), (f32::NEG_INFINITY, 0.25), (1.0, -1.0)] {
                let name = format!("CLAMP({tag},min={min},max={max})");
                push(v, "CLAMP", name, t, ne, axes, w.clone(), move |g, a| {
                    g.clamp(a, min, max)
                });
            }
        }
    }
    // Soft-capping (Gemma 2 logits): a composition, checked end to end.
    for (ne, cap) in [([33, 4, 1, 1], 5.0f32), ([129, 2, 2, 1], 30.0)] {
        let name = format!("SOFTCAP(type=f32,ne={},cap={cap})", fmt_ne(&ne));
        let init = Init::Uniform {
            lo: -4.0 * cap,
            hi: 4.0 * cap,
        };
        push(
            v,
            "SOFTCAP",
            name,
            DType::F32,
            ne,
            None,
            init,
            move |g, a| g.softcap(a, cap),
        );
    }
}

fn l2_norm_cases(v: &mut Vec<Case>) {
    let unit = Init::Uniform { lo: -1.0, hi: 1.0 };
    let tiny = Init::Uniform {
        lo: -1e-4,
        hi: 1e-4,
    };
    let shapes = [
        ([7, 3, 1, 1], 1e-6f32, None, unit.clone()),
        ([129, 2, 3, 1], 1e-12, None, unit.clone()),
        ([1, 4, 1, 1], 1e-6, None, unit.clone()),
        ([33, 4, 3, 1], 1e-6, Some([0, 2, 1, 3]), unit.clone()),
        // Norms below eps: the rows are divided by eps.
        ([16, 3, 1, 1], 1e-2, None, tiny),
    ];
    for (ne, eps, axes, init) in shapes {
        let name = format!(
            "L2_NORM(type=f32,ne={},eps={eps:e}{})",
            fmt_ne(&ne),
            fmt_perm("permute", axes)
        );
        push(
            v,
            "L2_NORM",
            name,
            DType::F32,
            ne,
            axes,
            init,
            move |g, a| g.l2_norm(a, eps),
        );
    }
}

fn repeat_cases(v: &mut Vec<Case>) {
    type RepeatCase = (DType, [usize; 4], [usize; 4], Option<[usize; 4]>);
    let shapes: [RepeatCase; 6] = [
        (DType::F32, [3, 2, 1, 1], [6, 4, 3, 2], None),
        (DType::F32, [7, 1, 1, 1], [7, 5, 1, 1], None),
        (DType::F32, [1, 1, 1, 1], [9, 2, 1, 1], None),
        (DType::F16, [5, 3, 2, 1], [10, 3, 4, 1], None),
        (DType::I32, [4, 3, 1, 1], [8, 3, 2, 1], None),
        (DType::F32, [5, 4, 3, 1], [10, 8, 3, 2], PERM),
    ];
    for (t, ne, to, axes) in shapes {
        let name = format!(
            "REPEAT(type={t},ne={},nr={}{})",
            fmt_ne(&ne),
            fmt_ne(&[to[0] / ne[0], to[1] / ne[1], to[2] / ne[2], to[3] / ne[3]]),
            fmt_perm("permute", axes)
        );
        let init = Init::Ints {
            lo: -1000,
            hi: 1000,
        };
        push(v, "REPEAT", name, t, ne, axes, init, move |g, a| {
            g.repeat_4d(a, to)
        });
    }
}

fn pad_cases(v: &mut Vec<Case>) {
    type PadCase = (
        DType,
        [usize; 4],
        [usize; 4],
        [usize; 4],
        Option<[usize; 4]>,
    );
    let shapes: [PadCase; 6] = [
        (DType::F32, [7, 3, 2, 1], [0; 4], [1, 2, 0, 3], None),
        (DType::F32, [33, 1, 1, 1], [0; 4], [31, 0, 0, 0], None),
        (DType::F32, [5, 4, 3, 1], [1, 0, 2, 0], [2, 1, 0, 1], None),
        (DType::F16, [9, 2, 1, 1], [2, 1, 0, 0], [0, 1, 1, 0], None),
        (DType::I32, [4, 3, 1, 1], [0; 4], [3, 1, 1, 0], None),
        (DType::F32, [5, 4, 3, 1], [1, 1, 0, 0], [1, 0, 1, 1], PERM),
    ];
    for (t, ne, lp, rp, axes) in shapes {
        let name = format!(
            "PAD(type={t},ne={},lp={},rp={}{})",
            fmt_ne(&ne),
            fmt_ne(&lp),
            fmt_ne(&rp),
            fmt_perm("permute", axes)
        );
        let init = Init::Uniform { lo: -1.0, hi: 1.0 };
        push(v, "PAD", name, t, ne, axes, init, move |g, a| {
            g.pad_ext(a, lp, rp)
        });
    }
}

fn sort_cases(v: &mut Vec<Case>) {
    let uniform = Init::Uniform { lo: -1.0, hi: 1.0 };
    let ties = Init::Ints { lo: -3, hi: 3 };
    let shapes: [([usize; 4], Init); 6] = [
        ([16, 10, 3, 1], uniform.clone()),
        ([129, 3, 1, 1], uniform.clone()),
        ([1, 5, 1, 1], uniform.clone()),
        ([1024, 2, 1, 1], uniform.clone()),
        ([33, 4, 2, 1], ties.clone()),
        ([7, 3, 2, 2], ties),
    ];
    for (ne, init) in &shapes {
        let (ne, tie) = (*ne, matches!(init, Init::Ints { .. }));
        for order in [SortOrder::Asc, SortOrder::Desc] {
            let op = Op::Argsort { order };
            let name = format!(
                "ARGSORT(type=f32,ne={},order={}{})",
                fmt_ne(&ne),
                order.ggml_order(),
                if tie { ",ties" } else { "" }
            );
            push(
                v,
                op.name(),
                name,
                DType::F32,
                ne,
                None,
                init.clone(),
                move |g, a| g.argsort(a, order),
            );
        }
        let mut ks = vec![1, ne[0].div_ceil(3), ne[0]];
        ks.dedup();
        for k in ks {
            let name = format!(
                "TOP_K(type=f32,ne={},k={k}{})",
                fmt_ne(&ne),
                if tie { ",ties" } else { "" }
            );
            push(
                v,
                "TOP_K",
                name,
                DType::F32,
                ne,
                None,
                init.clone(),
                move |g, a| g.top_k(a, k),
            );
        }
    }
    // A strided source: rows contiguous, dims 1 and 2 swapped.
    let ne = [9, 4, 3, 1];
    let axes = Some([0, 2, 1, 3]);
    let perm = fmt_perm("permute", axes);
    push(
        v,
        "ARGSORT",
        format!("ARGSORT(type=f32,ne={},order=0{perm})", fmt_ne(&ne)),
        DType::F32,
        ne,
        axes,
        uniform.clone(),
        |g, a| g.argsort(a, SortOrder::Asc),
    );
    push(
        v,
        "TOP_K",
        format!("TOP_K(type=f32,ne={},k=4{perm})", fmt_ne(&ne)),
        DType::F32,
        ne,
        axes,
        uniform,
        |g, a| g.top_k(a, 4),
    );
}
