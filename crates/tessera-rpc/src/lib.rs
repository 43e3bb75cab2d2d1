//! Tessera remote devices over ggml-rpc.
//!
//! This crate speaks the wire protocol of llama.cpp's `rpc-server`
//! (version 7.0.0, as vendored by `llama-cpp-python` 0.3.36) in both
//! directions: [`Server`] serves local Tessera devices to ggml-rpc clients
//! (llama.cpp's `--rpc HOST:PORT`, or `tessera rpc-server`), and
//! [`connect`] turns a ggml-rpc server (llama.cpp's `ggml-rpc-server` or
//! Tessera's) into Tessera devices the scheduler can use.
//!
//! ```no_run
//! # fn main() -> tessera::Result<()> {
//! // Serve the CPU on loopback.
//! let cpu: std::sync::Arc<dyn tessera::Device> = tessera_cpu::device();
//! let server = tessera_rpc::Server::bind("127.0.0.1:0", vec![cpu], Default::default())?;
//! let handle = server.spawn()?;
//! // Use it as a device.
//! let remote = tessera_rpc::connect(&handle.addr().to_string())?;
//! # let _ = remote; Ok(()) }
//! ```
//!
//! Each connection counts its traffic ([`ConnStats`], from
//! [`RpcDevice::stats`]): bytes each way, requests, and graphs sent whole
//! or run again by reference (GRAPH_RECOMPUTE). `README.md` has the usage
//! with llama.cpp's server, the benchmark and what is not done.
//!
//! # Security model of the server
//!
//! Plain ggml-rpc has no authentication and no encryption: bind loopback
//! (the default endpoint) unless the network is trusted, or use Tessera's
//! opt-in extension, TLS and a pre-shared key ([`secure`]). Within that,
//! the server is safe by construction against everything a client sends:
//!
//! - buffer handles are opaque ids in a per-connection table (never
//!   addresses; a client cannot name another client's buffers); the base
//!   address a client sees is a fake constant per handle;
//! - every `rpc_tensor` is re-validated: known type id, `ne[0]` whole
//!   blocks, sizes with checked arithmetic, its whole span inside its
//!   buffer, no buffer means refused (whatever `data` says);
//! - graphs are rebuilt through Tessera's validating graph constructors
//!   from an op allow-list ([`ops`]), and the rebuilt layout must equal the
//!   wire's; sources must be defined before use (no dangling, self or
//!   cyclic references, no node id 0); views must lie inside their source;
//! - data-dependent indices (GET_ROWS, SET_ROWS, MUL_MAT_ID) are
//!   bounds-checked by Tessera's kernels, and a failed compute closes the
//!   connection instead of aborting;
//! - the graph kept for GRAPH_RECOMPUTE is dropped when a buffer it uses is
//!   freed;
//! - message size, buffer size, buffers and bytes per client, graph size
//!   and connections are bounded ([`ServerConfig`]).
//!
//! Every failure is a refusal the protocol can express (a null buffer
//! handle) or a closed connection, never a crash: no `unsafe`, and no
//! panic on any input (property-tested).
//!
//! # Wire format notes (7.0.0)
//!
//! `rpc_tensor` is packed, 296 bytes, with 32-bit `ne` and `nb` (strides of
//! 4 GiB or more cannot be sent). SET_TENSOR carries a one-byte cache flag
//! between the tensor and the offset. FREE_BUFFER, BUFFER_CLEAR,
//! SET_TENSOR, INIT_TENSOR, MEMSET_TENSOR, GRAPH_COMPUTE and GRAPH_RECOMPUTE
//! have no reply. Graph nodes must carry `GGML_TENSOR_FLAG_COMPUTE` (16):
//! ggml's CPU backend skips nodes without it, and so does this server.

#![forbid(unsafe_code)]

pub mod cache;
pub mod client;
pub mod codec;
pub mod msg;
pub mod ops;
pub mod proto;
pub mod rebuild;
pub mod secure;
pub mod server;
pub mod session;
pub mod wire_tensor;

pub use cache::TensorCache;
pub use client::{
    ClientOptions, ConnStats, RpcDevice, connect, connect_with, register, register_with,
};
pub use secure::{Psk, client_tls, server_tls};
pub use server::{DEFAULT_ENDPOINT, Server, ServerConfig, ServerHandle};
