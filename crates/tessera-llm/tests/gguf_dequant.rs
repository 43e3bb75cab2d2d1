//! GGUF files written by llama.cpp (the default model, Gemma 3 270M
//! Q4_K_M: F32, Q8_0, Q4_K, Q6_K and Q5_0 tensors; small files of
//! llama-quantize in Q4_1, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS),
//! memory-mapped and bound zero-copy on the CPU: every tensor dequantizes
//! to exactly what gguf-py's `gguf.quants.dequantize` gives (digests of the
//! f32 bit patterns made by `scripts/gguf-dequant-check/make-ref.py`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use tessera::{BufferType, Registry};
use tessera_gguf::GgufFile;

/// The digest of `make-ref.py`.
fn digest(values: &[f32]) -> u64 {
    const OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    let mut acc = 0u64;
    for (i, v) in values.iter().enumerate() {
        let w = u64::from(v.to_bits());
        acc ^= (w ^ (i as u64).wrapping_mul(PRIME)).wrapping_mul(PRIME);
    }
    acc ^ OFFSET
}

/// Check every tensor of `file` (bound zero-copy on the CPU) against the
/// digests of `refs`; returns the types seen.
fn check_file(file: &GgufFile, refs: &str) -> Vec<String> {
    tessera_cpu::register();
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let bound = file.bind_all(buft).unwrap();
    // Zero copy: the data buffer is the file's data section.
    assert_eq!(bound.buffer.size(), file.bytes().len() - file.data_offset());
    let mut n = 0;
    let mut types = Vec::new();
    for line in refs.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (name, ty, count, want) = (f[0], f[1], f[2], f[3]);
        let t = bound
            .get(name)
            .unwrap_or_else(|| panic!("tensor {name} not bound"));
        assert!(
            t.dtype().name().eq_ignore_ascii_case(ty),
            "{name}: {} vs {ty}",
            t.dtype()
        );
        let v = t.read_f32().unwrap();
        assert_eq!(v.len().to_string(), count, "{name}");
        assert_eq!(
            format!("{:016x}", digest(&v)),
            want,
            "{name} ({ty}): dequantized values differ from gguf-py's"
        );
        if !types.iter().any(|x| x == ty) {
            types.push(ty.to_string());
        }
        n += 1;
    }
    assert_eq!(n, file.tensors().len(), "every tensor of the file");
    types
}

#[test]
fn every_tensor_dequantizes_as_gguf_py_does() {
    let path = common::gemma_gguf();
    // SAFETY: the test's cached model file is not modified while mapped.
    let file = unsafe { GgufFile::open_mapped(&path) }.unwrap();
    check_file(&file, include_str!("data/gemma3-270m-tensors.ref"));
}

/// Files written by llama.cpp's `llama-quantize` in the other weight types
/// (`tests/data/quant-files`, made by
/// `scripts/gguf-dequant-check/make-quant-files.sh`): each loads zero-copy
/// and every tensor dequantizes as gguf-py's does.
#[test]
fn llama_cpp_files_of_every_type_dequantize_as_gguf_py_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant-files");
    let mut seen: Vec<String> = Vec::new();
    for ty in ["q4_1", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs"] {
        // SAFETY: the committed test file is not modified while mapped.
        let file = unsafe { GgufFile::open_mapped(dir.join(format!("{ty}.gguf"))) }.unwrap();
        let refs = std::fs::read_to_string(dir.join(format!("{ty}.ref"))).unwrap();
        let types = check_file(&file, &refs);
        assert!(
            types.iter().any(|t| t.eq_ignore_ascii_case(ty)),
            "{ty}.gguf holds no {ty} tensor: {types:?}"
        );
        seen.extend(types);
    }
    for ty in [
        "Q4_1", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
    ] {
        assert!(seen.iter().any(|t| t == ty), "no {ty} tensor checked");
    }
}
