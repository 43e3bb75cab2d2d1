//! The catalogue as data: unique names, graphs that build, and coverage of
//! every op, every unary and GLU function and every type each op accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use tessera::{DType, GluOp, MUL_MAT_WEIGHT_TYPES, Op, UnaryOp};
use tessera_testkit::tolerance::{DEFAULT_NMSE, OP_NMSE, op_nmse};
use tessera_testkit::{Tolerance, catalogue};

#[test]
fn names_are_unique_and_every_case_builds_with_checks() {
    let cases = catalogue();
    let mut names = BTreeSet::new();
    for c in &cases {
        assert!(
            names.insert(c.name.clone()),
            "duplicate case name {}",
            c.name
        );
        assert!(
            c.name.starts_with(c.op),
            "{} does not start with its op {}",
            c.name,
            c.op
        );
        let b = c.build().unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert!(!b.checks.is_empty(), "{} checks nothing", c.name);
        for ch in &b.checks {
            assert!(ch.id.index() < b.graph.len());
        }
    }
    assert!(cases.len() > 300, "{} cases", cases.len());
}

/// Every (op node) appearing in the catalogue, with its operand types.
fn op_nodes() -> Vec<(Op, DType, Vec<DType>, bool)> {
    let mut out = Vec::new();
    for c in catalogue() {
        let b = c.build().unwrap();
        let g = &b.graph;
        for id in g.op_ids() {
            let n = &g.node(id).unwrap();
            let srcs: Vec<DType> = n
                .src_ids()
                .map(|s| g.node(s).unwrap().layout.dtype)
                .collect();
            let strided = n
                .src_ids()
                .any(|s| !g.node(s).unwrap().layout.is_contiguous());
            out.push((n.op, n.layout.dtype, srcs, strided));
        }
    }
    out
}

#[test]
fn every_op_function_and_type_is_covered() {
    let nodes = op_nodes();
    let names: BTreeSet<&str> = nodes.iter().map(|(op, ..)| op.name()).collect();
    for op in [
        "DUP",
        "CONT",
        "CPY",
        "RESHAPE",
        "VIEW",
        "PERMUTE",
        "TRANSPOSE",
        "GET_ROWS",
        "SET_ROWS",
        "ADD",
        "MUL",
        "DIV",
        "SCALE",
        "RMS_NORM",
        "NORM",
        "MUL_MAT",
        "SOFT_MAX",
        "ROPE",
        "UNARY",
        "GLU",
        "CONCAT",
        "ARGMAX",
        "SUM_ROWS",
        "FLASH_ATTN_EXT",
    ] {
        assert!(names.contains(op), "no case exercises {op}");
    }
    for f in UnaryOp::ALL {
        for t in [DType::F32, DType::F16, DType::BF16] {
            assert!(
                nodes
                    .iter()
                    .any(|(op, d, ..)| *op == Op::Unary(f) && *d == t),
                "{} {t}",
                f.name()
            );
        }
    }
    for f in GluOp::ALL {
        for (swapped, split) in [(false, false), (true, false), (false, true)] {
            assert!(
                nodes
                    .iter()
                    .any(|(op, _, s, _)| *op == Op::Glu { op: f, swapped }
                        && (s.len() == 2) == split),
                "{} swapped={swapped} split={split}",
                f.name()
            );
        }
    }
    for t in MUL_MAT_WEIGHT_TYPES {
        assert!(
            nodes
                .iter()
                .any(|(op, _, s, _)| *op == Op::MulMat && s[0] == t),
            "MUL_MAT {t}"
        );
    }
    for t in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
        DType::I32,
    ] {
        assert!(
            nodes
                .iter()
                .any(|(op, _, s, _)| *op == Op::GetRows && s[0] == t),
            "GET_ROWS {t}"
        );
    }
    for t in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ] {
        for ti in [DType::I32, DType::I64] {
            assert!(
                nodes
                    .iter()
                    .any(|(op, d, s, _)| *op == Op::SetRows && *d == t && s[2] == ti),
                "SET_ROWS {t} {ti}"
            );
        }
    }
    let cpy = |a: DType, b: DType| {
        nodes
            .iter()
            .any(|(op, d, s, _)| *op == Op::Cpy && s[0] == a && *d == b)
    };
    for a in [DType::F32, DType::F16, DType::BF16] {
        for b in [DType::F32, DType::F16, DType::BF16] {
            assert!(cpy(a, b), "CPY {a} -> {b}");
        }
    }
    for q in [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::IQ4NL,
        DType::IQ4XS,
    ] {
        assert!(
            cpy(DType::F32, q) && cpy(q, DType::F32) && cpy(q, q),
            "CPY with {q}"
        );
    }
    // Strided operands for the ops that take them.
    for op in [
        "ADD",
        "MUL",
        "DIV",
        "MUL_MAT",
        "CPY",
        "CONT",
        "ROPE",
        "SOFT_MAX",
        "GET_ROWS",
        "FLASH_ATTN_EXT",
    ] {
        assert!(
            nodes
                .iter()
                .any(|(o, _, _, strided)| o.name() == op && *strided),
            "no strided operand for {op}"
        );
    }
    // ROPE modes, FA with and without mask, ALiBi, softcap and GQA.
    let rope_modes: BTreeSet<i32> = nodes
        .iter()
        .filter_map(|(op, ..)| {
            if let Op::Rope(p) = op {
                Some(p.mode.ggml_mode())
            } else {
                None
            }
        })
        .collect();
    // Normal, NeoX and the multi-section modes (M-RoPE, vision, interleaved).
    assert_eq!(rope_modes, BTreeSet::from([0, 2, 8, 24, 40]));
    let fa: Vec<_> = nodes
        .iter()
        .filter(|(op, ..)| op.name() == "FLASH_ATTN_EXT")
        .collect();
    // Without and with a mask, and with sinks (src 4).
    assert!(
        fa.iter().any(|(_, _, s, _)| s.len() == 3)
            && fa.iter().any(|(_, _, s, _)| s.len() == 4)
            && fa.iter().any(|(_, _, s, _)| s.len() == 5)
    );
    // SOFT_MAX with sinks (src 2).
    assert!(
        nodes
            .iter()
            .any(|(op, _, s, _)| op.name() == "SOFT_MAX" && s.len() == 3)
    );
    assert!(
        fa.iter()
            .any(|(op, ..)| matches!(op, Op::FlashAttnExt { max_bias, .. } if *max_bias > 0.0))
    );
    assert!(fa.iter().any(
        |(op, ..)| matches!(op, Op::FlashAttnExt { logit_softcap, .. } if *logit_softcap > 0.0)
    ));
}

#[test]
fn thresholds_are_the_documented_ones() {
    assert_eq!(DEFAULT_NMSE, 1e-7);
    assert_eq!(op_nmse("MUL_MAT"), 5e-4);
    assert_eq!(op_nmse("FLASH_ATTN_EXT"), 5e-4);
    assert_eq!(op_nmse("ROPE"), 1e-3);
    assert_eq!(op_nmse("SOFT_MAX"), 1e-6);
    assert_eq!(op_nmse("SILU"), 1e-7);
    assert!(OP_NMSE.iter().all(|&(_, t)| t > 0.0 && t <= 1e-3));
    // Every case of an exact op is checked exactly.
    for c in catalogue()
        .into_iter()
        .filter(|c| ["ARGMAX", "GET_ROWS"].contains(&c.op))
    {
        let b = c.build().unwrap();
        assert!(
            b.checks.iter().all(|ch| ch.tolerance == Tolerance::Exact),
            "{}",
            c.name
        );
    }
}
