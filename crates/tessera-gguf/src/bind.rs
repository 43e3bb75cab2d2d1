//! Zero-copy tensors: one read-only [`HostBuffer`] over the file's data
//! section (the memory map itself, kept alive by the buffer), one
//! [`Tensor`] per GGUF tensor at its offset.

#![forbid(unsafe_code)]

use std::sync::Arc;

use tessera::{Buffer, BufferType, Error, HostBuffer, HostMemory, Layout, Result, Tensor};

use crate::file::{GgufFile, Storage};

/// The data section of a file, as the owner of a borrowed host buffer.
struct DataSection {
    storage: Storage,
    start: usize,
}

impl AsRef<[u8]> for DataSection {
    fn as_ref(&self) -> &[u8] {
        (*self.storage).as_ref().get(self.start..).unwrap_or(&[])
    }
}

/// The tensors of a file bound over one buffer ([`GgufFile::bind_all`]).
#[derive(Debug)]
pub struct BoundTensors {
    /// The data section's buffer.
    pub buffer: Arc<dyn Buffer>,
    /// Name and tensor, in file order.
    pub tensors: Vec<(String, Tensor)>,
}

impl BoundTensors {
    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

impl GgufFile {
    /// A read-only buffer over the whole data section, reported as belonging
    /// to `buft` (which must be able to use host memory, e.g. the CPU's).
    /// Nothing is copied: the buffer keeps the file's bytes (the memory map)
    /// alive. Tensors at offset [`TensorInfo::offset`](crate::TensorInfo)
    /// in it are the file's tensors; see [`GgufFile::tensor_in`].
    pub fn data_buffer(&self, buft: Arc<dyn BufferType>) -> Arc<dyn Buffer> {
        let owner = DataSection {
            storage: self.storage.clone(),
            start: self.data_offset(),
        };
        Arc::new(HostBuffer::from_memory(HostMemory::borrowed(owner), buft))
    }

    /// Tensor `name` over `buffer`, which must be this file's
    /// [`data_buffer`](GgufFile::data_buffer) (its size is checked).
    pub fn tensor_in(&self, buffer: &Arc<dyn Buffer>, name: &str) -> Result<Tensor> {
        let info = self.tensor_info(name)?;
        let dtype = info.dtype()?;
        let section = self.bytes().len().saturating_sub(self.data_offset());
        if buffer.size() != section {
            return Err(Error::InvalidLayout(format!(
                "buffer '{}' has {} bytes, the data section of this GGUF file {section}",
                buffer.name(),
                buffer.size()
            )));
        }
        let layout = Layout::contiguous(dtype, &info.ne)?;
        let offset = usize::try_from(info.offset)
            .map_err(|_| Error::Overflow(format!("tensor '{name}': offset {}", info.offset)))?;
        Tensor::new(layout, buffer.clone(), offset)
    }

    /// Tensor `name` in a fresh data buffer of type `buft` (see
    /// [`data_buffer`](GgufFile::data_buffer)); to bind several tensors,
    /// make the buffer once and use [`tensor_in`](GgufFile::tensor_in).
    pub fn tensor(&self, name: &str, buft: Arc<dyn BufferType>) -> Result<Tensor> {
        let buffer = self.data_buffer(buft);
        self.tensor_in(&buffer, name)
    }

    /// Every tensor whose type Tessera knows, in file order, over one data
    /// buffer of type `buft`.
    pub fn bind_all(&self, buft: Arc<dyn BufferType>) -> Result<BoundTensors> {
        let buffer = self.data_buffer(buft);
        let tensors = self
            .tensors()
            .iter()
            .filter(|t| t.dtype.is_some())
            .map(|t| Ok((t.name.clone(), self.tensor_in(&buffer, &t.name)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(BoundTensors { buffer, tensors })
    }
}
