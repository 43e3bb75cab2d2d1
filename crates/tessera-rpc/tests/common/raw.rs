//! A raw ggml-rpc peer for attack replays: sends arbitrary frames and tells
//! whether the server replied or closed the connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tessera_rpc::msg::Request;
use tessera_rpc::proto::Cmd;
use tessera_rpc::wire_tensor::RpcTensor;

pub struct Raw {
    pub s: TcpStream,
}

impl Raw {
    /// Connected, without HELLO.
    pub fn bare(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw { s }
    }

    /// Connected, after a successful HELLO (version 7.0.0 checked).
    pub fn new(addr: SocketAddr) -> Raw {
        let mut r = Raw::bare(addr);
        let v = r
            .call(&Request::Hello { caps: [0; 24] })
            .expect("HELLO reply");
        assert_eq!(&v[..4], &[7, 0, 0, 0]);
        r
    }

    /// Send raw bytes; false if the socket is already closed.
    pub fn send_bytes(&mut self, b: &[u8]) -> bool {
        self.s.write_all(b).and_then(|()| self.s.flush()).is_ok()
    }

    pub fn send(&mut self, cmd: u8, payload: &[u8]) -> bool {
        let mut f = vec![cmd];
        f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        f.extend_from_slice(payload);
        self.send_bytes(&f)
    }

    /// The next reply frame, `None` if the server closed the connection.
    pub fn reply(&mut self) -> Option<Vec<u8>> {
        let mut n = [0u8; 8];
        self.s.read_exact(&mut n).ok()?;
        let n = u64::from_le_bytes(n) as usize;
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).ok()?;
        Some(b)
    }

    /// Send a request; its reply if it has one (`Some(empty)` for
    /// fire-and-forget commands), `None` if the connection closed.
    pub fn call(&mut self, req: &Request) -> Option<Vec<u8>> {
        if !self.send(req.cmd() as u8, &req.encode()) {
            return None;
        }
        if req.cmd().has_reply() {
            self.reply()
        } else {
            Some(Vec::new())
        }
    }

    /// Is the connection closed (a DEVICE_COUNT goes unanswered)?
    pub fn closed(&mut self) -> bool {
        self.call(&Request::DeviceCount).is_none()
    }

    /// Allocate `size` bytes on device 0: `(handle, base)`.
    pub fn alloc(&mut self, size: u64) -> (u64, u64) {
        let r = self
            .call(&Request::AllocBuffer { device: 0, size })
            .expect("ALLOC_BUFFER reply");
        let h = u64::from_le_bytes(r[..8].try_into().unwrap());
        assert_ne!(h, 0, "allocation of {size} bytes refused");
        let b = self
            .call(&Request::BufferGetBase { buffer: h })
            .expect("BUFFER_GET_BASE reply");
        (h, u64::from_le_bytes(b[..8].try_into().unwrap()))
    }
}

/// A contiguous tensor description.
pub fn tensor(id: u64, dtype: u32, ne: [u32; 4], buffer: u64, data: u64) -> RpcTensor {
    let (block, size) = tessera_rpc::wire_tensor::type_traits(dtype).unwrap_or((1, 4));
    let mut nb = [0u32; 4];
    nb[0] = size as u32;
    nb[1] = (u64::from(ne[0]) / block * size) as u32;
    nb[2] = nb[1] * ne[1];
    nb[3] = nb[2] * ne[2];
    RpcTensor {
        id,
        dtype,
        ne,
        nb,
        buffer,
        data,
        ..RpcTensor::default()
    }
}

/// An F32 vector of `n` elements.
pub fn f32v(id: u64, n: u32, buffer: u64, data: u64) -> RpcTensor {
    tensor(id, 0, [n, 1, 1, 1], buffer, data)
}

pub const GRAPH_COMPUTE: u8 = Cmd::GraphCompute as u8;
