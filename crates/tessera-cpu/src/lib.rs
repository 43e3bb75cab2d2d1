//! Tessera's CPU device: host memory, a persistent thread pool, and a kernel
//! for every op.
//!
//! - [`CpuDevice`] / [`CpuFamily`]: the device (`CPU`) and its registry entry;
//!   [`register`] adds the family to [`tessera::Registry::global`], and
//!   [`device()`] is the process-wide device;
//! - [`CpuStream`]: a synchronous stream with a thread count, an abort
//!   callback and events ([`CpuEvent`]);
//! - `exec` and `resolve` (private): validate a graph range, resolve every
//!   tensor to a checked pointer, and run the nodes on the (private) thread pool
//!   with a barrier after each;
//! - [`support`]: the exact `supports_op` oracle;
//! - `kernels` (private: they work on raw pointers that only the executor
//!   vouches for): one module per op family, ggml's semantics;
//! - [`isa`]: the instruction set chosen at run time;
//! - [`machine`]: which CPU this is (vendor, microarchitecture);
//! - [`tuning`]: per-machine kernel choices and knobs for benchmarks;
//! - [`repack`]: the `CPU_REPACK` buffer type, weights stored in the
//!   layout the matrix kernels read.
//!
//! The kernels and their raw pointers are not reachable from outside the
//! crate (a safe caller could otherwise hand them a dangling pointer):
//!
//! ```compile_fail
//! // error[E0603]: module `kernels` is private
//! use tessera_cpu::kernels::TensorRef;
//! ```

pub mod device;
pub mod event;
mod exec;
pub mod isa;
#[cfg(test)]
mod kernel_tests;
mod kernels;
pub mod machine;
mod pool;
pub mod repack;
mod resolve;
pub mod stream;
pub mod support;
mod sysinfo;
pub mod tuning;

use std::sync::{Arc, OnceLock};

pub use device::{CpuDevice, CpuFamily};
pub use event::CpuEvent;
pub use exec::OpTime;
pub use stream::CpuStream;

/// The process-wide CPU device.
pub fn device() -> Arc<CpuDevice> {
    static DEVICE: OnceLock<Arc<CpuDevice>> = OnceLock::new();
    DEVICE.get_or_init(CpuDevice::new).clone()
}

/// Add the CPU family (with the process-wide [`device()`]) to
/// [`tessera::Registry::global`]. Calling it again does nothing.
pub fn register() {
    tessera::Registry::global().register(Arc::new(CpuFamily::new(device())));
}
