//! Tests of [`super`]: a ROPE and its cache writes recorded as one
//! dispatch give the bytes of the nodes recorded one by one.
#![allow(clippy::unwrap_used, clippy::panic)]
use tessera::{DType, Graph, RopeMode, RopeParams, Stream};

/// Keys [16 x 3 heads, 4 tokens] rotated (NeoX or normal) and stored
/// into rows 5, -1, 9, 2 of an F16 cache of 8 rows (ids clamped into the
/// cache as SET_ROWS clamps them: rows 5, 0, 7, 2): one dispatch, the
/// cache's bytes those of the separate ROPE and SET_ROWS (the ROPE's
/// result made an output, which keeps them apart), rows not written
/// left as they were. Through two views, the first an output, the
/// nodes stay apart too (the output must be written).
#[test]
fn a_rope_stores_into_the_cache_rows_in_one_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let (d, heads, tokens, slots) = (16, 3, 4, 8);
    // `apart`: 0 fused, 1 the ROPE an output, 2 two views, the first an
    // output.
    let run = |mode: RopeMode, apart: u8| -> (Vec<u8>, u64) {
        let mut g = Graph::new();
        let k = g.input("k", DType::F32, &[d * heads, tokens]).unwrap();
        let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
        let at = g.input("at", DType::I64, &[tokens]).unwrap();
        let cache = g.input("cache", DType::F16, &[d * heads, slots]).unwrap();
        let k3 = g.reshape(k, &[d, heads, tokens]).unwrap();
        let r = g
            .rope(k3, pos, None, RopeParams::new(d, mode, 10000.0))
            .unwrap();
        let (k2, middle) = if apart == 2 {
            let flat = g.reshape(r, &[d * heads * tokens]).unwrap();
            (g.reshape(flat, &[d * heads, tokens]).unwrap(), Some(flat))
        } else {
            (g.reshape(r, &[d * heads, tokens]).unwrap(), None)
        };
        let w = g.set_rows(cache, k2, at).unwrap();
        g.set_output(w).unwrap();
        if apart == 1 {
            g.set_output(r).unwrap();
        }
        if let Some(m) = middle {
            g.set_output(m).unwrap();
        }
        let stream = dev.new_wgpu_stream().unwrap();
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let x: Vec<f32> = (0..d * heads * tokens)
            .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
            .collect();
        pl.tensor(&g, k).unwrap().write_f32(&x).unwrap();
        let p: Vec<u8> = [3i32, 9, 10, 11]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        pl.tensor(&g, pos).unwrap().write(0, &p).unwrap();
        let a: Vec<u8> = [5i64, -1, 9, 2]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        pl.tensor(&g, at).unwrap().write(0, &a).unwrap();
        let before: Vec<f32> = (0..d * heads * slots).map(|i| i as f32 * 0.5).collect();
        let mut c = vec![0u8; d * heads * slots * 2];
        tessera::quant::from_f32(DType::F16, &before, &mut c).unwrap();
        pl.tensor(&g, cache).unwrap().write(0, &c).unwrap();
        let n0 = crate::batch::counts::now().0;
        stream.compute(&g, &pl).unwrap();
        let n = crate::batch::counts::now().0 - n0;
        let mut out = vec![0u8; c.len()];
        pl.tensor(&g, cache).unwrap().read(0, &mut out).unwrap();
        (out, n)
    };
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        let (fused, n_fused) = run(mode, 0);
        let (apart, n_apart) = run(mode, 1);
        let (chained, n_chained) = run(mode, 2);
        assert_eq!(n_fused, 1, "{mode:?}: one dispatch");
        assert_eq!(n_apart, 2, "{mode:?}: ROPE, SET_ROWS");
        assert_eq!(n_chained, 2, "{mode:?}: through an output view");
        assert!(chained == apart, "{mode:?}: the cache through two views");
        assert!(fused == apart, "{mode:?}: the cache's bytes differ");
        let row = |r: usize| &fused[r * d * heads * 2..(r + 1) * d * heads * 2];
        let mut kept = vec![0u8; d * heads * 2];
        let was: Vec<f32> = (0..d * heads)
            .map(|i| (d * heads + i) as f32 * 0.5)
            .collect();
        tessera::quant::from_f32(DType::F16, &was, &mut kept).unwrap();
        assert!(row(1) == &kept[..], "{mode:?}: row 1 was written");
        assert_ne!(row(5), row(1), "{mode:?}: row 5 is written");
    }
}

/// Keys rotated into their cache and values (16 wide, 2 heads) stored
/// into theirs with the same ids (5, -1, 9, 2 into 8 rows: clamped as
/// SET_ROWS clamps them): one dispatch, both caches' bytes those of the
/// values stored by a SET_ROWS of their own (ids of another tensor with
/// the same values: two dispatches), and the value rows the F16 of the
/// values, rows not written as they were.
#[test]
fn the_values_store_joins_the_keys_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let (d, heads, tokens, slots, dv) = (16, 3, 4, 8, 32);
    let ids = [5i64, -1, 9, 2];
    let run = |same_ids: bool| -> (Vec<u8>, Vec<u8>, u64) {
        let mut g = Graph::new();
        let k = g.input("k", DType::F32, &[d * heads, tokens]).unwrap();
        let v = g.input("v", DType::F32, &[dv, tokens]).unwrap();
        let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
        let at = g.input("at", DType::I64, &[tokens]).unwrap();
        let at2 = g.input("at2", DType::I64, &[tokens]).unwrap();
        let ck = g.input("ck", DType::F16, &[d * heads, slots]).unwrap();
        let cv = g.input("cv", DType::F16, &[dv, slots]).unwrap();
        let k3 = g.reshape(k, &[d, heads, tokens]).unwrap();
        let r = g
            .rope(k3, pos, None, RopeParams::new(d, RopeMode::Neox, 10000.0))
            .unwrap();
        let k2 = g.reshape(r, &[d * heads, tokens]).unwrap();
        let wk = g.set_rows(ck, k2, at).unwrap();
        let wv = g.set_rows(cv, v, if same_ids { at } else { at2 }).unwrap();
        g.set_output(wk).unwrap();
        g.set_output(wv).unwrap();
        let stream = dev.new_wgpu_stream().unwrap();
        let (pl, _galloc) = crate::test_placement(&dev, &g);
        let f = |n: usize, m: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * m) % 101) as f32 / 25.0 - 2.0)
                .collect()
        };
        pl.tensor(&g, k)
            .unwrap()
            .write_f32(&f(d * heads * tokens, 37))
            .unwrap();
        pl.tensor(&g, v)
            .unwrap()
            .write_f32(&f(dv * tokens, 53))
            .unwrap();
        let p: Vec<u8> = [3i32, 9, 10, 11]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        pl.tensor(&g, pos).unwrap().write(0, &p).unwrap();
        let a: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
        pl.tensor(&g, at).unwrap().write(0, &a).unwrap();
        pl.tensor(&g, at2).unwrap().write(0, &a).unwrap();
        for (c, n) in [(ck, d * heads), (cv, dv)] {
            let before: Vec<f32> = (0..n * slots).map(|i| i as f32 * 0.5).collect();
            let mut h = vec![0u8; n * slots * 2];
            tessera::quant::from_f32(DType::F16, &before, &mut h).unwrap();
            pl.tensor(&g, c).unwrap().write(0, &h).unwrap();
        }
        let n0 = crate::batch::counts::now().0;
        stream.compute(&g, &pl).unwrap();
        let n = crate::batch::counts::now().0 - n0;
        let read = |c, n: usize| {
            let mut out = vec![0u8; n * slots * 2];
            pl.tensor(&g, c).unwrap().read(0, &mut out).unwrap();
            out
        };
        (read(ck, d * heads), read(cv, dv), n)
    };
    let (k1, v1, n1) = run(true);
    let (k2, v2, n2) = run(false);
    assert_eq!(n1, 1, "keys and values in one dispatch");
    assert_eq!(n2, 2, "values with other ids: a dispatch of their own");
    assert!(k1 == k2, "the keys' cache differs");
    assert!(v1 == v2, "the values' cache differs");
    // Value row t in cache row clamp(ids[t]); row 1 untouched.
    let vals: Vec<f32> = (0..dv * tokens)
        .map(|i| ((i * 53) % 101) as f32 / 25.0 - 2.0)
        .collect();
    let mut want = vec![0u8; dv * tokens * 2];
    tessera::quant::from_f32(DType::F16, &vals, &mut want).unwrap();
    for (t, &id) in ids.iter().enumerate() {
        let row = id.clamp(0, slots as i64 - 1) as usize;
        assert_eq!(
            &v1[row * dv * 2..(row + 1) * dv * 2],
            &want[t * dv * 2..(t + 1) * dv * 2],
            "value row {t} in cache row {row}"
        );
    }
    let was: Vec<f32> = (dv..2 * dv).map(|i| i as f32 * 0.5).collect();
    let mut kept = vec![0u8; dv * 2];
    tessera::quant::from_f32(DType::F16, &was, &mut kept).unwrap();
    assert_eq!(&v1[dv * 2..2 * dv * 2], &kept[..], "row 1 was written");
}

/// Queries (4 heads), keys (2 heads) and values of one layer, the
/// queries' and keys' ROPE alike (NeoX, frequency factors): with
/// fusion, one dispatch; every node alone, four; the queries' result
/// and both caches the same bits. Queries rotated with another base
/// stay a dispatch of their own (two in all), their result that of
/// the same ROPE unfused.
#[test]
fn the_queries_rope_joins_the_keys_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    let run = |q_base: f32, fuse: bool, keep_q: bool| run_layer(&dev, q_base, fuse, keep_q, None);
    let (q1, k1, v1, n1) = run(10000.0, true, false);
    assert_eq!(n1, 1, "one dispatch fused");
    for keep_q in [false, true] {
        let (qf, kf, vf, nf) = run(10000.0, true, keep_q);
        let (q0, k0, v0, n0) = run(10000.0, false, keep_q);
        assert_eq!(
            (nf, n0),
            (1, 4),
            "one dispatch fused, four apart ({keep_q})"
        );
        assert!(qf == q0 && q0 == q1, "the queries differ ({keep_q})");
        assert!(kf == k0 && k0 == k1, "the keys' cache differs ({keep_q})");
        assert!(vf == v0 && v0 == v1, "the values' cache differs ({keep_q})");
    }
    let (q2, k2, _, n2) = run(500.0, true, false);
    let (q3, _, _, _) = run(500.0, false, false);
    assert_eq!(n2, 2, "queries rotated otherwise: a dispatch of their own");
    assert!(q2 == q3 && k2 == k1, "the queries with another base");
    assert!(q2 != q1, "another base rotates otherwise");
}

/// One layer's queries, keys and values as in
/// [`the_queries_rope_joins_the_keys_dispatch`] (`keep_q`: the queries'
/// input an output too, so their result is not placed over it; else it
/// is: the in-place case), computed with fusion on or off, the queries
/// scaled by `scale` (`x * scale + bias`) where given: the bits of the
/// queries' result, both caches' bytes, and the dispatches.
fn run_layer(
    dev: &crate::WgpuDevice,
    q_base: f32,
    fuse: bool,
    keep_q: bool,
    scale: Option<(f32, f32)>,
) -> (Vec<u32>, Vec<u8>, Vec<u8>, u64) {
    let (d, hq, hk, tokens, slots) = (16, 4, 2, 3, 6);

    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[d * hq, tokens]).unwrap();
    let k = g.input("k", DType::F32, &[d * hk, tokens]).unwrap();
    let v = g.input("v", DType::F32, &[d * hk, tokens]).unwrap();
    let pos = g.input("pos", DType::I32, &[tokens]).unwrap();
    let ff = g.input("ff", DType::F32, &[d / 2]).unwrap();
    let at = g.input("at", DType::I64, &[tokens]).unwrap();
    let ck = g.input("ck", DType::F16, &[d * hk, slots]).unwrap();
    let cv = g.input("cv", DType::F16, &[d * hk, slots]).unwrap();
    let p = |base| RopeParams::new(d, RopeMode::Neox, base);
    let q3 = g.reshape(q, &[d, hq, tokens]).unwrap();
    let rq = g.rope(q3, pos, Some(ff), p(q_base)).unwrap();
    let k3 = g.reshape(k, &[d, hk, tokens]).unwrap();
    let rk = g.rope(k3, pos, Some(ff), p(10000.0)).unwrap();
    let k2 = g.reshape(rk, &[d * hk, tokens]).unwrap();
    let wk = g.set_rows(ck, k2, at).unwrap();
    let wv = g.set_rows(cv, v, at).unwrap();
    // The queries' result: the ROPE's, or its SCALE's.
    let rq = match scale {
        Some((s, b)) => g.scale_bias(rq, s, b).unwrap(),
        None => rq,
    };
    for t in [rq, wk, wv] {
        g.set_output(t).unwrap();
    }
    if keep_q {
        g.set_output(q).unwrap();
    }
    let stream = dev.new_wgpu_stream().unwrap();
    let (pl, _galloc) = crate::test_placement(dev, &g);
    let at_q = |t| pl.get(t).unwrap().offset;
    if scale.is_none() {
        assert_eq!(at_q(rq) == at_q(q), !keep_q, "the queries' result in place");
    }
    let f = |n: usize, m: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * m) % 101) as f32 / 25.0 - 2.0)
            .collect()
    };
    pl.tensor(&g, q)
        .unwrap()
        .write_f32(&f(d * hq * tokens, 29))
        .unwrap();
    pl.tensor(&g, k)
        .unwrap()
        .write_f32(&f(d * hk * tokens, 37))
        .unwrap();
    pl.tensor(&g, v)
        .unwrap()
        .write_f32(&f(d * hk * tokens, 53))
        .unwrap();
    let factors: Vec<f32> = (0..d / 2).map(|i| 1.0 + i as f32 * 0.25).collect();
    pl.tensor(&g, ff).unwrap().write_f32(&factors).unwrap();
    let pb: Vec<u8> = [7i32, 8, 30].iter().flat_map(|x| x.to_le_bytes()).collect();
    pl.tensor(&g, pos).unwrap().write(0, &pb).unwrap();
    let ab: Vec<u8> = [4i64, 0, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    pl.tensor(&g, at).unwrap().write(0, &ab).unwrap();
    for c in [ck, cv] {
        let before: Vec<f32> = (0..d * hk * slots).map(|i| i as f32 * 0.25).collect();
        let mut h = vec![0u8; before.len() * 2];
        tessera::quant::from_f32(DType::F16, &before, &mut h).unwrap();
        pl.tensor(&g, c).unwrap().write(0, &h).unwrap();
    }
    crate::fuse::force(Some(fuse));
    let n0 = crate::batch::counts::now().0;
    stream.compute(&g, &pl).unwrap();
    let n = crate::batch::counts::now().0 - n0;
    crate::fuse::force(None);
    let qs = pl.tensor(&g, rq).unwrap().read_f32().unwrap();
    let read = |c| {
        let mut out = vec![0u8; d * hk * slots * 2];
        pl.tensor(&g, c).unwrap().read(0, &mut out).unwrap();
        out
    };
    (
        qs.iter().map(|x| x.to_bits()).collect(),
        read(ck),
        read(cv),
        n,
    )
}

/// Gemma 3 scales its queries after their ROPE: the SCALE (with and
/// without a bias, the queries' input kept or not) joins the layer's one
/// dispatch, the scaled queries and both caches bit for bit those of
/// every node alone (five dispatches); a SCALE of queries rotated
/// otherwise (their own dispatch) is not taken in (three).
#[test]
fn the_queries_scale_joins_the_rope_dispatch() {
    let Some(dev) = crate::test_device() else {
        return;
    };
    for (scale, keep_q) in [((0.125, 0.0), false), ((-0.3, 0.75), true)] {
        let (qf, kf, vf, nf) = run_layer(&dev, 10000.0, true, keep_q, Some(scale));
        let (q0, k0, v0, n0) = run_layer(&dev, 10000.0, false, keep_q, Some(scale));
        assert_eq!(
            (nf, n0),
            (1, 5),
            "{scale:?}: one dispatch fused, five apart"
        );
        assert!(qf == q0, "{scale:?}: the scaled queries differ");
        assert!(kf == k0 && vf == v0, "{scale:?}: the caches differ");
    }
    let (q2, _, _, n2) = run_layer(&dev, 500.0, true, false, Some((0.125, 0.0)));
    let (q3, _, _, _) = run_layer(&dev, 500.0, false, false, Some((0.125, 0.0)));
    assert_eq!(n2, 3, "queries rotated otherwise: ROPE and SCALE apart");
    assert!(q2 == q3);
}
