//! Shared test helpers: a loopback server over the CPU device, a client
//! device for it, and a runner that computes one graph on any device and
//! returns the outputs' bytes.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod model;
pub mod raw;

use std::sync::Arc;
use std::time::Duration;

use tessera::{Device, Graph, GraphAllocator, Placement, StreamOptions, TensorId};
use tessera_rpc::{ClientOptions, Server, ServerConfig, ServerHandle};

/// Threads of every compute, local and remote: the same split of work on
/// both sides, so results must be identical to the bit.
pub const THREADS: usize = 2;

pub fn cpu() -> Arc<dyn Device> {
    tessera_cpu::device()
}

pub fn config() -> ServerConfig {
    ServerConfig {
        threads: Some(THREADS),
        idle_timeout: Some(Duration::from_secs(30)),
        ..ServerConfig::default()
    }
}

/// A server on 127.0.0.1 (any free port) serving the CPU.
pub fn server_with(config: ServerConfig) -> ServerHandle {
    Server::bind("127.0.0.1:0", vec![cpu()], config)
        .unwrap()
        .spawn()
        .unwrap()
}

pub fn server() -> ServerHandle {
    server_with(config())
}

pub fn client_options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(20),
        ..ClientOptions::default()
    }
}

/// The remote CPU of `h` as a device.
pub fn remote(h: &ServerHandle) -> Arc<dyn Device> {
    let mut devs = tessera_rpc::connect_with(&h.addr().to_string(), client_options()).unwrap();
    assert_eq!(devs.len(), 1);
    devs.remove(0)
}

/// Input values: converted to the tensor's type (F), or raw i32 (I).
#[derive(Clone, Debug)]
pub enum Val {
    F(Vec<f32>),
    I(Vec<i32>),
}

pub fn ramp(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * k).collect()
}

/// Compute `g` on `dev` with every tensor allocated in its memory, the
/// inputs set, and return the bytes of `outs`.
pub fn run(
    dev: &Arc<dyn Device>,
    g: &Graph,
    inputs: &[(TensorId, Val)],
    outs: &[TensorId],
) -> Vec<Vec<u8>> {
    let mut p = Placement::new(g);
    let mut alloc = GraphAllocator::new(dev.buffer_type());
    alloc.alloc_graph(g, &mut p).unwrap();
    for (id, v) in inputs {
        let t = p.tensor(g, *id).unwrap();
        match v {
            Val::F(x) => t.write_f32(x).unwrap(),
            Val::I(x) => {
                let b: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                t.write(0, &b).unwrap();
            }
        }
    }
    let opts = if dev.family_name() == "RPC" {
        StreamOptions::new()
    } else {
        StreamOptions::new().threads(THREADS)
    };
    let s = dev.new_stream(&opts).unwrap();
    s.compute(g, &p).unwrap();
    outs.iter()
        .map(|&o| p.tensor(g, o).unwrap().to_bytes().unwrap())
        .collect()
}

/// The graph on the local CPU and on the remote one: identical bytes.
pub fn same_as_local(
    remote: &Arc<dyn Device>,
    g: &Graph,
    inputs: &[(TensorId, Val)],
    outs: &[TensorId],
) {
    let want = run(&cpu(), g, inputs, outs);
    let got = run(remote, g, inputs, outs);
    for (i, (w, r)) in want.iter().zip(&got).enumerate() {
        assert!(!w.is_empty());
        assert!(
            w == r,
            "output {i} differs between the local and the remote CPU"
        );
    }
}
