//! Device-local buffers: the wgpu device's buffer type and its buffers.
//!
//! A buffer is one wgpu storage buffer (`STORAGE | COPY_SRC | COPY_DST`),
//! bound whole by every kernel that uses one of its tensors, so the buffer
//! type's `max_size` is the adapter's largest storage binding (128 MiB on
//! lavapipe): the graph allocator's chunking then keeps every binding within
//! the limit. Tensor offsets are aligned to the adapter's storage offset
//! alignment (at least 16 bytes).
//!
//! `write`, `fill` and `copy_from` are queued on the device's queue and
//! return once queued: every later operation on the device (a read, a
//! compute, a copy) sees their effect, which is all "blocking" can mean for
//! memory only the device can read. `read` waits for the bytes.

use std::any::Any;
use std::sync::{Arc, Weak};

use tessera::buffer::{UsageCell, check_range};
use tessera::{Buffer, BufferType, BufferUsage, Copied, Device, Error, Result};

use crate::device::Core;
use crate::staging;

/// The device-local buffer type of one wgpu device.
#[derive(Debug)]
pub struct WgpuBufferType {
    core: Arc<Core>,
    name: String,
    alignment: usize,
    device: Weak<dyn Device>,
    me: Weak<WgpuBufferType>,
}

impl WgpuBufferType {
    pub(crate) fn new(core: Arc<Core>, alignment: usize, device: Weak<dyn Device>) -> Arc<Self> {
        Arc::new_cyclic(|me| WgpuBufferType {
            name: core.name.clone(),
            core,
            alignment: alignment.next_power_of_two(),
            device,
            me: me.clone(),
        })
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    fn arc(&self) -> Result<Arc<WgpuBufferType>> {
        self.me
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "the buffer type is being dropped"))
    }
}

impl BufferType for WgpuBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let max = self.core.max_buffer;
        if size > max {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: size,
                detail: format!(
                    "larger than the largest buffer (one storage binding) of {max} bytes"
                ),
            });
        }
        let raw = if size == 0 {
            None
        } else {
            // A multiple of 16: kernels may bind it as 16-byte vectors.
            let alloc = size.next_multiple_of(16);
            let what = format!("allocating a buffer of {size} bytes");
            Some(self.core.scoped(&what, size, || {
                self.core.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tessera"),
                    size: alloc as u64,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?)
        };
        Ok(Arc::new(WgpuBuffer {
            core: self.core.clone(),
            buft: self.arc()?,
            raw,
            size,
            usage: UsageCell::new(BufferUsage::Any),
        }))
    }

    fn alignment(&self) -> usize {
        self.alignment
    }

    fn max_size(&self) -> usize {
        self.core.max_buffer
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.upgrade()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One device-local allocation.
#[derive(Debug)]
pub struct WgpuBuffer {
    core: Arc<Core>,
    buft: Arc<WgpuBufferType>,
    raw: Option<wgpu::Buffer>,
    size: usize,
    usage: UsageCell,
}

impl Drop for WgpuBuffer {
    fn drop(&mut self) {
        // The bind groups kept for later computes must not keep it alive.
        if let Some(raw) = &self.raw {
            self.core.binds.forget(raw);
        }
    }
}

impl WgpuBuffer {
    /// The wgpu buffer (`None` for an empty buffer).
    pub fn raw(&self) -> Option<&wgpu::Buffer> {
        self.raw.as_ref()
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The wgpu buffer for `len` bytes at `offset`, after a bounds check.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Result<Option<&wgpu::Buffer>> {
        check_range(&self.buft.name, self.size, offset, len)?;
        self.core.errors.check()?;
        Ok(if len == 0 { None } else { self.raw.as_ref() })
    }

    /// Queue a read of `len` bytes at `offset`.
    pub(crate) fn read_async(&self, offset: usize, len: usize) -> Result<staging::PendingBytes> {
        let raw = self.range(offset, len)?;
        staging::read_async(&self.core, raw, offset, len)
    }
}

impl Buffer for WgpuBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        self.buft.name()
    }

    fn size(&self) -> usize {
        self.size
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        match self.range(offset, data.len())? {
            Some(b) => staging::write(&self.core, b, offset, data),
            None => Ok(()),
        }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return self.range(offset, 0).map(|_| ());
        }
        self.read_async(offset, out.len())?.wait_into(out)
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        match self.range(offset, len)? {
            Some(b) => staging::fill(&self.core, b, offset, len, value),
            None => Ok(()),
        }
    }

    fn copy_from(
        &self,
        dst_offset: usize,
        src: &dyn Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<Copied> {
        let Some(s) = src.as_any().downcast_ref::<WgpuBuffer>() else {
            return Ok(Copied::Fallback);
        };
        if !Arc::ptr_eq(&s.core, &self.core) {
            return Ok(Copied::Fallback);
        }
        let (Some(sb), Some(db)) = (s.range(src_offset, len)?, self.range(dst_offset, len)?) else {
            return Ok(Copied::Done);
        };
        let same = std::ptr::eq(s, self);
        if same && src_offset < dst_offset + len && dst_offset < src_offset + len {
            // Overlapping ranges of one buffer: let the caller stage through the host.
            return Ok(Copied::Fallback);
        }
        let mut batch = crate::batch::Batch::new(&self.core);
        staging::record_copy(&mut batch, &self.core, sb, src_offset, db, dst_offset, len)?;
        batch.submit("copying between buffers")?;
        Ok(Copied::Done)
    }

    fn usage(&self) -> BufferUsage {
        self.usage.get()
    }

    fn set_usage(&self, usage: BufferUsage) {
        self.usage.set(usage);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
