//! ggml's quantization block layouts, byte for byte.
//!
//! Quantized tensors are arrays of these blocks, exactly as ggml and GGUF
//! files store them (`block_q4_0`, `block_q4_1`, `block_q5_0`, `block_q5_1`,
//! `block_q8_0`, `block_q2_K`, `block_q3_K`, `block_q4_K`, `block_q5_K`, `block_q6_K`, `block_q8_K`, `block_iq4_nl`, `block_iq4_xs` of `ggml-common.h`): same field order, sizes and no padding,
//! checked at compile time against [`DType::type_size`]. Byte order is the
//! host's, as in ggml (little-endian on every target Tessera supports).
//!
//! The [`QuantBlock`] trait ties each block to its [`DType`] and its
//! reference quantizer, so kernels can be generic over the block type.

use std::fmt::Debug;
use std::mem::size_of;

use bytemuck::{Pod, Zeroable};
use half::f16;

use crate::dtype::DType;

/// Values per [`BlockQ4_0`].
pub const QK4_0: usize = 32;
/// Values per [`BlockQ4_1`].
pub const QK4_1: usize = 32;
/// Values per [`BlockQ5_0`].
pub const QK5_0: usize = 32;
/// Values per [`BlockQ5_1`].
pub const QK5_1: usize = 32;
/// Values per [`BlockQ8_0`].
pub const QK8_0: usize = 32;
/// Values per [`BlockQ8_1`].
pub const QK8_1: usize = 32;
/// Values per K-quant super-block ([`BlockQ4K`], [`BlockQ6K`], [`BlockQ8K`]).
pub const QK_K: usize = 256;
/// Values per [`BlockIQ4NL`].
pub const QK4_NL: usize = 32;
/// Bytes of packed 6-bit scales and mins in a [`BlockQ4K`] (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// A ggml quantization block of `QK` values.
///
/// `quantize` is ggml's *reference* quantizer for one block
/// (`quantize_row_*_ref`), `dequantize` its `dequantize_row_*`; both are
/// bit-exact with ggml's C on x86-64 and never panic, whatever the input.
pub trait QuantBlock<const QK: usize>: Pod + Debug {
    /// The element type these blocks make up.
    const DTYPE: DType;

    /// Quantizes `QK` values into one block.
    fn quantize(x: &[f32; QK]) -> Self;

    /// Writes the `QK` values this block stands for into `y`.
    fn dequantize(&self, y: &mut [f32; QK]);
}

/// `block_q4_0`: 32 values `x = d * (q - 8)` with 4-bit `q`.
///
/// `qs[j]` holds value `j` in its low nibble and value `j + 16` in its high one.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed nibbles.
    pub qs: [u8; QK4_0 / 2],
}

/// `block_q4_1`: 32 values `x = d * q + m` with 4-bit `q`.
///
/// `qs` is packed as in [`BlockQ4_0`]: value `j` low, value `j + 16` high.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of `q = 0`).
    pub m: f16,
    /// Packed nibbles.
    pub qs: [u8; QK4_1 / 2],
}

/// `block_q5_0`: 32 values `x = d * (q - 16)` with 5-bit `q`.
///
/// The low four bits are packed into `qs` as in [`BlockQ4_0`]; bit 4 of
/// value `j` is bit `j` of the little-endian u32 `qh`. `qh` is a byte array
/// as in ggml, so the block has no padding (22 bytes, 2-byte aligned).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits of the 32 quants (a little-endian u32).
    pub qh: [u8; 4],
    /// Packed low nibbles.
    pub qs: [u8; QK5_0 / 2],
}

/// `block_q5_1`: 32 values `x = d * q + m` with 5-bit `q`, bits laid out
/// as in [`BlockQ5_0`].
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (the value of `q = 0`).
    pub m: f16,
    /// Fifth bits of the 32 quants (a little-endian u32).
    pub qh: [u8; 4],
    /// Packed low nibbles.
    pub qs: [u8; QK5_1 / 2],
}

/// `block_q8_0`: 32 values `x = d * q` with `q` in -127..=127.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants.
    pub qs: [i8; QK8_0],
}

/// `block_q8_1`: 32 values `x = d * q` with `q` in -127..=127, and
/// `s = d * sum(q)`: the activation format of Q4_1 and Q5_1 dot products.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d` times the sum of the quants.
    pub s: f16,
    /// Quants.
    pub qs: [i8; QK8_1],
}

/// `block_q2_K`: 256 values in 16 sub-blocks of 16, `x = d*sc * q - dmin*m`
/// with 2-bit `q` and 4-bit sub-block scale `sc` (low nibble of
/// `scales[s]`) and min `m` (high nibble).
///
/// Per 128 values, `qs[32h..32h + 32]` holds values `128h + 32j + l` in bits
/// `2j..2j + 2` of byte `32h + l`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    /// 4-bit sub-block scales (low nibbles) and mins (high nibbles).
    pub scales: [u8; QK_K / 16],
    /// Packed 2-bit quants.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block mins.
    pub dmin: f16,
}

/// `block_q3_K`: 256 values in 16 sub-blocks of 16, `x = d * (sc - 32) * (q - 4)`
/// with 3-bit `q` (low 2 bits in `qs` as in [`BlockQ2K`], the high bit of
/// value `e` in bit `e / 32` of `hmask[e % 32]`) and 6-bit `sc`: low 4 bits
/// in the nibbles of `scales[0..8]`, high 2 bits in `scales[8..12]`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bits of the quants.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the quants.
    pub qs: [u8; QK_K / 4],
    /// Packed 6-bit sub-block scales.
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

/// `block_q4_K`: 256 values in 8 sub-blocks of 32, `x = d*sc * q - dmin*m`
/// with 4-bit `q` and 6-bit sub-block scale `sc` and min `m`.
///
/// `scales` packs the eight `(sc, m)` pairs; read them with
/// [`get_scale_min_k4`](super::get_scale_min_k4). `qs` holds sub-blocks
/// `2i` (low nibbles) and `2i + 1` (high nibbles) in bytes `32i..32i + 32`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block mins.
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and mins.
    pub scales: [u8; K_SCALE_SIZE],
    /// Packed nibbles.
    pub qs: [u8; QK_K / 2],
}

/// `block_q5_K`: 256 values in 8 sub-blocks of 32, `x = d*sc * q - dmin*m`
/// with 5-bit `q`: the low 4 bits packed as in [`BlockQ4K`], the high bit of
/// value `e` in bit `e / 32` of `qh[e % 32]`; scales and mins as in Q4_K.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block mins.
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and mins.
    pub scales: [u8; K_SCALE_SIZE],
    /// High bits of the quants.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of the quants.
    pub qs: [u8; QK_K / 2],
}

/// `block_q6_K`: 256 values in 16 sub-blocks of 16, `x = d * scales[s] * (q - 32)`
/// with 6-bit `q` split into low 4 bits (`ql`) and high 2 bits (`qh`).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants.
    pub qh: [u8; QK_K / 4],
    /// 8-bit sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

/// `block_q8_K`: 256 values `x = d * q`, plus the sums of each 16 quants
/// (used by K-quant dot products). Activations only; never stored in files.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale (an f32, unlike the other blocks).
    pub d: f32,
    /// Quants.
    pub qs: [i8; QK_K],
    /// Sums of the quants in groups of 16.
    pub bsums: [i16; QK_K / 16],
}

/// `block_iq4_nl`: 32 values `x = d * kvalues_iq4nl[q]` with 4-bit `q`.
///
/// `qs` is packed as in [`BlockQ4_0`]: value `j` low, value `j + 16` high.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4NL {
    /// Scale.
    pub d: f16,
    /// Packed 4-bit table indices.
    pub qs: [u8; QK4_NL / 2],
}

/// `block_iq4_xs`: 256 values in 8 sub-blocks of 32,
/// `x = d * (ls - 32) * kvalues_iq4nl[q]` with a 6-bit sub-block scale `ls`.
///
/// `ls` of sub-block `ib` is nibble `ib % 2` of `scales_l[ib / 2]` (low
/// bits) and bits `2 ib..2 ib + 2` of `scales_h` (high bits); read it with
/// [`iq4_xs_scale`](super::iq4_xs_scale). `qs[16 ib..16 ib + 16]` packs
/// sub-block `ib` as a [`BlockIQ4NL`] does.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    /// Super-block scale.
    pub d: f16,
    /// High 2 bits of the 8 sub-block scales (a little-endian u16).
    pub scales_h: [u8; 2],
    /// Low 4 bits of the 8 sub-block scales.
    pub scales_l: [u8; QK_K / 64],
    /// Packed 4-bit table indices.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4_0>() == DType::Q4_0.type_size());
const _: () = assert!(size_of::<BlockQ4_1>() == DType::Q4_1.type_size());
const _: () = assert!(size_of::<BlockQ5_0>() == DType::Q5_0.type_size());
const _: () = assert!(size_of::<BlockQ5_1>() == DType::Q5_1.type_size());
const _: () = assert!(size_of::<BlockQ8_0>() == DType::Q8_0.type_size());
const _: () = assert!(size_of::<BlockQ8_1>() == DType::Q8_1.type_size());
const _: () = assert!(size_of::<BlockQ2K>() == DType::Q2K.type_size());
const _: () = assert!(size_of::<BlockQ3K>() == DType::Q3K.type_size());
const _: () = assert!(size_of::<BlockQ4K>() == DType::Q4K.type_size());
const _: () = assert!(size_of::<BlockQ5K>() == DType::Q5K.type_size());
const _: () = assert!(size_of::<BlockQ6K>() == DType::Q6K.type_size());
const _: () = assert!(size_of::<BlockQ8K>() == DType::Q8K.type_size());
const _: () = assert!(size_of::<BlockIQ4NL>() == DType::IQ4NL.type_size());
const _: () = assert!(size_of::<BlockIQ4XS>() == DType::IQ4XS.type_size());
const _: () = assert!(QK4_NL == DType::IQ4NL.block_size());
const _: () = assert!(QK_K == DType::IQ4XS.block_size());
const _: () = assert!(QK4_0 == DType::Q4_0.block_size());
const _: () = assert!(QK4_1 == DType::Q4_1.block_size());
const _: () = assert!(QK5_0 == DType::Q5_0.block_size());
const _: () = assert!(QK5_1 == DType::Q5_1.block_size());
const _: () = assert!(QK8_0 == DType::Q8_0.block_size());
const _: () = assert!(QK8_1 == DType::Q8_1.block_size());
const _: () = assert!(QK_K == DType::Q4K.block_size());
const _: () = assert!(QK_K == DType::Q6K.block_size());
const _: () = assert!(QK_K == DType::Q8K.block_size());

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn field_offsets_match_ggml_common_h() {
        assert_eq!(offset_of!(BlockQ4_0, qs), 2);
        assert_eq!(offset_of!(BlockQ4_1, m), 2);
        assert_eq!(offset_of!(BlockQ4_1, qs), 4);
        assert_eq!(offset_of!(BlockQ5_0, qh), 2);
        assert_eq!(offset_of!(BlockQ5_0, qs), 6);
        assert_eq!(offset_of!(BlockQ5_1, m), 2);
        assert_eq!(offset_of!(BlockQ5_1, qh), 4);
        assert_eq!(offset_of!(BlockQ5_1, qs), 8);
        assert_eq!(size_of::<BlockQ4_1>(), 20);
        assert_eq!(size_of::<BlockQ5_0>(), 22);
        assert_eq!(size_of::<BlockQ5_1>(), 24);
        assert_eq!(offset_of!(BlockQ8_0, qs), 2);
        assert_eq!(offset_of!(BlockQ8_1, s), 2);
        assert_eq!(offset_of!(BlockQ8_1, qs), 4);
        assert_eq!(size_of::<BlockQ8_1>(), 36);
        assert_eq!(offset_of!(BlockQ4K, dmin), 2);
        assert_eq!(offset_of!(BlockQ4K, scales), 4);
        assert_eq!(offset_of!(BlockQ4K, qs), 16);
        assert_eq!(offset_of!(BlockQ2K, qs), 16);
        assert_eq!(offset_of!(BlockQ2K, d), 80);
        assert_eq!(offset_of!(BlockQ2K, dmin), 82);
        assert_eq!(offset_of!(BlockQ3K, qs), 32);
        assert_eq!(offset_of!(BlockQ3K, scales), 96);
        assert_eq!(offset_of!(BlockQ3K, d), 108);
        assert_eq!(offset_of!(BlockQ5K, scales), 4);
        assert_eq!(offset_of!(BlockQ5K, qh), 16);
        assert_eq!(offset_of!(BlockQ5K, qs), 48);
        assert_eq!(offset_of!(BlockQ6K, qh), 128);
        assert_eq!(offset_of!(BlockQ6K, scales), 192);
        assert_eq!(offset_of!(BlockQ6K, d), 208);
        assert_eq!(offset_of!(BlockQ8K, qs), 4);
        assert_eq!(offset_of!(BlockQ8K, bsums), 260);
        assert_eq!(offset_of!(BlockIQ4NL, qs), 2);
        assert_eq!(offset_of!(BlockIQ4XS, scales_h), 2);
        assert_eq!(offset_of!(BlockIQ4XS, scales_l), 4);
        assert_eq!(offset_of!(BlockIQ4XS, qs), 8);
    }

    #[test]
    fn trait_dtypes_match() {
        assert_eq!(<BlockQ4_0 as QuantBlock<QK4_0>>::DTYPE, DType::Q4_0);
        assert_eq!(<BlockQ4_1 as QuantBlock<QK4_1>>::DTYPE, DType::Q4_1);
        assert_eq!(<BlockQ5_0 as QuantBlock<QK5_0>>::DTYPE, DType::Q5_0);
        assert_eq!(<BlockQ5_1 as QuantBlock<QK5_1>>::DTYPE, DType::Q5_1);
        assert_eq!(<BlockQ8_0 as QuantBlock<QK8_0>>::DTYPE, DType::Q8_0);
        assert_eq!(<BlockQ8_1 as QuantBlock<QK8_1>>::DTYPE, DType::Q8_1);
        assert_eq!(<BlockQ2K as QuantBlock<QK_K>>::DTYPE, DType::Q2K);
        assert_eq!(<BlockQ3K as QuantBlock<QK_K>>::DTYPE, DType::Q3K);
        assert_eq!(<BlockQ4K as QuantBlock<QK_K>>::DTYPE, DType::Q4K);
        assert_eq!(<BlockQ5K as QuantBlock<QK_K>>::DTYPE, DType::Q5K);
        assert_eq!(<BlockQ6K as QuantBlock<QK_K>>::DTYPE, DType::Q6K);
        assert_eq!(<BlockQ8K as QuantBlock<QK_K>>::DTYPE, DType::Q8K);
    }
}
