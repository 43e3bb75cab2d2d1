//! Tests of [`super`]: a MoE layer's down product, weighting and sum as
//! one dispatch, bit for bit the separate dispatches (on lavapipe: see
//! the module docs), and only where nothing can tell.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, GluOp, Graph, TensorId};

/// The tail of `moe_ffn`: `experts = MUL_MAT_ID(w, act, ids)`, `p =
/// experts * weights`, the sum of `p`'s slot views by a chain of ADDs
/// (`reversed`: each ADD's operands the other way round); `keep` also
/// makes the first ADD's result an output (nothing may be fused then).
struct Tail {
    g: Graph,
    w: TensorId,
    act: TensorId,
    ids: TensorId,
    weights: TensorId,
    out: TensorId,
}

fn tail(
    wt: DType,
    (k, m, experts): (usize, usize, usize),
    (used, tokens): (usize, usize),
    reversed: bool,
    keep: bool,
) -> Tail {
    let mut g = Graph::new();
    let w = g.input("w", wt, &[k, m, experts]).unwrap();
    let act = g.input("act", DType::F32, &[k, used, tokens]).unwrap();
    let ids = g.input("ids", DType::I32, &[used, tokens]).unwrap();
    let weights = g.input("weights", DType::F32, &[1, used, tokens]).unwrap();
    for t in [w, act, ids, weights] {
        // Kept: inputs' memory is not reused (as a model's weights and
        // routing are not).
        g.set_output(t).unwrap();
    }
    let experts_out = g.mul_mat_id(w, act, ids).unwrap();
    let p = g.mul(experts_out, weights).unwrap();
    let l = g.layout(p).unwrap();
    let views: Vec<TensorId> = (0..used)
        .map(|s| g.view_2d(p, m, tokens, l.nb[2], s * l.nb[1]).unwrap())
        .collect();
    let mut out = views[0];
    for (s, &v) in views.iter().enumerate().skip(1) {
        out = if reversed {
            g.add(v, out).unwrap()
        } else {
            g.add(out, v).unwrap()
        };
        if keep && s == 1 {
            g.set_output(out).unwrap();
        }
    }
    g.set_output(out).unwrap();
    Tail {
        g,
        w,
        act,
        ids,
        weights,
        out,
    }
}

/// Compute `t` with the fusion on or off: the sum's bits and the
/// dispatches recorded.
fn run(dev: &crate::WgpuDevice, t: &Tail, fused: bool, seed: u64) -> (Vec<u32>, u64) {
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &t.g);
    let lw = t.g.layout(t.w).unwrap();
    let (k, rows, experts) = (lw.ne[0], lw.ne[1] * lw.ne[2], lw.ne[2]);
    let mut values = crate::test_values(seed);
    let mut rnd = move || values.next().unwrap();
    let (q, _) = crate::matvec_q8::tests::weights(lw.dtype, k, rows, &mut rnd);
    pl.tensor(&t.g, t.w).unwrap().write(0, &q).unwrap();
    let n_act = t.g.layout(t.act).unwrap().nelements();
    let xs: Vec<f32> = (0..n_act).map(|_| rnd()).collect();
    pl.tensor(&t.g, t.act).unwrap().write_f32(&xs).unwrap();
    let n_ids = t.g.layout(t.ids).unwrap().nelements();
    let id: Vec<u8> = (0..n_ids)
        .flat_map(|i| (((i * 7 + 3) % experts) as i32).to_le_bytes())
        .collect();
    pl.tensor(&t.g, t.ids).unwrap().write(0, &id).unwrap();
    let ws: Vec<f32> = (0..n_ids).map(|_| 0.5 + 0.5 * rnd()).collect();
    pl.tensor(&t.g, t.weights).unwrap().write_f32(&ws).unwrap();
    super::force(Some(fused));
    let dispatches = crate::test_compute_counted(&stream, &t.g, &pl);
    super::force(None);
    (crate::test_bits(&t.g, &pl, &[t.out]).remove(0), dispatches)
}

/// 2, 4 and 8 slots, 1 and 3 tokens, rows that end mid-workgroup, three
/// weight types, each ADD's operands either way: one dispatch for the
/// product, the weighting and the sum (after the quantization) against
/// `used + 2`, the same bits.
#[test]
fn the_weighted_sum_of_the_experts_joins_their_product() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    if dev.subgroup_size().is_none() {
        eprintln!("skipped: the device has no subgroup operations (the kernels need them)");
        return;
    }
    for wt in [DType::Q4K, DType::Q8_0, DType::IQ4XS] {
        for (used, tokens) in [(2, 1), (4, 3), (8, 1)] {
            for reversed in [false, true] {
                let what = format!("{wt} used {used} tokens {tokens} reversed {reversed}");
                let t = tail(wt, (256, 70, 9), (used, tokens), reversed, false);
                let (want, apart) = run(&dev, &t, false, 3);
                let (got, together) = run(&dev, &t, true, 3);
                assert_eq!(
                    apart,
                    used as u64 + 2,
                    "{what}: quantization, product, MUL, ADDs"
                );
                assert_eq!(together, 2, "{what}: quantization and one dispatch");
                assert_eq!(got, want, "{what}: bits");
            }
        }
    }
}

/// A sum read elsewhere midway (the first ADD's result an output) is not
/// fused: every node's dispatch, and the same sum.
#[test]
fn a_sum_read_midway_is_not_fused() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    if dev.subgroup_size().is_none() {
        return;
    }
    let t = tail(DType::Q4K, (256, 70, 9), (4, 2), false, true);
    let (want, apart) = run(&dev, &t, false, 5);
    let (got, on) = run(&dev, &t, true, 5);
    assert_eq!((apart, on), (6, 6), "nothing fused");
    assert_eq!(got, want);
}

/// `x` [k, 1, tokens] -> up and gate MUL_MAT_IDs (in `order`) by one
/// set of ids, h = glu(gate, up) [ff, used, tokens]: the graph and its
/// tensors (weights, x, ids, h); `keep` makes the first product an output
/// (nothing may be fused then).
fn gate_up(
    wt: DType,
    (k, ff, experts): (usize, usize, usize),
    (used, tokens): (usize, usize),
    (op, up_first, keep): (GluOp, bool, bool),
) -> (Graph, [TensorId; 5]) {
    let mut g = Graph::new();
    let wg = g.input("wg", wt, &[k, ff, experts]).unwrap();
    let wu = g.input("wu", wt, &[k, ff, experts]).unwrap();
    let x = g.input("x", DType::F32, &[k, 1, tokens]).unwrap();
    let ids = g.input("ids", DType::I32, &[used, tokens]).unwrap();
    for t in [wg, wu, x, ids] {
        g.set_output(t).unwrap();
    }
    let (gate, up) = if up_first {
        let up = g.mul_mat_id(wu, x, ids).unwrap();
        (g.mul_mat_id(wg, x, ids).unwrap(), up)
    } else {
        let gate = g.mul_mat_id(wg, x, ids).unwrap();
        (gate, g.mul_mat_id(wu, x, ids).unwrap())
    };
    if keep {
        g.set_output(gate).unwrap();
    }
    let h = g.glu_split(gate, up, op).unwrap();
    g.set_output(h).unwrap();
    (g, [wg, wu, x, ids, h])
}

/// Compute a [`gate_up`] graph with the fusion on or off: h's bits and
/// the dispatches recorded.
fn run_gate_up(
    dev: &crate::WgpuDevice,
    g: &Graph,
    t: [TensorId; 5],
    fused: bool,
) -> (Vec<u32>, u64) {
    let [wg, wu, x, ids, h] = t;
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, g);
    let mut values = crate::test_values(61);
    let mut rnd = move || values.next().unwrap();
    let lw = g.layout(wg).unwrap();
    for w in [wg, wu] {
        let (q, _) =
            crate::matvec_q8::tests::weights(lw.dtype, lw.ne[0], lw.ne[1] * lw.ne[2], &mut rnd);
        pl.tensor(g, w).unwrap().write(0, &q).unwrap();
    }
    let xs: Vec<f32> = (0..g.layout(x).unwrap().nelements())
        .map(|_| 2.0 * rnd())
        .collect();
    pl.tensor(g, x).unwrap().write_f32(&xs).unwrap();
    let n_ids = g.layout(ids).unwrap().nelements();
    let id: Vec<u8> = (0..n_ids)
        .flat_map(|i| (((i * 5 + 1) % lw.ne[2]) as i32).to_le_bytes())
        .collect();
    pl.tensor(g, ids).unwrap().write(0, &id).unwrap();
    super::force(Some(fused));
    let dispatches = crate::test_compute_counted(&stream, g, &pl);
    super::force(None);
    (crate::test_bits(g, &pl, &[h]).remove(0), dispatches)
}

/// Gate and up expert products and their GLU (SwiGLU and GeGLU, either
/// product first, 1 and 3 tokens, rows that end mid-workgroup, three
/// weight types): one dispatch after the quantization against four, the
/// same bits; with the gate's result also an output, nothing fused.
#[test]
fn gate_and_up_experts_join_their_glu() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    if dev.subgroup_size().is_none() {
        return;
    }
    for wt in [DType::Q4K, DType::Q8_0, DType::IQ4XS] {
        for (used, tokens) in [(2, 1), (4, 3)] {
            for (op, up_first) in [(GluOp::SwiGlu, false), (GluOp::GeGlu, true)] {
                let what = format!("{wt} used {used} tokens {tokens} {op:?} up first {up_first}");
                let (g, t) = gate_up(wt, (256, 70, 6), (used, tokens), (op, up_first, false));
                let (want, apart) = run_gate_up(&dev, &g, t, false);
                let (got, together) = run_gate_up(&dev, &g, t, true);
                assert_eq!((apart, together), (4, 2), "{what}: dispatches");
                assert_eq!(got, want, "{what}: bits");
            }
        }
    }
    let (g, t) = gate_up(
        DType::Q4K,
        (256, 70, 6),
        (2, 2),
        (GluOp::SwiGlu, false, true),
    );
    let (want, apart) = run_gate_up(&dev, &g, t, false);
    let (got, on) = run_gate_up(&dev, &g, t, true);
    assert_eq!(
        (apart, on),
        (4, 4),
        "the gate read elsewhere: nothing fused"
    );
    assert_eq!(got, want);
}

/// The routing tail of `moe_ffn`: `probs` [experts, tokens] -> ARGSORT
/// (descending), the first `used` of each token's order as ids, the
/// probabilities gathered by them, renormalised by their sum (SUM_ROWS,
/// CLAMP, DIV). Returns the graph, `probs` and the weights.
fn routing(experts: usize, (used, tokens): (usize, usize)) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let probs = g.input("probs", DType::F32, &[experts, tokens]).unwrap();
    g.set_output(probs).unwrap();
    let order = g.argsort(probs, tessera::SortOrder::Desc).unwrap();
    let selected = g.view_2d(order, used, tokens, experts * 4, 0).unwrap();
    let probs3 = g.reshape(probs, &[1, experts, tokens]).unwrap();
    let weights = g.get_rows(probs3, selected).unwrap();
    let w2 = g.reshape(weights, &[used, tokens]).unwrap();
    let sum = g.sum_rows(w2).unwrap();
    let sum = g.clamp(sum, 6.103_515_6e-5, f32::INFINITY).unwrap();
    let out = g.div(w2, sum).unwrap();
    g.set_output(out).unwrap();
    (g, probs, out)
}

/// The routing weights (GET_ROWS, SUM_ROWS, CLAMP, DIV) as one dispatch:
/// 32 and 128 experts, 4 and 8 used, 1 and 3 tokens (one token's
/// probabilities all tiny, so CLAMP bounds its sum): ARGSORT and one
/// dispatch against five, the same bits; with the sums reduced by trees
/// and by subgroups (as SUM_ROWS reduces them on the device).
#[test]
fn the_routing_weights_are_one_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for shape in crate::test_reduction_shapes(&dev) {
        crate::with_reduction_shape(shape, || routing_weights(&dev));
    }
}

fn routing_weights(dev: &crate::WgpuDevice) {
    for (experts, used, tokens) in [(32, 4, 1), (128, 8, 3), (32, 8, 3)] {
        let (g, probs, out) = routing(experts, (used, tokens));
        let mut values = crate::test_values(67);
        let ps: Vec<f32> = (0..experts * tokens)
            .map(|i| {
                let v = 0.5 + 0.5 * values.next().unwrap();
                if i / experts == 1 {
                    v * 1e-7
                } else {
                    v / experts as f32
                }
            })
            .collect();
        let mut runs = Vec::new();
        for fused in [false, true] {
            let stream = dev.new_wgpu_stream().unwrap();
            let (pl, _galloc) = crate::test_placement(dev, &g);
            pl.tensor(&g, probs).unwrap().write_f32(&ps).unwrap();
            super::force(Some(fused));
            let dispatches = crate::test_compute_counted(&stream, &g, &pl);
            super::force(None);
            runs.push((crate::test_bits(&g, &pl, &[out]).remove(0), dispatches));
        }
        let what = format!("{experts} experts, {used} used, {tokens} tokens");
        assert_eq!((runs[0].1, runs[1].1), (5, 2), "{what}: dispatches");
        assert_eq!(runs[1].0, runs[0].0, "{what}: bits");
    }
}
