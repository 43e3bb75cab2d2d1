//! One test per validation rule: a valid file from the writer, corrupted in
//! one specific way, must give the specific `Error::Malformed`.

#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::*;
use tessera::{DType, Error};
use tessera_gguf::{GgufFile, GgufWriter, MAX_ARRAY_DEPTH, Value, ValueType};

/// The message of the `Malformed` error `bytes` must give.
fn malformed(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Err(Error::Malformed(m)) => m,
        Err(e) => panic!("expected Malformed, got {e:?}"),
        Ok(f) => panic!("accepted a corrupt file: {f:?}"),
    }
}

fn assert_has(m: &str, parts: &[&str]) {
    for p in parts {
        assert!(m.contains(p), "{m:?} lacks {p:?}");
    }
}

fn sample() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

/// Offset of the u32 type of KV `key`.
fn kv_type_at(bytes: &[u8], key: &str) -> usize {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    find(bytes, &needle) + needle.len()
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample();
    // Whole file minus trailing padding of the last tensor still reads; any
    // cut inside the header, the infos or a tensor's bytes does not.
    let q = GgufFile::from_bytes(bytes.clone()).unwrap();
    let end = q
        .tensors()
        .iter()
        .map(|t| t.file_offset + t.nbytes.unwrap())
        .max()
        .unwrap();
    for n in 0..end {
        let m = malformed(bytes[..n].to_vec());
        assert!(
            m.contains("truncated") || m.contains("past the end") || m.contains("remaining"),
            "cut at {n}: {m}"
        );
    }
    assert!(GgufFile::from_bytes(bytes[..end].to_vec()).is_ok());
}

#[test]
fn bad_magic() {
    let mut b = sample();
    b[0] = b'X';
    assert_has(&malformed(b), &["bad magic", "offset 0"]);
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, u32::MAX] {
        let mut b = sample();
        put_u32(&mut b, 4, v);
        assert_has(&malformed(b), &["unsupported GGUF version", &v.to_string()]);
    }
}

#[test]
fn absurd_tensor_and_kv_counts() {
    let mut b = sample();
    put_u64(&mut b, 8, 1 << 40);
    assert_has(
        &malformed(b),
        &["tensor count", "1099511627776", "offset 8"],
    );
    let mut b = sample();
    put_u64(&mut b, 16, u64::MAX);
    assert_has(&malformed(b), &["metadata count", "offset 16"]);
}

#[test]
fn string_length_beyond_the_file() {
    let mut b = sample();
    // The first key's length.
    put_u64(&mut b, 24, 1 << 50);
    assert_has(
        &malformed(b),
        &["key of metadata entry 0 length", "offset 24"],
    );
}

#[test]
fn array_count_beyond_the_file() {
    let mut b = sample();
    let at = kv_type_at(&b, "t.arr_i32");
    put_u64(&mut b, at + 8, u64::MAX / 2);
    assert_has(&malformed(b), &["'t.arr_i32' element count"]);
}

fn nested(depth: usize) -> Value {
    let mut v = Value::array(ValueType::U8, [7u8]);
    for _ in 1..depth {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    v
}

#[test]
fn arrays_nested_too_deep() {
    let mut w = GgufWriter::new();
    w.add("ok", nested(MAX_ARRAY_DEPTH));
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.value("ok"), Some(&nested(MAX_ARRAY_DEPTH)));
    let mut w = GgufWriter::new();
    w.add("deep", nested(MAX_ARRAY_DEPTH + 1));
    assert_has(
        &malformed(w.to_bytes().unwrap()),
        &["'deep'", "nested deeper than 8"],
    );
}

#[test]
fn dimension_counts_0_and_5() {
    for n in [0u32, 5] {
        let mut b = sample();
        let at = tensor_info_at(&b, "a");
        put_u32(&mut b, at, n);
        assert_has(&malformed(b), &["tensor 'a'", &format!("{n} dimensions")]);
    }
}

#[test]
fn dimension_product_overflows() {
    let mut w = GgufWriter::new();
    w.add_tensor_raw("big", 0, &[1 << 40, 1 << 40], &[]);
    assert_has(&malformed(w.to_bytes().unwrap()), &["'big'", "overflows"]);
    // Elements fit but bytes do not.
    let mut w = GgufWriter::new();
    w.add_tensor_raw("wide", 0, &[1 << 31, 1 << 31, 4], &[]);
    assert_has(&malformed(w.to_bytes().unwrap()), &["'wide'", "overflows"]);
}

#[test]
fn bad_alignments() {
    for a in [0u32, 48, 2 << 20] {
        let mut w = GgufWriter::new();
        w.add("general.alignment", a);
        assert_has(
            &malformed(w.to_bytes().unwrap()),
            &["general.alignment", &a.to_string()],
        );
    }
    let mut w = GgufWriter::new();
    w.add("general.alignment", 64u64);
    assert_has(
        &malformed(w.to_bytes().unwrap()),
        &["general.alignment", "u64", "expected u32"],
    );
}

#[test]
fn tensor_data_outside_the_file() {
    let mut b = sample();
    let at = tensor_offset_at(&b, "q");
    put_u64(&mut b, at, 1 << 20);
    assert_has(&malformed(b), &["tensor 'q'", "past the end"]);
    let mut b = sample();
    let at = tensor_offset_at(&b, "q");
    put_u64(&mut b, at, u64::MAX - 31);
    assert_has(&malformed(b), &["tensor 'q'", "past the end"]);
}

#[test]
fn overlapping_tensors() {
    let mut b = sample();
    let at = tensor_offset_at(&b, "q");
    put_u64(&mut b, at, 0);
    assert_has(&malformed(b), &["'a'", "'q'", "overlap"]);
}

#[test]
fn misaligned_data_offset() {
    let mut b = sample();
    let at = tensor_offset_at(&b, "b");
    put_u64(&mut b, at, 40);
    assert_has(&malformed(b), &["tensor 'b'", "offset 40", "alignment 32"]);
}

#[test]
fn unknown_value_type_id() {
    let mut b = sample();
    let at = kv_type_at(&b, "t.u16");
    put_u32(&mut b, at, 13);
    assert_has(
        &malformed(b),
        &[
            "unknown value type id 13",
            "'t.u16'",
            &format!("offset {at}"),
        ],
    );
    let mut b = sample();
    let at = kv_type_at(&b, "t.arr_i32");
    put_u32(&mut b, at + 4, 99);
    assert_has(&malformed(b), &["unknown value type id 99", "t.arr_i32"]);
}

#[test]
fn row_not_a_multiple_of_the_block_size() {
    let mut w = GgufWriter::new();
    w.add_tensor_raw("q", DType::Q8_0.ggml_id(), &[33, 2], &[0; 80]);
    assert_has(
        &malformed(w.to_bytes().unwrap()),
        &["'q'", "ne[0] = 33", "q8_0", "32"],
    );
}

#[test]
fn duplicate_names() {
    let mut w = GgufWriter::new();
    w.add("k", 1u32).add("k", 2u32);
    assert_has(
        &malformed(w.to_bytes().unwrap()),
        &["duplicate metadata key 'k'"],
    );
    let mut w = GgufWriter::new();
    w.add_tensor("t", DType::F32, &[1], &[0; 4]).unwrap();
    w.add_tensor("t", DType::F32, &[1], &[0; 4]).unwrap();
    assert_has(
        &malformed(w.to_bytes().unwrap()),
        &["duplicate tensor name 't'"],
    );
}

#[test]
fn non_utf8_strings() {
    let mut b = sample();
    let at = kv_type_at(&b, "t.string");
    b[at + 4 + 8] = 0xff;
    assert_has(&malformed(b), &["'t.string'", "not UTF-8"]);
    let mut b = sample();
    let at = tensor_info_at(&b, "q");
    b[at - 1] = 0xc0;
    assert_has(&malformed(b), &["name of tensor 2", "not UTF-8"]);
}

#[test]
fn bool_other_than_0_or_1() {
    let mut b = sample();
    let at = kv_type_at(&b, "t.bool");
    b[at + 4] = 2;
    assert_has(&malformed(b), &["'t.bool'", "bool byte 2"]);
}
