//! Builder tests of SUB, SQR, SQRT, CLAMP, GELU_QUICK, GEGLU_QUICK, the soft
//! cap, L2_NORM, REPEAT, PAD, ARGSORT and TOP_K.

use crate::error::Error;
use crate::graph::{Graph, TensorId};
use crate::op::{GluOp, Op, SortOrder, UnaryOp};
use crate::{DType, Result};

fn t(g: &mut Graph, dtype: DType, ne: &[usize]) -> TensorId {
    g.new_tensor(dtype, ne).unwrap()
}

fn invalid(r: Result<TensorId>, op: &str) {
    match r {
        Err(Error::InvalidOp { op: o, .. }) => assert_eq!(o, op),
        other => panic!("expected InvalidOp for {op}, got {other:?}"),
    }
}

fn ne(g: &Graph, id: TensorId) -> [usize; 4] {
    g.node(id).unwrap().layout.ne
}

#[test]
fn sub_and_elementwise() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[8, 6, 2]);
    let b = t(&mut g, DType::F32, &[8, 1, 2]);
    let c = g.sub(a, b).unwrap();
    assert_eq!(ne(&g, c), [8, 6, 2, 1]);
    assert_eq!(g.node(c).unwrap().op, Op::Sub);
    let bad = t(&mut g, DType::F32, &[3, 6, 2]);
    invalid(g.sub(a, bad), "SUB");
    let i = t(&mut g, DType::I32, &[8, 6, 2]);
    invalid(g.sub(i, a), "SUB");
    invalid(g.sqr(i), "SQR");
    invalid(g.sqrt(i), "SQRT");
    invalid(g.clamp(i, 0.0, 1.0), "CLAMP");
    invalid(g.clamp(a, f32::NAN, 1.0), "CLAMP");
    invalid(g.clamp(a, 0.0, f32::NAN), "CLAMP");
    let h = t(&mut g, DType::F16, &[8, 6]);
    for id in [
        g.sqr(h).unwrap(),
        g.sqrt(h).unwrap(),
        g.clamp(h, f32::NEG_INFINITY, 2.0).unwrap(),
        g.unary(h, UnaryOp::GeluQuick).unwrap(),
    ] {
        assert_eq!(g.node(id).unwrap().layout, g.node(h).unwrap().layout);
    }
    assert!(Op::Sqr.can_inplace() && Op::Sub.can_inplace());
    assert!(!Op::Clamp { min: 0.0, max: 1.0 }.can_inplace());
    let q = t(&mut g, DType::Q8_0, &[32]);
    invalid(g.unary(q, UnaryOp::GeluQuick), "GELU_QUICK");
    let s = g.glu(a, GluOp::GeGluQuick, false).unwrap();
    assert_eq!(ne(&g, s), [4, 6, 2, 1]);
    let odd = t(&mut g, DType::F32, &[7, 3]);
    invalid(g.glu(odd, GluOp::GeGluQuick, false), "GEGLU_QUICK");
    assert_eq!(GluOp::GeGluQuick.activation(), UnaryOp::GeluQuick);
}

#[test]
fn softcap_is_scale_tanh_scale() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[5, 2]);
    let y = g.softcap(a, 30.0).unwrap();
    let n = g.node(y).unwrap();
    assert_eq!(
        n.op,
        Op::Scale {
            scale: 30.0,
            bias: 0.0
        }
    );
    let th = n.src(0).unwrap();
    assert_eq!(g.node(th).unwrap().op, Op::Unary(UnaryOp::Tanh));
    invalid(g.softcap(a, 0.0), "SCALE");
    invalid(g.softcap(a, f32::INFINITY), "SCALE");
    invalid(g.softcap(a, -1.0), "SCALE");
    let h = t(&mut g, DType::F16, &[5, 2]);
    invalid(g.softcap(h, 2.0), "SCALE");
}

#[test]
fn l2_norm_repeat_pad() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[6, 3]);
    let n = g.l2_norm(a, 1e-6).unwrap();
    assert_eq!(g.node(n).unwrap().op, Op::L2Norm { eps: 1e-6 });
    invalid(g.l2_norm(a, -1.0), "L2_NORM");
    invalid(g.l2_norm(a, f32::NAN), "L2_NORM");
    let h = t(&mut g, DType::F16, &[6, 3]);
    invalid(g.l2_norm(h, 1e-6), "L2_NORM");

    let big = t(&mut g, DType::F32, &[12, 6, 2]);
    let r = g.repeat(a, big).unwrap();
    assert_eq!(ne(&g, r), [12, 6, 2, 1]);
    assert_eq!(g.node(r).unwrap().srcs[1], None);
    let r4 = g.repeat_4d(h, [6, 3, 1, 5]).unwrap();
    assert_eq!(ne(&g, r4), [6, 3, 1, 5]);
    invalid(g.repeat_4d(a, [7, 3, 1, 1]), "REPEAT");
    invalid(g.repeat(big, a), "REPEAT");
    let q = t(&mut g, DType::Q4_0, &[32, 2]);
    invalid(g.repeat_4d(q, [64, 2, 1, 1]), "REPEAT");

    let p = g.pad(a, [1, 2, 0, 3]).unwrap();
    assert_eq!(ne(&g, p), [7, 5, 1, 4]);
    let pe = g.pad_ext(a, [1, 0, 2, 0], [0, 1, 0, 0]).unwrap();
    assert_eq!(ne(&g, pe), [7, 4, 3, 1]);
    assert_eq!(
        g.node(pe).unwrap().op,
        Op::Pad {
            lp: [1, 0, 2, 0],
            rp: [0, 1, 0, 0]
        }
    );
    invalid(g.pad(q, [32, 0, 0, 0]), "PAD");
    invalid(g.pad(a, [1 << 40, 0, 0, 0]), "PAD");
    assert!(matches!(
        g.pad(a, [usize::MAX, 0, 0, 0]),
        Err(Error::InvalidOp { .. } | Error::Overflow(_))
    ));
}

#[test]
fn argsort_top_k() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[9, 3, 2]);
    let s = g.argsort(a, SortOrder::Desc).unwrap();
    let l = g.node(s).unwrap().layout;
    assert_eq!((l.dtype, l.ne), (DType::I32, [9, 3, 2, 1]));
    let k = g.top_k(a, 4).unwrap();
    let l = g.node(k).unwrap().layout;
    assert_eq!((l.dtype, l.ne), (DType::I32, [4, 3, 2, 1]));
    assert_eq!(g.node(k).unwrap().op, Op::TopK);
    invalid(g.top_k(a, 0), "TOP_K");
    invalid(g.top_k(a, 10), "TOP_K");
    let h = t(&mut g, DType::F16, &[9, 3]);
    invalid(g.argsort(h, SortOrder::Asc), "ARGSORT");
    invalid(g.top_k(h, 1), "TOP_K");
    let tr = g.transpose(a).unwrap();
    invalid(g.argsort(tr, SortOrder::Asc), "ARGSORT");
    invalid(g.top_k(tr, 2), "TOP_K");
    assert_eq!(SortOrder::Desc.ggml_order(), 1);
}

#[test]
fn mul_mat_id_and_add_id() {
    let mut g = Graph::new();
    let w = t(&mut g, DType::Q8_0, &[64, 16, 8]);
    let b = t(&mut g, DType::F32, &[64, 1, 5]);
    let ids = t(&mut g, DType::I32, &[2, 5]);
    let y = g.mul_mat_id(w, b, ids).unwrap();
    assert_eq!(ne(&g, y), [16, 2, 5, 1]);
    assert_eq!(g.node(y).unwrap().op, Op::MulMatId);
    assert_eq!(g.node(y).unwrap().layout.dtype, DType::F32);
    let b2 = t(&mut g, DType::F32, &[64, 2, 5]);
    assert!(g.mul_mat_id(w, b2, ids).is_ok());
    let b3 = t(&mut g, DType::F32, &[64, 3, 5]);
    invalid(g.mul_mat_id(w, b3, ids), "MUL_MAT_ID");
    let b_short = t(&mut g, DType::F32, &[32, 1, 5]);
    invalid(g.mul_mat_id(w, b_short, ids), "MUL_MAT_ID");
    let b_tok = t(&mut g, DType::F32, &[64, 1, 4]);
    invalid(g.mul_mat_id(w, b_tok, ids), "MUL_MAT_ID");
    let ids_f = t(&mut g, DType::F32, &[2, 5]);
    invalid(g.mul_mat_id(w, b, ids_f), "MUL_MAT_ID");
    let w4 = t(&mut g, DType::F32, &[64, 16, 8, 2]);
    invalid(g.mul_mat_id(w4, b, ids), "MUL_MAT_ID");
    let wi = t(&mut g, DType::I32, &[64, 16, 8]);
    invalid(g.mul_mat_id(wi, b, ids), "MUL_MAT_ID");
    let bh = t(&mut g, DType::F16, &[64, 1, 5]);
    invalid(g.mul_mat_id(w, bh, ids), "MUL_MAT_ID");

    let bias = t(&mut g, DType::F32, &[16, 8]);
    let z = g.add_id(y, bias, ids).unwrap();
    assert_eq!(ne(&g, z), [16, 2, 5, 1]);
    assert_eq!(g.node(z).unwrap().op, Op::AddId);
    let bias_bad = t(&mut g, DType::F32, &[15, 8]);
    invalid(g.add_id(y, bias_bad, ids), "ADD_ID");
    let ids_bad = t(&mut g, DType::I32, &[3, 5]);
    invalid(g.add_id(y, bias, ids_bad), "ADD_ID");
    let ids_f = t(&mut g, DType::F32, &[2, 5]);
    invalid(g.add_id(y, bias, ids_f), "ADD_ID");

    let x = t(&mut g, DType::F32, &[16, 2, 5]);
    let s = g.swiglu_oai(x, y, 1.702, 7.0).unwrap();
    assert_eq!(ne(&g, s), [16, 2, 5, 1]);
    assert_eq!(g.node(s).unwrap().op.display_name(), "SWIGLU_OAI");
    invalid(g.swiglu_oai(x, bias, 1.702, 7.0), "SWIGLU_OAI");
    invalid(g.swiglu_oai(x, y, f32::NAN, 7.0), "SWIGLU_OAI");
    invalid(g.swiglu_oai(x, y, 1.0, f32::NAN), "SWIGLU_OAI");
    let h = t(&mut g, DType::F16, &[16, 2, 5]);
    invalid(g.swiglu_oai(h, h, 1.0, 1.0), "SWIGLU_OAI");
}
