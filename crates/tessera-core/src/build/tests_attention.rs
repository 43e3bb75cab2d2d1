//! Builder tests of attention sinks (SOFT_MAX, FLASH_ATTN_EXT) and the
//! multi-section ROPE modes: the accepted shapes, the node's sources, and an
//! `InvalidOp` naming the op for every rule ggml asserts.

use crate::error::Error;
use crate::graph::{Graph, TensorId};
use crate::op::{Op, RopeMode, RopeParams};
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

#[test]
fn soft_max_sinks() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[16, 3, 4, 2]);
    let mask = t(&mut g, DType::F16, &[16, 3, 1, 1]);
    let sinks = t(&mut g, DType::F32, &[4]);
    let s = g
        .soft_max_ext_sinks(a, Some(mask), sinks, 0.5, 0.0)
        .unwrap();
    let n = g.node(s).unwrap();
    assert_eq!(n.src(2), Some(sinks));
    assert_eq!(
        n.op,
        Op::SoftMax {
            scale: 0.5,
            max_bias: 0.0
        }
    );
    assert!(g.soft_max_ext_sinks(a, None, sinks, 1.0, 0.0).is_ok());
    // One per head (dim 2), F32, a contiguous vector.
    let short = t(&mut g, DType::F32, &[3]);
    invalid(g.soft_max_ext_sinks(a, None, short, 1.0, 0.0), "SOFT_MAX");
    let f16 = t(&mut g, DType::F16, &[4]);
    invalid(g.soft_max_ext_sinks(a, None, f16, 1.0, 0.0), "SOFT_MAX");
    let m2 = t(&mut g, DType::F32, &[4, 2]);
    invalid(g.soft_max_ext_sinks(a, None, m2, 1.0, 0.0), "SOFT_MAX");
}

#[test]
fn flash_attn_sinks() {
    let mut g = Graph::new();
    let q = t(&mut g, DType::F32, &[32, 3, 8, 1]);
    let k = t(&mut g, DType::F16, &[32, 17, 2, 1]);
    let v = t(&mut g, DType::F16, &[32, 17, 2, 1]);
    let sinks = t(&mut g, DType::F32, &[8]);
    let o = g
        .flash_attn_ext_sinks(q, k, v, None, sinks, 0.2, 0.0, 0.0)
        .unwrap();
    assert_eq!(g.node(o).unwrap().src(4), Some(sinks));
    assert_eq!(g.node(o).unwrap().layout.ne, [32, 8, 3, 1]);
    // One per query head, not per KV head.
    let per_kv = t(&mut g, DType::F32, &[2]);
    invalid(
        g.flash_attn_ext_sinks(q, k, v, None, per_kv, 0.2, 0.0, 0.0),
        "FLASH_ATTN_EXT",
    );
    let i32s = t(&mut g, DType::I32, &[8]);
    invalid(
        g.flash_attn_ext_sinks(q, k, v, None, i32s, 0.2, 0.0, 0.0),
        "FLASH_ATTN_EXT",
    );
}

#[test]
fn rope_multi_section_modes() {
    let mut g = Graph::new();
    let a = t(&mut g, DType::F32, &[64, 4, 5]);
    let pos4 = t(&mut g, DType::I32, &[20]);
    let pos1 = t(&mut g, DType::I32, &[5]);
    for mode in [RopeMode::Mrope, RopeMode::Imrope] {
        let p = RopeParams::multi(64, mode, [8, 12, 12, 0], 10000.0);
        let r = g.rope(a, pos4, None, p).unwrap();
        assert_eq!(g.node(r).unwrap().op, Op::Rope(p));
        // Four positions per token.
        invalid(g.rope(a, pos1, None, p), "ROPE");
        // Sections: not all of t, h, w zero; at most ne0 in all.
        invalid(
            g.rope(
                a,
                pos4,
                None,
                RopeParams {
                    sections: [0, 0, 0, 4],
                    ..p
                },
            ),
            "ROPE",
        );
        invalid(
            g.rope(
                a,
                pos4,
                None,
                RopeParams {
                    sections: [0; 4],
                    ..p
                },
            ),
            "ROPE",
        );
        invalid(
            g.rope(
                a,
                pos4,
                None,
                RopeParams {
                    sections: [30, 30, 5, 0],
                    ..p
                },
            ),
            "ROPE",
        );
        invalid(
            g.rope(
                a,
                pos4,
                None,
                RopeParams {
                    sections: [u32::MAX; 4],
                    ..p
                },
            ),
            "ROPE",
        );
    }
    // Vision: n_dims = ne0 / 2, freq factors for all n_dims pairs.
    let v = RopeParams::multi(32, RopeMode::Vision, [8, 8, 0, 0], 10000.0);
    assert!(g.rope(a, pos4, None, v).is_ok());
    invalid(
        g.rope(a, pos4, None, RopeParams { n_dims: 64, ..v }),
        "ROPE",
    );
    invalid(
        g.rope(a, pos4, None, RopeParams { n_dims: 16, ..v }),
        "ROPE",
    );
    let ff16 = t(&mut g, DType::F32, &[16]);
    let ff32 = t(&mut g, DType::F32, &[32]);
    invalid(g.rope(a, pos4, Some(ff16), v), "ROPE");
    assert!(g.rope(a, pos4, Some(ff32), v).is_ok());
    // The single-stream modes keep one position per token.
    let n = RopeParams::new(64, RopeMode::Neox, 10000.0);
    assert!(g.rope(a, pos1, None, n).is_ok());
    invalid(g.rope(a, pos4, None, n), "ROPE");
    assert_eq!(RopeMode::from_ggml(40), Some(RopeMode::Imrope));
    assert_eq!(RopeMode::from_ggml(1), None);
    assert_eq!(RopeMode::Vision.ggml_mode(), 24);
}
