//! One client connection's state on the server, and what each request does
//! to it.
//!
//! Everything a client owns lives here and dies with the connection: its
//! buffers (by opaque handle), its memory total (bounded), its streams and
//! the last graph per device (for GRAPH_RECOMPUTE), which is dropped as soon
//! as a buffer it uses is freed. [`Session::handle`] returns the reply
//! payload, `None` for commands without a reply, or an error, after which
//! the connection is closed (ggml-rpc has no error replies; ALLOC_BUFFER's
//! null handle and COPY_TENSOR's `result = 0` are the only refusals it can
//! express).

use std::collections::HashMap;
use std::sync::Arc;

use tessera::buffer::{copy_between, try_zeroed_vec};
use tessera::{Buffer, Device, Error, Result, Stream, StreamOptions};

use crate::msg::Request;
use crate::proto::{CONN_CAPS_SIZE, PROTO_MAJOR, PROTO_MINOR, PROTO_PATCH};
use crate::rebuild::{BASE_SHIFT, Rebuilt, Resolved, fake_base, rebuild, resolve};
use crate::server::ServerConfig;
use crate::wire_tensor::RpcTensor;

/// The HELLO reply: version 7.0.0, no transport capabilities.
pub fn hello_reply() -> Vec<u8> {
    let mut r = vec![PROTO_MAJOR, PROTO_MINOR, PROTO_PATCH, 0];
    r.extend_from_slice(&[0u8; CONN_CAPS_SIZE]);
    r
}

/// Per-connection state.
#[derive(Debug)]
pub struct Session {
    devices: Arc<Vec<Arc<dyn Device>>>,
    config: Arc<ServerConfig>,
    buffers: HashMap<u64, Arc<dyn Buffer>>,
    next_handle: u64,
    used_bytes: u64,
    streams: Vec<Option<Arc<dyn Stream>>>,
    stored: Vec<Option<Rebuilt>>,
}

impl Session {
    /// A fresh session over `devices`.
    pub fn new(devices: Arc<Vec<Arc<dyn Device>>>, config: Arc<ServerConfig>) -> Self {
        let n = devices.len();
        Session {
            devices,
            config,
            buffers: HashMap::new(),
            next_handle: 1,
            used_bytes: 0,
            streams: vec![None; n],
            stored: (0..n).map(|_| None).collect(),
        }
    }

    /// Bytes of buffers the client holds.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    fn device(&self, d: u32) -> Result<&Arc<dyn Device>> {
        self.devices
            .get(d as usize)
            .ok_or_else(|| Error::Malformed(format!("no device {d}")))
    }

    fn stream(&mut self, d: u32) -> Result<Arc<dyn Stream>> {
        let dev = self.device(d)?.clone();
        let slot = self
            .streams
            .get_mut(d as usize)
            .ok_or_else(|| Error::Malformed(format!("no device {d}")))?;
        if let Some(s) = slot {
            return Ok(s.clone());
        }
        let mut opts = StreamOptions::new();
        if let Some(n) = self.config.threads {
            opts = opts.threads(n);
        }
        let s = dev.new_stream(&opts)?;
        *slot = Some(s.clone());
        Ok(s)
    }

    fn buffer(&self, h: u64) -> Result<Arc<dyn Buffer>> {
        self.buffers
            .get(&h)
            .cloned()
            .ok_or_else(|| Error::Malformed(format!("unknown buffer handle {h:#x}")))
    }

    fn resolve(&self, t: &RpcTensor) -> Result<Resolved> {
        resolve(t, &|h| self.buffers.get(&h).cloned())
    }

    fn alloc(&mut self, device: u32, size: u64) -> Result<Vec<u8>> {
        let dev = self.device(device)?.clone();
        let refused = [0u8; 16].to_vec();
        let total = self.used_bytes.checked_add(size);
        if size > self.config.max_buffer_bytes
            || total.is_none_or(|t| t > self.config.max_client_bytes)
            || self.buffers.len() >= self.config.max_buffers
            || self.next_handle >= 1 << (63 - BASE_SHIFT)
        {
            return Ok(refused);
        }
        let Ok(len) = usize::try_from(size) else {
            return Ok(refused);
        };
        let Ok(buffer) = dev.buffer_type().alloc_buffer(len) else {
            return Ok(refused);
        };
        let h = self.next_handle;
        self.next_handle += 1;
        self.used_bytes += size;
        let mut r = h.to_le_bytes().to_vec();
        r.extend_from_slice(&(buffer.size() as u64).to_le_bytes());
        self.buffers.insert(h, buffer);
        Ok(r)
    }

    /// Carry out one request.
    pub fn handle(&mut self, req: Request) -> Result<Option<Vec<u8>>> {
        let u64_reply = |v: u64| Ok(Some(v.to_le_bytes().to_vec()));
        match req {
            Request::Hello { .. } => Err(Error::Malformed("HELLO repeated".into())),
            Request::DeviceCount => Ok(Some((self.devices.len() as u32).to_le_bytes().to_vec())),
            Request::AllocBuffer { device, size } => self.alloc(device, size).map(Some),
            Request::GetAlignment { device } => {
                u64_reply(self.device(device)?.buffer_type().alignment() as u64)
            }
            Request::GetMaxSize { device } => {
                let m = self.device(device)?.buffer_type().max_size() as u64;
                u64_reply(m.min(self.config.max_buffer_bytes))
            }
            Request::GetDeviceMemory { device } => {
                let m = self.device(device)?.memory();
                let mut r = (m.free as u64).to_le_bytes().to_vec();
                r.extend_from_slice(&(m.total as u64).to_le_bytes());
                Ok(Some(r))
            }
            Request::BufferGetBase { buffer } => {
                self.buffer(buffer)?;
                u64_reply(fake_base(buffer))
            }
            Request::FreeBuffer { buffer } => {
                let b = self.buffers.remove(&buffer).ok_or_else(|| {
                    Error::Malformed(format!("unknown buffer handle {buffer:#x}"))
                })?;
                self.used_bytes = self.used_bytes.saturating_sub(b.size() as u64);
                for s in &mut self.stored {
                    if s.as_ref().is_some_and(|g| g.buffers.contains(&buffer)) {
                        *s = None;
                    }
                }
                Ok(None)
            }
            Request::BufferClear { buffer, value } => {
                self.buffer(buffer)?.clear(value)?;
                Ok(None)
            }
            Request::SetTensor {
                tensor,
                offset,
                data,
                ..
            } => {
                let r = self.resolve(&tensor)?;
                let at = r.sub_range(offset, data.len() as u64)?;
                r.buffer.write(at, &data)?;
                Ok(None)
            }
            Request::SetTensorHash {
                tensor,
                offset,
                hash,
            } => {
                // The operator's cache (`crate::cache`); a miss, or bytes
                // that do not fit the tensor, is "not found": the client
                // sends them.
                let r = self.resolve(&tensor)?;
                let cached = self.config.cache.as_ref().and_then(|c| c.get(hash));
                let Some(bytes) = cached else {
                    return Ok(Some(vec![0]));
                };
                let Ok(at) = r.sub_range(offset, bytes.len() as u64) else {
                    return Ok(Some(vec![0]));
                };
                r.buffer.write(at, bytes)?;
                if self.config.verbose {
                    eprintln!(
                        "rpc-server: {} bytes written from the tensor cache (hash {hash:016x})",
                        bytes.len()
                    );
                }
                Ok(Some(vec![1]))
            }
            Request::GetTensor {
                tensor,
                offset,
                size,
            } => {
                if size > self.config.max_message_bytes {
                    return Err(Error::Malformed(format!(
                        "GET_TENSOR of {size} bytes exceeds the message limit"
                    )));
                }
                let r = self.resolve(&tensor)?;
                let at = r.sub_range(offset, size)?;
                let mut out = try_zeroed_vec(size as usize, "a GET_TENSOR reply")?;
                r.buffer.read(at, &mut out)?;
                Ok(Some(out))
            }
            Request::CopyTensor { src, dst } => {
                let s = self.resolve(&src)?;
                let d = self.resolve(&dst)?;
                if s.nbytes > d.nbytes {
                    return Err(Error::OutOfBounds(format!(
                        "COPY_TENSOR of {} bytes into a tensor of {} bytes",
                        s.nbytes, d.nbytes
                    )));
                }
                copy_between(
                    s.buffer.as_ref(),
                    s.offset,
                    d.buffer.as_ref(),
                    d.offset,
                    s.nbytes,
                )?;
                Ok(Some(vec![1]))
            }
            Request::MemsetTensor {
                tensor,
                offset,
                size,
                value,
            } => {
                let r = self.resolve(&tensor)?;
                let at = r.sub_range(offset, size)?;
                r.buffer.fill(at, size as usize, value)?;
                Ok(None)
            }
            Request::InitTensor { tensor } => {
                if tensor.buffer != 0 || tensor.data != 0 {
                    self.resolve(&tensor)?;
                } else {
                    tensor.checked_nbytes()?;
                }
                Ok(None)
            }
            Request::GetAllocSize { device, tensor, .. } => {
                self.device(device)?;
                u64_reply(tensor.checked_nbytes()?)
            }
            Request::GraphCompute {
                device,
                nodes,
                tensors,
            } => {
                self.device(device)?;
                if nodes.len() > self.config.max_graph_nodes
                    || tensors.len() > self.config.max_graph_nodes
                {
                    return Err(Error::Malformed(format!(
                        "graph of {} nodes and {} tensors exceeds the limit of {}",
                        nodes.len(),
                        tensors.len(),
                        self.config.max_graph_nodes
                    )));
                }
                let slot = device as usize;
                if let Some(s) = self.stored.get_mut(slot) {
                    *s = None;
                }
                let built = rebuild(&nodes, &tensors, &|h| self.buffers.get(&h).cloned())?;
                self.stream(device)?
                    .compute(&built.graph, &built.placement)?;
                if let Some(s) = self.stored.get_mut(slot) {
                    *s = Some(built);
                }
                Ok(None)
            }
            Request::GraphRecompute { device } => {
                let stream = self.stream(device)?;
                let built = self
                    .stored
                    .get(device as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| {
                        Error::Malformed(format!(
                            "GRAPH_RECOMPUTE on device {device} without a stored graph"
                        ))
                    })?;
                stream.compute(&built.graph, &built.placement)?;
                Ok(None)
            }
        }
    }
}
