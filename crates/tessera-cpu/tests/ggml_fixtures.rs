//! ggml itself as the oracle: every case of `tests/fixtures/ggml/ops.bin`
//! (made by `scripts/ggml-op-fixtures/generate.sh`, which runs ggml's own CPU
//! backend, 1 thread) is rebuilt with Tessera's graph builder, computed on
//! the CPU device from ggml's input bytes and compared with ggml's output.
//!
//! Why: the CPU kernels and the conformance harness's f64 reference were
//! both written from descriptions of ggml's semantics; a misreading shared by
//! both (ROPE modes and YaRN, the multi-section ROPE modes' stream choice,
//! GLU halves, SOFT_MAX mask broadcasting, ALiBi and sinks, FLASH_ATTN_EXT
//! layout, softcap and sinks, GET_ROWS/SET_ROWS indexing, CPY
//! element order, broadcasting, ARGMAX ties) passes both; it fails here.
//! Source references (`ggml-cpu/ops.cpp:296`, ...) are to `ggml/src` of the
//! llama-cpp-python 0.3.36 sdist (ggml 0.25.3) the fixtures were made from.
//!
//! Tolerances (see [`tolerance`]):
//! - bit-exact: GET_ROWS, SET_ROWS, CPY (same type, F32 to F16/BF16 — both
//!   round to nearest even — F32 to a quantized type, Q4_0 to F32), CONT,
//!   CONCAT, ARGMAX;
//! - NMSE (ggml's test-backend-ops metric, `sum (t - g)^2 / sum g^2` with
//!   `g` ggml's value): 5e-4 MUL_MAT and FLASH_ATTN_EXT (ggml rounds the
//!   activations to the weights' dot type, Q to F16 for F16 K, and
//!   accumulates V·softmax in F16), 1e-3 ROPE, 1e-6 SOFT_MAX, 1e-7 the rest;
//! - F32 GELU and GEGLU: [`GELU_NMSE`], because ggml's CPU GELU is an F16
//!   lookup table (see the constant); F16 GELU bit-exact;
//! - one documented divergence: Q8_0 results of CPY and SET_ROWS may differ
//!   from ggml's x86 CPU backend at exact rounding ties, and only there (see
//!   [`q8_0_tie_rule`]).
//!
//! The attention-sink and multi-section ROPE cases also run on the f64
//! reference device ([`attention_ext_on_the_reference_device`]); the wgpu
//! crate checks its kernels on them (`tessera-wgpu/tests/ggml_fixtures_attention.rs`).
//!
//! A mismatch prints the case, its parameters, the worst element (index,
//! Tessera's value, ggml's value) and the metric. `cargo test -p tessera-cpu
//! --test ggml_fixtures -- --nocapture` also prints the metric of every case.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "ggml_fixtures/format.rs"]
mod format;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use format::{Case, FixtureTensor};
use tessera::alloc::GraphAllocator;
use tessera::{DType, Device, GluOp, Graph, Placement, RopeMode, RopeParams, TensorId, UnaryOp};

/// NMSE allowed for F32 GELU and GEGLU (tanh approximation).
///
/// ggml's CPU backend is compiled with `GGML_GELU_FP16` (ggml-cpu/vec.h:46):
/// for F32, `ggml_vec_gelu_f32` and `ggml_vec_geglu_f32` (vec.h:1001-1013,
/// 1447-1458) round `x` to F16 and look the result up in a 65536-entry F16
/// table for `-10 < x < 10`. Tessera evaluates the formula in f32
/// (`kernels/math.rs`), the more accurate of the two. The table costs two F16
/// roundings (unit roundoff 2^-11 each, amplified by `x gelu'(x)` for the
/// input one); measured against Tessera: NMSE 2.9e-8 for `unary_gelu` (x in
/// [-12, 12]) and 6.5e-8 to 8.7e-8 for the three GEGLU cases (x in [-5, 5],
/// 190 values each), i.e. within 1.2x of the default 1e-7, too close for a
/// fixed sample of a random error. 1e-6 gives a 10x margin and still catches
/// misread semantics of GEGLU (swapped halves, a missing gate: NMSE of order
/// 1).
///
/// What this NMSE cannot tell apart is the tanh form from the erf form: they
/// differ by an NMSE of 1e-8 to 1e-9 on these inputs, below the table's own
/// error. The F16 case `unary_gelu_f16` does, bit-exact: for F16, ggml reads
/// the table directly (`ggml_vec_gelu_f16`, vec.h:972), whose entries are
/// `GGML_CPU_FP32_TO_FP16(ggml_gelu_f32(x))` (ggml-cpu.c:3883), the tanh form
/// evaluated in f32 and rounded once; the erf form rounds differently in 111
/// of its 462 values.
const GELU_NMSE: f64 = 1e-6;

fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ggml/ops.bin");
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        format::parse(&data)
    })
}

// ---------------------------------------------------------------------------
// Building the graph

/// Tessera's graph for `case`: the leaves (in the fixture's order) and the output.
struct Built {
    graph: Graph,
    leaves: Vec<TensorId>,
    out: TensorId,
}

fn build(case: &Case) -> tessera::Result<Built> {
    let mut g = Graph::new();
    let mut leaves = Vec::new();
    let mut by_name = HashMap::new();
    for t in &case.inputs {
        let id = g.input(&t.name, t.dtype, &t.ne)?;
        leaves.push(id);
        by_name.insert(t.name.clone(), id);
    }
    // The operand the op sees: the leaf, or a permuted/transposed view of it.
    let arg = |g: &mut Graph, name: &str| -> tessera::Result<TensorId> {
        let id = *by_name
            .get(name)
            .unwrap_or_else(|| panic!("{}: no input '{name}'", case.name));
        if let Some(p) = case.list(&format!("perm_{name}")) {
            g.permute(id, [p[0], p[1], p[2], p[3]])
        } else if case.param(&format!("transpose_{name}")).is_some() {
            g.transpose(id)
        } else {
            Ok(id)
        }
    };
    let opt = |g: &mut Graph, name: &str| -> tessera::Result<Option<TensorId>> {
        if case.has_input(name) {
            arg(g, name).map(Some)
        } else {
            Ok(None)
        }
    };
    let out = match case.op.as_str() {
        "add" | "mul" | "div" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            match case.op.as_str() {
                "add" => g.add(a, b)?,
                "mul" => g.mul(a, b)?,
                _ => g.div(a, b)?,
            }
        }
        "scale" => {
            let a = arg(&mut g, "a")?;
            g.scale_bias(a, case.f32("scale"), case.f32("bias"))?
        }
        "unary" => {
            let a = arg(&mut g, "a")?;
            g.unary(a, unary_op(case))?
        }
        "glu" => {
            let a = arg(&mut g, "a")?;
            g.glu(a, glu_op(case), case.int("swapped") != 0)?
        }
        "glu_split" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            g.glu_split(a, b, glu_op(case))?
        }
        "rms_norm" => {
            let a = arg(&mut g, "a")?;
            g.rms_norm(a, case.f32("eps"))?
        }
        "norm" => {
            let a = arg(&mut g, "a")?;
            g.norm(a, case.f32("eps"))?
        }
        "soft_max" => {
            let a = arg(&mut g, "a")?;
            let mask = opt(&mut g, "mask")?;
            let (scale, max_bias) = (case.f32("scale"), case.f32("max_bias"));
            match opt(&mut g, "sinks")? {
                Some(s) => g.soft_max_ext_sinks(a, mask, s, scale, max_bias)?,
                None => g.soft_max_ext(a, mask, scale, max_bias)?,
            }
        }
        "rope" => {
            let a = arg(&mut g, "a")?;
            let pos = arg(&mut g, "pos")?;
            let ff = opt(&mut g, "ff")?;
            g.rope(a, pos, ff, rope_params(case))?
        }
        "mul_mat" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            g.mul_mat(a, b)?
        }
        "get_rows" => {
            let (a, ids) = (arg(&mut g, "a")?, arg(&mut g, "ids")?);
            g.get_rows(a, ids)?
        }
        "mul_mat_id" => {
            let (a, b) = (arg(&mut g, "as")?, arg(&mut g, "b")?);
            let ids = arg(&mut g, "ids")?;
            g.mul_mat_id(a, b, ids)?
        }
        "swiglu_oai" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            g.swiglu_oai(a, b, case.f32("alpha"), case.f32("limit"))?
        }
        "add_id" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            let ids = arg(&mut g, "ids")?;
            g.add_id(a, b, ids)?
        }
        "set_rows" => {
            let dst = arg(&mut g, "dst")?;
            let src = arg(&mut g, "src")?;
            let ids = arg(&mut g, "ids")?;
            g.set_rows(dst, src, ids)?
        }
        "cpy" => {
            let (src, dst) = (arg(&mut g, "src")?, arg(&mut g, "dst")?);
            g.cpy(src, dst)?
        }
        "cont" => {
            let a = arg(&mut g, "a")?;
            g.cont(a)?
        }
        "concat" => {
            let (a, b) = (arg(&mut g, "a")?, arg(&mut g, "b")?);
            g.concat(a, b, case.int("dim") as usize)?
        }
        "argmax" => {
            let a = arg(&mut g, "a")?;
            g.argmax(a)?
        }
        "sum_rows" => {
            let a = arg(&mut g, "a")?;
            g.sum_rows(a)?
        }
        "flash_attn_ext" => {
            let q = arg(&mut g, "q")?;
            let k = arg(&mut g, "k")?;
            let v = arg(&mut g, "v")?;
            let mask = opt(&mut g, "mask")?;
            let (scale, max_bias) = (case.f32("scale"), case.f32("max_bias"));
            let softcap = case.f32("softcap");
            match opt(&mut g, "sinks")? {
                Some(s) => g.flash_attn_ext_sinks(q, k, v, mask, s, scale, max_bias, softcap)?,
                None => g.flash_attn_ext(q, k, v, mask, scale, max_bias, softcap)?,
            }
        }
        other => panic!("{}: no builder for op '{other}'", case.name),
    };
    g.set_output(out)?;
    Ok(Built {
        graph: g,
        leaves,
        out,
    })
}

fn unary_op(case: &Case) -> UnaryOp {
    let f = case.param("fn").unwrap();
    UnaryOp::ALL
        .into_iter()
        .find(|u| u.name() == f)
        .unwrap_or_else(|| panic!("{}: unknown unary {f}", case.name))
}

fn glu_op(case: &Case) -> GluOp {
    let f = case.param("fn").unwrap();
    GluOp::ALL
        .into_iter()
        .find(|u| u.name() == f)
        .unwrap_or_else(|| panic!("{}: unknown GLU {f}", case.name))
}

fn rope_params(case: &Case) -> RopeParams {
    RopeParams {
        n_dims: case.int("n_dims") as usize,
        mode: RopeMode::from_ggml(case.int("mode") as i32)
            .unwrap_or_else(|| panic!("{}: rope mode {}", case.name, case.int("mode"))),
        n_ctx_orig: case.int("n_ctx_orig") as usize,
        freq_base: case.f32("freq_base"),
        freq_scale: case.f32("freq_scale"),
        ext_factor: case.f32("ext_factor"),
        attn_factor: case.f32("attn_factor"),
        beta_fast: case.f32("beta_fast"),
        beta_slow: case.f32("beta_slow"),
        sections: match case.list("sections") {
            Some(s) => [s[0], s[1], s[2], s[3]].map(|x| x as u32),
            None => [0; 4],
        },
    }
}

// ---------------------------------------------------------------------------
// Running on the CPU device

/// Tessera's output bytes for `case` on the CPU device.
fn run(case: &Case) -> Result<Vec<u8>, String> {
    run_on(case, tessera_cpu::device().as_ref())
}

/// Tessera's output bytes for `case` on `dev`.
fn run_on(case: &Case, dev: &dyn Device) -> Result<Vec<u8>, String> {
    let b = build(case).map_err(|e| format!("Tessera's builder rejects it: {e}"))?;
    let out_layout = b.graph.layout(b.out).unwrap();
    let want = &case.output;
    if out_layout.dtype != want.dtype || out_layout.ne != want.ne {
        return Err(format!(
            "result is {} {:?}, ggml's is {} {:?}",
            out_layout.dtype, out_layout.ne, want.dtype, want.ne
        ));
    }
    for id in b.graph.op_ids() {
        if !b.graph.node(id).unwrap().op.is_view() && !dev.supports_op(&b.graph, id) {
            return Err(format!(
                "the {} device does not support {} ({})",
                dev.name(),
                b.graph.node(id).unwrap().op.name(),
                b.graph.node(id).unwrap().layout
            ));
        }
    }
    let mut alloc = GraphAllocator::new(dev.buffer_type());
    let mut placement = Placement::new(&b.graph);
    alloc
        .alloc_graph(&b.graph, &mut placement)
        .map_err(|e| format!("allocation: {e}"))?;
    for (t, &id) in case.inputs.iter().zip(&b.leaves) {
        placement
            .tensor(&b.graph, id)
            .and_then(|tensor| tensor.write(0, &t.data))
            .map_err(|e| format!("writing input {}: {e}", t.name))?;
    }
    let stream = dev
        .new_stream(&tessera::StreamOptions::new())
        .map_err(|e| format!("stream: {e}"))?;
    stream
        .compute(&b.graph, &placement)
        .map_err(|e| format!("compute: {e}"))?;
    placement
        .tensor(&b.graph, b.out)
        .and_then(|t| t.to_bytes())
        .map_err(|e| format!("reading the result: {e}"))
}

// ---------------------------------------------------------------------------
// Comparing

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tol {
    Exact,
    Nmse(f64),
}

/// How `case` is compared (see the module docs).
fn tolerance(case: &Case) -> Tol {
    match case.op.as_str() {
        "get_rows" | "set_rows" | "cpy" | "cont" | "concat" | "argmax" => Tol::Exact,
        "mul_mat" | "mul_mat_id" | "flash_attn_ext" => Tol::Nmse(5e-4),
        "rope" => Tol::Nmse(1e-3),
        "soft_max" => Tol::Nmse(1e-6),
        "unary" if case.param("fn") == Some("GELU") => {
            if case.output.dtype == DType::F16 {
                Tol::Exact
            } else {
                Tol::Nmse(GELU_NMSE)
            }
        }
        "glu" | "glu_split" if case.param("fn") == Some("GEGLU") => Tol::Nmse(GELU_NMSE),
        _ => Tol::Nmse(1e-7),
    }
}

/// The values of a fixture-shaped tensor, as f64 (quantized types dequantized).
fn values(dtype: DType, ne: [usize; 4], bytes: &[u8]) -> Vec<f64> {
    let n: usize = ne.iter().product();
    if dtype == DType::I64 {
        return bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect();
    }
    let mut v = vec![0f32; n];
    tessera::quant::to_f32(dtype, bytes, &mut v).unwrap();
    v.into_iter().map(f64::from).collect()
}

/// Multi-index of flat element `i` of extents `ne`.
fn index_of(i: usize, ne: [usize; 4]) -> [usize; 4] {
    [
        i % ne[0],
        i / ne[0] % ne[1],
        i / (ne[0] * ne[1]) % ne[2],
        i / (ne[0] * ne[1] * ne[2]),
    ]
}

/// The comparison of one case: the metric line, or the failure message.
fn compare(case: &Case, got_bytes: &[u8]) -> Result<String, String> {
    let want = &case.output;
    let tol = tolerance(case);
    let got = values(want.dtype, want.ne, got_bytes);
    let exp = values(want.dtype, want.ne, &want.data);
    // Worst element by absolute difference; a NaN/Inf mismatch is worst of all.
    let mut worst: Option<(usize, f64)> = None;
    let mut class_mismatch = None;
    let (mut num, mut den) = (0f64, 0f64);
    let mut n_diff = 0usize;
    for (i, (&t, &g)) in got.iter().zip(&exp).enumerate() {
        if !g.is_finite() || !t.is_finite() {
            let same = (g.is_nan() && t.is_nan()) || g == t;
            if !same && class_mismatch.is_none() {
                class_mismatch = Some(i);
            }
            continue;
        }
        let d = (t - g).abs();
        if d > 0.0 {
            n_diff += 1;
        }
        num += d * d;
        den += g * g;
        if worst.is_none_or(|(_, w)| d > w) {
            worst = Some((i, d));
        }
    }
    let nmse = if den > 0.0 { num / den } else { num };
    let describe = |i: usize| {
        format!(
            "element {i} {:?}: Tessera {:e}, ggml {:e}",
            index_of(i, want.ne),
            got[i],
            exp[i]
        )
    };
    let header = || {
        format!(
            "{} (op {}{}, out {} {:?})",
            case.name,
            case.op,
            params_suffix(case),
            want.dtype,
            want.ne
        )
    };
    if let Some(i) = class_mismatch {
        return Err(format!(
            "{}: non-finite mismatch at {}",
            header(),
            describe(i)
        ));
    }
    match tol {
        Tol::Exact => {
            if got_bytes == want.data.as_slice() {
                return Ok("bit-exact".into());
            }
            if want.dtype == DType::Q8_0 && matches!(case.op.as_str(), "cpy" | "set_rows") {
                return match q8_0_tie_rule(case, got_bytes) {
                    Ok(n) => Ok(format!(
                        "bit-exact except {n} Q8_0 values at exact rounding ties \
                         (Tessera: half away from zero, as ggml's reference quantizer; \
                         ggml's x86 CPU backend: half to even)"
                    )),
                    Err(e) => Err(format!("{}: {e}", header())),
                };
            }
            let n_bytes = got_bytes
                .iter()
                .zip(&want.data)
                .filter(|(a, b)| a != b)
                .count();
            let first = got_bytes
                .iter()
                .zip(&want.data)
                .position(|(a, b)| a != b)
                .unwrap();
            let mut msg = format!(
                "{}: not bit-exact: {n_bytes} of {} bytes differ (first at byte {first}, {} bytes per block); \
                 {n_diff} of {} values differ, NMSE {nmse:.3e}",
                header(),
                want.data.len(),
                want.dtype.type_size(),
                exp.len()
            );
            if let Some((i, d)) = worst.filter(|&(_, d)| d > 0.0) {
                let _ = write!(msg, "; worst {} (|diff| {d:e})", describe(i));
            }
            if want.dtype.is_quantized() {
                let bs = want.dtype.type_size();
                let blk = first / bs;
                let _ = write!(
                    msg,
                    "; block {blk}: Tessera {:02x?}, ggml {:02x?}",
                    &got_bytes[blk * bs..(blk + 1) * bs],
                    &want.data[blk * bs..(blk + 1) * bs]
                );
            }
            Err(msg)
        }
        Tol::Nmse(t) => {
            let (wi, wd) = worst.unwrap_or((0, 0.0));
            let line = format!(
                "NMSE {nmse:.3e} (<= {t:e}); {n_diff}/{} differ; worst {} (|diff| {wd:e})",
                exp.len(),
                describe(wi)
            );
            if nmse <= t {
                Ok(line)
            } else {
                Err(format!("{}: {line}", header()))
            }
        }
    }
}

fn params_suffix(case: &Case) -> String {
    if case.params.is_empty() {
        String::new()
    } else {
        format!(", {}", case.params_line())
    }
}

/// For each value of the Q8_0 result of a CPY or SET_ROWS case, the f32 value
/// that was quantized into it (`None` for SET_ROWS rows that no source row
/// writes, and for a CPY from a permuted source, which the tie rule skips).
fn q8_0_sources(case: &Case) -> Vec<Option<f32>> {
    let f32s = |t: &FixtureTensor| -> Vec<f32> {
        assert_eq!(t.dtype, DType::F32, "{}: {} must be F32", case.name, t.name);
        t.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let out = &case.output;
    let n: usize = out.ne.iter().product();
    let viewed = case
        .params
        .keys()
        .any(|k| k.starts_with("perm_") || k.starts_with("transpose_"));
    match case.op.as_str() {
        // Same element count, logical row-major order on both sides.
        "cpy" if !viewed => f32s(case.input("src")).into_iter().map(Some).collect(),
        "set_rows" => {
            // ggml_compute_forward_set_rows_impl (ggml-cpu/ops.cpp:5446): row
            // i of src plane (j, l) goes to row ids[i, j % ids.ne1, l % ids.ne2].
            let src = f32s(case.input("src"));
            let ids = case.input("ids");
            let id_at = |k: usize| -> usize {
                let v = match ids.dtype {
                    DType::I64 => {
                        i64::from_le_bytes(ids.data[8 * k..8 * k + 8].try_into().unwrap())
                    }
                    _ => i64::from(i32::from_le_bytes(
                        ids.data[4 * k..4 * k + 4].try_into().unwrap(),
                    )),
                };
                usize::try_from(v).unwrap()
            };
            let ne = out.ne;
            let sn = case.input("src").ne[1];
            let mut res = vec![None; n];
            for l in 0..ne[3] {
                for j in 0..ne[2] {
                    for i in 0..sn {
                        let r =
                            id_at(i + ids.ne[0] * (j % ids.ne[1] + ids.ne[1] * (l % ids.ne[2])));
                        for e in 0..ne[0] {
                            let x = src[e + ne[0] * (i + sn * (j + ne[2] * l))];
                            res[e + ne[0] * (r + ne[1] * (j + ne[2] * l))] = Some(x);
                        }
                    }
                }
            }
            res
        }
        _ => vec![None; n],
    }
}

/// The one known divergence from ggml's CPU backend, checked precisely.
///
/// CPY and SET_ROWS quantize with the CPU type traits' `from_float`
/// (ggml-cpu/ops.cpp:296 for CPY, ops.cpp:5477 for SET_ROWS), which for Q8_0
/// is `quantize_row_q8_0` (ggml-cpu/ggml-cpu.c:273). On x86 with AVX/AVX2 that
/// function scales by `id = 127 / amax` and rounds with
/// `_mm256_round_ps(v, _MM_ROUND_NEAREST)`, half to even
/// (ggml-cpu/arch/x86/quants.c:333, 343-346), while ggml's portable fallback
/// (`quantize_row_q8_0_generic`, ggml-cpu/quants.c:49) calls the reference
/// `quantize_row_q8_0_ref`, which rounds half away from zero (`roundf(x0)`,
/// ggml-quants.c:296). So ggml's own bytes at an exact tie depend on the
/// machine it runs on. Tessera quantizes with the reference everywhere
/// (byte-identical to it, as the quant fixtures check), so its Q8_0 bytes
/// equal the x86 backend's except at values exactly half-way between two
/// levels.
///
/// Accepted: equal scales; a differing value only where `x * id` is exactly
/// `k + 0.5` under both of ggml's formulas, Tessera holding the `roundf`
/// result and ggml the round-half-even one. Returns how many values differ
/// that way.
fn q8_0_tie_rule(case: &Case, got: &[u8]) -> Result<usize, String> {
    let want = &case.output.data;
    let src = q8_0_sources(case);
    let mut ties = 0;
    for (b, (gb, wb)) in got.chunks_exact(34).zip(want.chunks_exact(34)).enumerate() {
        if gb == wb {
            continue;
        }
        if gb[..2] != wb[..2] {
            return Err(format!(
                "block {b}: scales differ (Tessera {:02x?}, ggml {:02x?})",
                &gb[..2],
                &wb[..2]
            ));
        }
        let xs: Option<Vec<f32>> = src[32 * b..32 * b + 32].iter().copied().collect();
        let Some(xs) = xs else {
            return Err(format!(
                "block {b} differs and was not written from a known source"
            ));
        };
        let amax = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
        let (id_ref, id_x86) = if amax == 0.0 {
            (0.0, 0.0)
        } else {
            (1.0 / (amax / 127.0), 127.0 / amax)
        };
        for j in 0..32 {
            let (g, w) = (gb[2 + j] as i8, wb[2 + j] as i8);
            if g == w {
                continue;
            }
            let (t, t86) = (xs[j] * id_ref, xs[j] * id_x86);
            let tie = t == t86 && (t - t.trunc()).abs() == 0.5;
            if !(tie && f32::from(g) == t.round() && f32::from(w) == t86.round_ties_even()) {
                return Err(format!(
                    "block {b} value {j}: Tessera q {g}, ggml q {w} for x = {:e} \
                     (x * id = {t:e}): not the known rounding-tie difference",
                    xs[j]
                ));
            }
            ties += 1;
        }
    }
    Ok(ties)
}

/// Run every case whose op is one of `ops`; panic with all failures.
fn check_ops(ops: &[&str]) {
    check_cases(&|c: &Case| ops.contains(&c.op.as_str()), run);
}

/// Compare the cases `pick` selects, computed by `run`, with ggml's results.
fn check_cases(pick: &dyn Fn(&Case) -> bool, run: impl Fn(&Case) -> Result<Vec<u8>, String>) {
    let mut ops: Vec<&str> = cases()
        .iter()
        .filter(|c| pick(c))
        .map(|c| c.op.as_str())
        .collect();
    ops.dedup();
    let mut failures = Vec::new();
    let mut n = 0;
    for case in cases().iter().filter(|c| pick(c)) {
        n += 1;
        match run(case).and_then(|got| compare(case, &got)) {
            Ok(line) => println!("ok    {:<28} {line}", case.name),
            Err(e) => {
                let e = if e.starts_with(&case.name) {
                    e
                } else {
                    format!("{} (op {}{}): {e}", case.name, case.op, params_suffix(case))
                };
                println!("FAIL  {e}");
                failures.push(e);
            }
        }
    }
    assert!(n > 0, "no fixture cases for {ops:?}");
    assert!(
        failures.is_empty(),
        "{} of {n} ggml fixture cases disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every op the fixture file uses has a test below; the file is complete.
#[test]
fn fixture_file_is_covered() {
    const KNOWN: [&str; 23] = [
        "add",
        "mul",
        "div",
        "scale",
        "unary",
        "glu",
        "glu_split",
        "rms_norm",
        "norm",
        "soft_max",
        "rope",
        "mul_mat",
        "get_rows",
        "set_rows",
        "cpy",
        "cont",
        "concat",
        "argmax",
        "sum_rows",
        "flash_attn_ext",
        "mul_mat_id",
        "add_id",
        "swiglu_oai",
    ];
    let cases = cases();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    for c in cases {
        assert!(
            KNOWN.contains(&c.op.as_str()),
            "{}: unknown op {}",
            c.name,
            c.op
        );
        assert!(names.insert(c.name.as_str()), "duplicate case {}", c.name);
    }
}

#[test]
fn binary_add_mul_div() {
    check_ops(&["add", "mul", "div"]);
}

#[test]
fn scale() {
    check_ops(&["scale"]);
}

#[test]
fn unary() {
    check_ops(&["unary"]);
}

#[test]
fn glu() {
    check_ops(&["glu", "glu_split"]);
}

#[test]
fn norms() {
    check_ops(&["rms_norm", "norm"]);
}

#[test]
fn soft_max() {
    check_ops(&["soft_max"]);
}

#[test]
fn rope() {
    check_ops(&["rope"]);
}

#[test]
fn mul_mat() {
    check_ops(&["mul_mat"]);
}

#[test]
fn mixture_of_experts() {
    check_ops(&["mul_mat_id", "add_id", "swiglu_oai"]);
}

#[test]
fn get_rows() {
    check_ops(&["get_rows"]);
}

#[test]
fn set_rows() {
    check_ops(&["set_rows"]);
}

#[test]
fn cpy_cont_concat() {
    check_ops(&["cpy", "cont", "concat"]);
}

#[test]
fn argmax_sum_rows() {
    check_ops(&["argmax", "sum_rows"]);
}

#[test]
fn flash_attn_ext() {
    check_ops(&["flash_attn_ext"]);
}

/// The attention sinks and multi-section ROPE cases.
fn attention_ext_case(c: &Case) -> bool {
    c.has_input("sinks") || c.param("sections").is_some()
}

/// The conformance harness compares every device with the f64 reference
/// device; here the reference itself meets ggml on the attention sinks and
/// multi-section ROPE cases (same tolerances as the CPU).
#[test]
fn attention_ext_on_the_reference_device() {
    let n = cases().iter().filter(|c| attention_ext_case(c)).count();
    assert_eq!(n, 22, "sinks + multi-section ROPE fixture cases");
    let dev = tessera_testkit::ReferenceDevice::new();
    check_cases(&attention_ext_case, |c| run_on(c, dev.as_ref()));
}

/// The tie cases really contain values on which ggml's x86 CPU backend and
/// its reference quantizer round differently, so [`q8_0_tie_rule`] is
/// exercised (and this fails if ggml's or Tessera's rounding changes).
#[test]
fn q8_0_tie_cases_differ_only_at_ties() {
    for name in ["cpy_f32_q8_0_ties", "set_rows_q8_0_ties"] {
        let case = cases().iter().find(|c| c.name == name).unwrap();
        let got = run(case).unwrap();
        let ties = q8_0_tie_rule(case, &got).unwrap();
        println!("{name}: {ties} values differ from ggml's x86 CPU backend, all at rounding ties");
        assert!(
            ties > 0,
            "{name}: no tie differences: did the rounding change?"
        );
    }
}
