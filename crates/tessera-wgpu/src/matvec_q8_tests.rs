//! Tests of [`super`]: the integer products against the f64 product of
//! the dequantized weights, within the bound of quantizing the activations;
//! the quantizations a compute shares and the writes that make them stale.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, Stream};

/// Every weight type the kernel takes (37 rows, k = 256 and 1,280)
/// times 1, 3 and 8 columns, two products sharing their activations: each result within
/// the bound of quantizing the activations (half of each block's step
/// per value, times the weights' magnitudes) of the f64 product of the
/// dequantized weights, and equal but for rounding to the f64 product of
/// the activations as quantized; one quantization for both products.
/// Both kernels where the device has subgroups (the subgroup kernel also
/// with 1 and 32 rows a workgroup, as devices of other subgroup sizes).
#[test]
fn integer_products_are_within_the_activation_quantization_bound() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    // The products one by one (merging: crate::merge_products's tests).
    crate::merge_products::force(Some(false));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(7);
    let mut rnd = move || values.next().unwrap();
    for shape in crate::test_reduction_shapes(&dev) {
        let what = format!(" {shape:?}");
        crate::with_reduction_shape(shape, || {
            for wt in super::TYPES {
                for (k, cols) in [(256, 1), (1280, 3), (256, 8)] {
                    two_products(&dev, &stream, wt, (k, 37, cols), &mut rnd, &what);
                }
            }
        });
    }
    crate::merge_products::force(None);
    super::force(None);
}

/// Weights of type `wt` (`k` x `m`) from `rnd`: the quantized bytes and
/// their dequantized values.
pub(crate) fn weights(
    wt: DType,
    k: usize,
    m: usize,
    rnd: &mut impl FnMut() -> f32,
) -> (Vec<u8>, Vec<f32>) {
    let f: Vec<f32> = (0..k * m).map(|_| rnd()).collect();
    let mut q = vec![0u8; wt.row_size(k).unwrap() * m];
    tessera::quant::from_f32(wt, &f, &mut q).unwrap();
    let mut deq = vec![0f32; k * m];
    tessera::quant::to_f32(wt, &q, &mut deq).unwrap();
    (q, deq)
}

/// Two products of `wt` weights (`k` x `m`, from `rnd`) by one input of
/// `cols` columns (some blocks with a large value: coarse steps there),
/// computed on `dev`: one quantization and one dispatch per product, each
/// result within [`within_bound`] and [`within_rounding`].
pub(crate) fn two_products(
    dev: &crate::WgpuDevice,
    stream: &crate::stream::WgpuStream,
    wt: DType,
    (k, m, cols): (usize, usize, usize),
    rnd: &mut impl FnMut() -> f32,
    what: &str,
) {
    let mut g = Graph::new();
    let w1 = g.input("w1", wt, &[k, m]).unwrap();
    let w2 = g.input("w2", wt, &[k, m]).unwrap();
    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
    let y1 = g.mul_mat(w1, x).unwrap();
    let y2 = g.mul_mat(w2, x).unwrap();
    g.set_output(y1).unwrap();
    g.set_output(y2).unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    let mut ws = Vec::new();
    for w in [w1, w2] {
        let (q, deq) = weights(wt, k, m, rnd);
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        ws.push(deq);
    }
    let xs: Vec<f32> = (0..k * cols)
        .map(|i| if i % 97 == 5 { 40.0 } else { rnd() })
        .collect();
    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    let before = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(dispatches, 3, "{wt}{what}: one quantization, two products");
    let what = format!("{wt}{what}");
    for (w, y) in ws.iter().zip([y1, y2]) {
        let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
        within_bound(w, &xs, &got, (k, m, cols), &what);
        within_rounding(w, &xs, &got, (k, m, cols), &what);
    }
}

/// `got` (m x cols) against the f64 product of `w` (m rows of k) and
/// `xs` (cols columns of k), within the bound of quantizing the
/// activations: half a step of each 32 values' scale per value, times
/// the weights' magnitudes.
pub(crate) fn within_bound(
    w: &[f32],
    xs: &[f32],
    got: &[f32],
    (k, m, cols): (usize, usize, usize),
    what: &str,
) {
    for c in 0..cols {
        let xc = &xs[c * k..(c + 1) * k];
        for r in 0..m {
            let wr = &w[r * k..(r + 1) * k];
            let mut want = 0f64;
            let mut bound = 0f64;
            for (wb, xb) in wr.chunks(32).zip(xc.chunks(32)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                let step = f64::from(amax) / 127.0;
                for (&wv, &xv) in wb.iter().zip(xb) {
                    want += f64::from(wv) * f64::from(xv);
                    bound += f64::from(wv).abs() * (0.5 * step * 1.0001);
                }
            }
            let v = f64::from(got[c * m + r]);
            assert!(
                (v - want).abs() <= bound + 1e-4 * want.abs().max(1.0),
                "{what} k={k} column {c} row {r}: {v} vs {want} (bound {bound})"
            );
        }
    }
}

/// A CPY into the input's memory between two products that read it:
/// the second quantizes the new values again (a quantization kept by
/// tensor id alone would give it the old ones).
#[test]
fn a_write_into_the_input_between_two_products_is_seen() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    let stream = dev.new_wgpu_stream().unwrap();
    let (k, m) = (256, 16);
    let mut g = Graph::new();
    let w = g.input("w", DType::Q8_0, &[k, m]).unwrap();
    let x = g.input("x", DType::F32, &[k, 1]).unwrap();
    let z = g.input("z", DType::F32, &[k, 1]).unwrap();
    let y1 = g.mul_mat(w, x).unwrap();
    let c = g.cpy(z, x).unwrap();
    let y2 = g.mul_mat(w, x).unwrap();
    for t in [y1, c, y2] {
        g.set_output(t).unwrap();
    }
    let (pl, _galloc) = crate::test_placement(&dev, &g);
    let f: Vec<f32> = (0..k * m)
        .map(|i| ((i * 7919) % 211) as f32 / 105.0 - 1.0)
        .collect();
    let mut q = vec![0u8; DType::Q8_0.row_size(k).unwrap() * m];
    tessera::quant::from_f32(DType::Q8_0, &f, &mut q).unwrap();
    let mut deq = vec![0f32; k * m];
    tessera::quant::to_f32(DType::Q8_0, &q, &mut deq).unwrap();
    pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
    let xs: Vec<f32> = (0..k).map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0).collect();
    let zs: Vec<f32> = (0..k).map(|i| 2.0 - ((i * 13) % 23) as f32 / 5.0).collect();
    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    pl.tensor(&g, z).unwrap().write_f32(&zs).unwrap();
    stream.compute(&g, &pl).unwrap();
    let got1 = pl.tensor(&g, y1).unwrap().read_f32().unwrap();
    let got2 = pl.tensor(&g, y2).unwrap().read_f32().unwrap();
    within_bound(&deq, &xs, &got1, (k, m, 1), "before the copy");
    within_bound(&deq, &zs, &got2, (k, m, 1), "after the copy");
    super::force(None);
}

/// An input first read by a product the kernel does not take (F16
/// weights) and then by one it takes (Q8_0): the second still gets its
/// quantized activations (a plan that counted inputs by their first
/// reader missed it).
#[test]
fn an_input_first_read_by_another_weight_type_is_still_planned() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    let stream = dev.new_wgpu_stream().unwrap();
    let (k, m) = (512, 24);
    let mut g = Graph::new();
    let wf = g.input("wf", DType::F16, &[k, m]).unwrap();
    let wq = g.input("wq", DType::Q8_0, &[k, m]).unwrap();
    let x = g.input("x", DType::F32, &[k, 1]).unwrap();
    let yf = g.mul_mat(wf, x).unwrap();
    let yq = g.mul_mat(wq, x).unwrap();
    g.set_output(yf).unwrap();
    g.set_output(yq).unwrap();
    let (pl, _galloc) = crate::test_placement(&dev, &g);
    let f: Vec<f32> = (0..k * m)
        .map(|i| ((i * 7919) % 211) as f32 / 105.0 - 1.0)
        .collect();
    let xs: Vec<f32> = (0..k).map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0).collect();
    let mut deq = vec![0f32; k * m];
    for (w, t) in [(wf, DType::F16), (wq, DType::Q8_0)] {
        let mut q = vec![0u8; t.row_size(k).unwrap() * m];
        tessera::quant::from_f32(t, &f, &mut q).unwrap();
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        if t == DType::Q8_0 {
            tessera::quant::to_f32(t, &q, &mut deq).unwrap();
        }
    }
    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    let before = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(
        dispatches, 3,
        "the F16 product, the quantization, the Q8_0 product"
    );
    let got = pl.tensor(&g, yq).unwrap().read_f32().unwrap();
    within_bound(&deq, &xs, &got, (k, m, 1), "q8_0 after f16");
    super::force(None);
}

/// `xs` (columns of `k`) as the kernels see them: each 32 values
/// quantized as `q8_block.wgsl` does (d = max |x| / 127, q = x / d
/// rounded half to even, clamped to ±127) and dequantized, q d.
fn quantized_activations(xs: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(xs.len());
    for b in xs.chunks(32) {
        let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend(
            b.iter()
                .map(|&x| (x * id).round_ties_even().clamp(-127.0, 127.0) * d),
        );
    }
    out
}

/// `got` (m x cols) against the f64 product of `w` and the activations
/// quantized as the kernels quantize them (`quantized_activations`):
/// equal but for float rounding (1e-5 of the sum of the products'
/// magnitudes). A wrong code, scale or offset of any weight type shows
/// here long before it leaves [`within_bound`]'s bound.
pub(crate) fn within_rounding(
    w: &[f32],
    xs: &[f32],
    got: &[f32],
    shape: (usize, usize, usize),
    what: &str,
) {
    within_rounding_by(w, xs, got, shape, what, 1e-5);
}

/// [`within_rounding`] within `rel` of the products' magnitudes (and
/// 1e-6).
pub(crate) fn within_rounding_by(
    w: &[f32],
    xs: &[f32],
    got: &[f32],
    (k, m, cols): (usize, usize, usize),
    what: &str,
    rel: f64,
) {
    let xq = quantized_activations(xs);
    for c in 0..cols {
        let xc = &xq[c * k..(c + 1) * k];
        for r in 0..m {
            let wr = &w[r * k..(r + 1) * k];
            let (mut want, mut mag) = (0f64, 0f64);
            for (&wv, &xv) in wr.iter().zip(xc) {
                want += f64::from(wv) * f64::from(xv);
                mag += (f64::from(wv) * f64::from(xv)).abs();
            }
            let v = f64::from(got[c * m + r]);
            assert!(
                (v - want).abs() <= rel * mag + 1e-6,
                "{what} k={k} column {c} row {r}: {v} vs {want} (products' magnitude {mag})"
            );
        }
    }
}
