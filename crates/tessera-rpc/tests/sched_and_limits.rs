//! The scheduler over [remote device, local CPU], a lost or silent server
//! (errors, never hangs), version checks, the connection limit, and a
//! bounded soak of concurrent clients with a malicious one among them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::Raw;
use common::{THREADS, Val, client_options, cpu, ramp, remote, run, server, server_with};
use tessera::alloc::alloc_tensors;
use tessera::{
    BufferUsage, DType, Device, Graph, Placement, Scheduler, SchedulerOptions, StreamOptions,
    TensorId,
};

struct Small {
    g: Graph,
    x: TensorId,
    w: TensorId,
    bias: TensorId,
    o: TensorId,
    sorted: TensorId,
}

/// `o = silu(W x + bias) * (W x + bias)`, then TOP_K, which Tessera's
/// client does not send (ggml's leaves its indices unordered, Tessera's
/// sorts them): it must run on the CPU.
fn small() -> Small {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[32, 4]).unwrap();
    let w = g.new_tensor(DType::Q8_0, &[32, 16]).unwrap();
    let bias = g.new_tensor(DType::F32, &[16, 4]).unwrap();
    let mm = g.mul_mat(w, x).unwrap();
    let h = g.add(mm, bias).unwrap();
    let s = g.silu(h).unwrap();
    let o = g.mul(s, h).unwrap();
    let sorted = g.top_k(o, 5).unwrap();
    g.set_output(o).unwrap();
    g.set_output(sorted).unwrap();
    Small {
        g,
        x,
        w,
        bias,
        o,
        sorted,
    }
}

fn run_sched(devs: &[Arc<dyn Device>], t: &Small) -> (Vec<u8>, Vec<u8>, usize) {
    let streams = devs
        .iter()
        .map(|d| {
            let o = if d.family_name() == "RPC" {
                StreamOptions::new()
            } else {
                StreamOptions::new().threads(THREADS)
            };
            d.new_stream(&o).unwrap()
        })
        .collect();
    let mut sc = Scheduler::new(streams, SchedulerOptions::default()).unwrap();
    let wdev = &devs[0];
    let mut p = Placement::new(&t.g);
    let layouts = [t.w, t.bias].map(|id| t.g.node(id).unwrap().layout);
    let set = alloc_tensors(&wdev.buffer_type(), &layouts, BufferUsage::Weights).unwrap();
    p.bind(&t.g, t.w, &set.tensors[0]).unwrap();
    p.bind(&t.g, t.bias, &set.tensors[1]).unwrap();
    set.tensors[0].write_f32(&ramp(32 * 16, 0.05)).unwrap();
    set.tensors[1].write_f32(&ramp(16 * 4, 0.1)).unwrap();
    sc.alloc_graph(&t.g, &mut p).unwrap();
    p.tensor(&t.g, t.x)
        .unwrap()
        .write_f32(&ramp(32 * 4, 0.03))
        .unwrap();
    sc.compute(&t.g, &p).unwrap();
    let o = p.tensor(&t.g, t.o).unwrap().to_bytes().unwrap();
    let s = p.tensor(&t.g, t.sorted).unwrap().to_bytes().unwrap();
    (o, s, sc.n_splits())
}

#[test]
fn the_scheduler_splits_between_the_remote_device_and_the_cpu() {
    let h = server();
    let dev = remote(&h);
    let t = small();
    let (o, s, splits) = run_sched(&[dev.clone(), cpu()], &t);
    let (wo, ws, wsplits) = run_sched(&[cpu()], &t);
    assert_eq!(wsplits, 1);
    assert!(splits >= 2, "TOP_K should have moved to the CPU");
    assert_eq!(o, wo, "scheduled remote result differs from the CPU's");
    assert_eq!(s, ws);
    // supports_op is what the wire can carry.
    assert!(dev.supports_op(&t.g, t.o));
    assert!(!dev.supports_op(&t.g, t.sorted));
}

/// A fake server that answers the connection handshake, then runs `after`
/// on the socket.
fn fake_server(
    major: u8,
    after: impl FnOnce(std::net::TcpStream) + Send + 'static,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let reply = |s: &mut std::net::TcpStream, payload: &[u8]| {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).unwrap();
            let n = u64::from_le_bytes(head[1..].try_into().unwrap());
            let mut body = vec![0u8; n as usize];
            s.read_exact(&mut body).unwrap();
            s.write_all(&(payload.len() as u64).to_le_bytes()).unwrap();
            s.write_all(payload).unwrap();
        };
        let mut hello = vec![major, 0, 0, 0];
        hello.extend_from_slice(&[0; 24]);
        reply(&mut s, &hello);
        if major != 7 {
            return;
        }
        reply(&mut s, &1u32.to_le_bytes());
        reply(&mut s, &32u64.to_le_bytes());
        reply(&mut s, &(1u64 << 30).to_le_bytes());
        after(s);
    });
    addr
}

#[test]
fn a_lost_connection_is_an_error_on_every_later_call() {
    let addr = fake_server(7, drop);
    let dev = tessera_rpc::connect_with(&addr.to_string(), client_options())
        .unwrap()
        .remove(0);
    let t0 = Instant::now();
    assert!(dev.buffer_type().alloc_buffer(64).is_err());
    assert!(dev.buffer_type().alloc_buffer(64).is_err());
    let s = dev.new_stream(&StreamOptions::new()).unwrap();
    assert!(s.synchronize().is_err());
    assert_eq!(dev.memory().total, 0);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_silent_server_times_out_instead_of_hanging() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let addr = fake_server(7, move |s| {
        // Hold the socket open, answer nothing.
        let _ = rx.recv_timeout(Duration::from_secs(20));
        drop(s);
    });
    let opts = tessera_rpc::ClientOptions {
        io_timeout: Duration::from_millis(500),
        ..client_options()
    };
    let dev = tessera_rpc::connect_with(&addr.to_string(), opts)
        .unwrap()
        .remove(0);
    let t0 = Instant::now();
    assert!(dev.buffer_type().alloc_buffer(64).is_err());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(dev.buffer_type().alloc_buffer(64).is_err());
    drop(tx);
}

#[test]
fn a_server_of_another_major_version_is_refused() {
    let addr = fake_server(6, drop);
    let err = tessera_rpc::connect_with(&addr.to_string(), client_options()).unwrap_err();
    assert!(err.to_string().contains("6.0.0"), "{err}");
}

#[test]
fn connections_over_the_limit_are_closed() {
    let h = server_with(tessera_rpc::ServerConfig {
        max_connections: 2,
        ..common::config()
    });
    let mut a = Raw::new(h.addr());
    let mut b = Raw::new(h.addr());
    let mut c = Raw::bare(h.addr());
    c.send(14, &[0; 24]);
    assert!(c.reply().is_none(), "a third connection was served");
    assert!(!a.closed() && !b.closed());
    drop(a);
    // Once one closes, a new client is served again.
    let t0 = Instant::now();
    while h.active_connections() > 1 {
        assert!(t0.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut d = Raw::new(h.addr());
    assert!(!d.closed());
    assert!(!b.closed());
}

/// A few clients computing and checking results for about two seconds,
/// with a client sending garbage among them; the server serves them all
/// and ends with no connection left.
#[test]
fn soak_concurrent_clients_on_loopback() {
    let h = server_with(tessera_rpc::ServerConfig {
        max_connections: 16,
        ..common::config()
    });
    let addr = h.addr();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut workers = Vec::new();
    for k in 0..3 {
        workers.push(std::thread::spawn(move || {
            let mut rounds = 0;
            while Instant::now() < deadline {
                let dev = tessera_rpc::connect_with(&addr.to_string(), client_options())
                    .unwrap()
                    .remove(0);
                let mut g = Graph::new();
                let w = g.new_tensor(DType::Q4_0, &[64, 8]).unwrap();
                let x = g.new_tensor(DType::F32, &[64, 3]).unwrap();
                let y = g.mul_mat(w, x).unwrap();
                let z = g.rms_norm(y, 1e-5).unwrap();
                let inputs = [
                    (w, Val::F(ramp(64 * 8, 0.01 * (k + 1) as f32))),
                    (x, Val::F(ramp(64 * 3, 0.1))),
                ];
                let want = run(&cpu(), &g, &inputs, &[z]);
                for _ in 0..3 {
                    assert_eq!(run(&dev, &g, &inputs, &[z]), want);
                }
                rounds += 1;
            }
            rounds
        }));
    }
    let vandal = std::thread::spawn(move || {
        let mut n = 0u64;
        while Instant::now() < deadline {
            let mut r = Raw::new(addr);
            let mut junk = vec![(n % 19) as u8];
            junk.extend_from_slice(&(n * 37 % 700).to_le_bytes());
            junk.extend((0..(n * 37 % 700)).map(|i| (i * n) as u8));
            r.send_bytes(&junk);
            let _ = r.closed();
            n += 1;
        }
        n
    });
    for w in workers {
        assert!(w.join().unwrap() > 0);
    }
    assert!(vandal.join().unwrap() > 0);
    let t0 = Instant::now();
    while h.active_connections() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "connections leaked");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(h.is_running());
}
