//! ggml itself as the oracle for the WGSL kernels of attention sinks
//! (SOFT_MAX, FLASH_ATTN_EXT) and the multi-section ROPE modes: the cases of
//! `crates/tessera-cpu/tests/fixtures/ggml/ops.bin` that use them (made by
//! `scripts/ggml-op-fixtures/generate.sh` with ggml's CPU backend) are
//! rebuilt with Tessera's builder, computed on the wgpu device from ggml's
//! input bytes and compared with ggml's output.
//!
//! Tolerances are the CPU fixture test's (`tessera-cpu/tests/ggml_fixtures.rs`),
//! NMSE `sum (t - g)^2 / sum g^2` against ggml's values: 1e-6 SOFT_MAX,
//! 1e-3 ROPE, 5e-4 FLASH_ATTN_EXT; NaN/Inf must match exactly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[path = "../../tessera-cpu/tests/ggml_fixtures/format.rs"]
#[allow(dead_code)]
mod format;

use std::collections::HashMap;

use format::Case;
use tessera::alloc::GraphAllocator;
use tessera::{DType, Device, Graph, Placement, RopeMode, RopeParams, TensorId};

fn cases() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tessera-cpu/tests/fixtures/ggml/ops.bin"
    );
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    format::parse(&data)
        .into_iter()
        .filter(|c| c.has_input("sinks") || c.param("sections").is_some())
        .collect()
}

/// Tessera's graph for `case`: the leaves in the fixture's order and the output.
fn build(case: &Case) -> tessera::Result<(Graph, Vec<TensorId>, TensorId)> {
    let mut g = Graph::new();
    let mut by_name = HashMap::new();
    let mut leaves = Vec::new();
    for t in &case.inputs {
        let id = g.input(&t.name, t.dtype, &t.ne)?;
        leaves.push(id);
        by_name.insert(t.name.as_str(), id);
    }
    let get = |n: &str| by_name.get(n).copied();
    let arg = |n: &str| get(n).unwrap_or_else(|| panic!("{}: no input {n}", case.name));
    let out = match case.op.as_str() {
        "soft_max" => g.soft_max_ext_sinks(
            arg("a"),
            get("mask"),
            arg("sinks"),
            case.f32("scale"),
            case.f32("max_bias"),
        )?,
        "flash_attn_ext" => g.flash_attn_ext_sinks(
            arg("q"),
            arg("k"),
            arg("v"),
            get("mask"),
            arg("sinks"),
            case.f32("scale"),
            case.f32("max_bias"),
            case.f32("softcap"),
        )?,
        "rope" => {
            let mode = RopeMode::from_ggml(case.int("mode") as i32).unwrap();
            let s = case.list("sections").unwrap();
            let mut p = RopeParams::multi(
                case.int("n_dims") as usize,
                mode,
                [s[0], s[1], s[2], s[3]].map(|x| x as u32),
                case.f32("freq_base"),
            );
            p.n_ctx_orig = case.int("n_ctx_orig") as usize;
            p.freq_scale = case.f32("freq_scale");
            p.ext_factor = case.f32("ext_factor");
            p.attn_factor = case.f32("attn_factor");
            p.beta_fast = case.f32("beta_fast");
            p.beta_slow = case.f32("beta_slow");
            g.rope(arg("a"), arg("pos"), get("ff"), p)?
        }
        other => panic!("{}: unexpected op {other}", case.name),
    };
    g.set_output(out)?;
    Ok((g, leaves, out))
}

fn run(case: &Case, dev: &dyn Device) -> Vec<u8> {
    let (g, leaves, out) = build(case).unwrap();
    for id in g.op_ids() {
        assert!(dev.supports_op(&g, id), "{}: not supported", case.name);
    }
    let mut placement = Placement::new(&g);
    GraphAllocator::new(dev.buffer_type())
        .alloc_graph(&g, &mut placement)
        .unwrap();
    for (t, &id) in case.inputs.iter().zip(&leaves) {
        placement.tensor(&g, id).unwrap().write(0, &t.data).unwrap();
    }
    let stream = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    stream.compute(&g, &placement).unwrap();
    placement.tensor(&g, out).unwrap().to_bytes().unwrap()
}

fn values(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let mut v = vec![0f32; bytes.len() / dtype.type_size()];
    tessera::quant::to_f32(dtype, bytes, &mut v).unwrap();
    v.into_iter().map(f64::from).collect()
}

/// NMSE of `got` against ggml's output; Err on a NaN/Inf mismatch.
fn nmse(case: &Case, got: &[u8]) -> Result<f64, String> {
    let want = &case.output;
    let (t, g) = (values(want.dtype, got), values(want.dtype, &want.data));
    assert_eq!(t.len(), g.len(), "{}: result size", case.name);
    let (mut num, mut den) = (0.0, 0.0);
    for (i, (&t, &g)) in t.iter().zip(&g).enumerate() {
        if !t.is_finite() || !g.is_finite() {
            if !(t == g || t.is_nan() && g.is_nan()) {
                return Err(format!("element {i}: Tessera {t}, ggml {g}"));
            }
            continue;
        }
        num += (t - g) * (t - g);
        den += g * g;
    }
    Ok(if den > 0.0 { num / den } else { num })
}

#[test]
fn sinks_and_multi_section_rope_match_ggml() {
    let Some(dev) = common::device("sinks_and_multi_section_rope_match_ggml") else {
        return;
    };
    let cases = cases();
    assert_eq!(cases.len(), 22, "sinks + multi-section ROPE fixture cases");
    let mut failures = Vec::new();
    for case in &cases {
        let tol = match case.op.as_str() {
            "soft_max" => 1e-6,
            "rope" => 1e-3,
            _ => 5e-4,
        };
        let got = run(case, dev.as_ref());
        match nmse(case, &got) {
            Ok(e) if e <= tol => println!("ok    {:<30} NMSE {e:.3e} (<= {tol:e})", case.name),
            Ok(e) => failures.push(format!("{}: NMSE {e:.3e} > {tol:e}", case.name)),
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
