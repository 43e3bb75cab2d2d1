//! MUL_MAT through the packed GEMM (`kernels/gemm.rs`, forced for every
//! column count), end to end on a CPU stream (scratch sizing, executor,
//! threads): every weight type on products with many columns — several `k` slices with a short last one, rows and
//! columns that are no multiple of any panel size, weights broadcast over
//! dims 2 and 3, and transposed or permuted activations — against an f64
//! product of the dequantized weights, on 1 to 3 threads. The instruction
//! set is the stream's (`TESSERA_CPU_ISA`): run the suite once per path.
//!
//! Tolerances (NMSE): f32 weights 1e-10 (only f32 rounding of long sums),
//! f16 1e-6 and bf16 5e-5 (as the dot-product path's tests, although the
//! GEMM keeps activations in f32), quantized 5e-4 (ggml's MUL_MAT bound).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, place};
use tessera::{DType, Graph, MUL_MAT_WEIGHT_TYPES, quant};

fn tolerance(t: DType) -> f64 {
    match t {
        DType::F32 => 1e-10,
        DType::F16 => 1e-6,
        DType::BF16 => 5e-5,
        _ => 5e-4,
    }
}

/// How `b` is stored.
#[derive(Clone, Copy, Debug)]
enum BView {
    Contiguous,
    /// Stored `[n, k, ..]` and transposed: elements of a row are `n * 4` apart.
    Transposed,
    /// Stored `[k, ne2, n, ne3]` and permuted to `[k, n, ne2, ne3]`.
    Permuted,
}

fn nmse(got: &[f64], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(g, w)| (g - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    err / norm.max(f64::MIN_POSITIVE)
}

/// `a [k, m, bs2, bs3]` of type `t` times `b [k, n, bs2 * r2, bs3 * r3]`.
fn check(t: DType, k: usize, m: usize, n: usize, bs: [usize; 2], r: [usize; 2], view: BView) {
    // Every product of this file takes the GEMM, whatever its column count
    // (every test sets the same value, so running them in parallel is fine).
    tessera_cpu::tuning::set_gemm_min_cols(Some(1));
    let mut rng = Rng::new((k * 31 + m * 7 + n) as u64);
    let ne_b = [k, n, bs[0] * r[0], bs[1] * r[1]];
    let mut g = Graph::new();
    let a = g.new_tensor(t, &[k, m, bs[0], bs[1]]).unwrap();
    let b = match view {
        BView::Contiguous => g.new_tensor(DType::F32, &ne_b).unwrap(),
        BView::Transposed => {
            let leaf = g.new_tensor(DType::F32, &[n, k, ne_b[2], ne_b[3]]).unwrap();
            g.transpose(leaf).unwrap()
        }
        BView::Permuted => {
            let leaf = g.new_tensor(DType::F32, &[k, ne_b[2], n, ne_b[3]]).unwrap();
            g.permute(leaf, [0, 2, 1, 3]).unwrap()
        }
    };
    let out = g.mul_mat(a, b).unwrap();
    let r_ = place(g);
    assert_eq!(r_.graph.node(b).unwrap().layout.ne, ne_b, "{view:?}");

    let rows = m * bs[0] * bs[1];
    let row_bytes = t.row_size(k).unwrap();
    let mut a_bytes = vec![0u8; rows * row_bytes];
    let mut a_vals = Vec::with_capacity(rows * k);
    for row in a_bytes.chunks_mut(row_bytes.max(1)).take(rows) {
        let v: Vec<f32> = rng.vec(k, -1.0, 1.0).iter().map(|&x| x as f32).collect();
        quant::from_f32(t, &v, row).unwrap();
        let mut d = vec![0f32; k];
        quant::to_f32(t, row, &mut d).unwrap();
        a_vals.extend(d.into_iter().map(f64::from));
    }
    r_.set_raw(a, &a_bytes);
    let b_vals: Vec<f64> = rng
        .vec(ne_b.iter().product(), -1.0, 1.0)
        .iter()
        .map(|&x| f64::from(x as f32))
        .collect();
    r_.set(b, &b_vals);

    let mut want = Vec::with_capacity(m * n * ne_b[2] * ne_b[3]);
    for i13 in 0..ne_b[3] {
        for i12 in 0..ne_b[2] {
            for j in 0..n {
                let brow = &b_vals[((i13 * ne_b[2] + i12) * n + j) * k..][..k];
                for i in 0..m {
                    let arow = ((i13 / r[1] * bs[0] + i12 / r[0]) * m + i) * k;
                    let arow = &a_vals[arow..arow + k];
                    want.push(arow.iter().zip(brow).map(|(x, y)| x * y).sum::<f64>());
                }
            }
        }
    }
    for threads in 1..=3 {
        r_.compute(threads).unwrap();
        let e = nmse(&r_.get(out), &want);
        assert!(
            e <= tolerance(t),
            "{t} k={k} m={m} n={n} bs={bs:?} r={r:?} {view:?} threads={threads}: NMSE {e:e}"
        );
    }
}

/// A row length of three `k` slices with a short last one, in whole blocks.
fn long_k(t: DType) -> usize {
    if t.block_size() == 256 { 768 } else { 608 }
}

#[test]
fn many_columns_odd_sizes_every_type() {
    for t in MUL_MAT_WEIGHT_TYPES {
        check(t, long_k(t), 70, 37, [1, 1], [1, 1], BView::Contiguous);
    }
}

#[test]
fn transposed_activations_every_type() {
    for t in MUL_MAT_WEIGHT_TYPES {
        check(t, 256, 33, 19, [1, 1], [1, 1], BView::Transposed);
    }
}

#[test]
fn permuted_and_broadcast_activations_every_type() {
    for t in MUL_MAT_WEIGHT_TYPES {
        check(t, 256, 21, 9, [2, 1], [2, 3], BView::Permuted);
        check(t, 256, 17, 6, [1, 2], [3, 1], BView::Contiguous);
    }
}

#[test]
fn odd_row_lengths_of_the_float_types() {
    for t in [DType::F32, DType::F16, DType::BF16] {
        check(t, 301, 45, 26, [1, 1], [1, 1], BView::Contiguous);
        check(t, 3, 18, 12, [1, 1], [1, 1], BView::Transposed);
    }
}
