//! Tests of [`super`]: two norm + MUL runs (the queries' and the keys'
//! head norms) as one dispatch, bit for bit the separate runs.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph};

/// Heads of `d` values: queries [d, 4, tokens] and keys [d, 2, tokens],
/// each normalized (eps `eps_k` for the keys) and multiplied by its
/// weights (the keys': a [d, 2] matrix where `k_matrix`), computed with
/// the pairing `on` (the other fusions `fuse`): both results' bits and
/// the dispatches.
fn run(
    dev: &crate::WgpuDevice,
    (d, tokens): (usize, usize),
    (eps_k, k_matrix): (f32, bool),
    on: bool,
    fuse: bool,
) -> (Vec<Vec<u32>>, u64) {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[d, 4, tokens]).unwrap();
    let k = g.input("k", DType::F32, &[d, 2, tokens]).unwrap();
    let wq = g.input("wq", DType::F32, &[d]).unwrap();
    let wk_ne: &[usize] = if k_matrix { &[d, 2] } else { &[d] };
    let wk = g.input("wk", DType::F32, wk_ne).unwrap();
    let nq = g.rms_norm(q, 1e-6).unwrap();
    let yq = g.mul(nq, wq).unwrap();
    let nk = g.rms_norm(k, eps_k).unwrap();
    let yk = g.mul(nk, wk).unwrap();
    g.set_output(yq).unwrap();
    g.set_output(yk).unwrap();
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    for (i, (t, base)) in [(q, 0.0), (k, 0.0), (wq, 1.0), (wk, 1.0)]
        .into_iter()
        .enumerate()
    {
        let len = g.layout(t).unwrap().nelements();
        let v: Vec<f32> = crate::test_values(i as u64 + 1)
            .take(len)
            .map(|v| base + v)
            .collect();
        pl.tensor(&g, t).unwrap().write_f32(&v).unwrap();
    }
    super::force(Some(on));
    crate::fuse::force(Some(fuse));
    let dispatches = crate::test_compute_counted(&stream, &g, &pl);
    crate::fuse::force(None);
    super::force(None);
    (crate::test_bits(&g, &pl, &[yq, yk]), dispatches)
}

/// Heads of 128 and 256 values, one token and five: one dispatch for
/// both runs (two paired off, four with no fusion), both results bit for
/// bit; not paired where the eps differ or the keys' weights are a
/// matrix.
#[test]
fn the_queries_and_keys_head_norms_are_one_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for shape in [(128, 1), (256, 5)] {
        let (paired, n1) = run(&dev, shape, (1e-6, false), true, true);
        let (two, n2) = run(&dev, shape, (1e-6, false), false, true);
        let (apart, n4) = run(&dev, shape, (1e-6, false), false, false);
        assert_eq!((n1, n2, n4), (1, 2, 4), "{shape:?}: dispatches");
        assert!(paired == two && two == apart, "{shape:?}: results differ");
    }
    for (what, k) in [
        ("another eps", (1e-5, false)),
        ("matrix weights", (1e-6, true)),
    ] {
        let (paired, n1) = run(&dev, (128, 3), k, true, true);
        let (two, n2) = run(&dev, (128, 3), k, false, true);
        assert_eq!((n1, n2), (2, 2), "{what}: not paired");
        assert!(paired == two, "{what}");
    }
}
