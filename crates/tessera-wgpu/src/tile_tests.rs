//! The MUL_MAT cases of the conformance harness on the 128 x 128 tile
//! kernel (`matmul_tiled8.wgsl`, chosen by `TESSERA_WGPU_MM=big`): every
//! weight type, batches and broadcasts, partial tiles.

#![allow(clippy::unwrap_used, clippy::panic)]

use tessera_testkit::{Outcome, run_all};

#[test]
fn mul_mat_cases_pass_on_the_big_tiles() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    crate::encode::BIG_TILES.with(|b| b.set(Some(true)));
    let report = run_all(dev.as_ref(), Some("MUL_MAT("));
    crate::encode::BIG_TILES.with(|b| b.set(None));
    let failed: Vec<String> = report
        .cases
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Passed { .. } => None,
            other => Some(format!("  {}: {other:?}", c.name)),
        })
        .collect();
    assert!(report.cases.len() > 100, "{}", report.summary());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A product larger than the catalogue's (300 x 260 outputs: two full and
/// one partial tile each way, every invocation's 8 x 8 outputs in use), F32
/// and Q4_0 weights, on both tile kernels: within 1e-5 of the f64 product
/// of the (dequantized) weights, relative to the sum of the magnitudes.
#[test]
fn a_product_of_several_big_tiles_is_exact_to_rounding() {
    use tessera::{DType, Graph, Stream};
    let Some(dev) = crate::test_device() else {
        return;
    };
    let (m, n, k) = (300, 260, 96);
    let wave = |len: usize, s: usize| -> Vec<f32> {
        (0..len)
            .map(|i| ((i * s) % 101) as f32 / 50.0 - 1.0)
            .collect()
    };
    let w = wave(k * m, 37);
    let x = wave(k * n, 11);
    for big in [true, false] {
        for t in [DType::F32, DType::Q4_0] {
            let mut g = Graph::new();
            let a = g.input("a", t, &[k, m]).unwrap();
            let b = g.input("b", DType::F32, &[k, n]).unwrap();
            let y = g.mul_mat(a, b).unwrap();
            g.set_output(y).unwrap();
            let (pl, _galloc) = crate::test_placement(&dev, &g);
            let mut bytes = vec![0u8; t.row_size(k).unwrap() * m];
            tessera::quant::from_f32(t, &w, &mut bytes).unwrap();
            let mut deq = vec![0f32; k * m];
            tessera::quant::to_f32(t, &bytes, &mut deq).unwrap();
            pl.tensor(&g, a).unwrap().write(0, &bytes).unwrap();
            pl.tensor(&g, b).unwrap().write_f32(&x).unwrap();
            crate::encode::BIG_TILES.with(|c| c.set(Some(big)));
            dev.new_wgpu_stream().unwrap().compute(&g, &pl).unwrap();
            crate::encode::BIG_TILES.with(|c| c.set(None));
            let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
            for j in 0..n {
                for i in 0..m {
                    let (mut want, mut mag) = (0f64, 0f64);
                    for kk in 0..k {
                        let p = f64::from(deq[i * k + kk]) * f64::from(x[j * k + kk]);
                        want += p;
                        mag += p.abs();
                    }
                    let g = f64::from(got[j * m + i]);
                    assert!(
                        (g - want).abs() <= 1e-5 * mag.max(1e-30),
                        "big {big}, {t:?}: output ({i}, {j}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
