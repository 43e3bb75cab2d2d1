//! Builder tests: each valid op gets the right result layout, each rule an
//! error (never a panic).

use crate::error::Error;
use crate::graph::{Graph, TensorId};
use crate::op::{GluOp, Op, RopeMode, RopeParams, UnaryOp};
use crate::{DType, Result};

fn g() -> Graph {
    Graph::new()
}

fn t(g: &mut Graph, dtype: DType, ne: &[usize]) -> TensorId {
    g.new_tensor(dtype, ne).unwrap()
}

fn invalid(r: Result<TensorId>, op: &str) {
    match r {
        Err(Error::InvalidOp { op: o, .. }) => assert_eq!(o, op),
        other => panic!("expected InvalidOp for {op}, got {other:?}"),
    }
}

#[test]
fn binary_broadcast_and_errors() {
    let mut g = g();
    let a = t(&mut g, DType::F32, &[8, 6, 2]);
    let b = t(&mut g, DType::F32, &[8, 1, 2]);
    let c = g.add(a, b).unwrap();
    assert_eq!(g.node(c).unwrap().layout.ne, [8, 6, 2, 1]);
    assert_eq!(g.node(c).unwrap().op, Op::Add);
    let bad = t(&mut g, DType::F32, &[3, 6, 2]);
    invalid(g.mul(a, bad), "MUL");
    let i = t(&mut g, DType::I32, &[8, 6, 2]);
    invalid(g.div(i, a), "DIV");
    let q = t(&mut g, DType::Q8_0, &[32]);
    invalid(g.add(q, q), "ADD");
    assert!(matches!(
        g.add(a, TensorId::from_index(999)),
        Err(Error::InvalidTensorId { id: 999, .. })
    ));
}

#[test]
fn unary_glu_scale_norm() {
    let mut g = g();
    let a = t(&mut g, DType::F32, &[10, 3]);
    let u = g.unary(a, UnaryOp::Tanh).unwrap();
    assert_eq!(g.node(u).unwrap().layout, g.node(a).unwrap().layout);
    let s = g.glu(a, GluOp::SwiGlu, false).unwrap();
    assert_eq!(g.node(s).unwrap().layout.ne, [5, 3, 1, 1]);
    let odd = t(&mut g, DType::F32, &[7, 3]);
    invalid(g.glu(odd, GluOp::GeGlu, true), "GEGLU");
    invalid(g.glu_split(a, odd, GluOp::SwiGlu), "SWIGLU");
    invalid(g.scale_bias(a, f32::NAN, 0.0), "SCALE");
    invalid(g.rms_norm(a, -1.0), "RMS_NORM");
    invalid(g.norm(a, f32::INFINITY), "NORM");
    let h = t(&mut g, DType::F16, &[10, 3]);
    invalid(g.rms_norm(h, 1e-5), "RMS_NORM");
    invalid(g.scale(h, 2.0), "SCALE");
}

#[test]
fn mul_mat_shapes_and_errors() {
    let mut g = g();
    let w = t(&mut g, DType::Q4_0, &[64, 5, 2]);
    let x = t(&mut g, DType::F32, &[64, 3, 6]);
    let y = g.mul_mat(w, x).unwrap();
    assert_eq!(g.node(y).unwrap().layout.ne, [5, 3, 6, 1]);
    assert_eq!(g.node(y).unwrap().layout.dtype, DType::F32);
    let x2 = t(&mut g, DType::F32, &[32, 3, 6]);
    invalid(g.mul_mat(w, x2), "MUL_MAT");
    let x3 = t(&mut g, DType::F32, &[64, 3, 5]);
    invalid(g.mul_mat(w, x3), "MUL_MAT");
    let xf16 = t(&mut g, DType::F16, &[64, 3, 6]);
    invalid(g.mul_mat(w, xf16), "MUL_MAT");
    let f = t(&mut g, DType::F32, &[4, 4]);
    let ft = g.transpose(f).unwrap();
    let v = t(&mut g, DType::F32, &[4, 2]);
    invalid(g.mul_mat(ft, v), "MUL_MAT");
    // A transposed activation is fine.
    let vt = t(&mut g, DType::F32, &[2, 4]);
    let vtt = g.transpose(vt).unwrap();
    assert!(g.mul_mat(f, vtt).is_ok());
}

#[test]
fn soft_max_rope_attention_errors() {
    let mut g = g();
    let a = t(&mut g, DType::F32, &[16, 4, 2]);
    let m = t(&mut g, DType::F16, &[16, 8]);
    assert!(g.soft_max_ext(a, Some(m), 0.5, 0.0).is_ok());
    let m_bad = t(&mut g, DType::F16, &[15, 8]);
    invalid(g.soft_max_ext(a, Some(m_bad), 1.0, 0.0), "SOFT_MAX");
    invalid(g.soft_max_ext(a, None, 1.0, 8.0), "SOFT_MAX");

    let x = t(&mut g, DType::F32, &[8, 2, 5]);
    let pos = t(&mut g, DType::I32, &[5]);
    let p = RopeParams::new(8, RopeMode::Neox, 10000.0);
    assert!(g.rope(x, pos, None, p).is_ok());
    invalid(g.rope(x, pos, None, RopeParams { n_dims: 7, ..p }), "ROPE");
    invalid(g.rope(x, pos, None, RopeParams { n_dims: 10, ..p }), "ROPE");
    let pos_bad = t(&mut g, DType::I32, &[4]);
    invalid(g.rope(x, pos_bad, None, p), "ROPE");
    let ff = t(&mut g, DType::F32, &[2]);
    invalid(g.rope(x, pos, Some(ff), p), "ROPE");

    let q = t(&mut g, DType::F32, &[64, 3, 8]);
    let k = t(&mut g, DType::F16, &[64, 10, 2]);
    let v = t(&mut g, DType::F16, &[32, 10, 2]);
    let mask = t(&mut g, DType::F16, &[10, 3]);
    let o = g
        .flash_attn_ext(q, k, v, Some(mask), 0.125, 0.0, 0.0)
        .unwrap();
    assert_eq!(g.node(o).unwrap().layout.ne, [32, 8, 3, 1]);
    let k3 = t(&mut g, DType::F16, &[64, 10, 3]);
    invalid(
        g.flash_attn_ext(q, k3, v, None, 1.0, 0.0, 0.0),
        "FLASH_ATTN_EXT",
    );
    let mask_bad = t(&mut g, DType::F16, &[9, 3]);
    invalid(
        g.flash_attn_ext(q, k, v, Some(mask_bad), 1.0, 0.0, 0.0),
        "FLASH_ATTN_EXT",
    );
}

#[test]
fn views_stay_inside_their_source() {
    let mut g = g();
    let a = t(&mut g, DType::F32, &[4, 3]);
    let v = g.view_2d(a, 2, 3, 16, 8).unwrap();
    assert_eq!(g.node(v).unwrap().view_src, Some(a));
    assert_eq!(g.node(v).unwrap().view_offs, 8);
    // View of a view points at the root with accumulated offsets.
    let vv = g.view_1d(v, 2, 16).unwrap();
    assert_eq!(g.node(vv).unwrap().view_src, Some(a));
    assert_eq!(g.node(vv).unwrap().view_offs, 24);
    invalid(g.view_1d(a, 4, 40), "VIEW");
    invalid(g.view_2d(a, 4, 3, 16, 4), "VIEW");
    assert!(g.view_1d(a, 2, usize::MAX).is_err());
}

#[test]
fn reshape_permute_cpy_concat() {
    let mut g = g();
    let a = t(&mut g, DType::F32, &[4, 3, 2]);
    let r = g.reshape(a, &[12, 2]).unwrap();
    assert_eq!(g.node(r).unwrap().layout.ne, [12, 2, 1, 1]);
    invalid(g.reshape(a, &[5, 5]), "RESHAPE");
    let p = g.permute(a, [2, 0, 1, 3]).unwrap();
    assert_eq!(g.node(p).unwrap().layout.ne, [3, 2, 4, 1]);
    assert_eq!(g.node(p).unwrap().layout.nb, [16, 48, 4, 96]);
    invalid(g.permute(a, [0, 0, 1, 2]), "PERMUTE");
    invalid(g.reshape(p, &[24]), "RESHAPE");
    let q = t(&mut g, DType::Q4_0, &[32, 2]);
    invalid(g.transpose(q), "TRANSPOSE");
    invalid(g.permute(q, [1, 0, 2, 3]), "PERMUTE");
    let dst = t(&mut g, DType::F16, &[24]);
    let c = g.cpy(a, dst).unwrap();
    assert_eq!(g.node(c).unwrap().view_src, Some(dst));
    let dst_small = t(&mut g, DType::F16, &[23]);
    invalid(g.cpy(a, dst_small), "CPY");
    let i = t(&mut g, DType::I32, &[24]);
    invalid(g.cpy(a, i), "CPY");
    let qdst = t(&mut g, DType::Q8_0, &[32, 2]);
    let src64 = t(&mut g, DType::F32, &[64]);
    invalid(g.cpy(src64, qdst), "CPY");
    let b = t(&mut g, DType::F32, &[4, 5, 2]);
    let cat = g.concat(a, b, 1).unwrap();
    assert_eq!(g.node(cat).unwrap().layout.ne, [4, 8, 2, 1]);
    invalid(g.concat(a, b, 0), "CONCAT");
    invalid(g.concat(a, b, 4), "CONCAT");
}

#[test]
fn rows_and_reductions() {
    let mut g = g();
    let emb = t(&mut g, DType::Q6K, &[256, 10]);
    let ids = t(&mut g, DType::I32, &[3]);
    let r = g.get_rows(emb, ids).unwrap();
    assert_eq!(g.node(r).unwrap().layout.ne, [256, 3, 1, 1]);
    assert_eq!(g.node(r).unwrap().layout.dtype, DType::F32);
    let fids = t(&mut g, DType::F32, &[3]);
    invalid(g.get_rows(emb, fids), "GET_ROWS");
    let cache = t(&mut g, DType::F16, &[8, 16]);
    let src = t(&mut g, DType::F32, &[8, 3]);
    let idx = t(&mut g, DType::I64, &[3]);
    let s = g.set_rows(cache, src, idx).unwrap();
    assert_eq!(g.node(s).unwrap().view_src, Some(cache));
    let idx_bad = t(&mut g, DType::I64, &[2]);
    invalid(g.set_rows(cache, src, idx_bad), "SET_ROWS");
    let m = t(&mut g, DType::F32, &[5, 4]);
    let am = g.argmax(m).unwrap();
    assert_eq!(g.node(am).unwrap().layout.ne, [4, 1, 1, 1]);
    assert_eq!(g.node(am).unwrap().layout.dtype, DType::I32);
    let cube = t(&mut g, DType::F32, &[5, 4, 2]);
    invalid(g.argmax(cube), "ARGMAX");
    let sr = g.sum_rows(cube).unwrap();
    assert_eq!(g.node(sr).unwrap().layout.ne, [1, 4, 2, 1]);
}

#[test]
fn leaves_validate_their_layout() {
    let mut g = g();
    assert!(matches!(
        g.new_tensor(DType::Q4_0, &[33]),
        Err(Error::BlockSize { .. })
    ));
    assert!(g.new_tensor(DType::F32, &[1 << 40, 1 << 40]).is_err());
    let x = g.input("x", DType::F32, &[4]).unwrap();
    assert_eq!(g.find("x"), Some(x));
    assert!(g.set_output(TensorId::from_index(42)).is_err());
}

#[test]
fn ids_of_another_graph_are_errors_everywhere() {
    let mut g1 = Graph::new();
    let a1 = g1.new_tensor(DType::F32, &[4]).unwrap();
    let b1 = g1.new_tensor(DType::F32, &[4]).unwrap();
    let mut g2 = Graph::new();
    let a2 = g2.new_tensor(DType::F32, &[4]).unwrap();
    // `b1` is in range of neither... `a1` is in range of g2 (index 0): it
    // must still be refused, not silently taken as g2's tensor 0.
    assert!(matches!(g2.node(a1), Err(Error::ForeignTensorId { id: 0 })));
    assert!(matches!(g2.add(a2, a1), Err(Error::ForeignTensorId { .. })));
    assert!(matches!(g2.add(a1, a2), Err(Error::ForeignTensorId { .. })));
    assert!(matches!(
        g2.view_1d(a1, 2, 0),
        Err(Error::ForeignTensorId { .. })
    ));
    assert!(g2.set_name(a1, "x").is_err());
    assert!(g2.set_input(a1).is_err());
    assert!(g2.set_output(b1).is_err());
    assert!(g2.memory_root(a1).is_err());
    assert!(g2.layout(a1).is_err());
    assert!(g2.describe_node(b1).contains("not in the graph"));
    assert_eq!(g2.len(), 1, "nothing was added by the refused calls");
    // A clone is the same graph: its ids work on it.
    let g1c = g1.clone();
    assert_eq!(g1c.node(b1).unwrap().layout, g1.node(b1).unwrap().layout);
    // Positional ids work on any graph, range-checked.
    assert!(g2.node(TensorId::from_index(0)).is_ok());
    assert!(matches!(
        g2.node(TensorId::from_index(1)),
        Err(Error::InvalidTensorId { id: 1, len: 1 })
    ));
    // Ids stored in a graph are its own, whatever was passed in.
    let s = g2.add(a2, TensorId::from_index(0)).unwrap();
    for src in g2.node(s).unwrap().src_ids() {
        assert!(g2.node(src).is_ok());
    }
}
