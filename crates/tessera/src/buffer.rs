//! Buffer types and buffers: where tensor bytes live.
//!
//! A [`BufferType`] is an allocator kind (ggml's `ggml_backend_buffer_type`):
//! "CPU", a GPU's device memory, a GPU's pinned host memory. A [`Buffer`] is one
//! allocation from it (ggml's `ggml_backend_buffer`). Tensors are *placed* in a
//! buffer at a byte offset; the buffer moves bytes in and out. Optional methods
//! are default methods carrying ggml's documented fallbacks.
//!
//! Buffers are device memory: calls on one buffer from several threads are
//! memory-safe. Host memory is reached only through a [`HostRegion`], which
//! only `unsafe` code can vouch for and whose lock orders every access (see
//! [`crate::host_region`]), so no sequence of safe calls races on it. The
//! *order* of accesses from several threads or streams is still yours to
//! choose: order them with [`crate::Stream::synchronize`] or events, as with
//! any device memory.
//!
//! # Copying
//!
//! Users copy with [`crate::Tensor::copy_to`] (blocking, whole tensors),
//! [`copy_between`] (blocking, byte ranges of any two buffers) or
//! [`crate::copy_async`] (queued on streams). [`Buffer::copy_from`] and
//! [`crate::Stream::copy_from_async`] are *hooks* for device implementers:
//! they answer [`Copied::Done`] or [`Copied::Fallback`], and the user-facing
//! functions take the fallback path.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::device::Device;
use crate::host_region::{HostRegion, copy_regions};
use crate::{Error, Layout, Result};

/// What a copy hook ([`Buffer::copy_from`], [`crate::Stream::copy_from_async`])
/// did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copied {
    /// The copy is done (or queued, for a stream).
    Done,
    /// This implementation cannot do it; the caller takes the fallback path.
    Fallback,
}

/// What a buffer holds; drives placement decisions (ggml's `ggml_backend_buffer_usage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BufferUsage {
    /// Unspecified.
    #[default]
    Any,
    /// Model weights: ops that read them prefer their device.
    Weights,
    /// Compute intermediates planned by the graph allocator.
    Compute,
}

/// An allocator kind (ggml's buffer type).
pub trait BufferType: Send + Sync + Debug {
    /// Name, e.g. `CPU`.
    fn name(&self) -> &str;

    /// Allocate `size` bytes. A size of 0 gives an empty buffer without
    /// touching the device (ggml's dummy buffer). Fails with
    /// [`Error::OutOfMemory`] naming the buffer type and size if `size`
    /// exceeds [`BufferType::max_size`] or the memory available.
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>>;

    /// Required alignment of tensor offsets, in bytes (a power of two).
    fn alignment(&self) -> usize;

    /// Largest single allocation. Default: unlimited.
    fn max_size(&self) -> usize {
        usize::MAX
    }

    /// Bytes a tensor of `layout` needs in this buffer type (padding
    /// included); at least `layout.nbytes()`. Default: `nbytes`.
    fn alloc_size(&self, layout: &Layout) -> usize {
        layout.nbytes()
    }

    /// The memory is host memory with the standard layout (the CPU can read
    /// it directly). Default: false.
    fn is_host(&self) -> bool {
        false
    }

    /// For an extra buffer type that stores weights in a layout of its own
    /// (ggml's repacked CPU buffer types, [`Device::extra_buffer_types`]):
    /// would a tensor of `layout` be stored repacked, so that the ops whose
    /// weights (operand 0 of MUL_MAT) it is run faster from here? Such a
    /// buffer type's buffers still read and write the standard layout
    /// through [`Buffer`]'s methods; only its device's kernels see the
    /// other one, and only MUL_MAT's weights may be read there. Default:
    /// false.
    fn repacks(&self, layout: &Layout) -> bool {
        let _ = layout;
        false
    }

    /// The device that owns this buffer type, if any.
    fn device(&self) -> Option<Arc<dyn Device>>;

    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}

/// Two buffer types are the same allocator (pointer identity, like ggml).
pub fn same_buffer_type(a: &dyn BufferType, b: &dyn BufferType) -> bool {
    std::ptr::addr_eq(a as *const dyn BufferType, b as *const dyn BufferType)
}

/// One allocation (ggml's buffer). Offsets are bytes from the buffer start.
pub trait Buffer: Send + Sync + Debug {
    /// The buffer type that allocated it.
    fn buffer_type(&self) -> Arc<dyn BufferType>;

    /// Name (usually the buffer type's).
    fn name(&self) -> &str;

    /// Size in bytes.
    fn size(&self) -> usize;

    /// The buffer's bytes as host memory the CPU can address directly, for
    /// host buffers; `None` for device memory and for empty buffers. Only
    /// `unsafe` code can make a region ([`HostRegion::new`] states what it
    /// promises); a safe implementation may forward the region of a buffer
    /// it owns.
    fn host_region(&self) -> Option<HostRegion<'_>> {
        None
    }

    /// Host memory with the standard layout (default: the buffer type's answer).
    fn is_host(&self) -> bool {
        self.buffer_type().is_host()
    }

    /// Writes are allowed (false for a read-only mapping of a file). Devices
    /// check it before placing a result here. Default: true.
    fn is_writable(&self) -> bool {
        true
    }

    /// Per-tensor setup when a tensor is placed at `offset` (ggml's
    /// `init_tensor`). Default: nothing to do.
    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        let _ = (layout, offset);
        Ok(())
    }

    /// Copy `data` into the buffer at `offset` (blocking).
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;

    /// Copy `out.len()` bytes at `offset` into `out` (blocking).
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;

    /// Set `len` bytes at `offset` to `value` (blocking).
    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()>;

    /// Strided write: `n` pieces of `piece` bytes, piece `i` from
    /// `data[i * data_stride..]` to `offset + i * buffer_stride`. Every
    /// piece must fit on both sides and the pieces written must not overlap
    /// (`buffer_stride >= piece` when `n > 1`), else an error before any
    /// byte moves. Default: `n` calls to [`Buffer::write`].
    fn write_2d(
        &self,
        offset: usize,
        data: &[u8],
        piece: usize,
        n: usize,
        buffer_stride: usize,
        data_stride: usize,
    ) -> Result<()> {
        let shape = (piece, n, buffer_stride, data_stride);
        if !check_2d(self.name(), self.size(), offset, data.len(), shape, true)? {
            return Ok(());
        }
        for i in 0..n {
            let src = slice_piece(data, i, data_stride, piece)?;
            let off = piece_offset(offset, i, buffer_stride)?;
            self.write(off, src)?;
        }
        Ok(())
    }

    /// Strided read, the inverse of [`Buffer::write_2d`] (the pieces written
    /// into `out` must not overlap: `data_stride >= piece` when `n > 1`).
    /// Default: `n` calls to [`Buffer::read`].
    fn read_2d(
        &self,
        offset: usize,
        out: &mut [u8],
        piece: usize,
        n: usize,
        buffer_stride: usize,
        data_stride: usize,
    ) -> Result<()> {
        let shape = (piece, n, buffer_stride, data_stride);
        if !check_2d(self.name(), self.size(), offset, out.len(), shape, false)? {
            return Ok(());
        }
        for i in 0..n {
            let start = i
                .checked_mul(data_stride)
                .ok_or_else(|| Error::Overflow("read_2d stride".into()))?;
            let end = start
                .checked_add(piece)
                .filter(|&e| e <= out.len())
                .ok_or_else(|| {
                    Error::OutOfBounds(format!("read_2d piece {i} past the host slice"))
                })?;
            let off = piece_offset(offset, i, buffer_stride)?;
            self.read(off, &mut out[start..end])?;
        }
        Ok(())
    }

    /// Hook: copy `len` bytes from `src` at `src_offset` to this buffer at
    /// `dst_offset` without going through the host, if this buffer knows how
    /// (ggml's `cpy_tensor`). [`Copied::Fallback`]: not possible, the caller
    /// ([`copy_between`]) falls back to a staging copy. Both ranges have been
    /// checked by the caller. Default: [`Copied::Fallback`].
    fn copy_from(
        &self,
        dst_offset: usize,
        src: &dyn Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<Copied> {
        let _ = (dst_offset, src, src_offset, len);
        Ok(Copied::Fallback)
    }

    /// Set every byte to `value`.
    fn clear(&self, value: u8) -> Result<()> {
        self.fill(0, self.size(), value)
    }

    /// Forget per-tensor state before tensors are placed again (ggml's
    /// `reset`). Default: nothing.
    fn reset(&self) {}

    /// What the buffer holds.
    fn usage(&self) -> BufferUsage;

    /// Declare what the buffer holds.
    fn set_usage(&self, usage: BufferUsage);

    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
}

/// `Err(OutOfBounds)` unless `offset + len <= size`; names the buffer.
pub fn check_range(name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds(format!(
            "{len} bytes at offset {offset} do not fit in buffer '{name}' of {size} bytes"
        ))),
    }
}

/// A host vector of `len` copies of `value`, allocated fallibly: a size the
/// allocator refuses (or that overflows `isize`) is [`Error::OutOfMemory`]
/// naming `what`, never a panic or an abort. Check sizes that come from a
/// caller against the tensor or buffer *before* calling this.
pub fn try_filled_vec<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| Error::OutOfMemory {
        device: "host".into(),
        requested: len.saturating_mul(std::mem::size_of::<T>()),
        detail: format!("{what}: {e}"),
    })?;
    v.resize(len, value);
    Ok(v)
}

/// [`try_filled_vec`] of `len` zero bytes.
pub fn try_zeroed_vec(len: usize, what: &str) -> Result<Vec<u8>> {
    try_filled_vec(len, 0u8, what)
}

/// Checks a strided copy ([`Buffer::write_2d`], [`Buffer::read_2d`]) of
/// `(piece, n, buffer_stride, data_stride)` between `offset` of a buffer of
/// `size` bytes and a host slice of `host_len` bytes, before any byte moves:
/// the last piece fits on both sides, and the pieces on the written side
/// (the buffer if `writes_buffer`) do not overlap, which also bounds the
/// work by the memory written (a request for `usize::MAX` pieces at one
/// place used to loop for ever). `Ok(false)`: nothing to copy (`n` or
/// `piece` is 0; pieces of nothing still start inside the buffer, as a
/// zero-length write must).
fn check_2d(
    name: &str,
    size: usize,
    offset: usize,
    host_len: usize,
    (piece, n, buffer_stride, data_stride): (usize, usize, usize, usize),
    writes_buffer: bool,
) -> Result<bool> {
    if n == 0 {
        return Ok(false);
    }
    if piece == 0 {
        check_range(name, size, offset, 0)?;
        return Ok(false);
    }
    let last = n - 1;
    let host_end = last
        .checked_mul(data_stride)
        .and_then(|s| s.checked_add(piece));
    if host_end.is_none_or(|e| e > host_len) {
        return Err(Error::OutOfBounds(format!(
            "2-D copy: {n} pieces of {piece} bytes, {data_stride} apart, do not fit in a host slice of {host_len} bytes"
        )));
    }
    let buffer_start = last
        .checked_mul(buffer_stride)
        .and_then(|d| d.checked_add(offset))
        .ok_or_else(|| Error::Overflow("2-D copy offset".into()))?;
    check_range(name, size, buffer_start, piece)?;
    let written = if writes_buffer {
        buffer_stride
    } else {
        data_stride
    };
    if n > 1 && written < piece {
        return Err(Error::InvalidLayout(format!(
            "2-D copy: {n} pieces of {piece} bytes written {written} bytes apart overlap"
        )));
    }
    Ok(true)
}

fn slice_piece(data: &[u8], i: usize, stride: usize, piece: usize) -> Result<&[u8]> {
    let start = i
        .checked_mul(stride)
        .ok_or_else(|| Error::Overflow("2-D copy stride".into()))?;
    start
        .checked_add(piece)
        .and_then(|end| data.get(start..end))
        .ok_or_else(|| Error::OutOfBounds(format!("2-D copy piece {i} past the host slice")))
}

fn piece_offset(offset: usize, i: usize, stride: usize) -> Result<usize> {
    i.checked_mul(stride)
        .and_then(|d| offset.checked_add(d))
        .ok_or_else(|| Error::Overflow("2-D copy offset".into()))
}

/// A [`BufferUsage`] with interior mutability, for buffer implementations.
#[derive(Debug, Default)]
pub struct UsageCell(AtomicU8);

impl UsageCell {
    /// A cell holding `usage`.
    pub fn new(usage: BufferUsage) -> Self {
        let c = UsageCell::default();
        c.set(usage);
        c
    }

    /// Current value.
    pub fn get(&self) -> BufferUsage {
        match self.0.load(Ordering::Relaxed) {
            1 => BufferUsage::Weights,
            2 => BufferUsage::Compute,
            _ => BufferUsage::Any,
        }
    }

    /// Replace the value.
    pub fn set(&self, usage: BufferUsage) {
        let v = match usage {
            BufferUsage::Any => 0,
            BufferUsage::Weights => 1,
            BufferUsage::Compute => 2,
        };
        self.0.store(v, Ordering::Relaxed);
    }
}

/// Largest staging vector of a copy between two non-host buffers: bigger
/// copies go through it piece by piece.
const STAGING_BYTES: usize = 16 << 20;

/// Copy `len` bytes between two buffers of any kinds (ggml's
/// `ggml_backend_tensor_copy` on raw ranges): host to host directly (both
/// regions locked); host source → `dst.write`; host destination →
/// `src.read`; otherwise the destination's [`Buffer::copy_from`] hook;
/// otherwise through a host staging vector of at most 16 MiB at a time.
pub fn copy_between(
    src: &dyn Buffer,
    src_offset: usize,
    dst: &dyn Buffer,
    dst_offset: usize,
    len: usize,
) -> Result<()> {
    check_range(src.name(), src.size(), src_offset, len)?;
    check_range(dst.name(), dst.size(), dst_offset, len)?;
    if len == 0 {
        return Ok(());
    }
    match (src.host_region(), dst.host_region()) {
        (Some(s), Some(d)) => return copy_regions(&s, src_offset, &d, dst_offset, len),
        // One side is host memory: the other side's own read/write moves the
        // bytes, through a staging piece (never a slice over the region's
        // memory, which another thread may be writing).
        (Some(_), None) | (None, Some(_)) => {}
        (None, None) => {
            if dst.copy_from(dst_offset, src, src_offset, len)? == Copied::Done {
                return Ok(());
            }
        }
    }
    let piece = len.min(STAGING_BYTES);
    let mut staging = try_zeroed_vec(piece, "a staging copy between buffers")?;
    let mut done = 0;
    while done < len {
        let n = piece.min(len - done);
        let chunk = &mut staging[..n];
        src.read(src_offset + done, chunk)?;
        dst.write(dst_offset + done, chunk)?;
        done += n;
    }
    Ok(())
}
