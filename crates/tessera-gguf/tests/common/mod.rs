//! Shared builders for the GGUF tests: a valid file with metadata of every
//! type and tensors of several types, and helpers to find and patch fields.

#![allow(dead_code, clippy::unwrap_used)]

use tessera::DType;
use tessera::quant;
use tessera_gguf::{GgufWriter, Value, ValueType};

/// `n` deterministic f32 values in [-1, 1].
pub fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 50.0)
        .collect()
}

/// Bytes of `v` stored as `dtype`.
pub fn encode(dtype: DType, v: &[f32]) -> Vec<u8> {
    let n = tessera::Layout::contiguous(dtype, &[v.len()])
        .unwrap()
        .nbytes();
    let mut out = vec![0u8; n];
    quant::from_f32(dtype, v, &mut out).unwrap();
    out
}

/// One metadata value of every type, plus nested arrays.
pub fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo \"gguf\"".into())),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f64", Value::F64(-2.25e300)),
        ("t.arr_i32", Value::array(ValueType::I32, [1i32, -2, 3])),
        (
            "t.arr_str",
            Value::array(ValueType::String, ["a", "", "ccc"]),
        ),
        ("t.arr_empty", Value::Array(ValueType::F32, vec![])),
        (
            "t.nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::array(ValueType::U8, [1u8, 2]),
                    Value::array(ValueType::U8, [3u8]),
                ],
            ),
        ),
    ]
}

/// A writer holding every value type and an F32, an F16 and a Q8_0 tensor.
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.add(k, v);
    }
    add_tensors(&mut w);
    w
}

/// F32 [3, 2], F16 [5], Q8_0 [64, 2] ("a", "b", "q").
pub fn add_tensors(w: &mut GgufWriter) {
    w.add_tensor("a", DType::F32, &[3, 2], &encode(DType::F32, &values(6, 1)))
        .unwrap();
    w.add_tensor("b", DType::F16, &[5], &encode(DType::F16, &values(5, 2)))
        .unwrap();
    w.add_tensor(
        "q",
        DType::Q8_0,
        &[64, 2],
        &encode(DType::Q8_0, &values(128, 3)),
    )
    .unwrap();
}

/// Byte offset of the first occurrence of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

/// Byte offset of the field right after tensor `name`'s name in the tensor
/// infos (its n_dims).
pub fn tensor_info_at(bytes: &[u8], name: &str) -> usize {
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    // Tensor infos follow the KVs; search from the last match.
    let mut at = None;
    let mut from = 0;
    while let Some(p) = hay_find(&bytes[from..], &needle) {
        at = Some(from + p);
        from += p + 1;
    }
    at.unwrap() + needle.len()
}

fn hay_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Byte offset of tensor `name`'s stored data offset (u64).
pub fn tensor_offset_at(bytes: &[u8], name: &str) -> usize {
    let at = tensor_info_at(bytes, name);
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    at + 4 + 8 * n_dims + 4
}

/// Byte offset of tensor `name`'s type id (u32).
pub fn tensor_type_at(bytes: &[u8], name: &str) -> usize {
    tensor_offset_at(bytes, name) - 4
}

pub fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
