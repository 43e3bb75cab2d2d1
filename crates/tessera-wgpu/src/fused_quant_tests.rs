//! Tests of a fused norm that also quantizes its result for the integer
//! products reading it ([`crate::fuse`], [`crate::matvec_q8`]): one
//! dispatch fewer per input, and the products' results bit for bit those
//! of the separate quantization.

#![allow(clippy::unwrap_used, clippy::panic)]

use tessera::{DType, Graph, Placement, Stream, TensorId};

use crate::WgpuDevice;

/// `h = a + b` (with `residual`: also read by a second ADD, as a residual
/// stream is), `y = rms_norm(h or a) * w`, then Q4_0 and Q8_0 products of
/// `y` (rows of `k`, 3 columns). With `norm_out` the norm's result is an
/// output too, which stops every fusion. Returns the two products' results
/// and the dispatches.
fn run(dev: &WgpuDevice, k: usize, residual: bool, norm_out: bool) -> (Vec<f32>, Vec<f32>, u64) {
    let (cols, m) = (3, 40);
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[k, cols]).unwrap();
    let b = g.input("b", DType::F32, &[k, cols]).unwrap();
    let w = g.input("w", DType::F32, &[k]).unwrap();
    let w4 = g.input("w4", DType::Q4_0, &[k, m]).unwrap();
    let w8 = g.input("w8", DType::Q8_0, &[k, m]).unwrap();
    let h = if residual { g.add(a, b).unwrap() } else { a };
    let t = g.rms_norm(h, 1e-6).unwrap();
    let y = g.mul(t, w).unwrap();
    let p4 = g.mul_mat(w4, y).unwrap();
    let p8 = g.mul_mat(w8, y).unwrap();
    let mut outs: Vec<TensorId> = vec![p4, p8];
    if residual {
        outs.push(g.add(h, b).unwrap());
    }
    if norm_out {
        outs.push(t);
    }
    for o in outs {
        g.set_output(o).unwrap();
    }
    let (pl, _galloc) = crate::test_placement(dev, &g);
    pl.tensor(&g, a)
        .unwrap()
        .write_f32(&wave(k * cols, 13, 24.0))
        .unwrap();
    pl.tensor(&g, b)
        .unwrap()
        .write_f32(&wave(k * cols, 29, 24.0))
        .unwrap();
    pl.tensor(&g, w)
        .unwrap()
        .write_f32(&wave(k, 7, 24.0))
        .unwrap();
    let f = wave(k * m, 31, 24.0);
    write_quantized(&pl, &g, w4, DType::Q4_0, k, &f);
    write_quantized(&pl, &g, w8, DType::Q8_0, k, &f);
    let dispatches = compute_counted(dev, &g, &pl);
    let read = |id| pl.tensor(&g, id).unwrap().read_f32().unwrap();
    (read(p4), read(p8), dispatches)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `n` values in [-2, 2) by a stride `s` through 0..97, over `div`.
fn wave(n: usize, s: usize, div: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * s) % 97) as f32 / div - 2.0).collect()
}

/// `values` quantized to `t` into tensor `id` of rows of `k`.
fn write_quantized(pl: &Placement, g: &Graph, id: TensorId, t: DType, k: usize, values: &[f32]) {
    let mut q = vec![0u8; t.row_size(k).unwrap() * (values.len() / k)];
    tessera::quant::from_f32(t, values, &mut q).unwrap();
    pl.tensor(g, id).unwrap().write(0, &q).unwrap();
}

/// Compute `g` with the integer products on; the dispatches it took.
fn compute_counted(dev: &WgpuDevice, g: &Graph, pl: &Placement) -> u64 {
    let stream = dev.new_wgpu_stream().unwrap();
    crate::matvec_q8::force(Some(true));
    let before = crate::batch::counts::now().0;
    stream.compute(g, pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    crate::matvec_q8::force(None);
    dispatches
}

#[test]
fn a_fused_norm_quantizes_its_result_for_the_products_that_read_it() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    // Rows in one pass through workgroup memory, in two (the second
    // partial), and the longest the fused norm quantizes.
    for (k, residual) in [(256, false), (256, true), (3072, true), (4096, false)] {
        let (f4, f8, fused) = run(&dev, k, residual, false);
        let (s4, s8, separate) = run(&dev, k, residual, true);
        // Fused: (ADD+)RMS_NORM+MUL with the quantization, two products
        // (and the second ADD). Separate: each node, the quantization, the
        // products.
        let extra = u64::from(residual);
        assert_eq!(
            fused,
            3 + extra,
            "k {k} residual {residual}: fused dispatches"
        );
        assert_eq!(
            separate,
            5 + 2 * extra,
            "k {k} residual {residual}: separate"
        );
        assert_eq!(
            bits(&f4),
            bits(&s4),
            "k {k} residual {residual}: Q4_0 product"
        );
        assert_eq!(
            bits(&f8),
            bits(&s8),
            "k {k} residual {residual}: Q8_0 product"
        );
        assert!(
            f4.iter().any(|&v| v != 0.0),
            "the products are not all zero"
        );
    }
}

/// `y = swiglu(x, g)` ([288, 3]: 864 values, 9 blocks a column, so
/// workgroups of 8 blocks hold parts of two columns, the last 3 blocks) read by a Q4_0 product, itself or (`copied`) through a SCALE
/// by 1 (exact), which keeps the separate quantization. Returns the product's
/// result and the dispatches.
fn run_glu(dev: &WgpuDevice, copied: bool) -> (Vec<f32>, u64) {
    let (k, cols, m) = (288, 3, 20);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
    let gate = g.input("g", DType::F32, &[k, cols]).unwrap();
    let w = g.input("w", DType::Q4_0, &[k, m]).unwrap();
    let y = g.swiglu_split(x, gate).unwrap();
    let b = if copied { g.scale(y, 1.0).unwrap() } else { y };
    let p = g.mul_mat(w, b).unwrap();
    g.set_output(p).unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    pl.tensor(&g, x)
        .unwrap()
        .write_f32(&wave(k * cols, 11, 22.0))
        .unwrap();
    pl.tensor(&g, gate)
        .unwrap()
        .write_f32(&wave(k * cols, 23, 22.0))
        .unwrap();
    write_quantized(&pl, &g, w, DType::Q4_0, k, &wave(k * m, 37, 22.0));
    let dispatches = compute_counted(dev, &g, &pl);
    (pl.tensor(&g, p).unwrap().read_f32().unwrap(), dispatches)
}

#[test]
fn a_glu_quantizes_its_result_for_the_product_that_reads_it() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let (fused, n_fused) = run_glu(&dev, false);
    let (separate, n_separate) = run_glu(&dev, true);
    assert_eq!(n_fused, 2, "the GLU with the quantization, the product");
    assert_eq!(
        n_separate, 4,
        "the GLU, the SCALE, the quantization, the product"
    );
    assert_eq!(bits(&fused), bits(&separate));
    assert!(
        fused.iter().any(|&v| v != 0.0),
        "the product is not all zero"
    );
}

/// Attention (64-value heads, 4 of them, 2 queries, 40 F16 keys) whose
/// result, reshaped to [256, 2] as a model's output projection reads it,
/// goes to a Q8_0 product, directly or (`copied`) through a SCALE by 1.
/// Returns the product's result and the dispatches.
fn run_attention(dev: &WgpuDevice, copied: bool) -> (Vec<f32>, u64) {
    let (d, heads, nq, nkv, m) = (64, 4, 2, 40, 24);
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[d, nq, heads]).unwrap();
    let k = g.input("k", DType::F16, &[d, nkv, heads]).unwrap();
    let v = g.input("v", DType::F16, &[d, nkv, heads]).unwrap();
    let w = g.input("w", DType::Q8_0, &[d * heads, m]).unwrap();
    let att = g.flash_attn_ext(q, k, v, None, 0.125, 0.0, 0.0).unwrap();
    let flat = g.reshape(att, &[d * heads, nq]).unwrap();
    let b = if copied {
        g.scale(flat, 1.0).unwrap()
    } else {
        flat
    };
    let p = g.mul_mat(w, b).unwrap();
    g.set_output(p).unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    pl.tensor(&g, q)
        .unwrap()
        .write_f32(&wave(d * nq * heads, 17, 41.0))
        .unwrap();
    write_quantized(&pl, &g, k, DType::F16, d, &wave(d * nkv * heads, 19, 41.0));
    write_quantized(&pl, &g, v, DType::F16, d, &wave(d * nkv * heads, 43, 41.0));
    write_quantized(
        &pl,
        &g,
        w,
        DType::Q8_0,
        d * heads,
        &wave(d * heads * m, 29, 41.0),
    );
    let dispatches = compute_counted(dev, &g, &pl);
    (pl.tensor(&g, p).unwrap().read_f32().unwrap(), dispatches)
}

#[test]
fn attention_quantizes_its_result_for_the_product_that_reads_it() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let (fused, n_fused) = run_attention(&dev, false);
    let (separate, n_separate) = run_attention(&dev, true);
    assert_eq!(
        n_fused, 2,
        "the attention with the quantization, the product"
    );
    assert_eq!(n_separate, 4, "attention, SCALE, quantization, product");
    assert_eq!(bits(&fused), bits(&separate));
    assert!(
        fused.iter().any(|&v| v != 0.0),
        "the product is not all zero"
    );
}
