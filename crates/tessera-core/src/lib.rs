//! Tessera core: everything about tensors that needs no device.
//!
//! - [`dtype`]: element types with ggml's ids and block sizes;
//! - [`quant`]: ggml-compatible quantization blocks and reference (de)quantizers;
//! - [`layout`]: extents and byte strides;
//! - [`op`]: operations and their typed parameters;
//! - [`graph`]: the data-oriented compute graph, with validating op
//!   constructors (in `build`);
//! - [`error`]: the one error type.
//!
//! Everything here is plain data and pure functions, so a graph can be hashed,
//! copied to another device or sent over the network.

#![forbid(unsafe_code)]

mod build;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod layout;
pub mod op;
pub mod quant;

pub use build::MUL_MAT_WEIGHT_TYPES;
pub use build::cpy_supported;
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Flags, Graph, MAX_SRC, Node, TensorId};
pub use layout::{Layout, MAX_DIMS};
pub use op::{GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};
