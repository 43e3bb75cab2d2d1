//! Every op with a SIMD path, computed on every instruction set this
//! machine has and with 1, 2 and 3 threads, against the portable path on
//! one thread: odd row lengths (tails), broadcasts, strided and in-place
//! operands, single rows (column splits), tiny nodes (solo scheduling) and
//! big ones.
//!
//! Tolerances: element-wise ops, SCALE, ROPE, CPY (F16, Q8_0, Q4_0 and back)
//! and GET_ROWS/SET_ROWS must be bit-identical; RMS_NORM/NORM within 4 f32
//! ulps (f64 sums in another order can move the mean's last bit), SOFT_MAX
//! within 1e-6 relative plus 1e-30 (AVX2's polynomial `exp`), SILU/SWIGLU
//! within 1e-6 relative plus 1e-30.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Placed, Rng, place};
use tessera::{DType, Device, Graph, RopeMode, RopeParams, TensorId, quant};
use tessera_cpu::isa::Isa;

/// How to fill an input.
#[derive(Clone, Copy)]
enum Init {
    /// Uniform values in [lo, hi) (quantized inputs: quantized from them).
    Uniform(f64, f64),
    /// Integers `0..n` at random.
    Index(usize),
    /// Positions `0, 1, 2, ...`
    Positions,
}

/// A case: builds its graph, names its inputs and its output.
type Case = fn(&mut Graph) -> (Vec<(TensorId, Init)>, TensorId);

/// How exactly the configurations must agree.
#[derive(Clone, Copy, Debug)]
enum Tol {
    Bits,
    Ulps(u32),
    Rel(f64),
}

fn fill(r: &Placed, inputs: &[(TensorId, Init)], seed: u64) {
    let mut rng = Rng::new(seed);
    for &(id, init) in inputs {
        let l = r.graph.node(id).unwrap().layout;
        let n = l.nelements();
        let values: Vec<f64> = match init {
            Init::Uniform(lo, hi) => rng.vec(n, lo, hi),
            Init::Index(m) => (0..n).map(|_| rng.below(m) as f64).collect(),
            Init::Positions => (0..n).map(|i| i as f64).collect(),
        };
        if l.dtype.is_quantized() {
            let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let mut bytes = vec![0u8; l.nbytes()];
            quant::from_f32(l.dtype, &f, &mut bytes).unwrap();
            r.set_raw(id, &bytes);
        } else {
            r.set(id, &values);
        }
    }
}

/// The output's bytes (contiguous outputs) after computing on `params`.
fn compute(case: Case, params: &str) -> (Vec<u8>, DType) {
    let mut g = Graph::new();
    let (inputs, out) = case(&mut g);
    let dtype = g.node(out).unwrap().layout.dtype;
    let r = place(g);
    fill(&r, &inputs, 42);
    let stream = tessera_cpu::device()
        .new_stream(&tessera::StreamOptions::parse(params).unwrap())
        .unwrap();
    stream.compute(&r.graph, &r.placement).unwrap();
    // Twice: the second compute reuses the cached plan.
    fill(&r, &inputs, 42);
    stream.compute(&r.graph, &r.placement).unwrap();
    (r.get_raw(out), dtype)
}

fn check(name: &str, case: Case, tol: Tol) {
    let (want, dtype) = compute(case, "threads=1,isa=scalar");
    for isa in Isa::all_available() {
        for threads in [1, 2, 3] {
            let params = format!("threads={threads},isa={}", isa.name());
            let (got, _) = compute(case, &params);
            assert_eq!(got.len(), want.len(), "{name} {params}");
            match (tol, dtype) {
                (Tol::Bits, _) => assert!(got == want, "{name} {params}: bytes differ"),
                (_, DType::F32) => {
                    let f = |b: &[u8]| -> Vec<f32> {
                        b.chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect()
                    };
                    for (i, (g, w)) in f(&got).into_iter().zip(f(&want)).enumerate() {
                        let ok = match tol {
                            Tol::Ulps(u) => {
                                g.to_bits() == w.to_bits()
                                    || (g.signum() == w.signum()
                                        && g.to_bits().abs_diff(w.to_bits()) <= u)
                            }
                            Tol::Rel(r) => {
                                (g.is_nan() && w.is_nan())
                                    || (f64::from(g) - f64::from(w)).abs()
                                        <= r * f64::from(w).abs() + 1e-30
                            }
                            Tol::Bits => unreachable!(),
                        };
                        assert!(ok, "{name} {params}: element {i}: {g} vs {w}");
                    }
                }
                (_, t) => panic!("{name}: tolerance for {t}"),
            }
        }
    }
}

const U: Init = Init::Uniform(-2.0, 2.0);
const POS: Init = Init::Uniform(0.5, 2.0);

#[test]
fn binary_ops_agree_bit_for_bit() {
    let cases: [(&str, Case); 7] = [
        ("add same shape", |g| {
            let a = g.new_tensor(DType::F32, &[37, 5, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[37, 5, 3]).unwrap();
            (vec![(a, U), (b, U)], g.add(a, b).unwrap())
        }),
        ("mul row broadcast", |g| {
            let a = g.new_tensor(DType::F32, &[4100, 9]).unwrap();
            let b = g.new_tensor(DType::F32, &[4100, 1]).unwrap();
            (vec![(a, U), (b, U)], g.mul(a, b).unwrap())
        }),
        ("div scalar broadcast", |g| {
            let a = g.new_tensor(DType::F32, &[19, 4, 2]).unwrap();
            let b = g.new_tensor(DType::F32, &[1]).unwrap();
            (vec![(a, U), (b, POS)], g.div(a, b).unwrap())
        }),
        ("add repeated segments", |g| {
            let a = g.new_tensor(DType::F32, &[60, 7]).unwrap();
            let b = g.new_tensor(DType::F32, &[12, 7]).unwrap();
            (vec![(a, U), (b, U)], g.add(a, b).unwrap())
        }),
        ("mul big flat", |g| {
            let a = g.new_tensor(DType::F32, &[70001]).unwrap();
            let b = g.new_tensor(DType::F32, &[70001]).unwrap();
            (vec![(a, U), (b, U)], g.mul(a, b).unwrap())
        }),
        ("add strided operand", |g| {
            let a0 = g.new_tensor(DType::F32, &[9, 33]).unwrap();
            let a = g.transpose(a0).unwrap();
            let b = g.new_tensor(DType::F32, &[33, 9]).unwrap();
            let c = g.add(b, a).unwrap();
            (vec![(a0, U), (b, U)], c)
        }),
        ("scale with bias", |g| {
            let a = g.new_tensor(DType::F32, &[101, 3]).unwrap();
            (vec![(a, U)], g.scale_bias(a, 0.37, -1.25).unwrap())
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Bits);
    }
}

#[test]
fn norms_agree() {
    let cases: [(&str, Case); 3] = [
        ("rms_norm", |g| {
            let a = g.new_tensor(DType::F32, &[4099, 5]).unwrap();
            (vec![(a, U)], g.rms_norm(a, 1e-6).unwrap())
        }),
        ("rms_norm short rows", |g| {
            let a = g.new_tensor(DType::F32, &[7, 3, 2]).unwrap();
            (vec![(a, U)], g.rms_norm(a, 1e-5).unwrap())
        }),
        ("norm", |g| {
            let a = g.new_tensor(DType::F32, &[1025, 4]).unwrap();
            (vec![(a, Init::Uniform(1.0, 3.0))], g.norm(a, 1e-5).unwrap())
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Ulps(4));
    }
}

#[test]
fn soft_max_agrees() {
    let cases: [(&str, Case); 4] = [
        ("soft_max", |g| {
            let a = g.new_tensor(DType::F32, &[1001, 6]).unwrap();
            (
                vec![(a, Init::Uniform(-20.0, 20.0))],
                g.soft_max(a).unwrap(),
            )
        }),
        ("soft_max f16 mask alibi", |g| {
            let a = g.new_tensor(DType::F32, &[77, 5, 4]).unwrap();
            let m = g.new_tensor(DType::F16, &[77, 8]).unwrap();
            let s = g.soft_max_ext(a, Some(m), 0.125, 8.0).unwrap();
            (
                vec![
                    (a, Init::Uniform(-20.0, 20.0)),
                    (m, Init::Uniform(-4.0, 0.0)),
                ],
                s,
            )
        }),
        ("soft_max f32 mask", |g| {
            let a = g.new_tensor(DType::F32, &[33, 3, 2]).unwrap();
            let m = g.new_tensor(DType::F32, &[33, 3]).unwrap();
            let s = g.soft_max_ext(a, Some(m), 1.0, 0.0).unwrap();
            (vec![(a, U), (m, U)], s)
        }),
        ("soft_max one long row", |g| {
            let a = g.new_tensor(DType::F32, &[65539]).unwrap();
            (
                vec![(a, Init::Uniform(-50.0, 50.0))],
                g.soft_max(a).unwrap(),
            )
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Rel(1e-6));
    }
}

#[test]
fn silu_and_swiglu_agree() {
    let cases: [(&str, Case); 3] = [
        ("silu", |g| {
            let a = g.new_tensor(DType::F32, &[1003, 3]).unwrap();
            (vec![(a, Init::Uniform(-15.0, 15.0))], g.silu(a).unwrap())
        }),
        ("swiglu split", |g| {
            let a = g.new_tensor(DType::F32, &[515, 3]).unwrap();
            let b = g.new_tensor(DType::F32, &[515, 3]).unwrap();
            (vec![(a, U), (b, U)], g.swiglu_split(a, b).unwrap())
        }),
        ("swiglu fused", |g| {
            let a = g.new_tensor(DType::F32, &[2 * 131, 4]).unwrap();
            (
                vec![(a, U)],
                g.glu(a, tessera::GluOp::SwiGlu, false).unwrap(),
            )
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Rel(1e-6));
    }
}

#[test]
fn rope_agrees_bit_for_bit() {
    fn rope(
        g: &mut Graph,
        t: DType,
        ne: [usize; 3],
        nd: usize,
        mode: RopeMode,
    ) -> (Vec<(TensorId, Init)>, TensorId) {
        let a = g.new_tensor(t, &ne).unwrap();
        let pos = g.new_tensor(DType::I32, &[ne[2]]).unwrap();
        let mut p = RopeParams::new(nd, mode, 10000.0);
        p.freq_scale = 0.5;
        p.ext_factor = 0.25;
        p.n_ctx_orig = 64;
        let r = g.rope(a, pos, None, p).unwrap();
        (vec![(a, U), (pos, Init::Index(300))], r)
    }
    let cases: [(&str, Case); 6] = [
        ("rope f32 normal", |g| {
            rope(g, DType::F32, [128, 5, 9], 128, RopeMode::Normal)
        }),
        ("rope f32 neox", |g| {
            rope(g, DType::F32, [128, 5, 9], 128, RopeMode::Neox)
        }),
        ("rope f32 normal partial odd", |g| {
            rope(g, DType::F32, [46, 3, 7], 38, RopeMode::Normal)
        }),
        ("rope f32 neox partial odd", |g| {
            rope(g, DType::F32, [46, 3, 7], 38, RopeMode::Neox)
        }),
        ("rope f16 normal", |g| {
            rope(g, DType::F16, [64, 4, 6], 64, RopeMode::Normal)
        }),
        ("rope f16 neox partial", |g| {
            rope(g, DType::F16, [72, 4, 6], 42, RopeMode::Neox)
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Bits);
    }
    // One position, several sequences (dimension 3): the cache is reused.
    check(
        "rope one position",
        |g| {
            let a = g.new_tensor(DType::F32, &[32, 3, 1, 5]).unwrap();
            let pos = g.new_tensor(DType::I32, &[1]).unwrap();
            let r = g
                .rope(a, pos, None, RopeParams::new(32, RopeMode::Normal, 10000.0))
                .unwrap();
            (vec![(a, U), (pos, Init::Index(1000))], r)
        },
        Tol::Bits,
    );
    // Two positions, several sequences: the next position wraps to 0.
    check(
        "rope wrapping positions",
        |g| {
            let a = g.new_tensor(DType::F16, &[48, 5, 2, 3]).unwrap();
            let pos = g.new_tensor(DType::I32, &[2]).unwrap();
            let r = g
                .rope(a, pos, None, RopeParams::new(40, RopeMode::Neox, 10000.0))
                .unwrap();
            (vec![(a, U), (pos, Init::Index(1000))], r)
        },
        Tol::Bits,
    );
    // Positions in order too (the cos/sin cache is reused across heads).
    check(
        "rope positions",
        |g| {
            let a = g.new_tensor(DType::F32, &[64, 8, 17]).unwrap();
            let pos = g.new_tensor(DType::I32, &[17]).unwrap();
            let r = g
                .rope(a, pos, None, RopeParams::new(64, RopeMode::Neox, 500000.0))
                .unwrap();
            (vec![(a, U), (pos, Init::Positions)], r)
        },
        Tol::Bits,
    );
}

#[test]
fn copies_agree_bit_for_bit() {
    fn cpy(g: &mut Graph, s: DType, d: DType, ne: [usize; 3]) -> (Vec<(TensorId, Init)>, TensorId) {
        let a = g.new_tensor(s, &ne).unwrap();
        let b = g.new_tensor(d, &ne).unwrap();
        let c = g.cpy(a, b).unwrap();
        (vec![(a, Init::Uniform(-3.0, 3.0)), (b, U)], c)
    }
    let cases: [(&str, Case); 8] = [
        ("f32 to f16", |g| {
            cpy(g, DType::F32, DType::F16, [517, 3, 2])
        }),
        ("f16 to f32", |g| {
            cpy(g, DType::F16, DType::F32, [517, 3, 2])
        }),
        ("f32 to q8_0", |g| {
            cpy(g, DType::F32, DType::Q8_0, [96, 7, 2])
        }),
        ("f32 to q4_0", |g| {
            cpy(g, DType::F32, DType::Q4_0, [96, 7, 2])
        }),
        ("q8_0 to f32", |g| {
            cpy(g, DType::Q8_0, DType::F32, [4096, 3, 1])
        }),
        ("q4_0 to f32", |g| {
            cpy(g, DType::Q4_0, DType::F32, [4096, 3, 1])
        }),
        ("f32 to q8_0 one row", |g| {
            cpy(g, DType::F32, DType::Q8_0, [4096, 1, 1])
        }),
        ("f32 to f16 transposed", |g| {
            let a0 = g.new_tensor(DType::F32, &[21, 13]).unwrap();
            let a = g.transpose(a0).unwrap();
            let b = g.new_tensor(DType::F16, &[13, 21]).unwrap();
            let c = g.cpy(a, b).unwrap();
            (vec![(a0, U), (b, U)], c)
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Bits);
    }
}

#[test]
fn row_gathers_and_scatters_agree_bit_for_bit() {
    fn get(
        g: &mut Graph,
        t: DType,
        n: usize,
        rows: usize,
        r: usize,
    ) -> (Vec<(TensorId, Init)>, TensorId) {
        let a = g.new_tensor(t, &[n, rows]).unwrap();
        let ids = g.new_tensor(DType::I32, &[r]).unwrap();
        let o = g.get_rows(a, ids).unwrap();
        (vec![(a, U), (ids, Init::Index(rows))], o)
    }
    let cases: [(&str, Case); 12] = [
        // Rows long enough to be split by columns between threads.
        ("get f32 one long row", |g| get(g, DType::F32, 20000, 3, 1)),
        ("get q8_0 one long row", |g| {
            get(g, DType::Q8_0, 32 * 700, 3, 1)
        }),
        ("get q4_0 two long rows", |g| {
            get(g, DType::Q4_0, 32 * 900, 3, 2)
        }),
        ("get f32 one row", |g| get(g, DType::F32, 4096, 50, 1)),
        ("get f16 one row", |g| get(g, DType::F16, 4096, 50, 1)),
        ("get q8_0 one row", |g| get(g, DType::Q8_0, 4096, 50, 1)),
        ("get q4_0 one row", |g| get(g, DType::Q4_0, 4096, 50, 1)),
        ("get q4_0 odd blocks", |g| {
            get(g, DType::Q4_0, 32 * 7, 20, 1)
        }),
        ("get f16 many rows", |g| get(g, DType::F16, 1000, 40, 37)),
        ("get q8_0 many rows", |g| get(g, DType::Q8_0, 320, 40, 37)),
        ("get bf16", |g| get(g, DType::BF16, 77, 12, 5)),
        ("set f16 rows", |g| {
            let dst = g.new_tensor(DType::F16, &[130, 20]).unwrap();
            let rows = g.new_tensor(DType::F32, &[130, 6]).unwrap();
            let ids = g.new_tensor(DType::I32, &[6]).unwrap();
            let o = g.set_rows(dst, rows, ids).unwrap();
            (vec![(dst, U), (rows, U), (ids, Init::Index(20))], o)
        }),
    ];
    for (name, case) in cases {
        check(name, case, Tol::Bits);
    }
    check(
        "set q8_0 rows",
        |g| {
            let dst = g.new_tensor(DType::Q8_0, &[128, 10]).unwrap();
            let rows = g.new_tensor(DType::F32, &[128, 4]).unwrap();
            let ids = g.new_tensor(DType::I32, &[4]).unwrap();
            let o = g.set_rows(dst, rows, ids).unwrap();
            (vec![(dst, U), (rows, U), (ids, Init::Index(10))], o)
        },
        Tol::Bits,
    );
}

#[test]
fn in_place_ops_agree_bit_for_bit() {
    // The allocator may give a result the memory of a same-layout source:
    // place the result exactly over it and compare with the portable path.
    for isa in Isa::all_available() {
        for threads in [1, 2] {
            let mut results = Vec::new();
            for params in [
                "threads=1,isa=scalar".to_string(),
                format!("threads={threads},isa={}", isa.name()),
            ] {
                let mut g = Graph::new();
                let a = g.new_tensor(DType::F32, &[301, 4]).unwrap();
                let b = g.new_tensor(DType::F32, &[301, 4]).unwrap();
                let c = g.add(a, b).unwrap();
                let d = g.rms_norm(c, 1e-6).unwrap();
                let e = g.mul(d, b).unwrap();
                let r = place(g);
                fill(&r, &[(a, U), (b, U)], 7);
                let mut placement = r.placement.clone();
                // c over b, d over c, e over d.
                let pb = r.placement.get(b).unwrap().clone();
                for id in [c, d, e] {
                    placement.set(&r.graph, id, pb.clone()).unwrap();
                }
                let stream = tessera_cpu::device()
                    .new_stream(&tessera::StreamOptions::parse(&params).unwrap())
                    .unwrap();
                // e = rms(a + b) * (a + b) with every result written over b.
                stream.compute(&r.graph, &placement).unwrap();
                results.push(r.get_raw(b));
            }
            assert!(results[0] == results[1], "{} {threads} threads", isa.name());
        }
    }
}
