//! The crate's one `unsafe`: a read-only memory map of a GGUF file, behind
//! [`GgufFile::open_mapped`](crate::GgufFile::open_mapped), an `unsafe fn`
//! whose caller promises what no program can check for itself: that the
//! file is not modified or truncated while it is mapped. (A safe
//! `GgufFile::open` reads the file into memory instead.)

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use tessera::Result;

use crate::GgufFile;

/// A read-only memory map of a whole file.
struct Mapped(memmap2::Mmap);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl GgufFile {
    /// Map `path` read-only and parse it: nothing is copied, and the tensors
    /// bound from it ([`GgufFile::data_buffer`]) are views of the map.
    ///
    /// # Safety
    ///
    /// The file must not be modified or truncated, by this process or any
    /// other, while the `GgufFile` or any buffer or tensor made from it is
    /// alive: the map's bytes are read as immutable memory, so a change
    /// behind them is undefined behaviour (and truncation makes the OS
    /// signal the reading process). Tessera itself never writes through the
    /// map. This is the contract of every memory-mapped model loader
    /// (llama.cpp's `mmap` loading included); where it cannot be kept, use
    /// the safe [`GgufFile::open`], which reads the file into memory.
    #[allow(unsafe_code)]
    pub unsafe fn open_mapped(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| crate::file::io_error(path, e))?;
        // SAFETY: `Mmap::map` is unsafe because the file could change while
        // mapped; our caller promised it will not (this function's contract).
        let map =
            unsafe { memmap2::Mmap::map(&file) }.map_err(|e| crate::file::io_error(path, e))?;
        let map = Arc::new(Mapped(map));
        let mut parsed = Self::from_storage(map.clone())?;
        parsed.release = Some(Arc::new(move |offset, len| {
            // A hint: if the OS refuses, the pages simply stay resident.
            // SAFETY: MADV_DONTNEED is "unchecked" in memmap2 because on a
            // private writable mapping it discards the process's changes;
            // this mapping is read-only and never written, so the pages it
            // drops are read again, unchanged, from the file on the next
            // access (whose contents our caller promised do not change).
            let _ = unsafe {
                map.0
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
        }));
        Ok(parsed)
    }
}
