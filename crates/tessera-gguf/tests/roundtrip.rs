//! Writer → reader round trips: every value type, nested arrays, several
//! tensors of several types, alignments 32 and 64, v2 and v3 headers, typed
//! accessors and their errors, and reading through a memory map.

#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use common::*;
use tessera::{DType, Error};
use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};

fn check_sample(f: &GgufFile, alignment: usize) {
    for (k, v) in every_value() {
        assert_eq!(f.value(k), Some(&v), "{k}");
    }
    assert_eq!(f.alignment(), alignment);
    assert_eq!(f.data_offset() % alignment, 0);
    let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "q"]);
    for (name, dtype, ne, seed) in [
        ("a", DType::F32, vec![3, 2], 1),
        ("b", DType::F16, vec![5], 2),
        ("q", DType::Q8_0, vec![64, 2], 3),
    ] {
        let t = f.tensor_info(name).unwrap();
        assert_eq!(t.dtype, Some(dtype));
        assert_eq!(t.type_id, dtype.ggml_id());
        assert_eq!(t.ne, ne);
        assert_eq!(t.offset % alignment as u64, 0, "{name}");
        assert_eq!(t.file_offset, f.data_offset() + t.offset as usize);
        let n: usize = ne.iter().product();
        let want = encode(dtype, &values(n, seed));
        assert_eq!(t.nbytes, Some(want.len()));
        assert_eq!(f.tensor_data(name).unwrap(), &want[..], "{name}");
    }
}

#[test]
fn every_value_type_and_tensor_round_trips_v3_align_32() {
    let bytes = sample_writer().to_bytes().unwrap();
    assert_eq!(&bytes[..4], b"GGUF");
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert!(f.value("general.alignment").is_none());
    check_sample(&f, 32);
}

#[test]
fn v2_header_and_alignment_64_round_trip() {
    let mut w = GgufWriter::new().version(2).alignment(64).unwrap();
    for (k, v) in every_value() {
        w.add(k, v);
    }
    add_tensors(&mut w);
    let bytes = w.to_bytes().unwrap();
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 2);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.get::<u32>("general.alignment").unwrap(), 64);
    check_sample(&f, 64);
    // 6 f32 = 24 bytes, padded to 64: "b" starts at 64, "q" at 128.
    assert_eq!(f.tensor_info("b").unwrap().offset, 64);
    assert_eq!(f.tensor_info("q").unwrap().offset, 128);
}

#[test]
fn typed_accessors_convert_exactly_the_stored_type() {
    let f = GgufFile::from_bytes(sample_writer().to_bytes().unwrap()).unwrap();
    assert_eq!(f.get::<u8>("t.u8").unwrap(), 200);
    assert_eq!(f.get::<i8>("t.i8").unwrap(), -100);
    assert_eq!(f.get::<u16>("t.u16").unwrap(), 60000);
    assert_eq!(f.get::<i16>("t.i16").unwrap(), -30000);
    assert_eq!(f.get::<u32>("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get::<i32>("t.i32").unwrap(), -2_000_000_000);
    assert_eq!(f.get::<f32>("t.f32").unwrap(), 1.5);
    assert!(f.get::<bool>("t.bool").unwrap());
    assert_eq!(f.get::<&str>("t.string").unwrap(), "héllo \"gguf\"");
    assert_eq!(f.get::<String>("t.string").unwrap(), "héllo \"gguf\"");
    assert_eq!(f.get::<u64>("t.u64").unwrap(), u64::MAX - 1);
    assert_eq!(f.get::<i64>("t.i64").unwrap(), i64::MIN + 1);
    assert_eq!(f.get::<f64>("t.f64").unwrap(), -2.25e300);
    assert_eq!(f.get::<Vec<i32>>("t.arr_i32").unwrap(), [1, -2, 3]);
    assert_eq!(f.get::<Vec<&str>>("t.arr_str").unwrap(), ["a", "", "ccc"]);
    assert!(f.get::<Vec<f32>>("t.arr_empty").unwrap().is_empty());
    assert_eq!(
        f.get::<Vec<Vec<u8>>>("t.nested").unwrap(),
        [vec![1, 2], vec![3]]
    );
}

#[test]
fn wrong_type_names_key_expected_and_found() {
    let f = GgufFile::from_bytes(sample_writer().to_bytes().unwrap()).unwrap();
    match f.get::<u64>("t.u32") {
        Err(Error::Malformed(m)) => {
            assert!(
                m.contains("t.u32") && m.contains("expected u64") && m.contains("found u32"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    match f.get::<Vec<String>>("t.nested") {
        Err(Error::Malformed(m)) => {
            assert!(
                m.contains("expected array<string>") && m.contains("found array<array<u8>>"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    match f.get::<u32>("llama.block_count") {
        Err(Error::NotFound(m)) => assert!(m.contains("llama.block_count"), "{m}"),
        other => panic!("{other:?}"),
    }
    match f.tensor_info("nope") {
        Err(Error::NotFound(m)) => assert!(m.contains("nope"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn writer_refuses_mixed_arrays_and_wrong_tensor_sizes() {
    let mut w = GgufWriter::new();
    w.add(
        "bad",
        Value::Array(ValueType::U8, vec![Value::U8(1), Value::I8(2)]),
    );
    assert!(matches!(w.to_bytes(), Err(Error::Malformed(m)) if m.contains("bad")));
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("t", DType::F32, &[4], &[0; 15]).is_err());
    assert!(GgufWriter::new().alignment(48).is_err());
}

#[test]
fn unknown_tensor_type_is_listed_but_not_readable() {
    let mut w = GgufWriter::new();
    w.add_tensor_raw("odd", 1000, &[32], &[0; 20]);
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let t = f.tensor_info("odd").unwrap();
    assert_eq!((t.type_id, t.dtype, t.nbytes), (1000, None, None));
    assert_eq!(t.type_name(), "type#1000");
    match f.tensor_data("odd") {
        Err(e) => assert!(
            e.to_string().contains("odd") && e.to_string().contains("type id 1000"),
            "{e}"
        ),
        Ok(_) => panic!("read a tensor of unknown type"),
    }
}

#[test]
fn open_reads_and_open_mapped_maps_a_file_from_disk() {
    let dir = std::env::temp_dir().join(format!("tessera-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    sample_writer().write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    check_sample(&f, 32);
    // SAFETY: the test wrote the file and nothing changes it while mapped.
    let m = unsafe { GgufFile::open_mapped(&path) }.unwrap();
    check_sample(&m, 32);
    let missing = GgufFile::open(dir.join("missing.gguf")).unwrap_err();
    assert!(missing.to_string().contains("missing.gguf"), "{missing}");
    // SAFETY: the file does not exist; nothing is mapped.
    let missing = unsafe { GgufFile::open_mapped(dir.join("missing.gguf")) }.unwrap_err();
    assert!(missing.to_string().contains("missing.gguf"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}
