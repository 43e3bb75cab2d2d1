//! Every ggml-rpc 7.0.0 request, encoded and decoded with exact sizes:
//! fixed-size requests must have exactly their C struct's size (as
//! upstream's `recv_msg` demands), variable ones are bounded by the payload
//! (a count is never trusted before the bytes it claims are there).

use tessera::{Error, Result};

use crate::codec::Reader;
use crate::proto::{CONN_CAPS_SIZE, Cmd, WIRE_MAX_SRC};
use crate::wire_tensor::{RPC_TENSOR_SIZE, RpcTensor};

/// A decoded request. (Tensor-carrying variants are large; requests are
/// short-lived, so they are not boxed.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Version handshake; must come first.
    Hello {
        /// Transport capabilities (zero for TCP).
        caps: [u8; CONN_CAPS_SIZE],
    },
    /// Number of devices served.
    DeviceCount,
    /// Allocate a buffer on a device.
    AllocBuffer {
        /// Device index.
        device: u32,
        /// Bytes.
        size: u64,
    },
    /// Alignment of the device's buffer type.
    GetAlignment {
        /// Device index.
        device: u32,
    },
    /// Largest buffer of the device.
    GetMaxSize {
        /// Device index.
        device: u32,
    },
    /// Base address of a buffer.
    BufferGetBase {
        /// Buffer handle.
        buffer: u64,
    },
    /// Free a buffer.
    FreeBuffer {
        /// Buffer handle.
        buffer: u64,
    },
    /// Set every byte of a buffer.
    BufferClear {
        /// Buffer handle.
        buffer: u64,
        /// Byte value.
        value: u8,
    },
    /// Write bytes into a tensor.
    SetTensor {
        /// Target tensor.
        tensor: RpcTensor,
        /// Ask the server to cache the bytes under their hash.
        cache_flag: u8,
        /// Byte offset into the tensor.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Write bytes the server may have cached under `hash`.
    SetTensorHash {
        /// Target tensor.
        tensor: RpcTensor,
        /// Byte offset into the tensor.
        offset: u64,
        /// FNV-1a 64 of the bytes.
        hash: u64,
    },
    /// Read bytes of a tensor.
    GetTensor {
        /// Source tensor.
        tensor: RpcTensor,
        /// Byte offset into the tensor.
        offset: u64,
        /// Bytes to read.
        size: u64,
    },
    /// Copy a tensor into another on the same server.
    CopyTensor {
        /// Source.
        src: RpcTensor,
        /// Destination.
        dst: RpcTensor,
    },
    /// Compute a graph.
    GraphCompute {
        /// Device index.
        device: u32,
        /// Tensor ids of the nodes, in execution order.
        nodes: Vec<u64>,
        /// Every tensor the nodes reach, sources first.
        tensors: Vec<RpcTensor>,
    },
    /// Free and total memory of a device.
    GetDeviceMemory {
        /// Device index.
        device: u32,
    },
    /// Per-tensor setup in its buffer.
    InitTensor {
        /// The tensor.
        tensor: RpcTensor,
    },
    /// Bytes a tensor needs in the device's buffer type.
    GetAllocSize {
        /// Device index.
        device: u32,
        /// The tensor.
        tensor: RpcTensor,
        /// Its sources (id 0 = none).
        srcs: Box<[RpcTensor; WIRE_MAX_SRC]>,
    },
    /// Re-run the device's last graph.
    GraphRecompute {
        /// Device index.
        device: u32,
    },
    /// Set a byte range of a tensor.
    MemsetTensor {
        /// The tensor.
        tensor: RpcTensor,
        /// Byte offset into the tensor.
        offset: u64,
        /// Bytes to set.
        size: u64,
        /// Byte value.
        value: u8,
    },
}

fn fixed(cmd: Cmd, payload: &[u8], want: usize) -> Result<Reader<'_>> {
    if payload.len() != want {
        return Err(Error::Malformed(format!(
            "{cmd:?} request of {} bytes, expected exactly {want}",
            payload.len()
        )));
    }
    Ok(Reader::new(payload))
}

impl Request {
    /// The command of this request.
    pub fn cmd(&self) -> Cmd {
        match self {
            Request::Hello { .. } => Cmd::Hello,
            Request::DeviceCount => Cmd::DeviceCount,
            Request::AllocBuffer { .. } => Cmd::AllocBuffer,
            Request::GetAlignment { .. } => Cmd::GetAlignment,
            Request::GetMaxSize { .. } => Cmd::GetMaxSize,
            Request::BufferGetBase { .. } => Cmd::BufferGetBase,
            Request::FreeBuffer { .. } => Cmd::FreeBuffer,
            Request::BufferClear { .. } => Cmd::BufferClear,
            Request::SetTensor { .. } => Cmd::SetTensor,
            Request::SetTensorHash { .. } => Cmd::SetTensorHash,
            Request::GetTensor { .. } => Cmd::GetTensor,
            Request::CopyTensor { .. } => Cmd::CopyTensor,
            Request::GraphCompute { .. } => Cmd::GraphCompute,
            Request::GetDeviceMemory { .. } => Cmd::GetDeviceMemory,
            Request::InitTensor { .. } => Cmd::InitTensor,
            Request::GetAllocSize { .. } => Cmd::GetAllocSize,
            Request::GraphRecompute { .. } => Cmd::GraphRecompute,
            Request::MemsetTensor { .. } => Cmd::MemsetTensor,
        }
    }

    /// The payload bytes (without the frame header).
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        match self {
            Request::Hello { caps } => o.extend_from_slice(caps),
            Request::DeviceCount => {}
            Request::AllocBuffer { device, size } => {
                o.extend_from_slice(&device.to_le_bytes());
                o.extend_from_slice(&size.to_le_bytes());
            }
            Request::GetAlignment { device }
            | Request::GetMaxSize { device }
            | Request::GetDeviceMemory { device }
            | Request::GraphRecompute { device } => o.extend_from_slice(&device.to_le_bytes()),
            Request::BufferGetBase { buffer } | Request::FreeBuffer { buffer } => {
                o.extend_from_slice(&buffer.to_le_bytes());
            }
            Request::BufferClear { buffer, value } => {
                o.extend_from_slice(&buffer.to_le_bytes());
                o.push(*value);
            }
            Request::SetTensor {
                tensor,
                cache_flag,
                offset,
                data,
            } => {
                tensor.encode(&mut o);
                o.push(*cache_flag);
                o.extend_from_slice(&offset.to_le_bytes());
                o.extend_from_slice(data);
            }
            Request::SetTensorHash {
                tensor,
                offset,
                hash,
            } => {
                tensor.encode(&mut o);
                o.extend_from_slice(&offset.to_le_bytes());
                o.extend_from_slice(&hash.to_le_bytes());
            }
            Request::GetTensor {
                tensor,
                offset,
                size,
            } => {
                tensor.encode(&mut o);
                o.extend_from_slice(&offset.to_le_bytes());
                o.extend_from_slice(&size.to_le_bytes());
            }
            Request::CopyTensor { src, dst } => {
                src.encode(&mut o);
                dst.encode(&mut o);
            }
            Request::GraphCompute {
                device,
                nodes,
                tensors,
            } => {
                o.extend_from_slice(&device.to_le_bytes());
                o.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
                for n in nodes {
                    o.extend_from_slice(&n.to_le_bytes());
                }
                o.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
                for t in tensors {
                    t.encode(&mut o);
                }
            }
            Request::InitTensor { tensor } => tensor.encode(&mut o),
            Request::GetAllocSize {
                device,
                tensor,
                srcs,
            } => {
                o.extend_from_slice(&device.to_le_bytes());
                tensor.encode(&mut o);
                for s in srcs.iter() {
                    s.encode(&mut o);
                }
            }
            Request::MemsetTensor {
                tensor,
                offset,
                size,
                value,
            } => {
                tensor.encode(&mut o);
                o.extend_from_slice(&offset.to_le_bytes());
                o.extend_from_slice(&size.to_le_bytes());
                o.push(*value);
            }
        }
        o
    }

    /// Decode the payload of command byte `cmd`.
    pub fn decode(cmd: u8, payload: &[u8]) -> Result<Request> {
        let cmd = Cmd::from_u8(cmd)?;
        const T: usize = RPC_TENSOR_SIZE;
        let req = match cmd {
            Cmd::Hello => {
                let mut r = fixed(cmd, payload, CONN_CAPS_SIZE)?;
                let mut caps = [0u8; CONN_CAPS_SIZE];
                caps.copy_from_slice(r.bytes(CONN_CAPS_SIZE)?);
                Request::Hello { caps }
            }
            Cmd::DeviceCount => {
                fixed(cmd, payload, 0)?;
                Request::DeviceCount
            }
            Cmd::AllocBuffer => {
                let mut r = fixed(cmd, payload, 12)?;
                Request::AllocBuffer {
                    device: r.u32()?,
                    size: r.u64()?,
                }
            }
            Cmd::GetAlignment => Request::GetAlignment {
                device: fixed(cmd, payload, 4)?.u32()?,
            },
            Cmd::GetMaxSize => Request::GetMaxSize {
                device: fixed(cmd, payload, 4)?.u32()?,
            },
            Cmd::GetDeviceMemory => Request::GetDeviceMemory {
                device: fixed(cmd, payload, 4)?.u32()?,
            },
            Cmd::GraphRecompute => Request::GraphRecompute {
                device: fixed(cmd, payload, 4)?.u32()?,
            },
            Cmd::BufferGetBase => Request::BufferGetBase {
                buffer: fixed(cmd, payload, 8)?.u64()?,
            },
            Cmd::FreeBuffer => Request::FreeBuffer {
                buffer: fixed(cmd, payload, 8)?.u64()?,
            },
            Cmd::BufferClear => {
                let mut r = fixed(cmd, payload, 9)?;
                Request::BufferClear {
                    buffer: r.u64()?,
                    value: r.u8()?,
                }
            }
            Cmd::SetTensor => {
                let mut r = Reader::new(payload);
                Request::SetTensor {
                    tensor: RpcTensor::decode(&mut r)?,
                    cache_flag: r.u8()?,
                    offset: r.u64()?,
                    data: r.rest().to_vec(),
                }
            }
            Cmd::SetTensorHash => {
                let mut r = fixed(cmd, payload, T + 16)?;
                Request::SetTensorHash {
                    tensor: RpcTensor::decode(&mut r)?,
                    offset: r.u64()?,
                    hash: r.u64()?,
                }
            }
            Cmd::GetTensor => {
                let mut r = fixed(cmd, payload, T + 16)?;
                Request::GetTensor {
                    tensor: RpcTensor::decode(&mut r)?,
                    offset: r.u64()?,
                    size: r.u64()?,
                }
            }
            Cmd::CopyTensor => {
                let mut r = fixed(cmd, payload, 2 * T)?;
                Request::CopyTensor {
                    src: RpcTensor::decode(&mut r)?,
                    dst: RpcTensor::decode(&mut r)?,
                }
            }
            Cmd::InitTensor => Request::InitTensor {
                tensor: RpcTensor::decode(&mut fixed(cmd, payload, T)?)?,
            },
            Cmd::GetAllocSize => {
                let mut r = fixed(cmd, payload, 4 + T * (1 + WIRE_MAX_SRC))?;
                let device = r.u32()?;
                let tensor = RpcTensor::decode(&mut r)?;
                let mut srcs: Box<[RpcTensor; WIRE_MAX_SRC]> = Box::default();
                for s in srcs.iter_mut() {
                    *s = RpcTensor::decode(&mut r)?;
                }
                Request::GetAllocSize {
                    device,
                    tensor,
                    srcs,
                }
            }
            Cmd::MemsetTensor => {
                let mut r = fixed(cmd, payload, T + 17)?;
                Request::MemsetTensor {
                    tensor: RpcTensor::decode(&mut r)?,
                    offset: r.u64()?,
                    size: r.u64()?,
                    value: r.u8()?,
                }
            }
            Cmd::GraphCompute => decode_graph(payload)?,
        };
        Ok(req)
    }
}

/// `device | n_nodes | ids[n_nodes] | n_tensors | rpc_tensor[n_tensors]`,
/// with both counts checked against the bytes present before allocating.
fn decode_graph(payload: &[u8]) -> Result<Request> {
    let mut r = Reader::new(payload);
    let device = r.u32()?;
    let n_nodes = r.u32()? as usize;
    if n_nodes.saturating_mul(8) > r.remaining() {
        return Err(Error::Malformed(format!(
            "graph claims {n_nodes} nodes in {} bytes",
            r.remaining()
        )));
    }
    let mut nodes = Vec::with_capacity(n_nodes);
    for _ in 0..n_nodes {
        nodes.push(r.u64()?);
    }
    let n_tensors = r.u32()? as usize;
    if n_tensors.saturating_mul(RPC_TENSOR_SIZE) != r.remaining() {
        return Err(Error::Malformed(format!(
            "graph claims {n_tensors} tensors in {} bytes",
            r.remaining()
        )));
    }
    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        tensors.push(RpcTensor::decode(&mut r)?);
    }
    r.finish()?;
    Ok(Request::GraphCompute {
        device,
        nodes,
        tensors,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(id: u64) -> RpcTensor {
        RpcTensor {
            id,
            ne: [1; 4],
            ..RpcTensor::default()
        }
    }

    fn all() -> Vec<Request> {
        vec![
            Request::Hello { caps: [3; 24] },
            Request::DeviceCount,
            Request::AllocBuffer {
                device: 1,
                size: 1 << 40,
            },
            Request::GetAlignment { device: 2 },
            Request::GetMaxSize { device: 3 },
            Request::BufferGetBase { buffer: 9 },
            Request::FreeBuffer { buffer: 9 },
            Request::BufferClear {
                buffer: 9,
                value: 0xAB,
            },
            Request::SetTensor {
                tensor: t(1),
                cache_flag: 1,
                offset: 5,
                data: vec![1, 2, 3],
            },
            Request::SetTensorHash {
                tensor: t(1),
                offset: 5,
                hash: 77,
            },
            Request::GetTensor {
                tensor: t(1),
                offset: 5,
                size: 6,
            },
            Request::CopyTensor {
                src: t(1),
                dst: t(2),
            },
            Request::GraphCompute {
                device: 0,
                nodes: vec![2, 3],
                tensors: vec![t(1), t(2), t(3)],
            },
            Request::GetDeviceMemory { device: 0 },
            Request::InitTensor { tensor: t(4) },
            Request::GetAllocSize {
                device: 0,
                tensor: t(4),
                srcs: Box::default(),
            },
            Request::GraphRecompute { device: 0 },
            Request::MemsetTensor {
                tensor: t(4),
                offset: 1,
                size: 2,
                value: 3,
            },
        ]
    }

    /// Payload sizes are those of the packed C request structs.
    #[test]
    fn sizes_match_c_structs_and_round_trip() {
        let sizes = [
            24,
            0,
            12,
            4,
            4,
            8,
            8,
            9,
            296 + 1 + 8 + 3,
            312,
            312,
            592,
            4 + 4 + 16 + 4 + 3 * 296,
            4,
            296,
            4 + 11 * 296,
            4,
            313,
        ];
        for (req, size) in all().into_iter().zip(sizes) {
            let p = req.encode();
            assert_eq!(p.len(), size, "{:?}", req.cmd());
            assert_eq!(Request::decode(req.cmd() as u8, &p).unwrap(), req);
        }
    }

    /// Every truncation and every extra byte of a fixed-size request is
    /// refused, and no prefix of any request panics.
    #[test]
    fn truncated_or_padded_requests_are_refused() {
        for req in all() {
            let p = req.encode();
            let cmd = req.cmd() as u8;
            for n in 0..p.len() {
                let r = Request::decode(cmd, &p[..n]);
                if !matches!(req, Request::SetTensor { .. }) || n < 305 {
                    assert!(r.is_err(), "{:?} truncated to {n}", req.cmd());
                }
            }
            if !matches!(req, Request::SetTensor { .. }) {
                let mut long = p.clone();
                long.push(0);
                assert!(Request::decode(cmd, &long).is_err(), "{:?}", req.cmd());
            }
        }
    }

    #[test]
    fn graph_counts_are_bounded_by_the_payload() {
        let mut p = Vec::new();
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::decode(Cmd::GraphCompute as u8, &p).is_err());
        let mut p = Vec::new();
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::decode(Cmd::GraphCompute as u8, &p).is_err());
        assert!(Request::decode(18, &[]).is_err());
    }
}
