//! Element-wise cases: ADD/MUL/DIV/SUB (broadcast, mixed types, strided
//! operands), SCALE, every UNARY function and every GLU (fused, swapped, split)
//! over F32/F16/BF16.

use tessera::{DType, GluOp, Result, TensorId, UnaryOp};

use super::{Case, CaseGraph, Init, fmt_ne};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

pub(super) fn cases(v: &mut Vec<Case>) {
    binary_cases(v);
    scale_cases(v);
    unary_cases(v);
    glu_cases(v);
}

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Mul,
    Div,
    Sub,
}

impl Bin {
    fn name(self) -> &'static str {
        match self {
            Bin::Add => "ADD",
            Bin::Mul => "MUL",
            Bin::Div => "DIV",
            Bin::Sub => "SUB",
        }
    }

    fn apply(self, g: &mut CaseGraph, a: TensorId, b: TensorId) -> Result<TensorId> {
        match self {
            Bin::Add => g.add(a, b),
            Bin::Mul => g.mul(a, b),
            Bin::Div => g.div(a, b),
            Bin::Sub => g.sub(a, b),
        }
    }

    /// Divisors stay away from 0, where relative errors explode.
    fn init_b(self) -> Init {
        match self {
            Bin::Div => Init::Uniform { lo: 0.5, hi: 1.5 },
            _ => Init::Uniform { lo: -1.0, hi: 1.0 },
        }
    }
}

/// How an operand is laid out in memory.
#[derive(Clone, Copy, PartialEq)]
enum Mem {
    Contiguous,
    /// Stored with dims (1, 2, 0, 3) and permuted back.
    Permuted,
    /// Stored with dims 0 and 1 swapped and transposed back.
    Transposed,
}

/// A leaf that appears with extents `ne` after the view `mem`.
fn operand(
    g: &mut CaseGraph,
    name: &str,
    t: DType,
    ne: [usize; 4],
    mem: Mem,
    init: Init,
) -> Result<TensorId> {
    match mem {
        Mem::Contiguous => g.leaf_init(name, t, &ne, init),
        Mem::Permuted => {
            // permute: source dim i becomes dim p[i], so store ne[p[i]].
            let p = [1, 2, 0, 3];
            let leaf = g.leaf_init(name, t, &[ne[p[0]], ne[p[1]], ne[p[2]], ne[p[3]]], init)?;
            g.permute(leaf, p)
        }
        Mem::Transposed => {
            let leaf = g.leaf_init(name, t, &[ne[1], ne[0], ne[2], ne[3]], init)?;
            g.transpose(leaf)
        }
    }
}

fn mem_tag(mem: Mem) -> &'static str {
    match mem {
        Mem::Contiguous => "",
        Mem::Permuted => ",perm=[1,2,0,3]",
        Mem::Transposed => ",transposed",
    }
}

#[allow(clippy::too_many_arguments)]
fn push_binary(
    v: &mut Vec<Case>,
    op: Bin,
    ta: DType,
    tb: DType,
    na: [usize; 4],
    nb: [usize; 4],
    ma: Mem,
    mb: Mem,
) {
    let types = if ta == tb {
        format!("type={ta}")
    } else {
        format!("type_a={ta},type_b={tb}")
    };
    let name = format!(
        "{}({types},ne_a={},ne_b={}{}{})",
        op.name(),
        fmt_ne(&na),
        fmt_ne(&nb),
        if ma == Mem::Contiguous {
            ""
        } else {
            ",a_strided"
        },
        mem_tag(mb)
    );
    v.push(Case::new(op.name(), name, move || {
        let mut g = CaseGraph::new();
        let a = operand(&mut g, "a", ta, na, ma, Init::Uniform { lo: -1.0, hi: 1.0 })?;
        let b = operand(&mut g, "b", tb, nb, mb, op.init_b())?;
        let out = op.apply(&mut g, a, b)?;
        g.check(out)?;
        Ok(g.finish())
    }));
}

fn binary_cases(v: &mut Vec<Case>) {
    let shapes = [
        ([1, 1, 1, 1], [1, 1, 1, 1]),
        ([7, 3, 1, 1], [7, 3, 1, 1]),
        ([33, 4, 3, 2], [33, 1, 3, 1]),
        ([16, 6, 4, 2], [16, 3, 2, 1]),
        ([129, 2, 1, 1], [1, 2, 1, 1]),
        ([4096, 3, 1, 1], [4096, 1, 1, 1]),
    ];
    for op in [Bin::Add, Bin::Mul, Bin::Div, Bin::Sub] {
        for t in FLOATS {
            for (na, nb) in shapes {
                push_binary(v, op, t, t, na, nb, Mem::Contiguous, Mem::Contiguous);
            }
        }
        for t in [DType::F16, DType::BF16] {
            push_binary(
                v,
                op,
                t,
                DType::F32,
                [33, 4, 3, 2],
                [33, 1, 3, 1],
                Mem::Contiguous,
                Mem::Contiguous,
            );
        }
        // Strided operands: b permuted (as in test-backend-ops), a transposed.
        push_binary(
            v,
            op,
            DType::F32,
            DType::F32,
            [10, 5, 4, 3],
            [10, 5, 4, 3],
            Mem::Contiguous,
            Mem::Permuted,
        );
        push_binary(
            v,
            op,
            DType::F32,
            DType::F32,
            [7, 5, 2, 1],
            [7, 1, 2, 1],
            Mem::Transposed,
            Mem::Contiguous,
        );
        push_binary(
            v,
            op,
            DType::F16,
            DType::F16,
            [7, 5, 2, 1],
            [7, 5, 2, 1],
            Mem::Transposed,
            Mem::Transposed,
        );
    }
}

fn scale_cases(v: &mut Vec<Case>) {
    let params = [
        ([7, 3, 1, 1], 0.5f32, 0.0f32, Mem::Contiguous),
        ([129, 2, 3, 1], -1.25, 0.75, Mem::Contiguous),
        ([1, 1, 1, 1], 3.0, -1.0, Mem::Contiguous),
        ([9, 7, 2, 1], 2.0, 0.5, Mem::Transposed),
    ];
    for (ne, s, b, mem) in params {
        let name = format!(
            "SCALE(type=f32,ne={},scale={s},bias={b}{})",
            fmt_ne(&ne),
            mem_tag(mem)
        );
        v.push(Case::new("SCALE", name, move || {
            let mut g = CaseGraph::new();
            let a = operand(
                &mut g,
                "a",
                DType::F32,
                ne,
                mem,
                Init::Uniform { lo: -1.0, hi: 1.0 },
            )?;
            let out = g.scale_bias(a, s, b)?;
            g.check(out)?;
            Ok(g.finish())
        }));
    }
}

fn unary_cases(v: &mut Vec<Case>) {
    // [-4, 4] reaches the curved parts of every function without overflowing f16.
    let init = Init::Uniform { lo: -4.0, hi: 4.0 };
    for f in UnaryOp::ALL {
        let mut push = |t: DType, ne: [usize; 4], mem: Mem| {
            let name = format!("{}(type={t},ne={}{})", f.name(), fmt_ne(&ne), mem_tag(mem));
            let init = init.clone();
            v.push(Case::new(f.name(), name, move || {
                let mut g = CaseGraph::new();
                let a = operand(&mut g, "a", t, ne, mem, init.clone())?;
                let out = g.unary(a, f)?;
                g.check(out)?;
                Ok(g.finish())
            }));
        };
        for t in FLOATS {
            push(t, [7, 3, 1, 1], Mem::Contiguous);
            push(t, [129, 1, 2, 1], Mem::Contiguous);
        }
        push(DType::F32, [5, 4, 3, 1], Mem::Permuted);
    }
}

fn glu_cases(v: &mut Vec<Case>) {
    let init = Init::Uniform { lo: -3.0, hi: 3.0 };
    for f in GluOp::ALL {
        for t in FLOATS {
            // (x extents, swapped, split)
            let variants = [
                ([7, 3, 1, 1], false, false),
                ([33, 2, 2, 1], true, false),
                ([129, 2, 1, 1], false, true),
                ([1, 3, 1, 1], false, false),
            ];
            for (ne, swapped, split) in variants {
                push_glu(v, f, t, ne, swapped, split, false, init.clone());
            }
        }
        push_glu(
            v,
            f,
            DType::F32,
            [16, 3, 4, 1],
            false,
            false,
            true,
            init.clone(),
        );
        push_glu(
            v,
            f,
            DType::F32,
            [16, 3, 4, 1],
            false,
            true,
            true,
            init.clone(),
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn push_glu(
    v: &mut Vec<Case>,
    f: GluOp,
    t: DType,
    ne: [usize; 4],
    swapped: bool,
    split: bool,
    permuted: bool,
    init: Init,
) {
    let name = format!(
        "{}(type={t},ne={},swapped={},split={}{})",
        f.name(),
        fmt_ne(&ne),
        u8::from(swapped),
        u8::from(split),
        if permuted { ",perm=[0,2,1,3]" } else { "" }
    );
    v.push(Case::new(f.name(), name, move || {
        let mut g = CaseGraph::new();
        // A leaf of extents `e` seen through the optional dims-1-2 swap.
        let input = |g: &mut CaseGraph, name: &str, e: [usize; 4]| -> Result<TensorId> {
            if permuted {
                let leaf = g.leaf_init(name, t, &[e[0], e[2], e[1], e[3]], init.clone())?;
                g.permute(leaf, [0, 2, 1, 3])
            } else {
                g.leaf_init(name, t, &e, init.clone())
            }
        };
        let out = if split {
            let x = input(&mut g, "x", ne)?;
            let gate = input(&mut g, "g", ne)?;
            g.glu_split(x, gate, f)?
        } else {
            let a = input(&mut g, "a", [2 * ne[0], ne[1], ne[2], ne[3]])?;
            g.glu(a, f, swapped)?
        };
        g.check(out)?;
        Ok(g.finish())
    }));
}
