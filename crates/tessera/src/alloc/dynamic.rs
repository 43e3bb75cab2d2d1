//! The address planner of the graph allocator (ggml's `ggml_dyn_tallocr`).
//!
//! It hands out *virtual* addresses `{chunk, offset}` without touching any
//! memory: the graph allocator runs it over a whole graph, then allocates one
//! buffer per chunk, sized to the chunk's high-water mark. Chunks exist
//! because devices limit the size of one allocation (Vulkan's
//! `maxBufferSize`): a chunk holds at most the buffer type's maximum size,
//! except the last of [`MAX_CHUNKS`], which is unbounded (its buffer then
//! fails to allocate with an out-of-memory error if the device refuses).
//!
//! Per chunk, free space is a list of blocks sorted by offset. Allocation is
//! best fit (ggml's algorithm): the smallest free block that fits among every
//! chunk's blocks *except* each chunk's last block; failing that, a chunk's
//! last block (which may grow the chunk), preferring one that fits within
//! the chunk's current high-water mark with the least waste, else the one
//! that grows it least; failing that, a new chunk. Freeing merges with the
//! neighbouring blocks.
//!
//! Two deliberate differences from ggml: the best fit of the first step is
//! global over all chunks (ggml keeps the best block of the *last* chunk
//! that has a fit, an artefact of a per-chunk running minimum; a single chunk
//! behaves identically), and the free list is not capped at 256 blocks
//! (ggml aborts there). A tensor larger than the maximum chunk size is an
//! error naming it, where ggml silently opens an oversized chunk.

use crate::{Error, Result};

use super::pad;

/// Most chunks (buffers) per buffer type (ggml's `GGML_VBUFFER_MAX_CHUNKS`).
pub const MAX_CHUNKS: usize = 16;

/// Largest chunk the planner reasons about; keeps all sums far from overflow
/// (ggml clamps the same way).
const UNBOUNDED: usize = usize::MAX / 2;

/// A planned address: chunk index and byte offset in that chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VirtualAddress {
    /// Which chunk (buffer) of the buffer type.
    pub chunk: usize,
    /// Byte offset in the chunk.
    pub offset: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FreeBlock {
    offset: usize,
    size: usize,
}

impl FreeBlock {
    fn end(&self) -> usize {
        self.offset + self.size
    }
}

#[derive(Clone, Debug)]
struct Chunk {
    /// Free blocks sorted by offset, never overlapping or touching.
    free: Vec<FreeBlock>,
    /// High-water mark: one past the last byte ever handed out.
    max_size: usize,
}

/// A best-fit planner of virtual addresses over up to [`MAX_CHUNKS`] chunks.
#[derive(Clone, Debug)]
pub struct DynamicAllocator {
    name: String,
    alignment: usize,
    max_chunk_size: usize,
    chunks: Vec<Chunk>,
}

impl DynamicAllocator {
    /// A planner for buffer type `name`: sizes are padded to `alignment` (a
    /// power of two) and a chunk holds at most `max_chunk_size` bytes.
    pub fn new(name: &str, alignment: usize, max_chunk_size: usize) -> Result<Self> {
        if !alignment.is_power_of_two() {
            return Err(Error::device(
                name,
                format!("alignment {alignment} is not a power of two"),
            ));
        }
        Ok(DynamicAllocator {
            name: name.to_owned(),
            alignment,
            max_chunk_size: max_chunk_size.min(UNBOUNDED),
            chunks: Vec::new(),
        })
    }

    /// The alignment every size is padded to.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Forget every allocation and chunk.
    pub fn reset(&mut self) {
        self.chunks.clear();
    }

    /// Number of chunks opened so far.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The high-water mark of each chunk: the size its buffer needs.
    pub fn chunk_sizes(&self) -> Vec<usize> {
        self.chunks.iter().map(|c| c.max_size).collect()
    }

    /// Sum of [`DynamicAllocator::chunk_sizes`].
    pub fn total_size(&self) -> usize {
        self.chunks.iter().map(|c| c.max_size).sum()
    }

    /// Plan `size` bytes (padded to the alignment) for the tensor that
    /// `what` names (called only to build an error message).
    pub fn alloc(&mut self, size: usize, what: impl FnOnce() -> String) -> Result<VirtualAddress> {
        let size = pad(size, self.alignment)?;
        if size > self.max_chunk_size {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: size,
                detail: format!(
                    "tensor {} is larger than the largest allocation of {} bytes",
                    what(),
                    self.max_chunk_size
                ),
            });
        }
        let (c, i) = match self
            .best_inner_block(size)
            .or_else(|| self.best_last_block(size))
        {
            Some(found) => found,
            None => (self.new_chunk(size, what)?, 0),
        };
        let chunk = self.chunks.get_mut(c).ok_or_else(|| internal("chunk"))?;
        let block = chunk
            .free
            .get_mut(i)
            .ok_or_else(|| internal("free block"))?;
        let addr = VirtualAddress {
            chunk: c,
            offset: block.offset,
        };
        block.offset += size;
        block.size -= size;
        if block.size == 0 {
            chunk.free.remove(i);
        }
        chunk.max_size = chunk.max_size.max(addr.offset + size);
        Ok(addr)
    }

    /// Return `size` bytes (padded to the alignment) at `addr` to the free
    /// list, merging with adjacent free blocks.
    ///
    /// The range must have been handed out and not freed since: a range in
    /// an unknown chunk, past the chunk's high-water mark, or overlapping
    /// free space (a double free) is [`Error::OutOfBounds`], and the planner
    /// is left unchanged.
    pub fn free(&mut self, addr: VirtualAddress, size: usize) -> Result<()> {
        let size = pad(size, self.alignment)?;
        if size == 0 {
            return Ok(());
        }
        let name = &self.name;
        let fail = |why: String| {
            Error::OutOfBounds(format!(
                "{name}: freeing {size} bytes at offset {} of chunk {}: {why}",
                addr.offset, addr.chunk
            ))
        };
        let n_chunks = self.chunks.len();
        let chunk = self
            .chunks
            .get_mut(addr.chunk)
            .ok_or_else(|| fail(format!("there are {n_chunks} chunks")))?;
        let end = addr
            .offset
            .checked_add(size)
            .filter(|&e| e <= chunk.max_size)
            .ok_or_else(|| {
                fail(format!(
                    "past the chunk's high-water mark of {} bytes",
                    chunk.max_size
                ))
            })?;
        let free = &mut chunk.free;
        // Blocks are sorted and disjoint: only the last block starting before
        // the range and the first starting at or after it can overlap it.
        let pos = free.partition_point(|b| b.offset < addr.offset);
        let prev = pos.checked_sub(1).and_then(|i| free.get(i)).copied();
        let next = free.get(pos).copied();
        for b in [prev, next].into_iter().flatten() {
            if b.offset < end && addr.offset < b.end() {
                return Err(fail(format!(
                    "overlaps the free block [{}, {}) (a double free?)",
                    b.offset,
                    b.end()
                )));
            }
        }
        let joins_prev = prev.is_some_and(|b| b.end() == addr.offset);
        let joins_next = next.is_some_and(|b| b.offset == end);
        match (joins_prev, joins_next) {
            (true, true) => {
                let next_size = free.remove(pos).size;
                free[pos - 1].size += size + next_size;
            }
            (true, false) => free[pos - 1].size += size,
            (false, true) => {
                free[pos].offset = addr.offset;
                free[pos].size += size;
            }
            (false, false) => free.insert(
                pos,
                FreeBlock {
                    offset: addr.offset,
                    size,
                },
            ),
        }
        Ok(())
    }

    /// Smallest block that fits, over all chunks, each chunk's last block
    /// excluded; ties go to the later block (as ggml's `<=`).
    fn best_inner_block(&self, size: usize) -> Option<(usize, usize)> {
        let mut best = None;
        let mut best_size = usize::MAX;
        for (c, chunk) in self.chunks.iter().enumerate() {
            let inner = chunk.free.len().saturating_sub(1);
            for (i, block) in chunk.free.iter().enumerate().take(inner) {
                if block.size >= size && block.size <= best_size {
                    best = Some((c, i));
                    best_size = block.size;
                }
            }
        }
        best
    }

    /// The chunk whose last block fits best: within the high-water mark with
    /// the least waste, else growing it least (ggml's `reuse_factor`).
    fn best_last_block(&self, size: usize) -> Option<(usize, usize)> {
        let mut best = None;
        let mut best_reuse = i128::MIN;
        for (c, chunk) in self.chunks.iter().enumerate() {
            let Some(last) = chunk.free.last() else {
                continue;
            };
            // < 0: bytes the chunk must grow by; >= 0: bytes left unused.
            let reuse = chunk.max_size as i128 - last.offset as i128 - size as i128;
            let better_reuse = best_reuse < 0 && reuse > best_reuse;
            let better_fit = reuse >= 0 && reuse < best_reuse;
            if last.size >= size && (better_reuse || better_fit) {
                best = Some((c, chunk.free.len() - 1));
                best_reuse = reuse;
            }
        }
        best
    }

    /// Open a chunk able to hold `size` bytes; the last possible chunk is
    /// unbounded.
    fn new_chunk(&mut self, size: usize, what: impl FnOnce() -> String) -> Result<usize> {
        let n = self.chunks.len();
        if n >= MAX_CHUNKS {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: size,
                detail: format!("tensor {} does not fit in {MAX_CHUNKS} chunks", what()),
            });
        }
        let capacity = if n == MAX_CHUNKS - 1 {
            UNBOUNDED
        } else {
            size.max(self.max_chunk_size)
        };
        self.chunks.push(Chunk {
            free: vec![FreeBlock {
                offset: 0,
                size: capacity,
            }],
            max_size: 0,
        });
        Ok(n)
    }
}

fn internal(what: &str) -> Error {
    Error::device(
        "graph allocator",
        format!("internal error: {what} out of range"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn addr(chunk: usize, offset: usize) -> VirtualAddress {
        VirtualAddress { chunk, offset }
    }

    fn none() -> String {
        "t".into()
    }

    #[test]
    fn pads_and_bumps_then_reuses_freed_space() {
        let mut a = DynamicAllocator::new("X", 32, usize::MAX).unwrap();
        assert_eq!(a.alloc(10, none).unwrap(), addr(0, 0));
        assert_eq!(a.alloc(40, none).unwrap(), addr(0, 32));
        assert_eq!(a.alloc(32, none).unwrap(), addr(0, 96));
        assert_eq!(a.chunk_sizes(), vec![128]);
        a.free(addr(0, 32), 40).unwrap();
        // Best fit: the freed 64-byte hole, not the tail.
        assert_eq!(a.alloc(50, none).unwrap(), addr(0, 32));
        assert_eq!(a.chunk_sizes(), vec![128]);
    }

    #[test]
    fn best_fit_prefers_the_smallest_hole() {
        let mut a = DynamicAllocator::new("X", 1, usize::MAX).unwrap();
        let xs: Vec<_> = [100, 10, 50, 10, 30, 10]
            .iter()
            .map(|&s| a.alloc(s, none).unwrap())
            .collect();
        a.free(xs[0], 100).unwrap();
        a.free(xs[2], 50).unwrap();
        a.free(xs[4], 30).unwrap();
        assert_eq!(a.alloc(40, none).unwrap(), xs[2]);
        assert_eq!(a.alloc(20, none).unwrap(), xs[4]);
        assert_eq!(a.alloc(60, none).unwrap(), xs[0]);
        assert_eq!(a.total_size(), 210);
    }

    #[test]
    fn free_merges_both_neighbours() {
        let mut a = DynamicAllocator::new("X", 1, usize::MAX).unwrap();
        let x = a.alloc(10, none).unwrap();
        let y = a.alloc(20, none).unwrap();
        let z = a.alloc(30, none).unwrap();
        let _w = a.alloc(5, none).unwrap();
        a.free(x, 10).unwrap();
        a.free(z, 30).unwrap();
        a.free(y, 20).unwrap();
        // One hole of 60 at 0 (plus the tail): a 60-byte tensor fits at 0.
        assert_eq!(a.alloc(60, none).unwrap(), addr(0, 0));
        assert_eq!(a.total_size(), 65);
    }

    #[test]
    fn chunks_open_when_full_and_the_last_is_unbounded() {
        let mut a = DynamicAllocator::new("X", 1, 100).unwrap();
        assert_eq!(a.alloc(60, none).unwrap(), addr(0, 0));
        assert_eq!(a.alloc(60, none).unwrap(), addr(1, 0));
        assert_eq!(a.alloc(40, none).unwrap(), addr(0, 60));
        assert_eq!(a.chunk_sizes(), vec![100, 60]);
        let err = a.alloc(101, || "big".into()).unwrap_err();
        assert!(err.to_string().contains("big"), "{err}");
        let mut b = DynamicAllocator::new("X", 1, 10).unwrap();
        for i in 0..MAX_CHUNKS - 1 {
            assert_eq!(b.alloc(10, none).unwrap(), addr(i, 0));
        }
        // The 16th chunk takes everything that follows.
        for k in 0..5 {
            assert_eq!(b.alloc(10, none).unwrap(), addr(MAX_CHUNKS - 1, 10 * k));
        }
        assert_eq!(b.chunk_sizes()[MAX_CHUNKS - 1], 50);
    }

    #[test]
    fn last_block_choice_prefers_no_growth() {
        let mut a = DynamicAllocator::new("X", 1, 100).unwrap();
        let c0 = a.alloc(90, none).unwrap();
        let c1 = a.alloc(50, none).unwrap();
        assert_eq!(c1.chunk, 1);
        a.free(c0, 90).unwrap();
        // Chunk 0's only block [0, 100) is its last block; chunk 0 has a
        // high-water mark of 90, so 80 bytes fit without growth there while
        // chunk 1 would have to grow.
        assert_eq!(a.alloc(80, none).unwrap(), addr(0, 0));
        assert_eq!(a.chunk_sizes(), vec![90, 50]);
        // 30 bytes: chunk 0 has 20 left, chunk 1 grows from 50 to 80.
        assert_eq!(a.alloc(30, none).unwrap(), addr(1, 50));
    }

    #[test]
    fn bad_alignment_and_bad_chunk_are_errors() {
        assert!(DynamicAllocator::new("X", 24, 100).is_err());
        assert!(DynamicAllocator::new("X", 0, 100).is_err());
        let mut a = DynamicAllocator::new("X", 8, 100).unwrap();
        assert!(a.free(addr(3, 0), 8).is_err());
    }

    fn is_oob(r: Result<()>) -> bool {
        matches!(r, Err(Error::OutOfBounds(_)))
    }

    #[test]
    fn a_double_free_is_an_error_and_changes_nothing() {
        let mut a = DynamicAllocator::new("X", 16, usize::MAX).unwrap();
        let x = a.alloc(32, none).unwrap();
        let _keep = a.alloc(16, none).unwrap();
        a.free(x, 32).unwrap();
        let before = format!("{a:?}");
        assert!(is_oob(a.free(x, 32)), "the same block twice");
        assert!(is_oob(a.free(addr(0, 16), 16)), "inside the freed block");
        assert!(is_oob(a.free(addr(0, 16), 32)), "straddling free and used");
        assert_eq!(format!("{a:?}"), before, "a refused free changes nothing");
        // Two live tensors never share memory.
        let y = a.alloc(32, none).unwrap();
        let z = a.alloc(32, none).unwrap();
        assert!(
            y.chunk != z.chunk || y.offset + 32 <= z.offset || z.offset + 32 <= y.offset,
            "{y:?} and {z:?} overlap"
        );
    }

    #[test]
    fn frees_outside_what_was_handed_out_are_errors() {
        let mut a = DynamicAllocator::new("X", 8, 100).unwrap();
        let x = a.alloc(40, none).unwrap();
        let before = format!("{a:?}");
        assert!(is_oob(a.free(addr(1, 0), 8)), "unknown chunk");
        assert!(is_oob(a.free(addr(0, 40), 8)), "past the high-water mark");
        assert!(
            is_oob(a.free(addr(0, 32), 16)),
            "crossing the high-water mark"
        );
        assert!(is_oob(a.free(addr(0, usize::MAX - 4), 8)), "overflowing");
        assert_eq!(format!("{a:?}"), before);
        a.free(x, 40).unwrap();
        assert_eq!(a.alloc(40, none).unwrap(), x);
    }
}
