//! The repacked-weights buffer type and its buffers.
//!
//! A [`RepackBuffer`] is host memory whose tensors, once placed
//! ([`Buffer::init_tensor`], which the allocators call), are kept in the
//! layout [`super::packs`] gives them. Every byte that goes in or out
//! through the [`Buffer`] methods is in the file's (ggml's) layout: `write`
//! packs, `read` unpacks (a group at a time, read-modify-write for a range
//! that cuts a group), so uploads, copies to other devices and `Tensor`
//! reads all see the standard bytes. Only the CPU's kernels see the packed
//! ones (the executor asks [`RepackBuffer::packing_of`]); the buffer is not
//! [`Buffer::is_host`] and gives no [`Buffer::host_region`], so nothing
//! else can read its memory as if it had the standard layout.
//!
//! Tensors are remembered for the buffer's life: a tensor placed where
//! another one is packed, overlapping it with another layout, is an error.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tessera::buffer::{UsageCell, check_range, try_zeroed_vec};
use tessera::{
    Buffer, BufferType, BufferUsage, Device, Error, HostBufferType, HostRegion, Layout, Result,
};

use super::{Packing, ROWS, group_bytes, pack_group, packs, unpack_group};

/// Bytes per piece of a fill.
const FILL_PIECE: usize = 1 << 16;

/// The CPU's repacked-weights buffer type (`CPU_REPACK`).
#[derive(Debug)]
pub struct RepackBufferType {
    host: Arc<HostBufferType>,
    device: Option<Weak<dyn Device>>,
    me: Weak<RepackBufferType>,
}

impl RepackBufferType {
    /// The buffer type of `device` (the CPU device).
    pub fn new(device: Option<Weak<dyn Device>>) -> Arc<Self> {
        Arc::new_cyclic(|me| RepackBufferType {
            host: HostBufferType::new("CPU_REPACK", usize::MAX, None),
            device,
            me: me.clone(),
        })
    }
}

impl BufferType for RepackBufferType {
    fn name(&self) -> &str {
        "CPU_REPACK"
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device("CPU_REPACK", "buffer type was dropped"))?;
        Ok(Arc::new(RepackBuffer {
            inner: self.host.alloc_buffer(size)?,
            buft: me,
            tensors: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            usage: UsageCell::new(BufferUsage::Weights),
        }))
    }

    fn alignment(&self) -> usize {
        self.host.alignment()
    }

    fn repacks(&self, layout: &Layout) -> bool {
        packs(layout) != Packing::Standard
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.as_ref().and_then(Weak::upgrade)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A tensor placed in a [`RepackBuffer`].
#[derive(Clone, Copy, Debug)]
struct Placed {
    layout: Layout,
    nbytes: usize,
    packing: Packing,
}

/// One buffer of [`RepackBufferType`].
#[derive(Debug)]
pub struct RepackBuffer {
    /// The memory (a host buffer nobody else sees).
    inner: Arc<dyn Buffer>,
    buft: Arc<RepackBufferType>,
    /// Placed tensors by offset.
    tensors: Mutex<BTreeMap<usize, Placed>>,
    /// Bumped whenever bytes are packed in place (a tensor placed over
    /// bytes the executor may have read as standard): plans remember it.
    generation: AtomicU64,
    usage: UsageCell,
}

impl RepackBuffer {
    /// The memory, for the CPU's executor (which reads packed tensors
    /// through [`RepackBuffer::packing_of`]).
    pub(crate) fn region(&self) -> Option<HostRegion<'_>> {
        self.inner.host_region()
    }

    /// Changes whenever a placed tensor changes how bytes are stored (a
    /// plan resolved before must be made again).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// How the `nbytes` at `offset`, read as `layout`, are stored: packed
    /// for a placed packed tensor or a view of whole groups of its rows,
    /// standard for bytes no packed tensor holds; an error for any other
    /// view of a packed tensor.
    pub fn packing_of(&self, offset: usize, layout: &Layout, nbytes: usize) -> Result<Packing> {
        let end = offset.saturating_add(nbytes);
        let tensors = self.tensors.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(&(at, p)) = Self::packed_in(&tensors, offset, end).first() else {
            return Ok(Packing::Standard);
        };
        let gb = group_bytes(&p.layout);
        let whole_groups = offset >= at
            && (offset - at).is_multiple_of(gb)
            && end <= at + p.nbytes
            && layout.dtype == p.layout.dtype
            && layout.ne[0] == p.layout.ne[0]
            && layout.nb[1] == p.layout.nb[1]
            && layout.ne[1].is_multiple_of(ROWS)
            && (layout == &p.layout || (layout.ne[2] == 1 && layout.ne[3] == 1));
        if !whole_groups {
            return Err(Error::unsupported(
                "CPU_REPACK",
                format!(
                    "bytes {offset}..{end} read as {layout}: the tensor {} at {at} is stored repacked, and only it or whole groups of {ROWS} of its rows can be read by the CPU's kernels",
                    p.layout
                ),
            ));
        }
        Ok(p.packing)
    }

    /// The packed tensors overlapping `offset..end`, in offset order.
    fn packed_in(
        tensors: &BTreeMap<usize, Placed>,
        offset: usize,
        end: usize,
    ) -> Vec<(usize, Placed)> {
        let first = tensors
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&at, _)| at);
        tensors
            .range(first..end)
            .filter(|(at, p)| p.packing != Packing::Standard && **at + p.nbytes > offset)
            .map(|(&at, &p)| (at, p))
            .collect()
    }

    /// Move bytes between the caller's standard layout and the buffer:
    /// `Io::Write` packs `data` in at `offset`, `Io::Read` unpacks into it.
    fn transfer(&self, offset: usize, io: Io<'_>) -> Result<()> {
        let len = io.len();
        check_range(self.name(), self.size(), offset, len)?;
        let end = offset + len;
        let tensors = self.tensors.lock().unwrap_or_else(PoisonError::into_inner);
        let mut io = io;
        let mut pos = offset;
        for (at, p) in Self::packed_in(&tensors, offset, end) {
            if pos < at {
                io.raw(&*self.inner, pos, pos - offset, at - pos)?;
            }
            let gb = group_bytes(&p.layout);
            let row_bytes = p.layout.nb[1];
            let (lo, hi) = (pos.max(at), end.min(at + p.nbytes));
            let mut std = try_zeroed_vec(gb, "a repacked group")?;
            let mut packed = try_zeroed_vec(gb, "a repacked group")?;
            let mut g = at + (lo - at) / gb * gb;
            while g < hi {
                // The part of this group the call covers.
                let (a, b) = (lo.max(g), hi.min(g + gb));
                let whole = a == g && b == g + gb;
                if !(whole && matches!(io, Io::Write(_))) {
                    self.inner.read(g, &mut packed)?;
                    unpack_group(&packed, &mut std, row_bytes);
                }
                match &mut io {
                    Io::Write(data) => {
                        std[a - g..b - g].copy_from_slice(&data[a - offset..b - offset]);
                        pack_group(&std, &mut packed, row_bytes);
                        self.inner.write(g, &packed)?;
                    }
                    Io::Read(out) => {
                        out[a - offset..b - offset].copy_from_slice(&std[a - g..b - g])
                    }
                }
                g += gb;
            }
            pos = hi;
        }
        if pos < end {
            io.raw(&*self.inner, pos, pos - offset, end - pos)?;
        }
        Ok(())
    }
}

/// One direction of [`RepackBuffer::transfer`].
enum Io<'a> {
    Write(&'a [u8]),
    Read(&'a mut [u8]),
}

impl Io<'_> {
    fn len(&self) -> usize {
        match self {
            Io::Write(d) => d.len(),
            Io::Read(o) => o.len(),
        }
    }

    /// Bytes no packed tensor holds: as they are.
    fn raw(&mut self, inner: &dyn Buffer, at: usize, from: usize, n: usize) -> Result<()> {
        match self {
            Io::Write(d) => inner.write(at, &d[from..from + n]),
            Io::Read(o) => inner.read(at, &mut o[from..from + n]),
        }
    }
}

impl Buffer for RepackBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        "CPU_REPACK"
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        let nbytes = layout.checked_nbytes()?;
        check_range(self.name(), self.size(), offset, nbytes)?;
        if nbytes == 0 {
            // No bytes: nothing to keep in any layout.
            return Ok(());
        }
        let packing = packs(layout);
        let end = offset + nbytes;
        let mut tensors = self.tensors.lock().unwrap_or_else(PoisonError::into_inner);
        // Every placed tensor overlapping the new one (all of them before
        // `end`: a long tensor far before can reach past later short ones).
        for (&at, p) in tensors.range(..end) {
            if at + p.nbytes <= offset {
                continue;
            }
            if at == offset && p.layout == *layout {
                return Ok(());
            }
            if p.packing != Packing::Standard || packing != Packing::Standard {
                return Err(Error::InvalidLayout(format!(
                    "CPU_REPACK: a {layout} at {offset} overlaps the {} at {at}, and one of them is stored repacked",
                    p.layout
                )));
            }
        }
        if packing == Packing::Standard && tensors.contains_key(&offset) {
            // Another standard tensor at this offset: its bytes are read as
            // they are either way.
            return Ok(());
        }
        if packing != Packing::Standard {
            // Bytes written before the tensor was placed were in the
            // standard layout: pack them where they are.
            let gb = group_bytes(layout);
            let mut std = try_zeroed_vec(gb, "a repacked group")?;
            let mut packed = try_zeroed_vec(gb, "a repacked group")?;
            for g in (offset..end).step_by(gb) {
                self.inner.read(g, &mut std)?;
                pack_group(&std, &mut packed, layout.nb[1]);
                self.inner.write(g, &packed)?;
            }
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        tensors.insert(
            offset,
            Placed {
                layout: *layout,
                nbytes,
                packing,
            },
        );
        Ok(())
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.transfer(offset, Io::Write(data))
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.transfer(offset, Io::Read(out))
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        check_range(self.name(), self.size(), offset, len)?;
        let piece = vec![value; len.min(FILL_PIECE)];
        let mut done = 0;
        while done < len {
            let n = piece.len().min(len - done);
            self.write(offset + done, &piece[..n])?;
            done += n;
        }
        Ok(())
    }

    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
