//! Remote memory: the buffer type of a remote device and its buffers,
//! mapped on ALLOC_BUFFER, BUFFER_GET_BASE, SET/GET/MEMSET/COPY_TENSOR,
//! BUFFER_CLEAR and FREE_BUFFER (on drop).
//!
//! Raw byte ranges travel as 1-D `I8` tensors at `base + offset` (the
//! protocol only moves tensors), in pieces of at most [`PIECE`] bytes.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tessera::buffer::{Copied, UsageCell, check_range};
use tessera::{Buffer, BufferType, BufferUsage, Device, Error, Layout, Result};

use crate::client::conn::Conn;
use crate::msg::Request;
use crate::proto::{HASH_THRESHOLD, fnv1a64};
use crate::wire_tensor::{GGML_TYPE_I8, RpcTensor};

/// Largest piece of one SET/GET/MEMSET/COPY request.
pub const PIECE: usize = 64 << 20;

/// The buffer type of one remote device.
#[derive(Debug)]
pub struct RpcBufferType {
    pub(crate) name: String,
    pub(crate) conn: Arc<Conn>,
    pub(crate) device_index: u32,
    pub(crate) alignment: usize,
    pub(crate) max_size: usize,
    pub(crate) device: Weak<dyn Device>,
    pub(crate) me: Weak<RpcBufferType>,
    /// GET_ALLOC_SIZE answers by (type, extents, strides).
    pub(crate) alloc_sizes: Mutex<HashMap<SizeKey, usize>>,
}

/// A layout as a cache key: ggml type, extents, strides.
type SizeKey = (u32, [usize; 4], [usize; 4]);

/// Upstream's rule for asking the server: quantized tensors whose rows are
/// not a multiple of 512 elements (a CUDA server pads them). Everything
/// else is `nbytes`.
fn server_sized(layout: &Layout) -> bool {
    layout.dtype.is_quantized() && !layout.ne[0].is_multiple_of(512)
}

/// `layout` as a wire tensor at `data` of buffer `handle`.
fn layout_tensor(layout: &Layout, handle: u64, data: u64) -> Result<RpcTensor> {
    let mut t = RpcTensor {
        id: 1,
        dtype: layout.dtype.ggml_id(),
        buffer: handle,
        data,
        ..RpcTensor::default()
    };
    for i in 0..4 {
        t.ne[i] = u32::try_from(layout.ne[i]).map_err(|_| Error::Overflow("extent".into()))?;
        t.nb[i] = u32::try_from(layout.nb[i]).map_err(|_| Error::Overflow("stride".into()))?;
    }
    Ok(t)
}

impl BufferType for RpcBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let buft = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "buffer type dropped"))?;
        if size == 0 {
            return Ok(Arc::new(RpcBuffer {
                buft,
                handle: 0,
                base: 0,
                size: 0,
                usage: UsageCell::default(),
            }));
        }
        let r = self.conn.call(&Request::AllocBuffer {
            device: self.device_index,
            size: size as u64,
        })?;
        let handle = u64::from_le_bytes(word(&r, 0)?);
        let remote_size = u64::from_le_bytes(word(&r, 8)?);
        if handle == 0 || remote_size < size as u64 {
            return Err(Error::OutOfMemory {
                device: self.name.clone(),
                requested: size,
                detail: "the server refused the allocation".into(),
            });
        }
        let mut b = RpcBuffer {
            buft,
            handle,
            base: 0,
            size,
            usage: UsageCell::default(),
        };
        b.base = self
            .conn
            .call_u64(&Request::BufferGetBase { buffer: handle })?;
        Ok(Arc::new(b))
    }

    fn alignment(&self) -> usize {
        self.alignment
    }

    fn max_size(&self) -> usize {
        self.max_size
    }

    fn alloc_size(&self, layout: &Layout) -> usize {
        let n = layout.nbytes();
        if !server_sized(layout) {
            return n;
        }
        let key = (layout.dtype.ggml_id(), layout.ne, layout.nb);
        let mut cache = self.alloc_sizes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&s) = cache.get(&key) {
            return s.max(n);
        }
        let asked = layout_tensor(layout, 0, 0).and_then(|tensor| {
            self.conn.call_u64(&Request::GetAllocSize {
                device: self.device_index,
                tensor,
                srcs: Box::default(),
            })
        });
        match asked.ok().and_then(|s| usize::try_from(s).ok()) {
            Some(s) => {
                cache.insert(key, s);
                s.max(n)
            }
            // A lost connection shows on the next allocation.
            None => n,
        }
    }

    fn device(&self) -> Option<Arc<dyn Device>> {
        self.device.upgrade()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn word(r: &[u8], at: usize) -> Result<[u8; 8]> {
    r.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| Error::Malformed("short reply".into()))
}

/// One remote allocation.
#[derive(Debug)]
pub struct RpcBuffer {
    buft: Arc<RpcBufferType>,
    handle: u64,
    base: u64,
    size: usize,
    usage: UsageCell,
}

impl RpcBuffer {
    /// The server's handle for it (0 for an empty buffer).
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The server-side address of byte `offset`.
    pub fn address(&self, offset: usize) -> Result<u64> {
        self.base
            .checked_add(offset as u64)
            .ok_or_else(|| Error::Overflow("remote address".into()))
    }

    /// The connection it lives on.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.buft.conn
    }

    /// `len` raw bytes at `offset` as a wire tensor.
    fn raw(&self, offset: usize, len: usize) -> Result<RpcTensor> {
        let n = u32::try_from(len).map_err(|_| Error::Overflow("piece size".into()))?;
        Ok(RpcTensor {
            id: 1,
            dtype: GGML_TYPE_I8,
            buffer: self.handle,
            ne: [n, 1, 1, 1],
            nb: [1, n, n, n],
            data: self.address(offset)?,
            ..RpcTensor::default()
        })
    }

    fn pieces(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        check_range(&self.buft.name, self.size, offset, len)?;
        let mut done = 0;
        while done < len {
            let n = PIECE.min(len - done);
            f(done, n)?;
            done += n;
        }
        Ok(())
    }
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        if self.handle != 0 {
            self.buft.conn.forget_graphs();
            let _ = self.buft.conn.call(&Request::FreeBuffer {
                buffer: self.handle,
            });
        }
    }
}

impl Buffer for RpcBuffer {
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn name(&self) -> &str {
        &self.buft.name
    }

    fn size(&self) -> usize {
        self.size
    }

    fn init_tensor(&self, layout: &Layout, offset: usize) -> Result<()> {
        if self.handle == 0 || !server_sized(layout) {
            return Ok(());
        }
        let tensor = layout_tensor(layout, self.handle, self.address(offset)?)?;
        self.buft.conn.call(&Request::InitTensor { tensor })?;
        Ok(())
    }

    /// Weights above [`HASH_THRESHOLD`] are first offered by hash
    /// (SET_TENSOR_HASH, per piece): a server with a tensor cache that has
    /// the bytes writes them itself; otherwise they follow with the cache
    /// flag set, as upstream's client does.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let by_hash = self.usage() == BufferUsage::Weights && data.len() > HASH_THRESHOLD;
        self.pieces(offset, data.len(), |at, n| {
            let piece = &data[at..at + n];
            let tensor = self.raw(offset + at, n)?;
            if by_hash {
                let r = self.buft.conn.call(&Request::SetTensorHash {
                    tensor: tensor.clone(),
                    offset: 0,
                    hash: fnv1a64(piece),
                })?;
                if r.first() == Some(&1) {
                    return Ok(());
                }
            }
            self.buft.conn.call(&Request::SetTensor {
                tensor,
                cache_flag: u8::from(by_hash),
                offset: 0,
                data: piece.to_vec(),
            })?;
            Ok(())
        })
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let len = out.len();
        self.pieces(offset, len, |at, n| {
            let r = self.buft.conn.call(&Request::GetTensor {
                tensor: self.raw(offset + at, n)?,
                offset: 0,
                size: n as u64,
            })?;
            out[at..at + n].copy_from_slice(&r);
            Ok(())
        })
    }

    fn fill(&self, offset: usize, len: usize, value: u8) -> Result<()> {
        self.pieces(offset, len, |at, n| {
            self.buft.conn.call(&Request::MemsetTensor {
                tensor: self.raw(offset + at, n)?,
                offset: 0,
                size: n as u64,
                value,
            })?;
            Ok(())
        })
    }

    fn clear(&self, value: u8) -> Result<()> {
        if self.handle == 0 {
            return Ok(());
        }
        self.buft.conn.call(&Request::BufferClear {
            buffer: self.handle,
            value,
        })?;
        Ok(())
    }

    fn copy_from(
        &self,
        dst_offset: usize,
        src: &dyn Buffer,
        src_offset: usize,
        len: usize,
    ) -> Result<Copied> {
        let Some(s) = src.as_any().downcast_ref::<RpcBuffer>() else {
            return Ok(Copied::Fallback);
        };
        if !Arc::ptr_eq(s.conn(), self.conn()) {
            return Ok(Copied::Fallback);
        }
        check_range(src.name(), src.size(), src_offset, len)?;
        self.pieces(dst_offset, len, |at, n| {
            let r = self.buft.conn.call(&Request::CopyTensor {
                src: s.raw(src_offset + at, n)?,
                dst: self.raw(dst_offset + at, n)?,
            })?;
            if r.first() == Some(&1) {
                Ok(())
            } else {
                Err(Error::device(self.name(), "the server refused COPY_TENSOR"))
            }
        })?;
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
