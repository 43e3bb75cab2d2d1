//! Planning buffers: tensors placed exactly where a real allocation would
//! put them, in buffers that hold no memory. They answer "how many bytes
//! would this need on that device?" with the allocator's own arithmetic
//! (alignment, per-tensor sizes, maximum buffer size) and let the scheduler
//! plan a graph over weights and caches that are not loaded yet
//! ([`crate::Scheduler::reserve_size`]), which is how a model is fitted to
//! devices before anything is allocated (`--fit`).
//!
//! [`PlanningType::wrap`] gives a buffer type with the real one's rules
//! whose buffers report the *real* buffer type (so the scheduler assigns
//! ops to its device) but own no bytes: reading or writing them is an
//! error, never a silent success.

use std::any::Any;
use std::sync::Arc;

use crate::buffer::UsageCell;
use crate::{Buffer, BufferType, BufferUsage, Device, Error, Layout, Result};

/// A buffer type with the allocation rules of another, allocating nothing.
#[derive(Debug)]
pub struct PlanningType {
    real: Arc<dyn BufferType>,
    name: String,
}

impl PlanningType {
    /// Planning buffers for `real`.
    pub fn wrap(real: Arc<dyn BufferType>) -> Arc<dyn BufferType> {
        let name = format!("{} (planning)", real.name());
        Arc::new(PlanningType { real, name })
    }
}

impl BufferType for PlanningType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        if size > self.real.max_size() {
            return Err(Error::OutOfMemory {
                device: self.real.name().to_string(),
                requested: size,
                detail: format!("more than its largest buffer of {}", self.real.max_size()),
            });
        }
        Ok(Arc::new(PlanningBuffer {
            real: self.real.clone(),
            size,
            usage: UsageCell::new(BufferUsage::Any),
        }))
    }

    fn alignment(&self) -> usize {
        self.real.alignment()
    }

    fn max_size(&self) -> usize {
        self.real.max_size()
    }

    fn alloc_size(&self, layout: &Layout) -> usize {
        self.real.alloc_size(layout)
    }

    fn is_host(&self) -> bool {
        self.real.is_host()
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.real.device()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `size` bytes of a buffer type, planned and not allocated.
#[derive(Debug)]
pub struct PlanningBuffer {
    real: Arc<dyn BufferType>,
    size: usize,
    usage: UsageCell,
}

impl PlanningBuffer {
    fn no_memory(&self) -> Error {
        Error::unsupported(
            self.real.name(),
            format!(
                "a planning buffer of {} bytes holds no memory (it only measures)",
                self.size
            ),
        )
    }
}

impl Buffer for PlanningBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.real.clone()
    }

    fn name(&self) -> &str {
        self.real.name()
    }

    fn size(&self) -> usize {
        self.size
    }

    fn write(&self, _offset: usize, _data: &[u8]) -> Result<()> {
        Err(self.no_memory())
    }

    fn read(&self, _offset: usize, _out: &mut [u8]) -> Result<()> {
        Err(self.no_memory())
    }

    fn fill(&self, _offset: usize, _len: usize, _value: u8) -> Result<()> {
        Err(self.no_memory())
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
