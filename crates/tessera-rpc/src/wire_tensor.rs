//! `rpc_tensor`: ggml's packed tensor description on the wire, and the
//! checked byte arithmetic every server path applies to it.
//!
//! Layout (packed, little-endian, 296 bytes, offsets checked by the tests
//! against the C struct of ggml-rpc 7.0.0):
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | id | u64 (the client's tensor handle) |
//! | 8 | type | u32 (`ggml_type`) |
//! | 12 | buffer | u64 (server buffer handle, 0 = none) |
//! | 20 | ne | `u32[4]` |
//! | 36 | nb | `u32[4]` (strides of 4 GiB or more do not fit) |
//! | 52 | op | u32 (`ggml_op`) |
//! | 56 | op_params | `i32[16]` |
//! | 120 | flags | i32 |
//! | 124 | src | `u64[10]` (tensor ids) |
//! | 204 | view_src | u64 |
//! | 212 | view_offs | u64 |
//! | 220 | data | u64 (address in the server's address space) |
//! | 228 | name | `char[64]` |
//! | 292 | use_count | i32 |

use tessera::{Error, Result};

use crate::codec::Reader;
use crate::proto::{MAX_DIMS, MAX_NAME, OP_PARAMS, WIRE_MAX_SRC};

/// Size of one `rpc_tensor` on the wire.
pub const RPC_TENSOR_SIZE: usize = 296;

/// One `rpc_tensor`, decoded but not validated (validation needs the
/// server's buffer table: see [`crate::server`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTensor {
    /// Client-side handle of the tensor (0 = no tensor).
    pub id: u64,
    /// `ggml_type` id.
    pub dtype: u32,
    /// Server buffer handle (0 = none).
    pub buffer: u64,
    /// Extents.
    pub ne: [u32; MAX_DIMS],
    /// Byte strides.
    pub nb: [u32; MAX_DIMS],
    /// `ggml_op` id.
    pub op: u32,
    /// Raw op parameters.
    pub op_params: [i32; OP_PARAMS],
    /// `ggml_tensor_flag` bits.
    pub flags: i32,
    /// Source tensor ids (0 = none).
    pub src: [u64; WIRE_MAX_SRC],
    /// Tensor id of the viewed tensor (0 = none).
    pub view_src: u64,
    /// Byte offset into `view_src`.
    pub view_offs: u64,
    /// Address of the first byte in the server's space (base + offset).
    pub data: u64,
    /// NUL-padded name.
    pub name: [u8; MAX_NAME],
    /// Uses of the tensor in the graph (fusion hint).
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> Self {
        RpcTensor {
            id: 0,
            dtype: 0,
            buffer: 0,
            ne: [0; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; OP_PARAMS],
            flags: 0,
            src: [0; WIRE_MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; MAX_NAME],
            use_count: 0,
        }
    }
}

impl RpcTensor {
    /// Append the 296 wire bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.dtype.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        for v in self.ne.iter().chain(&self.nb) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        for p in &self.op_params {
            out.extend_from_slice(&p.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        for s in &self.src {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
    }

    /// Read one tensor from `r`.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let mut t = RpcTensor {
            id: r.u64()?,
            dtype: r.u32()?,
            buffer: r.u64()?,
            ..RpcTensor::default()
        };
        for v in t.ne.iter_mut() {
            *v = r.u32()?;
        }
        for v in t.nb.iter_mut() {
            *v = r.u32()?;
        }
        t.op = r.u32()?;
        for p in t.op_params.iter_mut() {
            *p = r.i32()?;
        }
        t.flags = r.i32()?;
        for s in t.src.iter_mut() {
            *s = r.u64()?;
        }
        t.view_src = r.u64()?;
        t.view_offs = r.u64()?;
        t.data = r.u64()?;
        t.name.copy_from_slice(r.bytes(MAX_NAME)?);
        t.use_count = r.i32()?;
        Ok(t)
    }

    /// The name up to its first NUL, lossily decoded.
    pub fn name_str(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Set the name (truncated to 63 bytes, NUL-padded).
    pub fn set_name(&mut self, name: &str) {
        self.name = [0; MAX_NAME];
        let n = name.len().min(MAX_NAME - 1);
        self.name[..n].copy_from_slice(&name.as_bytes()[..n]);
    }

    /// Bytes the tensor spans, with ggml's formula and checked arithmetic:
    /// the type must be one [`type_traits`] knows, `ne[0]` a whole number
    /// of blocks. A tensor with an extent of 0 spans 0 bytes.
    pub fn checked_nbytes(&self) -> Result<u64> {
        let (block, size) = type_traits(self.dtype)?;
        if self.ne.contains(&0) {
            return Ok(0);
        }
        let ne0 = u64::from(self.ne[0]);
        if ne0 % block != 0 {
            return Err(Error::Malformed(format!(
                "tensor of ggml type {}: ne[0] = {ne0} is not a multiple of the block size {block}",
                self.dtype
            )));
        }
        let ovf = || Error::Malformed("tensor size overflows".into());
        let mut bytes = (ne0 / block - 1)
            .checked_mul(u64::from(self.nb[0]))
            .and_then(|b| b.checked_add(size))
            .ok_or_else(ovf)?;
        for i in 1..MAX_DIMS {
            let span = u64::from(self.ne[i] - 1)
                .checked_mul(u64::from(self.nb[i]))
                .ok_or_else(ovf)?;
            bytes = bytes.checked_add(span).ok_or_else(ovf)?;
        }
        Ok(bytes)
    }
}

/// ggml id of `GGML_TYPE_I8`, used for raw byte ranges.
pub const GGML_TYPE_I8: u32 = 24;

/// `(block size, bytes per block)` of the ggml types this crate accepts
/// on the wire. Unknown ids, removed types (Q4_2, Q4_3: block size 0
/// upstream, llama.cpp #20712) and types Tessera cannot compute or size
/// are refused.
pub fn type_traits(id: u32) -> Result<(u64, u64)> {
    let t = match id {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        20 => (32, 18),   // IQ4_NL
        23 => (256, 136), // IQ4_XS
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        30 => (1, 2),     // BF16
        _ => {
            return Err(Error::Malformed(format!(
                "ggml type id {id} is unknown or not accepted"
            )));
        }
    };
    Ok(t)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> RpcTensor {
        let mut t = RpcTensor {
            id: 0x1122_3344_5566_7788,
            dtype: 8,
            buffer: 0xAABB,
            ne: [1, 2, 3, 4],
            nb: [5, 6, 7, 8],
            op: 29,
            flags: -2,
            view_src: 77,
            view_offs: 99,
            data: 0xDEAD_BEEF,
            use_count: 3,
            ..RpcTensor::default()
        };
        for (i, p) in t.op_params.iter_mut().enumerate() {
            *p = i as i32 - 8;
        }
        for (i, s) in t.src.iter_mut().enumerate() {
            *s = 1000 + i as u64;
        }
        t.set_name("blk.0.attn_q.weight");
        t
    }

    fn at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
        b[off..off + N].try_into().unwrap()
    }

    /// Field offsets of the packed C struct `rpc_tensor` (ggml-rpc.cpp, v7.0.0).
    #[test]
    fn byte_layout_matches_packed_c_struct() {
        let t = sample();
        let mut b = Vec::new();
        t.encode(&mut b);
        assert_eq!(b.len(), RPC_TENSOR_SIZE);
        assert_eq!(RPC_TENSOR_SIZE % 8, 0, "static_assert in ggml-rpc.cpp");
        assert_eq!(u64::from_le_bytes(at(&b, 0)), t.id);
        assert_eq!(u32::from_le_bytes(at(&b, 8)), 8);
        assert_eq!(u64::from_le_bytes(at(&b, 12)), 0xAABB);
        assert_eq!(u32::from_le_bytes(at(&b, 20)), 1);
        assert_eq!(u32::from_le_bytes(at(&b, 32)), 4);
        assert_eq!(u32::from_le_bytes(at(&b, 36)), 5);
        assert_eq!(u32::from_le_bytes(at(&b, 48)), 8);
        assert_eq!(u32::from_le_bytes(at(&b, 52)), 29);
        assert_eq!(i32::from_le_bytes(at(&b, 56)), -8);
        assert_eq!(i32::from_le_bytes(at(&b, 116)), 7);
        assert_eq!(i32::from_le_bytes(at(&b, 120)), -2);
        assert_eq!(u64::from_le_bytes(at(&b, 124)), 1000);
        assert_eq!(u64::from_le_bytes(at(&b, 196)), 1009);
        assert_eq!(u64::from_le_bytes(at(&b, 204)), 77);
        assert_eq!(u64::from_le_bytes(at(&b, 212)), 99);
        assert_eq!(u64::from_le_bytes(at(&b, 220)), 0xDEAD_BEEF);
        assert_eq!(&b[228..247], b"blk.0.attn_q.weight");
        assert_eq!(b[247], 0);
        assert_eq!(i32::from_le_bytes(at(&b, 292)), 3);
        let mut r = Reader::new(&b);
        assert_eq!(RpcTensor::decode(&mut r).unwrap(), t);
        assert!(r.finish().is_ok());
    }

    #[test]
    fn truncated_tensor_is_an_error() {
        let mut b = Vec::new();
        sample().encode(&mut b);
        for n in [0, 1, 100, RPC_TENSOR_SIZE - 1] {
            assert!(RpcTensor::decode(&mut Reader::new(&b[..n])).is_err());
        }
    }

    #[test]
    fn nbytes_is_checked() {
        let mut t = RpcTensor {
            dtype: 0,
            ne: [4, 3, 1, 1],
            nb: [4, 16, 48, 48],
            ..RpcTensor::default()
        };
        assert_eq!(t.checked_nbytes().unwrap(), 48);
        t.ne = [4, 0, 1, 1];
        assert_eq!(t.checked_nbytes().unwrap(), 0);
        // Q8_0 with ne0 = 33: not whole blocks (llama.cpp #25288).
        t.dtype = 8;
        t.ne = [33, 1, 1, 1];
        t.nb = [34, 34, 34, 34];
        assert!(t.checked_nbytes().is_err());
        // Removed types Q4_2/Q4_3 and out-of-range ids (#13067, #20712).
        for id in [4, 5, 43, 1000, u32::MAX] {
            t.dtype = id;
            assert!(t.checked_nbytes().is_err(), "type {id}");
        }
        // Huge extents and strides do not wrap in u64: an error, never a
        // small size.
        t.dtype = 0;
        t.ne = [u32::MAX; 4];
        t.nb = [u32::MAX; 4];
        assert!(t.checked_nbytes().is_err());
        t.ne = [u32::MAX, 2, 1, 1];
        t.nb = [4, u32::MAX, 1, 1];
        let want = 4 + (u64::from(u32::MAX) - 1) * 4 + u64::from(u32::MAX);
        assert_eq!(t.checked_nbytes().unwrap(), want);
    }
}
