//! ADD/MUL/DIV, SCALE, UNARY and GLU on the CPU device against f64
//! references computed from the stored (already rounded) inputs.
//!
//! Tolerances: the kernels compute in f32 and round the result once to the
//! destination type, so a result is within `eps(dst) + 4 eps(f32)` relative
//! of the exact value (plus a tiny absolute term for results near zero);
//! transcendental functions get a few more f32 ulps.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, assert_close, eps, place};
use tessera::{DType, GluOp, Graph, Place, Placement, Stream, UnaryOp};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn tol(t: DType) -> f64 {
    eps(t) + 16.0 * eps(DType::F32)
}

#[test]
fn binary_ops_broadcast_over_every_dimension() {
    let mut rng = Rng::new(10);
    for t in FLOATS {
        for bt in [DType::F32, t] {
            for (name, f) in [("add", 0), ("mul", 1), ("div", 2)] {
                let mut g = Graph::new();
                let a = g.new_tensor(t, &[6, 5, 4, 3]).unwrap();
                // b broadcasts in dims 0 (3 -> 6), 1 and 3.
                let b = g.new_tensor(bt, &[3, 1, 4, 1]).unwrap();
                let out = match f {
                    0 => g.add(a, b),
                    1 => g.mul(a, b),
                    _ => g.div(a, b),
                }
                .unwrap();
                let r = place(g);
                r.set(a, &rng.vec(360, -3.0, 3.0));
                r.set(b, &rng.vec(12, 0.5, 2.0));
                r.compute(3).unwrap();
                let (av, bv) = (r.get(a), r.get(b));
                let want: Vec<f64> = cpu_util::indices(&r.graph.node(a).unwrap().layout)
                    .enumerate()
                    .map(|(k, i)| {
                        let y = bv[cpu_util::lin([i[0] % 3, 0, i[2], 0], [3, 1, 4, 1])];
                        match f {
                            0 => av[k] + y,
                            1 => av[k] * y,
                            _ => av[k] / y,
                        }
                    })
                    .collect();
                assert_close(
                    &format!("{name} {t} {bt}"),
                    &r.get(out),
                    &want,
                    1e-6,
                    tol(t),
                );
            }
        }
    }
}

#[test]
fn binary_ops_read_permuted_operands() {
    let mut g = Graph::new();
    let a0 = g.new_tensor(DType::F32, &[4, 7, 3]).unwrap();
    let a = g.permute(a0, [1, 0, 2, 3]).unwrap(); // [7, 4, 3], strided rows
    let b0 = g.new_tensor(DType::F32, &[4, 7]).unwrap();
    let b = g.transpose(b0).unwrap(); // [7, 4]
    let b16 = g.new_tensor(DType::F16, &[7, 4, 3]).unwrap();
    let out = g.mul(a, b).unwrap();
    let out16 = g.add(b16, a).unwrap(); // f16 + f32 -> f16
    let r = place(g);
    let mut rng = Rng::new(11);
    r.set(a0, &rng.vec(84, -2.0, 2.0));
    r.set(b0, &rng.vec(28, -2.0, 2.0));
    r.set(b16, &rng.vec(84, -2.0, 2.0));
    r.compute(2).unwrap();
    let (av, bv, cv) = (r.get(a), r.get(b), r.get(b16));
    let want: Vec<f64> = (0..84).map(|k| av[k] * bv[k % 28]).collect();
    assert_close("mul permuted", &r.get(out), &want, 1e-7, tol(DType::F32));
    let want16: Vec<f64> = (0..84).map(|k| cv[k] + av[k]).collect();
    assert_close("f16 + f32", &r.get(out16), &want16, 1e-3, tol(DType::F16));
}

/// Place every tensor of `g` like `cpu_util::place`, except that `alias` is
/// placed on `onto`'s memory (in-place computation).
fn place_in_place(g: Graph, alias: tessera::TensorId, onto: tessera::TensorId) -> cpu_util::Placed {
    let r = place(g);
    let mut placement = Placement::new(&r.graph);
    for id in r.graph.ids() {
        if r.graph.node(id).unwrap().is_view() {
            continue;
        }
        let src = if id == alias { onto } else { id };
        let offset = r.offset(src);
        placement
            .set(
                &r.graph,
                id,
                Place {
                    buffer: r.buffer.clone(),
                    offset,
                },
            )
            .unwrap();
    }
    placement.place_views(&r.graph).unwrap();
    cpu_util::Placed { placement, ..r }
}

#[test]
fn in_place_ops_give_the_same_results() {
    let mut rng = Rng::new(12);
    for t in FLOATS {
        let mut g = Graph::new();
        let a = g.new_tensor(t, &[9, 4, 3]).unwrap();
        let b = g.new_tensor(t, &[9, 1, 3]).unwrap();
        let s = g.add(a, b).unwrap();
        let u = g.unary(s, UnaryOp::Silu).unwrap();
        let vals = rng.vec(108, -3.0, 3.0);
        let bvals = rng.vec(27, -1.0, 1.0);
        let fresh = place(g.clone());
        fresh.set(a, &vals);
        fresh.set(b, &bvals);
        fresh.compute(2).unwrap();
        // ADD written into a's memory, SILU into ADD's (= a's).
        let aliased = place_in_place(g, s, a);
        let aliased = {
            let mut p = aliased.placement.clone();
            let off = aliased.offset(a);
            p.set(
                &aliased.graph,
                u,
                Place {
                    buffer: aliased.buffer.clone(),
                    offset: off,
                },
            )
            .unwrap();
            cpu_util::Placed {
                placement: p,
                ..aliased
            }
        };
        aliased.set(a, &vals);
        aliased.set(b, &bvals);
        aliased.compute(2).unwrap();
        assert_eq!(aliased.get(u), fresh.get(u), "{t}");
    }
}

fn unary_ref(f: UnaryOp, x: f64) -> f64 {
    match f {
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Gelu => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::GeluErf => 0.5 * x * (1.0 + erf_simpson(x / std::f64::consts::SQRT_2)),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::GeluQuick => x / (1.0 + (-1.702 * x).exp()),
    }
}

/// erf by composite Simpson integration (independent of the kernel's series).
fn erf_simpson(x: f64) -> f64 {
    let n = 4000;
    let h = x / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(x);
    for i in 1..n {
        s += if i % 2 == 1 { 4.0 } else { 2.0 } * f(i as f64 * h);
    }
    std::f64::consts::FRAC_2_SQRT_PI * s * h / 3.0
}

#[test]
fn unary_ops_match_f64_for_every_type_and_strided_input() {
    let mut rng = Rng::new(13);
    for t in FLOATS {
        for f in UnaryOp::ALL {
            let mut g = Graph::new();
            let a0 = g.new_tensor(t, &[5, 7, 2]).unwrap();
            let a = g.permute(a0, [1, 0, 2, 3]).unwrap();
            let out = g.unary(a, f).unwrap();
            let r = place(g);
            r.set(a0, &rng.vec(70, -6.0, 6.0));
            r.compute(2).unwrap();
            let want: Vec<f64> = r.get(a).iter().map(|&x| unary_ref(f, x)).collect();
            assert_close(
                &format!("{} {t}", f.name()),
                &r.get(out),
                &want,
                1e-6,
                tol(t) + 1e-6,
            );
        }
    }
}

#[test]
fn scale_with_bias() {
    let mut g = Graph::new();
    let a0 = g.new_tensor(DType::F32, &[3, 8]).unwrap();
    let a = g.transpose(a0).unwrap();
    let out = g.scale_bias(a, -1.75, 0.5).unwrap();
    let r = place(g);
    r.set(a0, &Rng::new(14).vec(24, -10.0, 10.0));
    r.compute(3).unwrap();
    let want: Vec<f64> = r.get(a).iter().map(|&x| x * -1.75 + 0.5).collect();
    assert_close("scale", &r.get(out), &want, 1e-6, tol(DType::F32));
}

fn act(op: GluOp, x: f64, g: f64) -> f64 {
    match op {
        GluOp::SwiGlu => unary_ref(UnaryOp::Silu, x) * g,
        GluOp::GeGlu => unary_ref(UnaryOp::Gelu, x) * g,
        GluOp::ReGlu => {
            if x > 0.0 {
                x * g
            } else {
                0.0
            }
        }
        GluOp::GeGluErf => unary_ref(UnaryOp::GeluErf, x) * g,
        GluOp::GeGluQuick => unary_ref(UnaryOp::GeluQuick, x) * g,
    }
}

#[test]
fn glu_fused_swapped_and_split() {
    let mut rng = Rng::new(15);
    for t in FLOATS {
        for op in GluOp::ALL {
            let n = 7;
            let mut g = Graph::new();
            let a = g.new_tensor(t, &[2 * n, 3, 2]).unwrap();
            let x = g.new_tensor(t, &[n, 3, 2]).unwrap();
            let gate = g.new_tensor(t, &[n, 3, 2]).unwrap();
            let fused = g.glu(a, op, false).unwrap();
            let swapped = g.glu(a, op, true).unwrap();
            let split = g.glu_split(x, gate, op).unwrap();
            let r = place(g);
            r.set(a, &rng.vec(2 * n * 6, -4.0, 4.0));
            r.set(x, &rng.vec(n * 6, -4.0, 4.0));
            r.set(gate, &rng.vec(n * 6, -4.0, 4.0));
            r.compute(2).unwrap();
            let av = r.get(a);
            let (xv, gv) = (r.get(x), r.get(gate));
            let mut want_f = Vec::new();
            let mut want_s = Vec::new();
            for row in 0..6 {
                for i in 0..n {
                    let (lo, hi) = (av[row * 2 * n + i], av[row * 2 * n + n + i]);
                    want_f.push(act(op, lo, hi));
                    want_s.push(act(op, hi, lo));
                }
            }
            let want_split: Vec<f64> = xv.iter().zip(&gv).map(|(&x, &g)| act(op, x, g)).collect();
            let what = format!("{} {t}", op.name());
            let (abs, rel) = (1e-5, tol(t) + 1e-6);
            assert_close(&format!("{what} fused"), &r.get(fused), &want_f, abs, rel);
            assert_close(
                &format!("{what} swapped"),
                &r.get(swapped),
                &want_s,
                abs,
                rel,
            );
            assert_close(
                &format!("{what} split"),
                &r.get(split),
                &want_split,
                abs,
                rel,
            );
        }
    }
}

#[test]
fn reglu_follows_ggml_for_infinite_gates() {
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[3]).unwrap();
    let gate = g.new_tensor(DType::F32, &[3]).unwrap();
    let out = g.glu_split(x, gate, GluOp::ReGlu).unwrap();
    let r = place(g);
    r.set(x, &[-1.0, 0.0, 2.0]);
    r.set(gate, &[f64::INFINITY, f64::INFINITY, 3.0]);
    let s: std::sync::Arc<dyn Stream> = cpu_util::stream(1);
    s.compute(&r.graph, &r.placement).unwrap();
    // ggml: x > 0 ? x * g : 0 (relu(x) * g would give NaN for 0 * inf).
    assert_eq!(r.get(out), vec![0.0, 0.0, 6.0]);
}
