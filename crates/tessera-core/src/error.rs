//! The one error type of Tessera.
//!
//! Everything a user, a file or a peer can influence returns one of these
//! instead of aborting: bad shapes when a graph is built, out-of-memory when a
//! buffer is allocated, an op a device cannot run, a cancelled compute. Each
//! variant names *what* failed and *where*, so the message alone tells a user
//! what to fix.

/// Result alias used across all Tessera crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every recoverable failure in Tessera.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An op was given operands or parameters it cannot accept (graph build time).
    #[error("{op}: {reason}")]
    InvalidOp {
        /// Op name as ggml spells it (`MUL_MAT`, `ROPE`, ...).
        op: &'static str,
        /// What is wrong, with the offending shapes or values.
        reason: String,
    },
    /// A tensor id made by another graph.
    #[error("tensor id #{id} belongs to another graph")]
    ForeignTensorId {
        /// The id's position.
        id: usize,
    },
    /// A tensor id past the end of the graph it was used with.
    #[error("tensor id {id} is not in this graph (it has {len} tensors)")]
    InvalidTensorId {
        /// The id given.
        id: usize,
        /// Number of tensors in the graph.
        len: usize,
    },
    /// A row length that is not a multiple of the type's block size.
    #[error("{dtype}: a row of {ne0} elements is not a multiple of the block size {block}")]
    BlockSize {
        /// Type name.
        dtype: &'static str,
        /// Row length in elements.
        ne0: usize,
        /// Block size of the type.
        block: usize,
    },
    /// A size computation overflowed (shapes too large, or hostile input).
    #[error("size overflow: {0}")]
    Overflow(String),
    /// A shape, stride or offset that is inconsistent with the memory it describes.
    #[error("invalid layout: {0}")]
    InvalidLayout(String),
    /// An allocation failed: larger than the buffer type allows, or than memory.
    #[error("out of memory on {device}: {requested} bytes requested ({detail})")]
    OutOfMemory {
        /// Device or buffer type name.
        device: String,
        /// Bytes asked for.
        requested: usize,
        /// Why it failed (max size, free memory, allocator).
        detail: String,
    },
    /// An access outside a buffer or tensor.
    #[error("out of bounds: {0}")]
    OutOfBounds(String),
    /// The device cannot do this (op, type, capability).
    #[error("{device} does not support {what}")]
    Unsupported {
        /// Device, stream or buffer type name.
        device: String,
        /// What was asked for.
        what: String,
    },
    /// A tensor that needs memory has none (not bound, not allocated).
    #[error("tensor '{tensor}' (id {id}) has no memory: bind it or allocate the graph first")]
    Unallocated {
        /// Tensor name (may be empty).
        tensor: String,
        /// Tensor id in its graph.
        id: usize,
    },
    /// The compute was cancelled by an abort callback.
    #[error("compute aborted by the abort callback")]
    Aborted,
    /// A device-level failure (driver error, lost device, failed submission).
    #[error("{device}: {message}")]
    Device {
        /// Device name.
        device: String,
        /// What the device reported.
        message: String,
    },
    /// Malformed input data (a file, a fixture, a message from a peer).
    #[error("malformed data: {0}")]
    Malformed(String),
    /// Something looked up by name or type does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Shorthand for [`Error::InvalidOp`].
    pub fn op(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidOp {
            op,
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(device: impl Into<String>, what: impl Into<String>) -> Self {
        Error::Unsupported {
            device: device.into(),
            what: what.into(),
        }
    }

    /// Shorthand for [`Error::Device`].
    pub fn device(device: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Device {
            device: device.into(),
            message: message.into(),
        }
    }
}
