//! Tests of [`super`]: the tiled integer products against the f64 product
//! of the dequantized weights, within the bound of quantizing the
//! activations; the scratch regions a chain of products reuses.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, Stream, TensorId};

use crate::matvec_q8::tests::{two_products, weights, within_bound, within_rounding};

/// Every weight type the kernel takes, in shapes that end mid-tile (rows
/// and columns) and, for 32-value blocks, an odd count of units (a step's
/// second unit past the row's end), two products sharing their
/// activations: each result within the quantization bound of the f64
/// product, and equal but for rounding to the f64 product of the
/// activations as quantized; one quantization and one dispatch per
/// product ([`two_products`]). Tiles of 64 and of 128
/// (`TESSERA_WGPU_MMQ=big`).
#[test]
fn tiled_integer_products_are_within_the_activation_quantization_bound() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    crate::coopmat::force(Some(false));
    crate::matvec_q8::force(Some(true));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(23);
    let mut rnd = move || values.next().unwrap();
    for big in [false, true] {
        super::BIG.with(|b| b.set(Some(big)));
        let what = if big { " tiled 128" } else { " tiled 64" };
        for wt in crate::matvec_q8::TYPES {
            let k_odd = if wt.block_size() == 32 { 288 } else { 512 };
            for (k, m, cols) in [(256, 37, 9), (k_odd, 70, 65), (256, 129, 130)] {
                two_products(&dev, &stream, wt, (k, m, cols), &mut rnd, what);
            }
        }
    }
    super::BIG.with(|b| b.set(None));
    crate::matvec_q8::force(None);
    super::force(None);
    crate::coopmat::force(None);
}

/// A chain of ten products, each reading the one before (as a model's
/// layers do): the scratch is sized for two regions live at once and the
/// gaps, not for ten, each quantization reuses the space of one no later
/// product reads, and every product is within the bound of the f64
/// product of its own input (read back).
#[test]
fn a_chain_of_products_reuses_the_scratch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    super::force(Some(true));
    crate::coopmat::force(Some(false));
    crate::matvec_q8::force(Some(true));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(29);
    let mut rnd = move || values.next().unwrap();
    let (k, cols, steps) = (256, 40, 10);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
    let mut ws: Vec<TensorId> = Vec::new();
    let mut ys = vec![x];
    for s in 0..steps {
        let w = g.input(&format!("w{s}"), DType::Q8_0, &[k, k]).unwrap();
        let y = g.mul_mat(w, *ys.last().unwrap()).unwrap();
        g.set_output(y).unwrap();
        ws.push(w);
        ys.push(y);
    }
    let region = crate::q8_scratch::region_bytes(k, cols).1;
    let bytes = crate::matvec_q8::scratch_bytes(&g, 0..g.len());
    assert_eq!(bytes, 4 * region, "two live regions and room for gaps");
    let (pl, _galloc) = crate::test_placement(&dev, &g);
    let mut deqs = Vec::new();
    for &w in &ws {
        let (q, deq) = weights(DType::Q8_0, k, k, &mut rnd);
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        deqs.push(deq);
    }
    let xs: Vec<f32> = (0..k * cols).map(|_| rnd()).collect();
    pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
    let before = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    // Every product quantized its input and took the integer kernel (a
    // quantization that found no room would leave it to the float one):
    // in a scratch of 64 KiB (its least size, more than 4 regions) where
    // the ten regions side by side would need 125 KiB.
    assert!(bytes <= 1 << 16 && steps * region > 1 << 16);
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(
        dispatches,
        2 * steps as u64,
        "a quantization and a product each"
    );
    let mut input = xs;
    for (s, deq) in deqs.iter().enumerate() {
        let got = pl.tensor(&g, ys[s + 1]).unwrap().read_f32().unwrap();
        within_bound(deq, &input, &got, (k, k, cols), &format!("step {s}"));
        input = got;
    }
    crate::matvec_q8::force(None);
    super::force(None);
    crate::coopmat::force(None);
}

/// The tiled kernel and the matrix-vector kernel read the same quantized
/// activations (each column's bytes do not depend on the other columns),
/// so a product of 20 columns and the products of its first 8 and of its
/// column 13 alone agree to float rounding (summation order), for every
/// weight type: a far tighter check than the quantization bound. Tiles
/// of 64 and of 128.
#[test]
fn tiled_and_matrix_vector_integer_products_agree() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for big in [false, true] {
        super::BIG.with(|b| b.set(Some(big)));
        tiled_and_matrix_vector_agree(&dev);
    }
    super::BIG.with(|b| b.set(None));
}

fn tiled_and_matrix_vector_agree(dev: &crate::WgpuDevice) {
    super::force(Some(true));
    crate::coopmat::force(Some(false));
    crate::matvec_q8::force(Some(true));
    crate::merge_products::force(Some(false));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(31);
    let mut rnd = move || values.next().unwrap();
    let (k, m, cols) = (512, 75, 20);
    for wt in crate::matvec_q8::TYPES {
        let mut g = Graph::new();
        let w = g.input("w", wt, &[k, m]).unwrap();
        let x = g.input("x", DType::F32, &[k, cols]).unwrap();
        let x8 = g.input("x8", DType::F32, &[k, 8]).unwrap();
        let x1 = g.input("x1", DType::F32, &[k, 1]).unwrap();
        let ys: Vec<TensorId> = [x, x8, x1]
            .iter()
            .map(|&t| g.mul_mat(w, t).unwrap())
            .collect();
        for &y in &ys {
            g.set_output(y).unwrap();
        }
        let (pl, _galloc) = crate::test_placement(dev, &g);
        let (q, _) = weights(wt, k, m, &mut rnd);
        pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
        let xs: Vec<f32> = (0..k * cols)
            .map(|i| if i % 89 == 3 { -25.0 } else { rnd() })
            .collect();
        pl.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
        pl.tensor(&g, x8).unwrap().write_f32(&xs[..8 * k]).unwrap();
        pl.tensor(&g, x1)
            .unwrap()
            .write_f32(&xs[13 * k..14 * k])
            .unwrap();
        stream.compute(&g, &pl).unwrap();
        let got: Vec<Vec<f32>> = ys
            .iter()
            .map(|&y| pl.tensor(&g, y).unwrap().read_f32().unwrap())
            .collect();
        let scale = got[0].iter().fold(0f32, |a, v| a.max(v.abs()));
        let close = |a: f32, b: f32, what: &str| {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "{wt} {what}: tiled {a} vs matrix-vector {b} (largest {scale})"
            );
        };
        for r in 0..m {
            for c in 0..8 {
                close(
                    got[0][c * m + r],
                    got[1][c * m + r],
                    &format!("row {r} column {c}"),
                );
            }
            close(got[0][13 * m + r], got[2][r], &format!("row {r} column 13"));
        }
    }
    crate::merge_products::force(None);
    crate::matvec_q8::force(None);
    super::force(None);
    crate::coopmat::force(None);
}

/// Four inputs read twice each, round robin, on a device whose buffers
/// hold at most 64 KiB: the scratch (capped there) holds three of their
/// quantizations (19,200 bytes each) but not a fourth, so the fourth
/// input's first product takes the float kernels, without a quantization;
/// by its second product the other three have been read for the last time
/// and their space is free again, so it is quantized then. Every product
/// within the bound of the f64 product, and the integer ones also within
/// float rounding of their quantized input.
#[test]
fn a_quantization_without_room_leaves_its_products_to_the_float_kernels() {
    if crate::test_device().is_none() {
        return;
    }
    let opts = crate::DeviceOptions {
        name: Some("WGPU0.q8-small".into()),
        max_buffer_size: Some(64 << 10),
    };
    let dev = crate::family().open_device(0, &opts).unwrap();
    super::force(Some(true));
    crate::coopmat::force(Some(false));
    crate::matvec_q8::force(Some(true));
    crate::merge_products::force(Some(false));
    let stream = dev.new_wgpu_stream().unwrap();
    let mut values = crate::test_values(37);
    let mut rnd = move || values.next().unwrap();
    let (k, m, cols) = (256, 64, 60);
    let region = crate::q8_scratch::region_bytes(k, cols).1;
    assert!(3 * region <= 64 << 10 && 4 * region > 64 << 10);
    let mut g = Graph::new();
    let w = g.input("w", DType::Q8_0, &[k, m]).unwrap();
    let xs: Vec<TensorId> = (0..4)
        .map(|i| g.input(&format!("x{i}"), DType::F32, &[k, cols]).unwrap())
        .collect();
    let mut ys = Vec::new();
    for round in 0..2 {
        for (i, &x) in xs.iter().enumerate() {
            let y = g.mul_mat(w, x).unwrap();
            g.set_output(y).unwrap();
            ys.push((round, i, y));
        }
    }
    let (pl, _galloc) = crate::test_placement(&dev, &g);
    let (q, deq) = weights(DType::Q8_0, k, m, &mut rnd);
    pl.tensor(&g, w).unwrap().write(0, &q).unwrap();
    let inputs: Vec<Vec<f32>> = xs
        .iter()
        .map(|&x| {
            let v: Vec<f32> = (0..k * cols).map(|_| rnd()).collect();
            pl.tensor(&g, x).unwrap().write_f32(&v).unwrap();
            v
        })
        .collect();
    let before = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    let dispatches = crate::batch::counts::now().0 - before;
    assert_eq!(dispatches, 4 + 8, "four quantizations, eight products");
    for (round, i, y) in ys {
        let got = pl.tensor(&g, y).unwrap().read_f32().unwrap();
        let what = format!("round {round}, input {i}");
        within_bound(&deq, &inputs[i], &got, (k, m, cols), &what);
        let float = round == 0 && i == 3;
        if !float {
            within_rounding(&deq, &inputs[i], &got, (k, m, cols), &what);
        } else {
            // The float kernel's result is nearer the f64 product than
            // quantized activations allow for: it did not quantize.
            let exact = (0..cols).all(|c| {
                (0..m).all(|r| {
                    let want: f64 = (0..k)
                        .map(|j| f64::from(deq[r * k + j]) * f64::from(inputs[i][c * k + j]))
                        .sum();
                    (f64::from(got[c * m + r]) - want).abs() <= 1e-4 * want.abs().max(1.0)
                })
            });
            assert!(exact, "{what}: not the float kernel's result");
        }
    }
    crate::merge_products::force(None);
    crate::matvec_q8::force(None);
    super::force(None);
    crate::coopmat::force(None);
}
