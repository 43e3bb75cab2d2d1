//! A GGUF file written by llama.cpp (the default model, Gemma 3 270M
//! Q4_K_M: F32, Q8_0, Q4_K, Q6_K and Q5_0 tensors), memory-mapped and bound
//! zero-copy on the CPU: every tensor dequantizes to exactly what gguf-py's
//! `gguf.quants.dequantize` gives (digests of the f32 bit patterns made by
//! `scripts/gguf-dequant-check/make-ref.py`).

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

#[test]
fn every_tensor_dequantizes_as_gguf_py_does() {
    let path = common::gemma_gguf();
    // SAFETY: the test's cached model file is not modified while mapped.
    let file = unsafe { GgufFile::open_mapped(&path) }.unwrap();
    tessera_cpu::register();
    let cpu = Registry::global().device_by_name("cpu").unwrap();
    let buft: Arc<dyn BufferType> = cpu.buffer_type();
    let bound = file.bind_all(buft).unwrap();
    // Zero copy: the data buffer is the mapped file's data section.
    assert_eq!(bound.buffer.size(), file.bytes().len() - file.data_offset());
    let refs = include_str!("data/gemma3-270m-tensors.ref");
    let mut n = 0;
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
        n += 1;
    }
    assert_eq!(n, file.tensors().len(), "every tensor of the file");
}
