//! GGUF, the file format of llama.cpp: read (versions 2 and 3), validate,
//! bind tensors without copying, and write.
//!
//! - [`GgufFile::open`] reads a file and parses it; the `unsafe`
//!   [`GgufFile::open_mapped`] maps it read-only instead (zero copy; its
//!   caller promises the file does not change while mapped);
//!   [`GgufFile::from_bytes`] parses bytes in memory. Every length, count,
//!   offset and shape read from the file is checked before it is used, so a
//!   corrupt or hostile file is an [`Error::Malformed`](tessera::Error) naming
//!   what is wrong and where, never a panic or a huge allocation.
//! - Metadata is typed: [`GgufFile::get`]`::<u32>("llama.block_count")`
//!   (strict about the stored type; see [`FromValue`]).
//! - [`GgufFile::data_buffer`] wraps the data section in one read-only host
//!   buffer (the map itself) and [`GgufFile::tensor_in`] makes a
//!   [`tessera::Tensor`] per GGUF tensor over it.
//! - [`GgufWriter`] builds files, for tests and tools.

// Every module forbids unsafe code except `mmap`, whose one unsafe call
// (`memmap2::Mmap::map`) is allowed locally with its safety contract.
#![deny(unsafe_code)]

mod bind;
mod file;
mod mmap;
mod parse;
mod value;
mod writer;

pub use bind::BoundTensors;
pub use file::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, GgufFile, MAX_ALIGNMENT, TensorInfo};
pub use parse::MAX_ARRAY_DEPTH;
pub use value::{FromValue, Value, ValueType};
pub use writer::GgufWriter;
