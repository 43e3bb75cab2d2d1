//! The server's tensor cache, seeded by the operator and read-only to
//! clients: what SET_TENSOR_HASH finds.
//!
//! A ggml-rpc client offers a large write (over [`HASH_THRESHOLD`]) by the
//! FNV-1a 64 hash of its bytes first; a server that has bytes under that
//! hash writes them itself and the weights never cross the network.
//! Upstream's server fills its cache from what clients send (`-c`): any
//! client can then fill the disk, and, FNV-1a not being collision-resistant,
//! plant bytes under the hash of another client's weights. Here only the
//! operator fills the cache, from files it trusts (`tessera rpc-server
//! --cache-gguf model.gguf`: each tensor of the file over the threshold);
//! a client can only read back bytes the operator already serves. A hash
//! that is not there, or whose bytes do not fit the tensor, answers "not
//! found" and the client sends the bytes.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tessera::{Error, Result};

use crate::proto::{HASH_THRESHOLD, fnv1a64};

/// Bytes a cache entry points into (e.g. a memory-mapped model file).
pub type Source = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Tensor bytes by FNV-1a 64 hash.
#[derive(Default)]
pub struct TensorCache {
    sources: Vec<Source>,
    /// hash → (source, byte range).
    index: HashMap<u64, (usize, usize, usize)>,
    bytes: usize,
}

impl fmt::Debug for TensorCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TensorCache({} entries, {} bytes)",
            self.index.len(),
            self.bytes
        )
    }
}

impl TensorCache {
    /// An empty cache.
    pub fn new() -> TensorCache {
        TensorCache::default()
    }

    /// Index the byte ranges `(offset, len)` of `source` longer than
    /// [`HASH_THRESHOLD`] (what clients offer by hash); returns how many were
    /// added. A range outside `source` is an error.
    pub fn add(&mut self, source: Source, ranges: &[(usize, usize)]) -> Result<usize> {
        let bytes = (*source).as_ref();
        // Every range checked before any is indexed.
        for &(offset, len) in ranges {
            if offset.checked_add(len).is_none_or(|e| e > bytes.len()) {
                return Err(Error::OutOfBounds(format!(
                    "cache range {offset}+{len} outside its source of {} bytes",
                    bytes.len()
                )));
            }
        }
        let mut added = 0;
        for &(offset, len) in ranges {
            if len <= HASH_THRESHOLD {
                continue;
            }
            let hash = fnv1a64(&bytes[offset..offset + len]);
            // The first bytes seen under a hash stay (a second file with
            // the same tensor adds nothing).
            if let std::collections::hash_map::Entry::Vacant(e) = self.index.entry(hash) {
                e.insert((self.sources.len(), offset, len));
                self.bytes += len;
                added += 1;
            }
        }
        if added > 0 {
            self.sources.push(source);
        }
        Ok(added)
    }

    /// The bytes cached under `hash`.
    pub fn get(&self, hash: u64) -> Option<&[u8]> {
        let &(s, offset, len) = self.index.get(&hash)?;
        (**self.sources.get(s)?).as_ref().get(offset..offset + len)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No entries?
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of all entries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn indexes_large_ranges_by_their_hash() {
        let n = HASH_THRESHOLD + 100;
        let data: Vec<u8> = (0..2 * n + 10).map(|i| (i * 31 % 251) as u8).collect();
        let src: Source = Arc::new(data.clone());
        let mut c = TensorCache::new();
        // Two large ranges, one small (not indexed).
        let added = c.add(src.clone(), &[(0, n), (n, n), (2 * n, 10)]).unwrap();
        assert_eq!(added, 2);
        assert_eq!(c.bytes(), 2 * n);
        assert_eq!(c.get(fnv1a64(&data[n..2 * n])), Some(&data[n..2 * n]));
        assert_eq!(c.get(fnv1a64(&data[2 * n..])), None);
        assert!(c.add(src.clone(), &[(2 * n, n)]).is_err());
        // The same tensor again (another file): nothing added, still found.
        assert_eq!(c.add(src, &[(n, n)]).unwrap(), 0);
        assert_eq!(c.get(fnv1a64(&data[n..2 * n])), Some(&data[n..2 * n]));
    }
}
