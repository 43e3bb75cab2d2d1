//! Bad input for the graph builder (tessera-core's op constructors): every
//! op the builder offers, called with operands drawn from a pool of tensors
//! of every type and odd shapes (empty, broadcast extents whose product
//! overflows, permuted views), ids of another graph or out of range, and
//! parameters that are zero, negative, huge or not finite. A case applies
//! one to three ops, later ones possibly on the results of earlier ones
//! (views of views). An op that succeeds must leave a node whose span is
//! computable and, for a view, inside its root's memory.

use proptest::prelude::*;
use tessera::{DType, GluOp, Graph, Layout, RopeMode, RopeParams, SortOrder, TensorId, UnaryOp};

use super::strategies::{dtype, extent, float_param, offset, raw_layout, sample, shape, stride};
use super::{Case, Stop, ensure};

/// Operand choice: a tensor of the pool (index modulo its size), an id of
/// another graph, or an id by position (often out of range).
#[derive(Clone, Copy, Debug)]
pub(super) enum Pick {
    Pool(usize),
    Foreign(u32),
    Index(u32),
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        10 => (0usize..64).prop_map(Pick::Pool),
        1 => (0u32..4).prop_map(Pick::Foreign),
        1 => prop_oneof![0u32..64, any::<u32>()].prop_map(Pick::Index),
    ]
}

/// One op call: which op, and every parameter any op could want.
#[derive(Clone, Debug)]
pub(super) struct Spec {
    pub(super) kind: usize,
    pub(super) ops: [Pick; 4],
    pub(super) ext: [usize; 4],
    pub(super) nb: [usize; 4],
    pub(super) off: usize,
    pub(super) f: [f32; 4],
    pub(super) axes: [usize; 4],
    pub(super) flag: bool,
    pub(super) ty: DType,
    pub(super) shape: Vec<usize>,
    pub(super) layout: Layout,
}

pub(super) const KINDS: [&str; 54] = [
    "dup",
    "cont",
    "cpy",
    "reshape",
    "view",
    "view_1d",
    "view_2d",
    "view_3d",
    "permute",
    "transpose",
    "concat",
    "get_rows",
    "set_rows",
    "argmax",
    "sum_rows",
    "add",
    "mul",
    "div",
    "scale",
    "scale_bias",
    "unary",
    "glu",
    "glu_split",
    "swiglu_split",
    "rms_norm",
    "norm",
    "soft_max",
    "soft_max_ext",
    "rope",
    "flash_attn_ext",
    "mul_mat",
    "new_leaf",
    "new_tensor",
    "input",
    "set_name",
    "set_input",
    "set_output",
    "node",
    "memory_root",
    "describe_node",
    "sub",
    "sqr",
    "sqrt",
    "clamp",
    "softcap",
    "l2_norm",
    "repeat",
    "pad",
    "pad_ext",
    "argsort",
    "top_k",
    "soft_max_sinks",
    "rope_multi",
    "flash_attn_sinks",
];

pub(super) fn spec() -> impl Strategy<Value = Spec> {
    (
        (0..KINDS.len(), prop::array::uniform4(pick())),
        (
            prop::array::uniform4(extent()),
            prop::array::uniform4(stride()),
        ),
        (offset(), prop::array::uniform4(float_param())),
        (prop::array::uniform4(0usize..6), any::<bool>(), dtype()),
        (shape(), raw_layout()),
    )
        .prop_map(
            |((kind, ops), (ext, nb), (off, f), (axes, flag, ty), (shape, layout))| Spec {
                kind,
                ops,
                ext,
                nb,
                off,
                f,
                axes,
                flag,
                ty,
                shape,
                layout,
            },
        )
}

impl Spec {
    pub(super) fn describe(&self) -> String {
        format!(
            "{}(ops {:?}, ext {:?}, nb {:?}, off {}, f {:?}, axes {:?}, flag {}, {} {:?}, layout {:?})",
            KINDS[self.kind],
            self.ops,
            self.ext,
            self.nb,
            self.off,
            self.f,
            self.axes,
            self.flag,
            self.ty,
            self.shape,
            self.layout
        )
    }
}

/// The pool: tensors of every type and some odd shapes, and a second graph
/// whose ids are foreign to it.
pub(super) fn pool() -> tessera::Result<(Graph, Vec<TensorId>, Graph)> {
    let mut g = Graph::new();
    let mut ids = Vec::new();
    let shapes: [(DType, &[usize]); 24] = [
        (DType::F32, &[8, 4, 2]),
        (DType::F32, &[8]),
        (DType::F32, &[4, 8]),
        (DType::F32, &[0, 3]),
        (DType::F32, &[1]),
        (DType::F32, &[64, 4]),
        (DType::F32, &[256, 2]),
        (DType::F32, &[8, 8, 2]),
        (DType::F16, &[8, 4, 2]),
        (DType::F16, &[8, 8]),
        (DType::BF16, &[8, 4]),
        (DType::I32, &[4]),
        (DType::I32, &[4, 2, 1]),
        (DType::I32, &[2]),
        (DType::I64, &[4]),
        (DType::Q4_0, &[64, 4]),
        (DType::Q8_0, &[32, 3, 2]),
        (DType::Q4K, &[256, 2]),
        (DType::Q6K, &[256]),
        (DType::IQ4NL, &[32, 2]),
        (DType::IQ4XS, &[256]),
        (DType::Q8K, &[256]),
        (DType::F32, &[32, 4, 2, 2]),
        (DType::F16, &[32, 6, 2, 2]),
    ];
    for (t, ne) in shapes {
        ids.push(g.new_tensor(t, ne)?);
    }
    // Broadcast extents whose product overflows, in one element of memory.
    ids.push(g.new_leaf(Layout {
        dtype: DType::F32,
        ne: [1, 1 << 40, 1 << 30, 1],
        nb: [4, 0, 0, 0],
    })?);
    ids.push(g.new_leaf(Layout {
        dtype: DType::F32,
        ne: [8, 1 << 62, 1, 4],
        nb: [4, 0, 32, 32],
    })?);
    let p = g.permute(ids[0], [2, 0, 1, 3])?;
    ids.push(p);
    ids.push(g.transpose(ids[2])?);
    ids.push(g.view_2d(ids[5], 32, 2, 256, 64)?);
    let mut other = Graph::new();
    for _ in 0..4 {
        other.new_tensor(DType::F32, &[8])?;
    }
    Ok((g, ids, other))
}

fn resolve(p: Pick, ids: &[TensorId], other: &Graph) -> TensorId {
    match p {
        Pick::Pool(i) => ids[i % ids.len()],
        Pick::Foreign(i) => other
            .ids()
            .nth(i as usize % other.len().max(1))
            .unwrap_or(TensorId::from_index(i)),
        Pick::Index(i) => TensorId::from_index(i),
    }
}

pub(super) fn apply(
    s: &Spec,
    g: &mut Graph,
    ids: &[TensorId],
    other: &Graph,
) -> tessera::Result<Option<TensorId>> {
    let [a, b, c, d] = s.ops.map(|p| resolve(p, ids, other));
    let [e0, e1, e2, e3] = s.ext;
    let [n0, n1, n2, _] = s.nb;
    let [f0, f1, f2, f3] = s.f;
    let unary = [
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::GeluQuick,
    ][e0 % 8];
    let glu = [
        GluOp::SwiGlu,
        GluOp::GeGlu,
        GluOp::ReGlu,
        GluOp::GeGluErf,
        GluOp::GeGluQuick,
    ][e1 % 5];
    let opt = |flag: bool, id: TensorId| flag.then_some(id);
    let id = match KINDS[s.kind] {
        "dup" => g.dup(a)?,
        "cont" => g.cont(a)?,
        "cpy" => g.cpy(a, b)?,
        "reshape" => g.reshape(a, &s.shape)?,
        "view" => g.view(a, s.ext, [n0, n1, n2], s.off)?,
        "view_1d" => g.view_1d(a, e0, s.off)?,
        "view_2d" => g.view_2d(a, e0, e1, n0, s.off)?,
        "view_3d" => g.view_3d(a, e0, e1, e2, n0, n1, s.off)?,
        "permute" => g.permute(a, s.axes)?,
        "transpose" => g.transpose(a)?,
        "concat" => g.concat(a, b, s.axes[0])?,
        "get_rows" => g.get_rows(a, b)?,
        "set_rows" => g.set_rows(a, b, c)?,
        "argmax" => g.argmax(a)?,
        "sum_rows" => g.sum_rows(a)?,
        "add" => g.add(a, b)?,
        "mul" => g.mul(a, b)?,
        "div" => g.div(a, b)?,
        "sub" => g.sub(a, b)?,
        "sqr" => g.sqr(a)?,
        "sqrt" => g.sqrt(a)?,
        "clamp" => g.clamp(a, f0, f1)?,
        "softcap" => g.softcap(a, f0)?,
        "l2_norm" => g.l2_norm(a, f0)?,
        "repeat" => g.repeat(a, b)?,
        "pad" => g.pad(a, s.ext)?,
        "pad_ext" => g.pad_ext(a, s.ext, s.nb)?,
        "argsort" => g.argsort(
            a,
            if s.flag {
                SortOrder::Desc
            } else {
                SortOrder::Asc
            },
        )?,
        "top_k" => g.top_k(a, e0)?,
        "scale" => g.scale(a, f0)?,
        "scale_bias" => g.scale_bias(a, f0, f1)?,
        "unary" => g.unary(a, unary)?,
        "glu" => g.glu(a, glu, s.flag)?,
        "glu_split" => g.glu_split(a, b, glu)?,
        "swiglu_split" => g.swiglu_split(a, b)?,
        "rms_norm" => g.rms_norm(a, f0)?,
        "norm" => g.norm(a, f0)?,
        "soft_max" => g.soft_max(a)?,
        "soft_max_ext" => g.soft_max_ext(a, opt(s.flag, b), f0, f1)?,
        "rope" => {
            let p = RopeParams {
                n_dims: e0,
                mode: if s.flag {
                    RopeMode::Neox
                } else {
                    RopeMode::Normal
                },
                n_ctx_orig: e1,
                freq_base: f0,
                freq_scale: f1,
                ext_factor: f2,
                attn_factor: f3,
                beta_fast: 32.0,
                beta_slow: 1.0,
                sections: [0; 4],
            };
            g.rope(a, b, opt(e3 % 2 == 0, c), p)?
        }
        "rope_multi" => {
            let mode = [RopeMode::Mrope, RopeMode::Vision, RopeMode::Imrope][e3 % 3];
            let sections = [e1, e2, e3, e0].map(|e| e.min(u32::MAX as usize) as u32);
            let mut p = RopeParams::multi(e0, mode, sections, f0);
            p.freq_scale = f1;
            p.ext_factor = f2;
            g.rope(a, b, opt(s.flag, c), p)?
        }
        "soft_max_sinks" => g.soft_max_ext_sinks(a, opt(s.flag, b), c, f0, f1)?,
        "flash_attn_sinks" => g.flash_attn_ext_sinks(a, b, c, opt(s.flag, d), d, f0, f1, f2)?,
        "flash_attn_ext" => g.flash_attn_ext(a, b, c, opt(s.flag, d), f0, f1, f2)?,
        "mul_mat" => g.mul_mat(a, b)?,
        "new_leaf" => g.new_leaf(s.layout)?,
        "new_tensor" => g.new_tensor(s.ty, &s.shape)?,
        "input" => g.input("x", s.ty, &s.shape)?,
        "set_name" => {
            g.set_name(a, "n")?;
            return Ok(None);
        }
        "set_input" => {
            g.set_input(a)?;
            return Ok(None);
        }
        "set_output" => {
            g.set_output(a)?;
            return Ok(None);
        }
        "node" => {
            g.check_id(a)?;
            let _ = (g.node(a)?, g.layout(a)?);
            return Ok(None);
        }
        "memory_root" => {
            g.memory_root(a)?;
            return Ok(None);
        }
        _ => {
            let _ = (g.describe_node(a), g.use_counts(), g.find("x"));
            return Ok(None);
        }
    };
    Ok(Some(id))
}

/// What a new node must satisfy: a computable span, views inside their root.
fn check_node(g: &Graph, id: TensorId) -> Result<(), Stop> {
    let node = g.node(id)?;
    let n = node.layout.checked_nbytes();
    ensure(n.is_ok(), || {
        format!("new node {} has no span: {n:?}", g.describe_node(id))
    })?;
    for s in node.src_ids() {
        g.check_id(s)?;
    }
    if let Some(root) = node.view_src {
        let rn = g.node(root)?;
        ensure(!rn.is_view(), || {
            format!("view root {root} is itself a view")
        })?;
        let span = n.unwrap_or(0);
        let root_bytes = rn.layout.checked_nbytes().unwrap_or(0);
        let end = node.view_offs.checked_add(span);
        ensure(span == 0 || end.is_some_and(|e| e <= root_bytes), || {
            format!(
                "view {} ends at {end:?}, past the {root_bytes} bytes of its root",
                g.describe_node(id)
            )
        })?;
    }
    let _ = (g.describe_node(id), g.memory_root(id)?);
    Ok(())
}

pub(super) fn graph_cases() -> Vec<Case> {
    let specs = sample(prop::collection::vec(spec(), 1..=3), 420, 20);
    specs
        .into_iter()
        .map(|chain| {
            let name = chain
                .iter()
                .map(Spec::describe)
                .collect::<Vec<_>>()
                .join(" ; ");
            Case::new(name, move || -> Result<(), Stop> {
                let (mut g, mut ids, other) = super::setup(pool())?;
                let mut last = Ok(());
                for s in &chain {
                    match apply(s, &mut g, &ids, &other) {
                        Ok(Some(id)) => {
                            check_node(&g, id)?;
                            ids.push(id);
                            last = Ok(());
                        }
                        Ok(None) => last = Ok(()),
                        Err(e) => last = Err(Stop::Lib(e)),
                    }
                }
                let copy = g.clone();
                ensure(copy == g, || "a clone differs".into())?;
                last
            })
        })
        .collect()
}
