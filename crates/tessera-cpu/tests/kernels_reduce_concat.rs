//! ARGMAX (ggml's tie and NaN rules), SUM_ROWS and CONCAT on the CPU device.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, assert_close, lin, place};
use tessera::{DType, Graph};

/// ggml's `ggml_vec_argmax_f32`, transcribed from its definition: C's
/// `MAX(a, b)` is `a > b ? a : b`; the index follows every element equal
/// to the running maximum.
fn argmax_ref(row: &[f64]) -> f64 {
    let (mut max, mut idx) = (f64::NEG_INFINITY, 0);
    for (i, &v) in row.iter().enumerate() {
        max = if max > v { max } else { v };
        if max == v {
            idx = i;
        }
    }
    idx as f64
}

#[test]
fn argmax_follows_ggml_on_ties_nan_and_infinities() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let rows: [[f64; 4]; 7] = [
        [1.0, 3.0, 3.0, 2.0],     // tie: the last maximum wins (2)
        [5.0, nan, 1.0, 0.0],     // a NaN resets the running max: 2
        [nan, nan, nan, nan],     // all NaN: 0
        [-inf, -inf, -inf, -inf], // all -inf: 3
        [0.0, inf, 7.0, inf],     // 3
        [-2.0, -1.0, -3.0, -4.0], // 1
        [0.5, 0.25, nan, 0.1],    // 3
    ];
    let want_fixed = [2.0, 2.0, 0.0, 3.0, 3.0, 1.0, 3.0];
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, rows.len()]).unwrap();
    let out = g.argmax(a).unwrap();
    let r = place(g);
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    r.set(a, &flat);
    r.compute(3).unwrap();
    let want: Vec<f64> = rows.iter().map(|row| argmax_ref(row)).collect();
    assert_eq!(want, want_fixed, "the transcription of ggml's rule");
    assert_eq!(r.get(out), want);
}

#[test]
fn argmax_of_random_rows() {
    let mut g = Graph::new();
    let a0 = g.new_tensor(DType::F32, &[9, 301]).unwrap();
    let a = g.transpose(a0).unwrap(); // [301, 9], strided elements
    let out = g.argmax(a).unwrap();
    let r = place(g);
    // Integers in a small range make ties common.
    let mut rng = Rng::new(50);
    let vals: Vec<f64> = (0..2709).map(|_| rng.below(40) as f64).collect();
    r.set(a0, &vals);
    r.compute(2).unwrap();
    let av = r.get(a);
    let want: Vec<f64> = av.chunks(301).map(argmax_ref).collect();
    assert_eq!(r.get(out), want);
}

#[test]
fn sum_rows_in_f64() {
    let mut g = Graph::new();
    let a0 = g.new_tensor(DType::F32, &[3, 1001, 2]).unwrap();
    let a = g.permute(a0, [1, 0, 2, 3]).unwrap(); // rows of 1001, stride 12 bytes
    let out = g.sum_rows(a).unwrap();
    let r = place(g);
    r.set(a0, &Rng::new(51).vec(6006, -1.0, 1.0));
    r.compute(3).unwrap();
    let want: Vec<f64> = r.get(a).chunks(1001).map(|row| row.iter().sum()).collect();
    // One rounding of an f64 sum to f32.
    assert_close(
        "sum_rows",
        &r.get(out),
        &want,
        1e-9,
        f64::from(f32::EPSILON),
    );
}

#[test]
fn concat_along_every_dimension() {
    let mut rng = Rng::new(52);
    for t in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for dim in 0..4 {
            let mut ane = [3, 4, 2, 2];
            let mut bne = ane;
            ane[dim] = 2;
            bne[dim] = 3;
            let mut g = Graph::new();
            let a = g.new_tensor(t, &ane).unwrap();
            // b is read through a permuted view (strided elements).
            let bt_ne = [bne[1], bne[0], bne[2], bne[3]];
            let b0 = g.new_tensor(t, &bt_ne).unwrap();
            let b = g.transpose(b0).unwrap();
            let out = g.concat(a, b, dim).unwrap();
            let r = place(g);
            r.set(
                a,
                &(0..ane.iter().product())
                    .map(|_| rng.below(1000) as f64)
                    .collect::<Vec<_>>(),
            );
            r.set(
                b0,
                &(0..bne.iter().product())
                    .map(|_| rng.below(1000) as f64)
                    .collect::<Vec<_>>(),
            );
            r.compute(3).unwrap();
            let (av, bv) = (r.get(a), r.get(b));
            let one = r.graph.node(out).unwrap().layout.ne;
            let want: Vec<f64> = cpu_util::indices(&r.graph.node(out).unwrap().layout)
                .map(|mut i| {
                    if i[dim] < ane[dim] {
                        av[lin(i, ane)]
                    } else {
                        i[dim] -= ane[dim];
                        bv[lin(i, bne)]
                    }
                })
                .collect();
            assert_eq!(one[dim], 5);
            assert_eq!(r.get(out), want, "{t} dim {dim}");
        }
    }
}
