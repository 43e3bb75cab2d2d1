//! Products of the same activations share their packed B panels (the
//! executor's `tables`, `kernels/gemm_shared_b.rs`): each product must be
//! bit for bit what it computes alone in a graph of its own. Covered: a
//! pair of one weight type (shared), a type packed otherwise between them
//! and after them (a group of its own, which closes the first), the
//! super-block and f32 paths, and the activations rewritten in place by a
//! CPY between two products that would share (the products after it must
//! pack the new values, not read the old panels), on 1 to 3 threads. The instruction set is the
//! stream's (`TESSERA_CPU_ISA`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, place};
use tessera::{DType, Graph, TensorId, quant};

const K: usize = 256;
const M: usize = 40;
const N: usize = 96;

/// Quantized bytes of `values` (M rows of K) as `t`.
fn weights(t: DType, values: &[f64]) -> Vec<u8> {
    let f: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    let mut out = vec![0u8; t.row_size(K).unwrap() * M];
    quant::from_f32(t, &f, &mut out).unwrap();
    out
}

/// `w x` alone in its graph: the per-node result sharing must equal.
fn alone(t: DType, w: &[u8], x: &[f64], threads: usize) -> Vec<u32> {
    let mut g = Graph::new();
    let a = g.new_tensor(t, &[K, M]).unwrap();
    let b = g.new_tensor(DType::F32, &[K, N]).unwrap();
    let y = g.mul_mat(a, b).unwrap();
    let r = place(g);
    r.set_raw(a, w);
    r.set(b, x);
    r.compute(threads).unwrap();
    bits(&r.get(y))
}

fn bits(v: &[f64]) -> Vec<u32> {
    v.iter().map(|&x| (x as f32).to_bits()).collect()
}

#[test]
fn products_of_one_input_share_their_packed_activations() {
    // (weight type, reads the activations after the CPY)
    let plan = [
        (DType::Q5_0, false),
        (DType::Q5_0, false),
        (DType::Q8_0, false),
        (DType::Q4K, false),
        (DType::Q4K, false),
        (DType::Q5_0, false),
        (DType::F16, false),
        (DType::F16, false),
        (DType::Q5_0, false),
        (DType::Q5_0, true),
        (DType::Q5_0, true),
    ];
    let mut rng = Rng::new(5);
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[K, N]).unwrap();
    let z = g.new_tensor(DType::F32, &[K, N]).unwrap();
    let mut xs = x;
    let mut nodes: Vec<(TensorId, TensorId)> = Vec::new();
    for &(t, after) in &plan {
        if after && xs == x {
            xs = g.cpy(z, x).unwrap();
        }
        let w = g.new_tensor(t, &[K, M]).unwrap();
        nodes.push((w, g.mul_mat(w, xs).unwrap()));
    }
    let r = place(g);
    let before = rng.vec(K * N, -2.0, 2.0);
    let later = rng.vec(K * N, -1.0, 3.0);
    let ws: Vec<Vec<u8>> = plan
        .iter()
        .map(|&(t, _)| weights(t, &rng.vec(K * M, -1.0, 1.0)))
        .collect();
    for threads in [1, 2, 3] {
        r.set(x, &before);
        r.set(z, &later);
        for (k, &(w, _)) in nodes.iter().enumerate() {
            r.set_raw(w, &ws[k]);
        }
        r.compute(threads).unwrap();
        for (k, &(_, y)) in nodes.iter().enumerate() {
            let (t, after) = plan[k];
            let seen = if after { &later } else { &before };
            assert!(
                bits(&r.get(y)) == alone(t, &ws[k], seen, threads),
                "product {k} ({t}) on {threads} threads differs from its own"
            );
        }
    }
}
