//! Protocol constants of ggml-rpc 7.0.0, exactly as the llama.cpp vendored by
//! `llama-cpp-python` 0.3.36 defines them (`ggml/include/ggml-rpc.h`,
//! `ggml/src/ggml-rpc/ggml-rpc.cpp`, `transport.h`).
//!
//! Framing: a request is `| cmd: u8 | size: u64 LE | payload |`, a reply is
//! `| size: u64 LE | payload |` whose size must match what the command
//! expects. Seven commands have no reply at all (fire-and-forget); the only
//! way a server reports their failure is closing the connection.

use tessera::{Error, Result};

/// Protocol major version: peers of another major version are refused.
pub const PROTO_MAJOR: u8 = 7;
/// Protocol minor version: a client accepts servers of a minor version up to its own.
pub const PROTO_MINOR: u8 = 0;
/// Protocol patch version.
pub const PROTO_PATCH: u8 = 0;

/// Bytes of the connection capabilities in HELLO (`RPC_CONN_CAPS_SIZE`);
/// all zero for plain TCP (a non-zero value offers RDMA, which Tessera
/// does not negotiate).
pub const CONN_CAPS_SIZE: usize = 24;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// ggml's `GGML_MAX_SRC` (the wire carries 10 sources; Tessera uses 6).
pub const WIRE_MAX_SRC: usize = 10;
/// `GGML_MAX_OP_PARAMS / sizeof(int32_t)`.
pub const OP_PARAMS: usize = 16;
/// ggml's `GGML_MAX_NAME`.
pub const MAX_NAME: usize = 64;

/// `GGML_TENSOR_FLAG_INPUT`.
pub const FLAG_INPUT: i32 = 1;
/// `GGML_TENSOR_FLAG_OUTPUT`.
pub const FLAG_OUTPUT: i32 = 2;
/// `GGML_TENSOR_FLAG_COMPUTE`: the node must be computed. ggml's CPU
/// backend skips graph nodes without it, so a client must set it on every
/// node it sends for computation.
pub const FLAG_COMPUTE: i32 = 16;

/// Writes larger than this may first be offered as a hash (`HASH_THRESHOLD`).
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;

/// FNV-1a 64 of `data`, the hash SET_TENSOR_HASH names bytes by (not
/// collision-resistant: a server's cache shared by distrusting clients can
/// be poisoned).
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The commands, numbered as `enum rpc_cmd` (HELLO pinned at 14).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cmd {
    /// `{device: u32, size: u64}` → `{remote_ptr: u64, remote_size: u64}`.
    AllocBuffer = 0,
    /// `{device: u32}` → `{alignment: u64}`.
    GetAlignment = 1,
    /// `{device: u32}` → `{max_size: u64}`.
    GetMaxSize = 2,
    /// `{remote_ptr: u64}` → `{base_ptr: u64}`.
    BufferGetBase = 3,
    /// `{remote_ptr: u64}` → no reply.
    FreeBuffer = 4,
    /// `{remote_ptr: u64, value: u8}` → no reply.
    BufferClear = 5,
    /// `rpc_tensor | cache_flag: u8 | offset: u64 | bytes` → no reply.
    SetTensor = 6,
    /// `{rpc_tensor, offset: u64, hash: u64}` → `{result: u8}`.
    SetTensorHash = 7,
    /// `{rpc_tensor, offset: u64, size: u64}` → `size` bytes.
    GetTensor = 8,
    /// `{src: rpc_tensor, dst: rpc_tensor}` → `{result: u8}`.
    CopyTensor = 9,
    /// `device: u32 | n_nodes: u32 | ids: u64[n] | n_tensors: u32 | rpc_tensor[n]` → no reply.
    GraphCompute = 10,
    /// `{device: u32}` → `{free: u64, total: u64}`.
    GetDeviceMemory = 11,
    /// `{rpc_tensor}` → no reply.
    InitTensor = 12,
    /// `{device: u32, tensor: rpc_tensor, srcs: rpc_tensor[10]}` → `{alloc_size: u64}`.
    GetAllocSize = 13,
    /// `{conn_caps: u8[24]}` → `{major, minor, patch, padding: u8, conn_caps: u8[24]}`.
    Hello = 14,
    /// empty → `{device_count: u32}`.
    DeviceCount = 15,
    /// `{device: u32}` → no reply: re-run the device's last graph.
    GraphRecompute = 16,
    /// `{rpc_tensor, offset: u64, size: u64, value: u8}` → no reply.
    MemsetTensor = 17,
}

impl Cmd {
    /// Every command, in wire order.
    pub const ALL: [Cmd; 18] = [
        Cmd::AllocBuffer,
        Cmd::GetAlignment,
        Cmd::GetMaxSize,
        Cmd::BufferGetBase,
        Cmd::FreeBuffer,
        Cmd::BufferClear,
        Cmd::SetTensor,
        Cmd::SetTensorHash,
        Cmd::GetTensor,
        Cmd::CopyTensor,
        Cmd::GraphCompute,
        Cmd::GetDeviceMemory,
        Cmd::InitTensor,
        Cmd::GetAllocSize,
        Cmd::Hello,
        Cmd::DeviceCount,
        Cmd::GraphRecompute,
        Cmd::MemsetTensor,
    ];

    /// The command of wire byte `b` (`RPC_CMD_NONE` = 18 is client-internal
    /// and never sent, so it is refused like any unknown byte).
    pub fn from_u8(b: u8) -> Result<Cmd> {
        Cmd::ALL
            .get(usize::from(b))
            .copied()
            .ok_or_else(|| Error::Malformed(format!("unknown ggml-rpc command {b}")))
    }

    /// Does the server send a reply?
    pub const fn has_reply(self) -> bool {
        !matches!(
            self,
            Cmd::FreeBuffer
                | Cmd::BufferClear
                | Cmd::SetTensor
                | Cmd::GraphCompute
                | Cmd::InitTensor
                | Cmd::GraphRecompute
                | Cmd::MemsetTensor
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn command_numbers_match_enum_rpc_cmd() {
        for (i, c) in Cmd::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(Cmd::from_u8(i as u8).unwrap(), *c);
        }
        assert_eq!(Cmd::Hello as u8, 14);
        assert_eq!(Cmd::MemsetTensor as u8, 17);
        assert!(
            Cmd::from_u8(18).is_err(),
            "RPC_CMD_NONE is never on the wire"
        );
        assert!(Cmd::from_u8(255).is_err());
        let no_reply: Vec<u8> = Cmd::ALL
            .iter()
            .filter(|c| !c.has_reply())
            .map(|c| *c as u8)
            .collect();
        assert_eq!(no_reply, vec![4, 5, 6, 10, 12, 16, 17]);
    }
}
