//! Tests of [`super`]: gate, up and their GLU as one dispatch, bit for
//! bit the separate dispatches, and only where nothing can tell.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, GluOp, Graph, TensorId};

/// `x` [k, cols] -> gate = Wg x, up = Wu x (in `order`), h = glu(gate,
/// up), y = Wd h: the graph, its weights (tensor, type) and the outputs.
struct Ffn {
    g: Graph,
    weights: Vec<(TensorId, DType)>,
    x: TensorId,
    h: TensorId,
    y: TensorId,
}

fn ffn(wt: DType, (k, m, cols): (usize, usize, usize), op: GluOp, up_first: bool) -> Ffn {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[k, cols]).unwrap();
    let wg = g.input("wg", wt, &[k, m]).unwrap();
    let wu = g.input("wu", wt, &[k, m]).unwrap();
    // Q8_0 (an integer product: it reads h quantized) where h's rows are
    // whole blocks, else F32.
    let dt = if m % 256 == 0 {
        DType::Q8_0
    } else {
        DType::F32
    };
    let wd = g.input("wd", dt, &[m, 64]).unwrap();
    for w in [wg, wu, wd] {
        // Kept: a weight's memory is not reused (as in a weights buffer).
        g.set_output(w).unwrap();
    }
    let (gate, up) = if up_first {
        let up = g.mul_mat(wu, x).unwrap();
        (g.mul_mat(wg, x).unwrap(), up)
    } else {
        let gate = g.mul_mat(wg, x).unwrap();
        (gate, g.mul_mat(wu, x).unwrap())
    };
    let h = g.glu_split(gate, up, op).unwrap();
    let y = g.mul_mat(wd, h).unwrap();
    g.set_output(h).unwrap();
    g.set_output(y).unwrap();
    Ffn {
        g,
        weights: vec![(wg, wt), (wu, wt), (wd, dt)],
        x,
        h,
        y,
    }
}

/// Compute `f` with the fusion on or off: the bits of h and y, and the
/// dispatches recorded.
fn run(dev: &crate::WgpuDevice, f: &Ffn, fused: bool) -> (Vec<Vec<u32>>, u64) {
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &f.g);
    for (i, &(w, t)) in f.weights.iter().enumerate() {
        let l = f.g.layout(w).unwrap();
        let v: Vec<f32> = crate::test_values(31 + i as u64)
            .take(l.nelements())
            .collect();
        let mut q = vec![0u8; t.row_size(l.ne[0]).unwrap() * l.ne[1]];
        tessera::quant::from_f32(t, &v, &mut q).unwrap();
        pl.tensor(&f.g, w).unwrap().write(0, &q).unwrap();
    }
    let n = f.g.layout(f.x).unwrap().nelements();
    let xs: Vec<f32> = crate::test_values(7).take(n).map(|v| 3.0 * v).collect();
    pl.tensor(&f.g, f.x).unwrap().write_f32(&xs).unwrap();
    crate::matvec_q8::force(Some(true));
    super::force(Some(fused));
    let dispatches = crate::test_compute_counted(&stream, &f.g, &pl);
    super::force(None);
    crate::matvec_q8::force(None);
    (crate::test_bits(&f.g, &pl, &[f.h, f.y]), dispatches)
}

/// Q4_0, Q8_0, Q4_K and Q6_K weights, SWIGLU and GEGLU, gate or
/// up first, 1, 3 and 8 columns, 256 rows (eight workgroups, each
/// quantizing its block of each column for the down product: no
/// quantizing dispatch of its own) and 80 (not whole blocks, the last
/// workgroup's rows partly past the end; an F32 down product): h and y
/// bit for bit those of the separate dispatches, one dispatch fewer.
/// Where the device has no subgroups, nothing is fused.
#[test]
fn gate_up_and_glu_in_one_dispatch_equal_the_separate_dispatches() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let fuses = crate::test_subgroup_variants(&dev).contains(&true);
    // A few types (the kernel decodes them as the matrix-vector kernel
    // does, whose tests take every type).
    for wt in [DType::Q4_0, DType::Q8_0, DType::Q4K, DType::Q6K] {
        for (m, cols, op, up_first) in [
            (256, 1, GluOp::SwiGlu, false),
            (256, 3, GluOp::GeGlu, true),
            (256, 8, GluOp::SwiGlu, true),
            (80, 1, GluOp::GeGlu, false),
        ] {
            let what = format!("{wt} m={m} cols={cols} {op:?} up_first={up_first}");
            let f = ffn(wt, (256, m, cols), op, up_first);
            let (apart, n_apart) = run(&dev, &f, false);
            let (fused, n_fused) = run(&dev, &f, true);
            assert_eq!(
                n_fused + u64::from(fuses),
                n_apart,
                "{what}: one dispatch fewer"
            );
            assert!(apart[0] == fused[0], "{what}: h differs");
            assert!(apart[1] == fused[1], "{what}: y differs");
        }
    }
}

/// Not fused: a product's result read by another node too, or a graph
/// output; the GLU not next; the GLU of a product and something else.
#[test]
fn only_gate_and_up_read_by_nothing_but_their_glu_fuse() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    if !crate::test_subgroup_variants(&dev).contains(&true) {
        return;
    }
    let (k, m) = (256, 64);
    // What follows gate and up (from gate, up and another input z): the
    // graph's outputs.
    type Tail = fn(&mut Graph, TensorId, TensorId, TensorId) -> Vec<TensorId>;
    let cases: [(&str, Tail); 3] = [
        ("gate also read by an ADD", |g, gate, up, _| {
            let h = g.glu_split(gate, up, GluOp::SwiGlu).unwrap();
            let s = g.add(gate, h).unwrap();
            vec![h, s]
        }),
        ("up an output", |g, gate, up, _| {
            g.set_output(up).unwrap();
            vec![g.glu_split(gate, up, GluOp::SwiGlu).unwrap()]
        }),
        ("the GLU of gate and another tensor", |g, gate, up, z| {
            let h = g.glu_split(gate, z, GluOp::SwiGlu).unwrap();
            let s = g.add(h, up).unwrap();
            vec![h, s]
        }),
    ];
    for (what, tail) in cases {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[k, 1]).unwrap();
        let z = g.input("z", DType::F32, &[m, 1]).unwrap();
        let wg = g.input("wg", DType::Q4_0, &[k, m]).unwrap();
        let wu = g.input("wu", DType::Q4_0, &[k, m]).unwrap();
        g.set_output(wg).unwrap();
        g.set_output(wu).unwrap();
        let gate = g.mul_mat(wg, x).unwrap();
        let up = g.mul_mat(wu, x).unwrap();
        let outs = tail(&mut g, gate, up, z);
        for &o in &outs {
            g.set_output(o).unwrap();
        }
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let counts = g.use_counts();
        let core = dev.core();
        let planned = super::plan(core, &g, &pl, &counts, gate, g.len()).unwrap();
        assert_eq!(planned, None, "{what}");
    }
}
