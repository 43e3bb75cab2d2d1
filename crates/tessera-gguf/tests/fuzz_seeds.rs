//! The fuzz target's seed corpus (`fuzz/seeds/`): valid files written by
//! [`GgufWriter`] — every value type, nested arrays, every tensor type
//! (quantized ones included), versions 2 and 3, several alignments — plus
//! the gguf-py fixture. `write_fuzz_seeds` (ignored) regenerates them;
//! `fuzz_seeds_parse` checks that every committed seed still reads back
//! and binds.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::*;
use tessera::DType;
use tessera::dtype::ALL_DTYPES;
use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};

fn seeds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds")
}

/// `n` bytes of a deterministic pattern (quantized blocks whose scales are
/// arbitrary f16s, NaN and infinity included).
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One tensor of `dtype` with two rows of one block each.
fn add_one(w: &mut GgufWriter, name: &str, dtype: DType) {
    let ne = [dtype.block_size(), 2];
    let n = dtype.row_size(ne[0]).unwrap() * 2;
    let bytes = if dtype == DType::Q8K {
        pattern(n, 7)
    } else {
        let mut out = vec![0u8; n];
        match tessera::quant::from_f32(dtype, &values(ne[0] * 2, 5), &mut out) {
            Ok(()) => out,
            Err(_) => pattern(n, 3),
        }
    };
    w.add_tensor(name, dtype, &ne, &bytes).unwrap();
}

/// A few small metadata entries of a real model's kind.
fn model_kvs(w: &mut GgufWriter) {
    w.add("general.architecture", "llama");
    w.add("general.name", "seed");
    w.add("llama.block_count", 2u32);
    w.add("llama.context_length", 128u32);
    w.add("llama.embedding_length", 64u32);
    w.add("llama.attention.head_count", 4u32);
    w.add("llama.attention.layer_norm_rms_epsilon", 1e-5f32);
    w.add("tokenizer.ggml.model", "llama");
    w.add(
        "tokenizer.ggml.tokens",
        Value::array(ValueType::String, ["<unk>", "<s>", "</s>", "a", "b"]),
    );
    w.add(
        "tokenizer.ggml.scores",
        Value::array(ValueType::F32, [0f32, 0.0, 0.0, -1.0, -2.0]),
    );
    w.add(
        "tokenizer.ggml.token_type",
        Value::array(ValueType::I32, [2i32, 3, 3, 1, 1]),
    );
    w.add("tokenizer.ggml.bos_token_id", 1u32);
}

/// Arrays nested `depth` deep around one u8.
fn nested(depth: usize) -> Value {
    let mut v = Value::array(ValueType::U8, [1u8, 2]);
    for _ in 1..depth {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    v
}

/// The seeds, by file name.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = vec![
        ("sample_v3.gguf", sample_writer().to_bytes().unwrap()),
        (
            "sample_v2.gguf",
            sample_writer().version(2).to_bytes().unwrap(),
        ),
        ("empty_v3.gguf", GgufWriter::new().to_bytes().unwrap()),
        (
            "empty_v2_align1.gguf",
            GgufWriter::new()
                .version(2)
                .alignment(1)
                .unwrap()
                .to_bytes()
                .unwrap(),
        ),
    ];

    // Every tensor type Tessera knows, at alignments 32 (default), 8 and 64.
    for (file, version, align) in [
        ("all_types_v3.gguf", 3, 32),
        ("all_types_v2_align8.gguf", 2, 8),
        ("all_types_v3_align64.gguf", 3, 64),
    ] {
        let mut w = GgufWriter::new().version(version).alignment(align).unwrap();
        model_kvs(&mut w);
        for t in ALL_DTYPES {
            add_one(&mut w, t.name(), t);
        }
        out.push((file, w.to_bytes().unwrap()));
    }

    // Metadata only: nested arrays to the deepest accepted, every array
    // element type.
    let mut w = GgufWriter::new();
    w.add("nested.max", nested(tessera_gguf::MAX_ARRAY_DEPTH));
    w.add("nested.2", nested(2));
    w.add("arr.u8", Value::array(ValueType::U8, [0u8, 255]));
    w.add("arr.i8", Value::array(ValueType::I8, [-1i8, 1]));
    w.add("arr.u16", Value::array(ValueType::U16, [1u16]));
    w.add("arr.i16", Value::array(ValueType::I16, [-1i16]));
    w.add("arr.u32", Value::array(ValueType::U32, [7u32]));
    w.add("arr.f64", Value::array(ValueType::F64, [f64::NAN, 1.0]));
    w.add("arr.bool", Value::array(ValueType::Bool, [true, false]));
    w.add("arr.u64", Value::array(ValueType::U64, [u64::MAX]));
    w.add("arr.i64", Value::array(ValueType::I64, [i64::MIN]));
    w.add("arr.empty_str", Value::Array(ValueType::String, vec![]));
    w.add("str.escapes", "tab\there \"q\" \\ \u{1} é");
    w.add("f32.inf", f32::INFINITY);
    out.push(("metadata_only_v3.gguf", w.to_bytes().unwrap()));

    // Tensors the reader lists but cannot bind: an unknown type id, empty
    // and zero-sized dimensions, four dimensions.
    let mut w = GgufWriter::new().alignment(16).unwrap();
    w.add_tensor_raw("unknown", 1000, &[4], &[1, 2, 3, 4]);
    w.add_tensor("zero", DType::F32, &[0, 3], &[]).unwrap();
    w.add_tensor(
        "four_d",
        DType::F16,
        &[2, 1, 2, 1],
        &encode(DType::F16, &values(4, 9)),
    )
    .unwrap();
    w.add_tensor("i32", DType::I32, &[3], &pattern(12, 1))
        .unwrap();
    out.push(("odd_tensors_align16.gguf", w.to_bytes().unwrap()));

    out.push((
        "gguf_py.gguf",
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_py.gguf"),
        )
        .unwrap(),
    ));
    out
}

/// Regenerate `fuzz/seeds/` (`cargo test -p tessera-gguf --test fuzz_seeds
/// -- --ignored`).
#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generator"]
fn write_fuzz_seeds() {
    let dir = seeds_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Every committed seed is what the generator writes, and parses and binds.
#[test]
fn fuzz_seeds_parse() {
    let buft = tessera::HostBufferType::new("CPU", usize::MAX, None);
    for (name, bytes) in seeds() {
        let committed = std::fs::read(seeds_dir().join(name)).unwrap();
        assert!(
            committed == bytes,
            "fuzz/seeds/{name} is stale: regenerate it"
        );
        let f = GgufFile::from_bytes(bytes).unwrap();
        let bound = f.bind_all(buft.clone()).unwrap();
        for (_, t) in &bound.tensors {
            t.to_bytes().unwrap();
        }
    }
}
