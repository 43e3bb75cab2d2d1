//! DUP, CONT and CPY on the CPU device against element-by-element
//! references: logical row-major order of the source written in logical
//! order into the destination, conversions rounded once from the source
//! value, quantized rows against `tessera::quant`'s reference conversions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use cpu_util::{Rng, assert_close, place, round_to};
use tessera::{DType, Graph, quant};

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

#[test]
fn cont_of_a_permuted_view_is_the_logical_order() {
    for t in FLOATS {
        let mut g = Graph::new();
        let a = g.new_tensor(t, &[5, 3, 4, 2]).unwrap();
        let p = g.permute(a, [2, 0, 3, 1]).unwrap();
        let c = g.cont(p).unwrap();
        let d = g.dup(p).unwrap();
        let r = place(g);
        let vals = Rng::new(1).vec(120, -4.0, 4.0);
        r.set(a, &vals);
        r.compute(2).unwrap();
        // The reference reads the view element by element through its strides.
        let want = r.get(p);
        for out in [c, d] {
            assert!(r.graph.node(out).unwrap().layout.is_contiguous());
            assert_eq!(r.get(out), want, "{t}");
        }
    }
}

#[test]
fn cpy_converts_between_float_types_into_other_shapes_and_strides() {
    let mut rng = Rng::new(2);
    for st in FLOATS {
        for dt in FLOATS {
            let mut g = Graph::new();
            let a = g.new_tensor(st, &[7, 3, 2]).unwrap();
            let at = g.transpose(a).unwrap(); // [3, 7, 2], strided source
            // Destination: a transposed view of a [6, 7] tensor, same element count (42).
            let b = g.new_tensor(dt, &[6, 7]).unwrap();
            let bt = g.transpose(b).unwrap(); // [7, 6]
            let out = g.cpy(at, bt).unwrap();
            let r = place(g);
            let vals = rng.vec(42, -100.0, 100.0);
            r.set(a, &vals);
            r.compute(3).unwrap();
            // Element k of the source's logical order goes to element k of
            // the destination's logical order, rounded once to `dt`.
            let src: Vec<f64> = r.get(at);
            let want: Vec<f64> = src.iter().map(|&v| round_to(dt, v)).collect();
            assert_eq!(r.get(out), want, "{st} -> {dt}");
            assert_eq!(
                r.get(bt),
                want,
                "{st} -> {dt}: the destination tensor holds the copy"
            );
        }
    }
}

#[test]
fn cpy_of_integers_copies_bytes() {
    for t in [DType::I32, DType::I64] {
        let mut g = Graph::new();
        let a = g.new_tensor(t, &[4, 3]).unwrap();
        let b = g.new_tensor(t, &[2, 6]).unwrap();
        let out = g.cpy(a, b).unwrap();
        let r = place(g);
        let vals: Vec<f64> = (0..12)
            .map(|i| f64::from(i * 1_000_003 - 5_000_000))
            .collect();
        r.set(a, &vals);
        r.compute(2).unwrap();
        assert_eq!(r.get(out), vals, "{t}");
    }
}

#[test]
fn cpy_quantizes_rows_like_the_reference() {
    let mut rng = Rng::new(3);
    for qt in [
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
        let ne0 = 512;
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[ne0, 3]).unwrap();
        let q = g.new_tensor(qt, &[ne0, 3]).unwrap();
        let out = g.cpy(a, q).unwrap();
        let back = g.new_tensor(DType::F32, &[ne0, 3]).unwrap();
        let deq = g.cpy(out, back).unwrap();
        let r = place(g);
        let vals = rng.vec(3 * ne0, -2.0, 2.0);
        r.set(a, &vals);
        r.compute(2).unwrap();
        let row_bytes = qt.row_size(ne0).unwrap();
        let mut want_q = vec![0u8; 3 * row_bytes];
        let src32: Vec<f32> = vals.iter().map(|&v| v as f32).collect();
        for (s, d) in src32.chunks(ne0).zip(want_q.chunks_mut(row_bytes)) {
            quant::from_f32(qt, s, d).unwrap();
        }
        assert_eq!(r.get_raw(q), want_q, "{qt}: quantized bytes");
        let mut want_f = vec![0f32; 3 * ne0];
        for (s, d) in want_q.chunks(row_bytes).zip(want_f.chunks_mut(ne0)) {
            quant::to_f32(qt, s, d).unwrap();
        }
        let want: Vec<f64> = want_f.iter().map(|&v| f64::from(v)).collect();
        assert_eq!(r.get(deq), want, "{qt}: dequantized values");
    }
}

#[test]
fn cpy_between_quantized_tensors_of_one_type_copies_rows() {
    let qt = DType::Q8_0;
    let mut g = Graph::new();
    // Rows of 64 elements: [64, 6] into [64, 3, 2] (same rows, other shape).
    let a = g.new_tensor(qt, &[64, 6]).unwrap();
    let b = g.new_tensor(qt, &[64, 3, 2]).unwrap();
    let out = g.cpy(a, b).unwrap();
    let r = place(g);
    let data: Vec<u8> = (0..6 * 68).map(|i| (i * 7 % 251) as u8).collect();
    r.set_raw(a, &data);
    r.compute(2).unwrap();
    assert_eq!(r.get_raw(out), data);
}

#[test]
fn thread_counts_do_not_change_a_copy() {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[13, 11, 3]).unwrap();
    let p = g.permute(a, [1, 2, 0, 3]).unwrap();
    let b = g.new_tensor(DType::F16, &[33, 13]).unwrap();
    let out = g.cpy(p, b).unwrap();
    let r = place(g);
    r.set(a, &Rng::new(4).vec(429, -1.0, 1.0));
    let mut results = Vec::new();
    for threads in [1, 2, 3, 7] {
        r.compute(threads).unwrap();
        results.push(r.get(out));
    }
    for w in results.windows(2) {
        assert_eq!(w[0], w[1]);
    }
    let want: Vec<f64> = r.get(p).iter().map(|&v| round_to(DType::F16, v)).collect();
    assert_close("permuted f32 -> f16", &results[0], &want, 0.0, 0.0);
}
