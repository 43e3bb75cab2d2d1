//! Every class of upstream ggml-rpc advisory, replayed against Tessera's
//! server with a raw peer (see ggml-backend-notes §5.6). Each attack must
//! end in a refusal the protocol can express or a closed connection; the
//! valid request next to it must work (so the refusal is the attack's),
//! and afterwards the server must still serve a fresh client correctly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::raw::{GRAPH_COMPUTE, Raw, f32v, tensor};
use common::{Val, remote, run, server, server_with};
use tessera::{DType, Graph};
use tessera_rpc::ServerHandle;
use tessera_rpc::msg::Request;
use tessera_rpc::proto::FLAG_COMPUTE;
use tessera_rpc::wire_tensor::RpcTensor;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn set(t: RpcTensor, data: Vec<u8>) -> Request {
    Request::SetTensor {
        tensor: t,
        cache_flag: 0,
        offset: 0,
        data,
    }
}

/// A fresh client still gets correct results.
fn alive(h: &ServerHandle) {
    let dev = remote(h);
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4]).unwrap();
    let b = g.new_tensor(DType::F32, &[4]).unwrap();
    let c = g.add(a, b).unwrap();
    let out = run(
        &dev,
        &g,
        &[
            (a, Val::F(vec![1.0, 2.0, 3.0, 4.0])),
            (b, Val::F(vec![10.0, 20.0, 30.0, 40.0])),
        ],
        &[c],
    );
    assert_eq!(out[0], f32_bytes(&[11.0, 22.0, 33.0, 44.0]));
}

/// A valid ADD graph in buffer `(b, base)`: tensors 1, 2 at 0 and 16, node 3 at 32.
fn add_graph(b: u64, base: u64) -> (Vec<u64>, Vec<RpcTensor>) {
    let x = f32v(1, 4, b, base);
    let y = f32v(2, 4, b, base + 16);
    let mut z = f32v(3, 4, b, base + 32);
    z.op = 2;
    z.flags = FLAG_COMPUTE;
    z.src[0] = 1;
    z.src[1] = 2;
    (vec![3], vec![x, y, z])
}

fn compute(nodes: Vec<u64>, tensors: Vec<RpcTensor>) -> Request {
    Request::GraphCompute {
        device: 0,
        nodes,
        tensors,
    }
}

/// Runs `attack` on a fresh connection with a 64-byte buffer holding a
/// valid ADD graph that is first computed and checked; the attack's
/// connection must then be closed.
fn expect_closed(h: &ServerHandle, what: &str, attack: impl Fn(&mut Raw, u64, u64)) {
    let mut r = Raw::new(h.addr());
    let (b, base) = r.alloc(64);
    let vals = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    r.call(&set(f32v(9, 8, b, base), vals)).unwrap();
    let (n, t) = add_graph(b, base);
    r.call(&compute(n, t)).unwrap();
    let got = r
        .call(&Request::GetTensor {
            tensor: f32v(3, 4, b, base + 32),
            offset: 0,
            size: 16,
        })
        .unwrap();
    assert_eq!(got, f32_bytes(&[6.0, 8.0, 10.0, 12.0]), "{what}: baseline");
    attack(&mut r, b, base);
    assert!(r.closed(), "{what}: the connection is still open");
}

#[test]
fn out_of_range_data_pointers_are_refused() {
    let h = server();
    let w = || f32_bytes(&[0.0; 4]);
    expect_closed(&h, "data past the end", |r, b, base| {
        r.call(&set(f32v(1, 4, b, base + 60), w()));
    });
    expect_closed(&h, "data before the base", |r, b, base| {
        r.call(&set(f32v(1, 4, b, base - 4), w()));
    });
    expect_closed(&h, "a raw pointer", |r, b, _| {
        r.call(&set(f32v(1, 4, b, 0x7fff_dead_0000), w()));
    });
    expect_closed(&h, "an unknown buffer handle", |r, b, base| {
        r.call(&set(f32v(1, 4, b + 1000, base), w()));
    });
    expect_closed(&h, "GET_TENSOR past the tensor", |r, b, base| {
        let reply = r.call(&Request::GetTensor {
            tensor: f32v(1, 4, b, base),
            offset: 8,
            size: 16,
        });
        assert!(reply.is_none());
    });
    expect_closed(&h, "GET_TENSOR offset overflow", |r, b, base| {
        r.call(&Request::GetTensor {
            tensor: f32v(1, 4, b, base),
            offset: u64::MAX - 3,
            size: 8,
        });
    });
    expect_closed(&h, "SET_TENSOR past the tensor", |r, b, base| {
        r.call(&set(f32v(1, 2, b, base), w()));
    });
    expect_closed(&h, "MEMSET past the tensor", |r, b, base| {
        r.call(&Request::MemsetTensor {
            tensor: f32v(1, 4, b, base),
            offset: 4,
            size: 16,
            value: 0x41,
        });
    });
    expect_closed(&h, "a graph leaf past the buffer", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[1].data = base + 56;
        r.call(&compute(n, t));
    });
    // Handles are per connection: another client's handle is unknown here.
    let mut owner = Raw::new(h.addr());
    let (ob, obase) = owner.alloc(64);
    let mut thief = Raw::new(h.addr());
    thief.call(&Request::GetTensor {
        tensor: f32v(1, 4, ob, obase),
        offset: 0,
        size: 16,
    });
    assert!(thief.closed());
    assert!(!owner.closed());
    alive(&h);
}

/// CVE-2026-34159 (llama.cpp #20908): tensors with buffer 0 skipped checks.
#[test]
fn buffer_zero_with_data_is_refused() {
    let h = server();
    expect_closed(&h, "graph leaf without buffer", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[0].buffer = 0;
        t[0].data = 0x4141_4141_4141;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "graph node without buffer", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[2].buffer = 0;
        t[2].data = 0x4141_4141_4141;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "graph leaf without any memory", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[0].buffer = 0;
        t[0].data = 0;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "SET_TENSOR without buffer", |r, _, base| {
        r.call(&set(f32v(1, 4, 0, base), vec![0; 16]));
    });
    alive(&h);
}

/// ggml#1103: COPY_TENSOR wrote nbytes(src) into a smaller dst (RCE).
#[test]
fn copy_into_a_smaller_tensor_is_refused() {
    let h = server();
    expect_closed(&h, "copy into a smaller dst", |r, b, base| {
        let (b2, base2) = r.alloc(64);
        // A valid copy first.
        let ok = r.call(&Request::CopyTensor {
            src: f32v(1, 4, b, base),
            dst: f32v(2, 4, b2, base2),
        });
        assert_eq!(ok, Some(vec![1]));
        let reply = r.call(&Request::CopyTensor {
            src: f32v(1, 16, b, base),
            dst: f32v(2, 4, b2, base2 + 48),
        });
        assert!(reply.is_none());
    });
    alive(&h);
}

/// llama.cpp #13067, #20712: invalid and removed type ids.
#[test]
fn unknown_type_ids_are_refused() {
    let h = server();
    for ty in [4u32, 5, 39, 43, 1000, u32::MAX] {
        expect_closed(&h, &format!("SET_TENSOR of type {ty}"), |r, b, base| {
            let mut t = f32v(1, 4, b, base);
            t.dtype = ty;
            r.call(&set(t, vec![0; 4]));
        });
        expect_closed(&h, &format!("graph leaf of type {ty}"), |r, b, base| {
            let (n, mut t) = add_graph(b, base);
            t[0].dtype = ty;
            r.call(&compute(n, t));
        });
    }
    alive(&h);
}

/// llama.cpp #9799 (ne = 0 wrapped sizes) and overflowing extents.
#[test]
fn zero_and_overflowing_extents_are_refused() {
    let h = server();
    expect_closed(&h, "write into a zero-sized tensor", |r, b, base| {
        let t = tensor(1, 0, [0, 1, 1, 1], b, base);
        r.call(&set(t, vec![0; 16]));
    });
    expect_closed(&h, "overflowing extents", |r, b, base| {
        let mut t = f32v(1, 4, b, base);
        t.ne = [u32::MAX; 4];
        t.nb = [u32::MAX; 4];
        r.call(&set(t, vec![0; 16]));
    });
    expect_closed(&h, "huge strides on extents > 1", |r, b, base| {
        let mut t = f32v(1, 4, b, base);
        t.ne = [4, 2, 1, 1];
        t.nb = [4, 1 << 31, 4, 4];
        r.call(&Request::GetTensor {
            tensor: t,
            offset: 0,
            size: 4,
        });
    });
    alive(&h);
}

/// llama.cpp #25288: ne[0] not a multiple of the block size.
#[test]
fn partial_blocks_are_refused() {
    let h = server();
    expect_closed(&h, "Q8_0 with ne0 = 33 in SET_TENSOR", |r, b, base| {
        let mut t = tensor(1, 8, [32, 1, 1, 1], b, base);
        t.ne[0] = 33;
        r.call(&set(t, vec![0; 34]));
    });
    expect_closed(&h, "Q8_0 with ne0 = 33 in a graph", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[0].dtype = 8;
        t[0].ne = [33, 1, 1, 1];
        t[0].nb = [34, 34, 34, 34];
        r.call(&compute(n, t));
    });
    expect_closed(&h, "Q4_0 with ne0 = 31 in GET_ALLOC_SIZE", |r, b, base| {
        let mut t = tensor(1, 2, [32, 1, 1, 1], b, base);
        t.ne[0] = 31;
        let reply = r.call(&Request::GetAllocSize {
            device: 0,
            tensor: t,
            srcs: Box::default(),
        });
        assert!(reply.is_none());
    });
    alive(&h);
}

/// llama.cpp #25289 (function pointer in a custom op's params), #25764
/// (ACC/SET strides in params), #25765 (SSM_SCAN): outside the allow-list.
#[test]
fn ops_outside_the_allow_list_are_refused() {
    let h = server();
    for op in [92u32, 93, 94, 95, 5, 33, 77, 101, 0xFFFF] {
        expect_closed(&h, &format!("op {op}"), |r, b, base| {
            let (n, mut t) = add_graph(b, base);
            t[2].op = op;
            t[2].op_params[0] = 0x4141_4141; // "function pointer", low half
            t[2].op_params[1] = 0x7fff;
            t[2].op_params[2] = 0x4242_4242; // "userdata"
            r.call(&compute(n, t));
        });
    }
    expect_closed(&h, "a VIEW escaping its source", |r, b, base| {
        let (_, mut t) = add_graph(b, base);
        let mut v = f32v(4, 4, b, base + 48);
        v.op = 37;
        v.flags = FLAG_COMPUTE;
        v.src[0] = 1;
        v.view_src = 1;
        v.op_params[0] = 48; // offset 48 into a 16-byte source
        t.push(v);
        r.call(&compute(vec![4], t));
    });
    alive(&h);
}

/// llama.cpp #25299 (node id 0) and dangling / cyclic sources.
#[test]
fn bad_node_ids_and_sources_are_refused() {
    let h = server();
    expect_closed(&h, "node id 0", |r, b, base| {
        let (_, t) = add_graph(b, base);
        r.call(&compute(vec![0], t));
    });
    expect_closed(&h, "node not among the tensors", |r, b, base| {
        let (_, t) = add_graph(b, base);
        r.call(&compute(vec![5], t));
    });
    expect_closed(&h, "dangling source", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[2].src[1] = 99;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "self-referencing source", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[2].src[1] = 3;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "source defined after its user", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t.swap(1, 2);
        r.call(&compute(n, t));
    });
    expect_closed(&h, "repeated tensor id", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[1].id = 1;
        r.call(&compute(n, t));
    });
    expect_closed(&h, "dangling view_src", |r, b, base| {
        let (n, mut t) = add_graph(b, base);
        t[2].view_src = 77;
        r.call(&compute(n, t));
    });
    alive(&h);
}

/// GHSA-2phh-px2f-2qmx / #25703: GRAPH_RECOMPUTE after FREE_BUFFER (UAF).
#[test]
fn recompute_after_free_is_refused() {
    let h = server();
    expect_closed(&h, "recompute after free", |r, b, _| {
        // The stored graph recomputes while its buffer lives.
        r.call(&Request::GraphRecompute { device: 0 }).unwrap();
        assert!(!r.closed());
        r.call(&Request::FreeBuffer { buffer: b }).unwrap();
        r.call(&Request::GraphRecompute { device: 0 });
    });
    let mut r = Raw::new(h.addr());
    r.call(&Request::GraphRecompute { device: 0 });
    assert!(r.closed(), "recompute without any graph");
    let mut r = Raw::new(h.addr());
    r.call(&Request::FreeBuffer { buffer: 1 });
    assert!(r.closed(), "free of an unknown handle");
    alive(&h);
}

/// #25765, #26825, #26912: out-of-range GET_ROWS / SET_ROWS indices. The
/// compute fails on the server, which closes the connection; the Tessera
/// client reports it as an error on this and every later call.
#[test]
fn out_of_range_row_indices_are_refused() {
    let h = server();
    for (bad, set_rows) in [(7i32, false), (-1, false), (100, true), (-5, true)] {
        let dev = remote(&h);
        let mut g = Graph::new();
        let table = g.new_tensor(DType::F32, &[4, 4]).unwrap();
        let out = if set_rows {
            let rows = g.new_tensor(DType::F32, &[4, 1]).unwrap();
            let ids = g.new_tensor(DType::I64, &[1]).unwrap();
            (g.set_rows(table, rows, ids).unwrap(), Some((rows, ids)))
        } else {
            let ids = g.new_tensor(DType::I32, &[2]).unwrap();
            (g.get_rows(table, ids).unwrap(), None)
        };
        let mut p = tessera::Placement::new(&g);
        let mut alloc = tessera::GraphAllocator::new(dev.buffer_type());
        alloc.alloc_graph(&g, &mut p).unwrap();
        let ids_id = match out.1 {
            Some((rows, ids)) => {
                p.tensor(&g, rows).unwrap().write_f32(&[9.0; 4]).unwrap();
                p.tensor(&g, ids)
                    .unwrap()
                    .write(0, &i64::from(bad).to_le_bytes())
                    .unwrap();
                ids
            }
            None => {
                let ids = g.nodes()[out.0.index()].srcs[1].unwrap();
                let b: Vec<u8> = [0i32, bad].iter().flat_map(|v| v.to_le_bytes()).collect();
                p.tensor(&g, ids).unwrap().write(0, &b).unwrap();
                ids
            }
        };
        let _ = ids_id;
        let s = dev.new_stream(&tessera::StreamOptions::new()).unwrap();
        assert!(s.compute(&g, &p).is_err(), "index {bad} accepted");
        // Every later call is an error, at once.
        assert!(s.synchronize().is_err());
        assert!(p.tensor(&g, table).unwrap().read_f32().is_err());
        assert!(dev.buffer_type().alloc_buffer(16).is_err());
    }
    alive(&h);
}

/// Resource exhaustion: huge ALLOC_BUFFER is refused with a null handle
/// (the connection stays usable); the per-client total is enforced.
#[test]
fn huge_and_excess_allocations_are_refused() {
    let h = server_with(tessera_rpc::ServerConfig {
        max_client_bytes: 1 << 20,
        ..common::config()
    });
    let mut r = Raw::new(h.addr());
    for size in [u64::MAX, 1 << 62, 1 << 41, (1 << 20) + 1] {
        let reply = r.call(&Request::AllocBuffer { device: 0, size }).unwrap();
        assert_eq!(reply, vec![0; 16], "{size} bytes granted");
    }
    let (a, _) = r.alloc(600 << 10);
    let reply = r
        .call(&Request::AllocBuffer {
            device: 0,
            size: 600 << 10,
        })
        .unwrap();
    assert_eq!(reply, vec![0; 16], "per-client total not enforced");
    r.call(&Request::FreeBuffer { buffer: a }).unwrap();
    r.alloc(600 << 10);
    // The number of buffers is bounded too (empty ones included).
    let h2 = server_with(tessera_rpc::ServerConfig {
        max_buffers: 3,
        ..common::config()
    });
    let mut r2 = Raw::new(h2.addr());
    for _ in 0..3 {
        r2.alloc(0);
    }
    let reply = r2
        .call(&Request::AllocBuffer { device: 0, size: 0 })
        .unwrap();
    assert_eq!(reply, vec![0; 16], "buffer count not enforced");
    // A device that does not exist.
    r.call(&Request::AllocBuffer {
        device: 7,
        size: 16,
    });
    assert!(r.closed());
    alive(&h);
}

/// Attacker-controlled message lengths and truncated or unknown messages.
#[test]
fn huge_truncated_and_unknown_messages_are_refused() {
    let h = server_with(tessera_rpc::ServerConfig {
        max_message_bytes: 1 << 20,
        ..common::config()
    });
    // 2^64 - 1 bytes announced, 9 sent.
    let mut r = Raw::new(h.addr());
    r.send_bytes(&[6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    assert!(r.closed());
    // Just over the limit.
    let mut r = Raw::new(h.addr());
    let mut f = vec![GRAPH_COMPUTE];
    f.extend_from_slice(&((1u64 << 20) + 1).to_le_bytes());
    r.send_bytes(&f);
    assert!(r.closed());
    // Counts bigger than the payload.
    let mut r = Raw::new(h.addr());
    let mut p = vec![0u8; 4];
    p.extend_from_slice(&u32::MAX.to_le_bytes());
    r.send(GRAPH_COMPUTE, &p);
    assert!(r.closed());
    // Every fixed-size request one byte short, or one byte long.
    for req in [
        Request::AllocBuffer { device: 0, size: 8 },
        Request::GetAlignment { device: 0 },
        Request::BufferGetBase { buffer: 1 },
        Request::BufferClear {
            buffer: 1,
            value: 0,
        },
        Request::GetTensor {
            tensor: f32v(1, 4, 1, 1 << 40),
            offset: 0,
            size: 4,
        },
        Request::GraphRecompute { device: 0 },
        Request::DeviceCount,
    ] {
        let p = req.encode();
        for bad in [p.len().wrapping_sub(1), p.len() + 1] {
            if bad > p.len() + 1 {
                continue;
            }
            let mut r = Raw::new(h.addr());
            let mut q = p.clone();
            q.resize(bad, 0);
            r.send(req.cmd() as u8, &q);
            assert!(r.closed(), "{:?} of {bad} bytes accepted", req.cmd());
        }
    }
    // Not starting with HELLO, HELLO of the wrong size, unknown commands.
    let mut r = Raw::bare(h.addr());
    r.send(15, &[]);
    assert!(r.reply().is_none());
    let mut r = Raw::bare(h.addr());
    r.send(14, &[0; 23]);
    assert!(r.reply().is_none());
    for cmd in [18u8, 19, 200, 255] {
        let mut r = Raw::new(h.addr());
        r.send(cmd, &[]);
        assert!(r.closed(), "command {cmd} accepted");
    }
    // A frame cut in the middle, then the peer goes away.
    let mut r = Raw::new(h.addr());
    let mut f = vec![6u8];
    f.extend_from_slice(&1000u64.to_le_bytes());
    f.extend_from_slice(&[0; 100]);
    r.send_bytes(&f);
    r.s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(r.reply().is_none());
    alive(&h);
}
