//! Tessera remote devices over ggml-rpc.
//!
//! This crate speaks the wire protocol of llama.cpp's `rpc-server`
//! (version 7.0.0, as vendored by `llama-cpp-python` 0.3.36) in both
//! directions: [`Server`] serves local Tessera devices to ggml-rpc clients,
//! and [`connect`] turns a ggml-rpc server into Tessera devices.
//!
//! The server is safe by construction: buffer handles are opaque ids in a
//! per-connection table (never addresses), every tensor description is
//! re-validated with checked arithmetic against its buffer, graphs are
//! rebuilt through Tessera's validating graph constructors from an op
//! allow-list, and every resource a client can claim is bounded. Anything a
//! peer sends ends in an error (a refusal the protocol can express, or a
//! closed connection), never a panic.

#![forbid(unsafe_code)]

pub mod client;
pub mod codec;
pub mod msg;
pub mod ops;
pub mod proto;
pub mod rebuild;
pub mod server;
pub mod session;
pub mod wire_tensor;

pub use client::{ClientOptions, RpcDevice, connect, connect_with, register};
pub use server::{DEFAULT_ENDPOINT, Server, ServerConfig, ServerHandle};
