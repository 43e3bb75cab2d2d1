//! The client side: a ggml-rpc server's devices as Tessera devices
//! (connection, memory, graph serialisation, devices and streams).

pub mod buffer;
pub mod conn;
pub mod device;
pub mod graph;

pub use conn::{ClientOptions, ConnStats};
pub use device::{RpcDevice, RpcStream, connect, connect_with, register, register_with};
