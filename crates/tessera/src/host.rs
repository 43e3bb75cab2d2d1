//! Host memory buffers: the standard "CPU" buffer type and buffers over
//! memory Tessera does not own (a memory-mapped model file).
//!
//! Any device that reads host memory directly (the CPU device, an integrated
//! GPU, a staging area) can reuse these. Allocation is fallible: a failed
//! `alloc` becomes [`Error::OutOfMemory`] instead of an abort.

use std::alloc::{Layout as AllocLayout, alloc_zeroed, dealloc};
use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use crate::buffer::{Buffer, BufferType, BufferUsage, Copied, UsageCell};
use crate::device::Device;
use crate::host_region::{HostAccessLock, HostRegion, copy_regions};
use crate::{Error, Result};

/// Tensor alignment of host buffers (ggml's `TENSOR_ALIGNMENT` is 32; 64
/// keeps every tensor on its own cache line start and suits AVX-512).
pub const HOST_ALIGNMENT: usize = 64;

/// The host buffer type: aligned, zero-initialised heap memory.
pub struct HostBufferType {
    name: String,
    max_size: usize,
    device: Option<Weak<dyn Device>>,
    me: Weak<HostBufferType>,
}

impl fmt::Debug for HostBufferType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBufferType")
            .field("name", &self.name)
            .field("max_size", &self.max_size)
            .finish()
    }
}

impl HostBufferType {
    /// A host buffer type named `name`, owned by `device` (if any), with
    /// allocations limited to `max_size` bytes (`usize::MAX` for no limit).
    pub fn new(name: &str, max_size: usize, device: Option<Weak<dyn Device>>) -> Arc<Self> {
        Arc::new_cyclic(|me| HostBufferType {
            name: name.to_owned(),
            max_size,
            device,
            me: me.clone(),
        })
    }

    fn arc(&self) -> Result<Arc<dyn BufferType>> {
        self.me
            .upgrade()
            .map(|a| a as Arc<dyn BufferType>)
            .ok_or_else(|| Error::device(&self.name, "buffer type was dropped"))
    }
}

impl BufferType for HostBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        if size > self.max_size {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: size,
                detail: format!(
                    "larger than the buffer type's maximum of {} bytes",
                    self.max_size
                ),
            });
        }
        let mem = HostMemory::alloc(size).map_err(|detail| Error::OutOfMemory {
            device: self.name.clone(),
            requested: size,
            detail,
        })?;
        Ok(Arc::new(HostBuffer::from_memory(mem, self.arc()?)))
    }

    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }

    fn max_size(&self) -> usize {
        self.max_size
    }

    fn is_host(&self) -> bool {
        true
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.as_ref().and_then(Weak::upgrade)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Memory behind a host buffer: owned (aligned heap) or borrowed (kept alive
/// by an owner object, e.g. a memory map), possibly read-only.
pub struct HostMemory {
    ptr: Option<NonNull<u8>>,
    len: usize,
    writable: bool,
    owner: Owner,
}

enum Owner {
    Heap(AllocLayout),
    External(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
    Empty,
}

// SAFETY: HostMemory owns (or keeps alive through `owner`) a plain byte
// allocation; the pointer is never tied to a thread. Data races on the bytes
// are governed by the buffer contract documented in `crate::buffer`.
unsafe impl Send for HostMemory {}
// SAFETY: see `Send`; shared access only hands out the pointer.
unsafe impl Sync for HostMemory {}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMemory")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl HostMemory {
    /// Zeroed heap memory of `len` bytes aligned to [`HOST_ALIGNMENT`]; the
    /// error string says why it failed.
    pub fn alloc(len: usize) -> std::result::Result<Self, String> {
        if len == 0 {
            return Ok(HostMemory {
                ptr: None,
                len: 0,
                writable: true,
                owner: Owner::Empty,
            });
        }
        let layout = AllocLayout::from_size_align(len, HOST_ALIGNMENT)
            .map_err(|e| format!("invalid allocation size: {e}"))?;
        // SAFETY: `layout` has a non-zero size (len > 0 checked above).
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| "the system allocator refused".to_string())?;
        Ok(HostMemory {
            ptr: Some(ptr),
            len,
            writable: true,
            owner: Owner::Heap(layout),
        })
    }

    /// Read-only memory borrowed from `owner` (e.g. an `Arc<memmap2::Mmap>`),
    /// which is kept alive as long as the buffer.
    pub fn borrowed<T: AsRef<[u8]> + Send + Sync + 'static>(owner: T) -> Self {
        // Box first so that owners holding their bytes inline do not move.
        let owner = Box::new(owner);
        let bytes = (*owner).as_ref();
        let (ptr, len) = (NonNull::new(bytes.as_ptr() as *mut u8), bytes.len());
        HostMemory {
            ptr: if len == 0 { None } else { ptr },
            len,
            writable: false,
            owner: Owner::External(owner),
        }
    }

    /// Writable memory borrowed from `owner` (e.g. a `Vec<u8>` or a writable
    /// map), kept alive as long as the buffer.
    pub fn borrowed_mut<T: AsMut<[u8]> + Send + Sync + 'static>(owner: T) -> Self {
        // Box first so that owners holding their bytes inline do not move.
        let mut owner = Box::new(owner);
        let bytes = (*owner).as_mut();
        let (ptr, len) = (NonNull::new(bytes.as_mut_ptr()), bytes.len());
        HostMemory {
            ptr: if len == 0 { None } else { ptr },
            len,
            writable: true,
            owner: Owner::External(owner),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if let (Some(p), Owner::Heap(layout)) = (self.ptr, &self.owner) {
            // SAFETY: `p` came from `alloc_zeroed(layout)` and is freed once.
            unsafe { dealloc(p.as_ptr(), *layout) };
        }
    }
}

/// A buffer of host memory.
#[derive(Debug)]
pub struct HostBuffer {
    mem: HostMemory,
    lock: HostAccessLock,
    buft: Arc<dyn BufferType>,
    usage: UsageCell,
}

impl HostBuffer {
    /// A buffer over `mem` reported as belonging to `buft` (used for buffers
    /// over external memory, ggml's `buffer_from_host_ptr`).
    pub fn from_memory(mem: HostMemory, buft: Arc<dyn BufferType>) -> Self {
        HostBuffer {
            mem,
            lock: HostAccessLock::new(),
            buft,
            usage: UsageCell::default(),
        }
    }

    /// The region, or `Ok(None)` for an empty buffer; a range that does not
    /// fit is an error naming the buffer.
    fn region_for(&self, offset: usize, len: usize) -> Result<Option<HostRegion<'_>>> {
        crate::buffer::check_range(self.name(), self.mem.len, offset, len)?;
        Ok(self.host_region())
    }
}

impl Buffer for HostBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        self.buft.name()
    }

    fn size(&self) -> usize {
        self.mem.len
    }

    fn host_region(&self) -> Option<HostRegion<'_>> {
        let ptr = self.mem.ptr?;
        // SAFETY: `ptr` addresses `mem.len` initialised bytes (zeroed by
        // `HostMemory::alloc`, or the owner's slice) that live, unmoved, as
        // long as `self.mem`, which outlives the borrow of `self`; they are
        // writable iff `mem.writable` (a read-only owner is never written).
        // This buffer touches them only through regions made with
        // `self.lock` (read, write, fill and copy_from below), and nothing
        // else can reach them: the memory is owned or its owner is boxed
        // inside `mem` and never accessed again.
        Some(unsafe { HostRegion::new(ptr, self.mem.len, self.mem.writable, &self.lock) })
    }

    fn is_host(&self) -> bool {
        true
    }

    fn is_writable(&self) -> bool {
        self.mem.writable
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        match self.region_for(offset, data.len())? {
            Some(r) if !data.is_empty() => {
                if !r.is_writable() {
                    return Err(read_only(self.name()));
                }
                r.write(offset, data)
            }
            _ => Ok(()),
        }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        match self.region_for(offset, out.len())? {
            Some(r) => r.read(offset, out),
            None => Ok(()),
        }
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        match self.region_for(offset, len)? {
            Some(r) if len > 0 => {
                if !r.is_writable() {
                    return Err(read_only(self.name()));
                }
                r.fill(offset, len, value)
            }
            _ => Ok(()),
        }
    }

    fn copy_from(
        &self,
        dst_offset: usize,
        src: &dyn Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<Copied> {
        // Only from another host buffer (as ggml's CPU `cpy_tensor`).
        let (Some(s), Some(d)) = (src.host_region(), self.host_region()) else {
            return Ok(Copied::Fallback);
        };
        if !d.is_writable() {
            return Err(read_only(self.name()));
        }
        copy_regions(&s, src_offset, &d, dst_offset, len)?;
        Ok(Copied::Done)
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

fn read_only(name: &str) -> Error {
    Error::unsupported(name, "writes: the buffer maps read-only memory")
}
