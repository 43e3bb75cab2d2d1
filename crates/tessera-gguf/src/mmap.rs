//! The crate's one unsafe call: a read-only memory map of a GGUF file.
//!
//! The map is private: [`GgufFile`](crate::GgufFile) and the buffers bound
//! over it only ever read it, and [`GgufFile::open`](crate::GgufFile::open)
//! documents the contract the caller keeps (the file is not modified or
//! truncated while mapped).

use std::fs::File;

/// A read-only memory map of a whole file.
pub(crate) struct Mapped(memmap2::Mmap);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Map `file` read-only.
pub(crate) fn map(file: &File) -> std::io::Result<Mapped> {
    // SAFETY: `Mmap::map` is unsafe because another process could modify or
    // truncate the file while it is mapped, changing bytes behind the
    // `&[u8]` this map hands out (undefined behaviour for Rust; truncation
    // raises SIGBUS on access). Tessera never writes through the map (it is
    // read-only and its buffers are read-only), and `GgufFile::open` makes
    // keeping the file unchanged while any `GgufFile`, buffer or tensor over
    // it is alive the caller's documented responsibility — the same contract
    // as llama.cpp's mmap loading.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(file)? };
    Ok(Mapped(map))
}
