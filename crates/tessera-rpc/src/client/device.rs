//! Remote devices: a ggml-rpc server's devices as Tessera [`Device`]s, with
//! their streams.
//!
//! [`connect`] opens one connection per server (HELLO, DEVICE_COUNT, then
//! GET_ALIGNMENT and GET_MAX_SIZE per device) shared by all its devices.
//! A remote device reports itself as a GPU whose memory only it can read;
//! `supports_op` is what the wire can carry ([`super::graph::can_send`]).
//! Streams are in order by construction (one TCP stream): writes and
//! computes are fire-and-forget, and [`Stream::synchronize`] is a round
//! trip that also surfaces a server that closed the connection on an
//! earlier request.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Weak};

use tessera::{
    BufferType, Device, DeviceCaps, DeviceType, Error, Graph, MemoryInfo, PendingRead, Placement,
    Result, Stream, StreamOptions, Tensor, TensorId,
};

use crate::client::buffer::{RpcBuffer, RpcBufferType};
use crate::client::conn::{ClientOptions, Conn};
use crate::client::graph::{can_send, graph_request};
use crate::msg::Request;

/// One device of a ggml-rpc server.
#[derive(Debug)]
pub struct RpcDevice {
    name: String,
    description: String,
    conn: Arc<Conn>,
    index: u32,
    buft: Arc<RpcBufferType>,
    me: Weak<RpcDevice>,
}

/// Connect to the ggml-rpc server at `endpoint` (`host:port`) with default
/// options: one device per remote device.
pub fn connect(endpoint: &str) -> Result<Vec<Arc<dyn Device>>> {
    connect_with(endpoint, ClientOptions::default())
}

/// [`connect`] with explicit timeouts.
pub fn connect_with(endpoint: &str, opts: ClientOptions) -> Result<Vec<Arc<dyn Device>>> {
    let conn = Arc::new(Conn::connect(endpoint, opts)?);
    let r = conn.call(&Request::DeviceCount)?;
    let count = r
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| Error::Malformed("short DEVICE_COUNT reply".into()))?;
    let mut out: Vec<Arc<dyn Device>> = Vec::new();
    for index in 0..count {
        let alignment = conn.call_u64(&Request::GetAlignment { device: index })?;
        let max_size = conn.call_u64(&Request::GetMaxSize { device: index })?;
        let alignment = usize::try_from(alignment)
            .ok()
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| Error::Malformed(format!("alignment {alignment} of device {index}")))?;
        let max_size = usize::try_from(max_size).unwrap_or(usize::MAX);
        let name = format!("RPC{index}[{endpoint}]");
        let conn2 = conn.clone();
        let dev = Arc::new_cyclic(|me: &Weak<RpcDevice>| {
            let weak_dev: Weak<dyn Device> = me.clone();
            RpcDevice {
                name: name.clone(),
                description: format!("ggml-rpc device {index} at {endpoint}"),
                conn: conn2.clone(),
                index,
                buft: Arc::new_cyclic(|bt| RpcBufferType {
                    name,
                    conn: conn2,
                    device_index: index,
                    alignment,
                    max_size,
                    device: weak_dev,
                    me: bt.clone(),
                    alloc_sizes: Default::default(),
                }),
                me: me.clone(),
            }
        });
        out.push(dev);
    }
    Ok(out)
}

/// [`connect`], then add the devices to the global registry (as devices of
/// no family, found by name, e.g. `RPC0[127.0.0.1:50052]`). Devices whose
/// name is already registered are skipped; all are returned.
pub fn register(endpoint: &str) -> Result<Vec<Arc<dyn Device>>> {
    register_with(endpoint, ClientOptions::default())
}

/// [`register`] with settings (TLS, a pre-shared key, timeouts).
pub fn register_with(endpoint: &str, opts: ClientOptions) -> Result<Vec<Arc<dyn Device>>> {
    let devs = connect_with(endpoint, opts)?;
    for d in &devs {
        tessera::Registry::global().register_device(d.clone());
    }
    Ok(devs)
}

impl RpcDevice {
    /// The connection (e.g. to check it is still open).
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// Traffic of the connection (shared by every device of the server).
    pub fn stats(&self) -> crate::client::ConnStats {
        self.conn.stats()
    }

    /// Index of the device on its server.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl Device for RpcDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn memory(&self) -> MemoryInfo {
        let r = self
            .conn
            .call(&Request::GetDeviceMemory { device: self.index });
        match r {
            Ok(r) if r.len() == 16 => {
                let w = |i: usize| {
                    r.get(i..i + 8)
                        .and_then(|s| s.try_into().ok())
                        .map_or(0, u64::from_le_bytes)
                };
                MemoryInfo {
                    free: usize::try_from(w(0)).unwrap_or(usize::MAX),
                    total: usize::try_from(w(8)).unwrap_or(usize::MAX),
                    estimated: false,
                }
            }
            _ => MemoryInfo {
                free: 0,
                total: 0,
                estimated: true,
            },
        }
    }

    fn device_type(&self) -> DeviceType {
        DeviceType::Gpu
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            async_ops: true,
            buffer_from_host_memory: false,
            events: false,
        }
    }

    fn family_name(&self) -> &str {
        "RPC"
    }

    fn new_stream(&self, options: &StreamOptions) -> Result<Arc<dyn Stream>> {
        options.only(&self.name, &[])?;
        let device = self
            .me
            .upgrade()
            .ok_or_else(|| Error::device(&self.name, "dropped"))?;
        Ok(Arc::new(RpcStream { device }))
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn supports_op(&self, graph: &Graph, id: TensorId) -> bool {
        can_send(graph, id)
    }

    fn supports_buffer_type(&self, buft: &dyn BufferType) -> bool {
        tessera::same_buffer_type(buft, self.buft.as_ref())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A stream on a remote device: requests in connection order.
#[derive(Debug)]
pub struct RpcStream {
    device: Arc<RpcDevice>,
}

impl RpcStream {
    fn is_mine(&self, t: &Tensor) -> bool {
        t.buffer()
            .as_any()
            .downcast_ref::<RpcBuffer>()
            .is_some_and(|b| Arc::ptr_eq(b.conn(), &self.device.conn))
    }
}

impl Stream for RpcStream {
    fn name(&self) -> &str {
        &self.device.name
    }

    fn device(&self) -> Arc<dyn Device> {
        self.device.clone()
    }

    fn set_async(&self, dst: &Tensor, offset: usize, data: Vec<u8>) -> Result<()> {
        if !self.is_mine(dst) {
            self.synchronize()?;
        }
        dst.write(offset, &data)
    }

    fn get_async(&self, src: &Tensor, offset: usize, len: usize) -> Result<PendingRead> {
        if offset.checked_add(len).is_none_or(|e| e > src.nbytes()) {
            return Err(Error::OutOfBounds(format!(
                "{len} bytes at offset {offset} of a tensor of {} bytes",
                src.nbytes()
            )));
        }
        if !self.is_mine(src) {
            self.synchronize()?;
        }
        let mut out = tessera::buffer::try_zeroed_vec(len, "an RPC tensor read")?;
        src.read(offset, &mut out)?;
        Ok(PendingRead::ready(out))
    }

    fn synchronize(&self) -> Result<()> {
        self.device.conn.call(&Request::DeviceCount)?;
        Ok(())
    }

    fn compute_async(
        &self,
        graph: &Graph,
        placement: &Placement,
        range: Range<usize>,
    ) -> Result<()> {
        let Some(req) = graph_request(
            graph,
            placement,
            range,
            self.device.index,
            &self.device.conn,
        )?
        else {
            return Ok(());
        };
        self.device.conn.compute(self.device.index, req.encode())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
