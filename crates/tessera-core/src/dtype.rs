//! Element types, with ggml's numbering and byte layouts.
//!
//! A [`DType`] knows its block size (elements per block: 1 for plain types,
//! 32 or 256 for quantized ones) and the bytes per block, exactly as ggml
//! stores them, so rows and whole tensors are byte-compatible with ggml and
//! GGUF files. The block structs themselves live in [`crate::quant`].

use crate::error::{Error, Result};

/// The element types Tessera understands.
///
/// The discriminants are ggml's `enum ggml_type` values, which GGUF files use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum DType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary16.
    F16 = 1,
    /// 32-element blocks of 4-bit ints with one f16 scale: `x = d * (q - 8)`.
    Q4_0 = 2,
    /// 32-element blocks of 4-bit ints with an f16 scale and min: `x = d * q + m`.
    Q4_1 = 3,
    /// 32-element blocks of 5-bit ints with one f16 scale: `x = d * (q - 16)`.
    Q5_0 = 6,
    /// 32-element blocks of 5-bit ints with an f16 scale and min: `x = d * q + m`.
    Q5_1 = 7,
    /// 32-element blocks of i8 with one f16 scale: `x = d * q`.
    Q8_0 = 8,
    /// 32-element blocks of i8 with an f16 scale and the f16 `d * sum(q)`;
    /// the activation type of Q4_1 and Q5_1 dot products (like [`DType::Q8K`],
    /// not a weight or storage type).
    Q8_1 = 9,
    /// 256-element super-blocks of 2-bit ints, 16 sub-blocks with 4-bit scales and mins.
    Q2K = 10,
    /// 256-element super-blocks of 3-bit ints, 16 sub-blocks with 6-bit scales.
    Q3K = 11,
    /// 256-element super-blocks of 4-bit ints, 8 sub-blocks with 6-bit scales and mins.
    Q4K = 12,
    /// 256-element super-blocks of 5-bit ints, 8 sub-blocks with 6-bit scales and mins.
    Q5K = 13,
    /// 256-element super-blocks of 6-bit ints, 16 sub-blocks with i8 scales.
    Q6K = 14,
    /// 256-element blocks of i8 with an f32 scale and 16 partial sums; the
    /// activation type of K-quant dot products (never stored in files).
    Q8K = 15,
    /// 32-element blocks of 4-bit indices into ggml's non-linear table
    /// `kvalues_iq4nl`, with one f16 scale: `x = d * kvalues[q]`.
    IQ4NL = 20,
    /// 256-element super-blocks of 4-bit indices into `kvalues_iq4nl`, an f16
    /// scale and 8 sub-blocks with 6-bit scales: `x = d * (ls - 32) * kvalues[q]`.
    IQ4XS = 23,
    /// 32-bit signed integer (indices, positions).
    I32 = 26,
    /// 64-bit signed integer (row indices for `SET_ROWS`).
    I64 = 27,
    /// bfloat16: the upper half of an f32.
    BF16 = 30,
}

/// Every type, in ggml id order.
pub const ALL_DTYPES: [DType; 19] = [
    DType::F32,
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q8_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::Q8K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::I32,
    DType::I64,
    DType::BF16,
];

impl DType {
    /// Elements per block (1 for non-quantized types).
    pub const fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::I64 => 1,
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4NL => 32,
            DType::Q2K
            | DType::Q3K
            | DType::Q4K
            | DType::Q5K
            | DType::Q6K
            | DType::Q8K
            | DType::IQ4XS => 256,
        }
    }

    /// Bytes per block (the element size for non-quantized types).
    pub const fn type_size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::Q8K => 292,
            DType::IQ4NL => 18,
            DType::IQ4XS => 136,
        }
    }

    /// True for block-quantized types.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for the floating-point types F32, F16, BF16.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// True for the integer types I32, I64.
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// The name ggml prints (`f32`, `q4_0`, `q4_K`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q8_0 => "q8_0",
            DType::Q8_1 => "q8_1",
            DType::Q2K => "q2_K",
            DType::Q3K => "q3_K",
            DType::Q4K => "q4_K",
            DType::Q5K => "q5_K",
            DType::Q6K => "q6_K",
            DType::Q8K => "q8_K",
            DType::IQ4NL => "iq4_nl",
            DType::IQ4XS => "iq4_xs",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::BF16 => "bf16",
        }
    }

    /// ggml's numeric type id (as stored in GGUF).
    pub const fn ggml_id(self) -> u32 {
        self as u32
    }

    /// The type with ggml id `id`, or an error naming the id.
    pub fn from_ggml_id(id: u32) -> Result<Self> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|t| t.ggml_id() == id)
            .ok_or_else(|| Error::NotFound(format!("ggml type id {id} (not supported by Tessera)")))
    }

    /// The type named `name` (case-insensitive: `q4_k` and `Q4_K` both work).
    pub fn from_name(name: &str) -> Result<Self> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::NotFound(format!("type '{name}'")))
    }

    /// Bytes of a row of `ne0` elements; an error if `ne0` is not a multiple
    /// of the block size (ggml asserts here; Tessera returns an error).
    pub fn row_size(self, ne0: usize) -> Result<usize> {
        let bs = self.block_size();
        if !ne0.is_multiple_of(bs) {
            return Err(Error::BlockSize {
                dtype: self.name(),
                ne0,
                block: bs,
            });
        }
        (ne0 / bs)
            .checked_mul(self.type_size())
            .ok_or_else(|| Error::Overflow(format!("row of {ne0} {} elements", self.name())))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_names_parse() {
        for t in ALL_DTYPES {
            assert_eq!(DType::from_ggml_id(t.ggml_id()).ok(), Some(t));
            assert_eq!(DType::from_name(&t.name().to_uppercase()).ok(), Some(t));
        }
        assert!(DType::from_ggml_id(4).is_err());
        assert!(DType::from_ggml_id(5).is_err());
        assert!(DType::from_name("iq2_xxs").is_err());
        assert_eq!(DType::from_name("q5_k").ok(), Some(DType::Q5K));
        assert_eq!(DType::from_ggml_id(10).ok(), Some(DType::Q2K));
        assert_eq!(DType::from_ggml_id(11).ok(), Some(DType::Q3K));
        assert_eq!(DType::from_ggml_id(13).ok(), Some(DType::Q5K));
        assert_eq!(DType::from_ggml_id(3).ok(), Some(DType::Q4_1));
        assert_eq!(DType::from_ggml_id(6).ok(), Some(DType::Q5_0));
        assert_eq!(DType::from_ggml_id(7).ok(), Some(DType::Q5_1));
        assert_eq!(DType::from_name("Q5_1").ok(), Some(DType::Q5_1));
    }

    #[test]
    fn row_size_checks_block_multiple() {
        assert_eq!(DType::Q4_0.row_size(64).ok(), Some(36));
        assert_eq!(DType::Q4_1.row_size(64).ok(), Some(40));
        assert_eq!(DType::Q5_0.row_size(64).ok(), Some(44));
        assert_eq!(DType::Q5_1.row_size(64).ok(), Some(48));
        assert!(DType::Q5_0.row_size(48).is_err());
        assert_eq!(DType::Q6K.row_size(512).ok(), Some(420));
        assert_eq!(DType::IQ4NL.row_size(64).ok(), Some(36));
        assert_eq!(DType::IQ4XS.row_size(512).ok(), Some(272));
        assert_eq!(DType::from_ggml_id(20).ok(), Some(DType::IQ4NL));
        assert_eq!(DType::from_ggml_id(23).ok(), Some(DType::IQ4XS));
        assert_eq!(DType::from_name("IQ4_XS").ok(), Some(DType::IQ4XS));
        assert!(matches!(
            DType::Q4K.row_size(100),
            Err(Error::BlockSize { .. })
        ));
        assert!(matches!(
            DType::F32.row_size(usize::MAX),
            Err(Error::Overflow(_))
        ));
    }
}
