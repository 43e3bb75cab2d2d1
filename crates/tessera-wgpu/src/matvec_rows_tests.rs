//! Tests of [`super`]: the row-group kernel's products of every type it
//! takes against the f64 product of the dequantized weights, with its
//! sums by trees and by subgroups in every shape a device may give them
//! (the conformance catalogue runs the device's own shape only).
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, Stream};

/// The types the kernel decodes (with the integer kernels off: they take
/// the integer types first).
const TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::IQ4NL,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4XS,
];

/// 37 rows (not a whole number of any workgroup's rows) of k = 512 by 1,
/// 3 and 8 columns, every type, every reduction shape: each output within
/// 1e-5 of the sum of the products' magnitudes of the f64 product (float
/// rounding, whatever the order of the sums).
#[test]
fn row_group_products_match_the_f64_product_in_every_reduction_shape() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    crate::matvec_q8::force(Some(false));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(23);
    let mut rnd = move || values.next().unwrap();
    let (k, m) = (512, 37);
    for shape in crate::test_reduction_shapes(&dev) {
        crate::with_reduction_shape(shape, || {
            for wt in TYPES {
                for cols in [1, 3, 8] {
                    if cols == 1 && matches!(wt, DType::Q4K | DType::Q5K) {
                        // One column of these: the general kernel's.
                        continue;
                    }
                    let what = format!("{wt} cols={cols} {shape:?}");
                    let mut g = Graph::new();
                    let w = g.input("w", wt, &[k, m]).unwrap();
                    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
                    let y = g.mul_mat(w, x).unwrap();
                    g.set_output(y).unwrap();
                    let (pl, _galloc) = crate::test_placement(&dev, &g);
                    let (wl, xl) = (g.layout(w).unwrap(), g.layout(x).unwrap());
                    let core = dev.core();
                    assert!(
                        super::variant(core, &wl, 0, &xl, 0, cols).is_some(),
                        "{what}: the row-group kernel takes it"
                    );
                    let (q, deq) = crate::matvec_q8::tests::weights(wt, k, m, &mut rnd);
                    pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
                    let xs: Vec<f32> = (0..k * cols).map(|_| rnd()).collect();
                    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
                    stream.compute(&g, &pl).unwrap();
                    let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
                    for c in 0..cols {
                        for r in 0..m {
                            let (mut want, mut mag) = (0f64, 0f64);
                            for i in 0..k {
                                let p = f64::from(deq[r * k + i]) * f64::from(xs[c * k + i]);
                                want += p;
                                mag += p.abs();
                            }
                            let v = f64::from(got[c * m + r]);
                            assert!(
                                (v - want).abs() <= 1e-5 * mag,
                                "{what}: row {r} column {c}: {v} vs {want}"
                            );
                        }
                    }
                }
            }
        });
    }
    crate::matvec_q8::force(None);
}
