//! Tests of [`super`]: a router's SOFT_MAX and ARGSORT as one dispatch,
//! bit for bit the separate dispatches, and only where the run fits.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, SortOrder, TensorId};

/// `probs = soft_max(logits * scale (+ mask))`, `order = argsort(probs)`,
/// both outputs.
fn router(experts: usize, tokens: usize, order: SortOrder, masked: bool) -> (Graph, [TensorId; 4]) {
    let mut g = Graph::new();
    let logits = g.input("logits", DType::F32, &[experts, tokens]).unwrap();
    let mask = g.input("mask", DType::F32, &[experts, tokens]).unwrap();
    g.set_output(mask).unwrap();
    let probs = if masked {
        g.soft_max_ext(logits, Some(mask), 0.75, 0.0).unwrap()
    } else {
        g.soft_max_ext(logits, None, 0.75, 0.0).unwrap()
    };
    let sorted = g.argsort(probs, order).unwrap();
    g.set_output(probs).unwrap();
    g.set_output(sorted).unwrap();
    (g, [logits, mask, probs, sorted])
}

/// Rows of 8 to 256 experts (and 257, not fused), 1 to 3 tokens, both
/// orders, logits with ties (every fifth repeats the one before) and a
/// -inf: the probabilities' and the order's bits those of the separate
/// dispatches, in one dispatch instead of two; each order a permutation
/// that sorts its row. A masked SOFT_MAX is not fused.
#[test]
fn a_routers_soft_max_and_argsort_are_one_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for shape in crate::test_reduction_shapes(&dev) {
        crate::with_reduction_shape(shape, || routers(&dev));
    }
}

fn routers(dev: &crate::WgpuDevice) {
    let cases = [
        (8, 1, false),
        (128, 3, false),
        (256, 2, false),
        (257, 2, false),
        (64, 2, true),
    ];
    for (experts, tokens, masked) in cases {
        for order in [SortOrder::Desc, SortOrder::Asc] {
            let (g, [logits, mask, probs, sorted]) = router(experts, tokens, order, masked);
            let mut values = crate::test_values(71);
            let mut xs: Vec<f32> = (0..experts * tokens)
                .map(|_| 4.0 * values.next().unwrap())
                .collect();
            for i in (5..xs.len()).step_by(5) {
                xs[i] = xs[i - 1];
            }
            xs[3] = f32::NEG_INFINITY;
            let mut runs = Vec::new();
            for fused in [false, true] {
                let stream = dev.new_wgpu_stream().unwrap();
                let (pl, _galloc) = crate::test_placement(dev, &g);
                pl.tensor(&g, logits).unwrap().write_f32(&xs).unwrap();
                let zeros = vec![0f32; experts * tokens];
                pl.tensor(&g, mask).unwrap().write_f32(&zeros).unwrap();
                super::force(Some(fused));
                let dispatches = crate::test_compute_counted(&stream, &g, &pl);
                super::force(None);
                runs.push((crate::test_bits(&g, &pl, &[probs, sorted]), dispatches));
            }
            let what = format!("{experts} experts, {tokens} tokens, {order:?}, mask {masked}");
            let one = experts <= super::MAX_ROW && !masked;
            assert_eq!(
                (runs[0].1, runs[1].1),
                (2, if one { 1 } else { 2 }),
                "{what}: dispatches"
            );
            assert_eq!(runs[1].0, runs[0].0, "{what}: bits");
            // (The bits as read back: the order's indices as f32.)
            let (p, s) = (&runs[1].0[0], &runs[1].0[1]);
            for t in 0..tokens {
                let row = &p[t * experts..(t + 1) * experts];
                let idx: Vec<usize> = s[t * experts..(t + 1) * experts]
                    .iter()
                    .map(|&v| f32::from_bits(v) as usize)
                    .collect();
                let mut seen = idx.clone();
                seen.sort_unstable();
                assert!(seen.iter().copied().eq(0..experts), "{what}: a permutation");
                for w in idx.windows(2) {
                    let (a, b) = (f32::from_bits(row[w[0]]), f32::from_bits(row[w[1]]));
                    let ok = match order {
                        SortOrder::Desc => a > b || (a == b && w[0] < w[1]),
                        SortOrder::Asc => a < b || (a == b && w[0] < w[1]),
                    };
                    assert!(ok, "{what}: token {t} order at {w:?}");
                }
            }
        }
    }
}
