//! Tests of [`super`]: norm, MUL, residual ADD, norm, MUL as one dispatch,
//! bit for bit the separate dispatches, and only where nothing can tell.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, TensorId};

const ROWS: usize = 3;

/// How the graph around the five nodes is built.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// `r + y1`, the sum normalized and read by a Q8_0 product.
    Plain,
    /// `y1 + r`.
    Swapped,
    /// y1 also read by another ADD (not fused).
    SecondReader,
    /// The first weights a [n, rows] matrix (not fused).
    MatrixWeights,
}

/// Compute the five nodes on rows of `n` with the sandwich fusion `on`
/// (the other fusions `fuse`): the bits of the sum and the result (and of
/// the product that reads it), and the dispatches.
fn run(
    dev: &crate::WgpuDevice,
    n: usize,
    shape: Shape,
    on: bool,
    fuse: bool,
) -> (Vec<Vec<u32>>, u64) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n, ROWS]).unwrap();
    let r = g.input("r", DType::F32, &[n, ROWS]).unwrap();
    let w1_ne: &[usize] = match shape {
        Shape::MatrixWeights => &[n, ROWS],
        _ => &[n],
    };
    let w1 = g.input("w1", DType::F32, w1_ne).unwrap();
    let w2 = g.input("w2", DType::F32, &[n]).unwrap();
    // A product of the result: its input quantized by the fused norm.
    let quantized = n.is_multiple_of(256);
    let wq = quantized.then(|| g.input("wq", DType::Q8_0, &[n, 16]).unwrap());
    for w in [Some(w1), Some(w2), wq].into_iter().flatten() {
        g.set_output(w).unwrap();
    }
    let t1 = g.rms_norm(x, 1e-6).unwrap();
    let y1 = g.mul(t1, w1).unwrap();
    let s = match shape {
        Shape::Swapped => g.add(y1, r).unwrap(),
        _ => g.add(r, y1).unwrap(),
    };
    let t2 = g.rms_norm(s, 1e-5).unwrap();
    let y2 = g.mul(t2, w2).unwrap();
    let mut outs = vec![s, y2];
    if let Some(wq) = wq {
        outs.push(g.mul_mat(wq, y2).unwrap());
    }
    if let Shape::SecondReader = shape {
        outs.push(g.add(y1, x).unwrap());
    }
    for &o in &outs {
        g.set_output(o).unwrap();
    }
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    let fill = |t: TensorId, seed: u64, base: f32| {
        let len = g.layout(t).unwrap().nelements();
        let v: Vec<f32> = crate::test_values(seed)
            .take(len)
            .map(|v| base + v)
            .collect();
        pl.tensor(&g, t).unwrap().write_f32(&v).unwrap();
    };
    fill(x, 1, 0.0);
    fill(r, 2, 0.0);
    fill(w1, 3, 1.0);
    fill(w2, 4, 1.0);
    if let Some(wq) = wq {
        let v: Vec<f32> = crate::test_values(5).take(n * 16).collect();
        let mut q = vec![0u8; DType::Q8_0.row_size(n).unwrap() * 16];
        tessera::quant::from_f32(DType::Q8_0, &v, &mut q).unwrap();
        pl.tensor(&g, wq).unwrap().write(0, &q).unwrap();
    }
    super::force(Some(on));
    crate::fuse::force(Some(fuse));
    crate::matvec_q8::force(Some(true));
    let dispatches = crate::test_compute_counted(&stream, &g, &pl);
    crate::matvec_q8::force(None);
    crate::fuse::force(None);
    super::force(None);
    (crate::test_bits(&g, &pl, &outs), dispatches)
}

/// Rows of 640 and 4,096 (read quantized by a product: the fused dispatch
/// quantizes them) and 2,100 (not whole blocks), the ADD's operands either
/// way: one dispatch for the five nodes instead of two (five with no
/// fusion at all), the sum, the result and the product bit for bit those
/// of both. Rows of 4,200 (past the registers) are not fused.
#[test]
fn norm_mul_add_norm_mul_in_one_dispatch_equal_the_separate_dispatches() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for (n, shape) in [
        (640, Shape::Plain),
        (2100, Shape::Swapped),
        (4096, Shape::Plain),
        (4200, Shape::Plain),
    ] {
        let what = format!("n={n} {shape:?}");
        let (fused, n_fused) = run(&dev, n, shape, true, true);
        let (two, n_two) = run(&dev, n, shape, false, true);
        let (apart, n_apart) = run(&dev, n, shape, false, false);
        let quant = usize::from(n.is_multiple_of(256));
        // The products: their quantization (a dispatch of its own without
        // fusion) and the product.
        assert_eq!(n_apart, (5 + 2 * quant) as u64, "{what}: every node apart");
        assert_eq!(n_two, (2 + quant) as u64, "{what}: two fused runs");
        let one = if n <= crate::fuse::QUANTIZED_ROW {
            1
        } else {
            2
        };
        assert_eq!(
            n_fused,
            (one + quant) as u64,
            "{what}: the five nodes' dispatches"
        );
        assert!(fused == two, "{what}: fused and two runs differ");
        assert!(fused == apart, "{what}: fused and apart differ");
    }
}

/// Not fused where the first MUL's result has another reader or the
/// first weights are not a vector of the row's length.
#[test]
fn only_a_norm_read_by_nothing_but_the_add_joins() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for shape in [Shape::SecondReader, Shape::MatrixWeights] {
        let (fused, n_fused) = run(&dev, 640, shape, true, true);
        let (two, n_two) = run(&dev, 640, shape, false, true);
        assert_eq!(n_fused, n_two, "{shape:?}: nothing more fused");
        assert!(fused == two, "{shape:?}");
    }
}
