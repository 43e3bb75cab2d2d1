//! Client and server on loopback: graphs computed on the remote CPU equal
//! the local CPU's results byte for byte, memory round-trips, and a
//! re-sent graph (GRAPH_RECOMPUTE) sees new inputs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Val, ramp, remote, run, same_as_local, server};
use tessera::{DType, GluOp, Graph, RopeMode, RopeParams};

#[test]
fn matmul_in_f32_q8_0_q4_0_matches_the_local_cpu() {
    let h = server();
    let dev = remote(&h);
    for wt in [DType::F32, DType::Q8_0, DType::Q4_0] {
        let mut g = Graph::new();
        let w = g.new_tensor(wt, &[64, 32]).unwrap();
        let x = g.new_tensor(DType::F32, &[64, 5]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        let inputs = [
            (w, Val::F(ramp(64 * 32, 0.02))),
            (x, Val::F(ramp(64 * 5, 0.1))),
        ];
        same_as_local(&dev, &g, &inputs, &[y]);
    }
}

#[test]
fn norm_rope_softmax_get_rows_match_the_local_cpu() {
    let h = server();
    let dev = remote(&h);
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[16, 4, 3]).unwrap();
    let pos = g.new_tensor(DType::I32, &[3]).unwrap();
    let emb = g.new_tensor(DType::Q8_0, &[32, 10]).unwrap();
    let ids = g.new_tensor(DType::I32, &[4]).unwrap();
    let n = g.rms_norm(x, 1e-5).unwrap();
    let r = g
        .rope(x, pos, None, RopeParams::new(16, RopeMode::Neox, 10000.0))
        .unwrap();
    let s = g.soft_max_ext(x, None, 0.5, 0.0).unwrap();
    let rows = g.get_rows(emb, ids).unwrap();
    let inputs = [
        (x, Val::F(ramp(16 * 12, 0.3))),
        (pos, Val::I(vec![0, 5, 17])),
        (emb, Val::F(ramp(320, 0.05))),
        (ids, Val::I(vec![9, 0, 3, 3])),
    ];
    same_as_local(&dev, &g, &inputs, &[n, r, s, rows]);
}

#[test]
fn a_transformer_like_chain_matches_the_local_cpu() {
    let h = server();
    let dev = remote(&h);
    let (d, nh, hd, t, ff) = (64, 4, 16, 5, 96);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[d, t]).unwrap();
    let pos = g.input("pos", DType::I32, &[t]).unwrap();
    let gain = g.new_tensor(DType::F32, &[d]).unwrap();
    let wq = g.new_tensor(DType::Q8_0, &[d, d]).unwrap();
    let wk = g.new_tensor(DType::F16, &[d, d]).unwrap();
    let wu = g.new_tensor(DType::Q4_0, &[d, ff]).unwrap();
    let wg = g.new_tensor(DType::Q4_0, &[d, ff]).unwrap();
    let wd = g.new_tensor(DType::F32, &[ff, d]).unwrap();
    let n = g.rms_norm(x, 1e-6).unwrap();
    let hdn = g.mul(n, gain).unwrap();
    let rope = RopeParams::new(hd, RopeMode::Neox, 10000.0);
    let mut heads = Vec::new();
    for w in [wq, wk] {
        let m = g.mul_mat(w, hdn).unwrap();
        let m = g.reshape(m, &[hd, nh, t]).unwrap();
        let m = g.rope(m, pos, None, rope).unwrap();
        let m = g.permute(m, [0, 2, 1, 3]).unwrap();
        heads.push(g.cont(m).unwrap());
    }
    let kq = g.mul_mat(heads[1], heads[0]).unwrap();
    let sm = g.soft_max_ext(kq, None, 0.25, 0.0).unwrap();
    let up = g.mul_mat(wu, hdn).unwrap();
    let gate = g.mul_mat(wg, hdn).unwrap();
    let act = g.glu_split(gate, up, GluOp::SwiGlu).unwrap();
    let down = g.mul_mat(wd, act).unwrap();
    let out = g.add(x, down).unwrap();
    let inputs = [
        (x, Val::F(ramp(d * t, 0.1))),
        (pos, Val::I((0..t as i32).collect())),
        (gain, Val::F(ramp(d, 0.2))),
        (wq, Val::F(ramp(d * d, 0.01))),
        (wk, Val::F(ramp(d * d, 0.013))),
        (wu, Val::F(ramp(d * ff, 0.011))),
        (wg, Val::F(ramp(d * ff, 0.017))),
        (wd, Val::F(ramp(ff * d, 0.007))),
    ];
    same_as_local(&dev, &g, &inputs, &[sm, out]);
}

/// Raw memory: write, read, fill, clear and a device-side copy.
#[test]
fn buffers_round_trip_bytes() {
    let h = server();
    let dev = remote(&h);
    let buft = dev.buffer_type();
    let a = buft.alloc_buffer(1000).unwrap();
    let b = buft.alloc_buffer(500).unwrap();
    let data: Vec<u8> = (0..1000).map(|i| (i * 31 % 251) as u8).collect();
    a.write(0, &data).unwrap();
    let mut back = vec![0u8; 1000];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    a.fill(10, 20, 0xEE).unwrap();
    let mut part = vec![0u8; 40];
    a.read(0, &mut part).unwrap();
    assert_eq!(&part[..10], &data[..10]);
    assert!(part[10..30].iter().all(|&v| v == 0xEE));
    assert_eq!(&part[30..], &data[30..40]);
    tessera::copy_between(a.as_ref(), 100, b.as_ref(), 7, 300).unwrap();
    let mut c = vec![0u8; 300];
    b.read(7, &mut c).unwrap();
    assert_eq!(c, &data[100..400]);
    b.clear(3).unwrap();
    b.read(7, &mut c).unwrap();
    assert!(c.iter().all(|&v| v == 3));
    // Out of range on the client side: an error, no request.
    assert!(a.write(990, &[0; 20]).is_err());
    assert!(dev.memory().total > 0);
}

/// The same graph sent twice goes as GRAPH_RECOMPUTE; it must recompute
/// with the new inputs (a stale result would show the first inputs).
#[test]
fn recompute_sees_new_inputs() {
    let h = server();
    let dev = remote(&h);
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[8, 2]).unwrap();
    let y = g.scale_bias(x, 2.0, 1.0).unwrap();
    let mut p = tessera::Placement::new(&g);
    let mut alloc = tessera::GraphAllocator::new(dev.buffer_type());
    alloc.alloc_graph(&g, &mut p).unwrap();
    let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
    for k in [1.0f32, -3.0, 0.5] {
        let xs: Vec<f32> = (0..16).map(|i| i as f32 * k).collect();
        p.tensor(&g, x).unwrap().write_f32(&xs).unwrap();
        s.compute(&g, &p).unwrap();
        let got = p.tensor(&g, y).unwrap().read_f32().unwrap();
        let want: Vec<f32> = xs.iter().map(|v| v * 2.0 + 1.0).collect();
        assert_eq!(got, want, "k = {k}");
    }
    // And the helper path agrees with the local CPU.
    let out = run(&dev, &g, &[(x, Val::F(ramp(16, 1.0)))], &[y]);
    assert_eq!(out.len(), 1);
}

/// GET_ALLOC_SIZE and INIT_TENSOR, sent (as upstream does) for quantized
/// rows that are not a multiple of 512: the Tessera server answers
/// `nbytes` and validates INIT_TENSOR's range like any other tensor.
#[test]
fn alloc_size_and_init_tensor_go_to_the_server() {
    let h = server();
    let dev = remote(&h);
    let buft = dev.buffer_type();
    let l = tessera::Layout::contiguous(DType::Q4_0, &[64, 3]).unwrap();
    assert_eq!(buft.alloc_size(&l), l.nbytes());
    assert_eq!(buft.alloc_size(&l), l.nbytes(), "cached answer");
    let b = buft.alloc_buffer(l.nbytes() + 64).unwrap();
    b.init_tensor(&l, 64).unwrap();
    b.write(0, &[1, 2, 3]).unwrap();
    let mut out = [0u8; 3];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3]);
    // A tensor placed past the end: the server closes the connection and
    // the next call says so.
    b.init_tensor(&l, 128).unwrap();
    assert!(b.read(0, &mut out).is_err());
}

/// As in ggml's CPU backend, a listed node without
/// `GGML_TENSOR_FLAG_COMPUTE` is not computed; with it, it is.
#[test]
fn only_nodes_flagged_compute_are_computed() {
    use common::raw::{Raw, f32v};
    use tessera_rpc::msg::Request;
    let h = server();
    let mut r = Raw::new(h.addr());
    let (b, base) = r.alloc(48);
    let vals: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    r.call(&Request::SetTensor {
        tensor: f32v(9, 8, b, base),
        cache_flag: 0,
        offset: 0,
        data: vals,
    })
    .unwrap();
    let sum = |r: &mut Raw, flags: i32| {
        let mut z = f32v(3, 4, b, base + 32);
        z.op = 2;
        z.src = [1, 2, 0, 0, 0, 0, 0, 0, 0, 0];
        z.flags = flags;
        let tensors = vec![f32v(1, 4, b, base), f32v(2, 4, b, base + 16), z];
        r.call(&Request::GraphCompute {
            device: 0,
            nodes: vec![3],
            tensors,
        })
        .unwrap();
        let out = r
            .call(&Request::GetTensor {
                tensor: f32v(3, 4, b, base + 32),
                offset: 0,
                size: 16,
            })
            .unwrap();
        out.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<f32>>()
    };
    assert_eq!(sum(&mut r, 0), vec![0.0; 4], "computed without the flag");
    assert_eq!(
        sum(&mut r, tessera_rpc::proto::FLAG_COMPUTE),
        vec![6.0, 8.0, 10.0, 12.0]
    );
}

/// `register` puts the remote devices in the global registry, by name.
#[test]
fn registered_devices_are_found_by_name() {
    let h = server();
    let ep = h.addr().to_string();
    let devs = tessera_rpc::register(&ep).unwrap();
    let name = format!("RPC0[{ep}]");
    assert_eq!(devs[0].name(), name);
    let found = tessera::Registry::global().device_by_name(&name).unwrap();
    assert_eq!(found.family_name(), "RPC");
    assert!(found.memory().total > 0);
}

/// Weights over 10 MiB go by hash first (SET_TENSOR_HASH); the Tessera
/// server has no tensor cache and says so, and the bytes follow.
#[test]
fn large_weights_are_offered_by_hash_then_sent() {
    let h = server();
    let dev = remote(&h);
    let n = (10 << 20) + 4096;
    let b = dev.buffer_type().alloc_buffer(n + 64).unwrap();
    b.set_usage(tessera::BufferUsage::Weights);
    let data: Vec<u8> = (0..n).map(|i| (i * 131 % 251) as u8).collect();
    b.write(64, &data).unwrap();
    let mut back = vec![0u8; n];
    b.read(64, &mut back).unwrap();
    assert!(back == data);
}

#[test]
fn argsort_both_ways_matches_the_local_cpu() {
    let h = server();
    let dev = remote(&h);
    let mut g = Graph::new();
    let x = g.new_tensor(DType::F32, &[37, 5]).unwrap();
    let up = g.argsort(x, tessera::SortOrder::Asc).unwrap();
    let down = g.argsort(x, tessera::SortOrder::Desc).unwrap();
    let inputs = [(x, Val::F(ramp(37 * 5, 0.7)))];
    same_as_local(&dev, &g, &inputs, &[up, down]);
    assert!(dev.supports_op(&g, up));
}
