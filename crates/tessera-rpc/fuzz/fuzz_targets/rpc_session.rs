//! Fuzz target: the server's side of a connection. The input is a sequence
//! of frames `| cmd: u8 | len: u16 le | payload |`, each decoded with
//! `Request::decode` (what the server does with every frame); a request
//! that decodes must re-encode to the same bytes, and is then handled by a
//! server `Session` over the CPU device with small limits, as the server
//! does, until the first error (where the server closes the connection).
//! Every session starts with a 4 KiB buffer (handle 1, at the fake base of
//! handle 1) so that tensors have memory to point into.
//!
//! Any panic, abort, out-of-memory or timeout is a finding.

#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tessera::Device;
use tessera_rpc::ServerConfig;
use tessera_rpc::msg::Request;
use tessera_rpc::session::Session;

fn devices() -> Arc<Vec<Arc<dyn Device>>> {
    static D: OnceLock<Arc<Vec<Arc<dyn Device>>>> = OnceLock::new();
    D.get_or_init(|| {
        let cpu: Arc<dyn Device> = tessera_cpu::device();
        Arc::new(vec![cpu])
    })
    .clone()
}

fn config() -> Arc<ServerConfig> {
    Arc::new(ServerConfig {
        max_connections: 1,
        max_message_bytes: 1 << 16,
        max_buffer_bytes: 1 << 20,
        max_client_bytes: 4 << 20,
        max_buffers: 64,
        max_graph_nodes: 256,
        threads: Some(1),
        idle_timeout: Some(Duration::from_secs(1)),
        verbose: false,
        ..ServerConfig::default()
    })
}

fuzz_target!(|data: &[u8]| {
    let mut s = Session::new(devices(), config());
    if s.handle(Request::AllocBuffer {
        device: 0,
        size: 4096,
    })
    .is_err()
    {
        return;
    }
    let mut rest = data;
    while rest.len() >= 3 {
        let cmd = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]]));
        let end = (3 + len).min(rest.len());
        let payload = &rest[3..end];
        rest = &rest[end..];
        let Ok(req) = Request::decode(cmd, payload) else {
            return;
        };
        assert_eq!(req.cmd() as u8, cmd);
        assert_eq!(req.encode(), payload, "re-encoding differs");
        if s.handle(req).is_err() {
            return;
        }
    }
});
