//! The operator-seeded tensor cache: a weight the server's cache holds is
//! written by SET_TENSOR_HASH without its bytes crossing the wire (the
//! bytes read back are the cached ones); a miss, or cached bytes that do
//! not fit the tensor, is "not found" and the client sends the bytes; a
//! client cannot add to the cache.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::raw::{Raw, f32v};
use common::{client_options, config, cpu, server_with};
use tessera::BufferUsage;
use tessera_rpc::msg::Request;
use tessera_rpc::proto::{HASH_THRESHOLD, fnv1a64};
use tessera_rpc::{RpcDevice, ServerConfig, TensorCache};

fn weights(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn cached_weights_do_not_cross_the_wire() {
    let n = HASH_THRESHOLD + 4096;
    let cached = weights(n, 1);
    let mut cache = TensorCache::new();
    assert_eq!(cache.add(Arc::new(cached.clone()), &[(0, n)]).unwrap(), 1);
    let h = server_with(ServerConfig {
        cache: Some(Arc::new(cache)),
        ..config()
    });
    let _ = cpu();
    let dev = tessera_rpc::connect_with(&h.addr().to_string(), client_options())
        .unwrap()
        .remove(0);
    let rpc = dev.as_any().downcast_ref::<RpcDevice>().unwrap();
    let buf = dev.buffer_type().alloc_buffer(n).unwrap();
    buf.set_usage(BufferUsage::Weights);
    // A hit: a few hundred bytes sent for 10 MiB written.
    let before = rpc.stats();
    buf.write(0, &cached).unwrap();
    let sent = rpc.stats().since(&before).bytes_sent;
    assert!(sent < 4096, "{sent} bytes sent for a cached weight");
    let mut back = vec![0; n];
    buf.read(0, &mut back).unwrap();
    assert!(back == cached, "the cached bytes were not written");
    // A miss: the bytes follow.
    let other = weights(n, 7);
    let before = rpc.stats();
    buf.write(0, &other).unwrap();
    assert!(rpc.stats().since(&before).bytes_sent >= n as u64);
    buf.read(0, &mut back).unwrap();
    assert!(back == other);
    // The client's write with the cache flag set added nothing: still a miss.
    let mut raw = Raw::new(h.addr());
    let (hb, base) = raw.alloc(n as u64);
    let t = f32v(1, (n / 4) as u32, hb, base);
    let r = raw.call(&Request::SetTensorHash {
        tensor: t.clone(),
        offset: 0,
        hash: fnv1a64(&other),
    });
    assert_eq!(r, Some(vec![0]));
    // Cached bytes that do not fit the tensor: "not found", not a write
    // past it.
    let small = f32v(2, 16, hb, base);
    let r = raw.call(&Request::SetTensorHash {
        tensor: small,
        offset: 0,
        hash: fnv1a64(&cached),
    });
    assert_eq!(r, Some(vec![0]));
    let r = raw.call(&Request::SetTensorHash {
        tensor: t,
        offset: 0,
        hash: fnv1a64(&cached),
    });
    assert_eq!(r, Some(vec![1]));
}
