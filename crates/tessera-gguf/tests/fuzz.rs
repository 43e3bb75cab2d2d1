//! Random corruption never panics the reader: flipped bytes, overwritten
//! words and truncations of a valid file return `Ok` or `Err` (bounded,
//! fixed-seed proptest).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use tessera::Device;
use tessera_gguf::GgufFile;

fn config() -> Config {
    Config {
        cases: 2000,
        rng_seed: RngSeed::Fixed(0x6767_7566),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Parse and, when it parses, touch everything a user could.
fn exercise(bytes: Vec<u8>) {
    if let Ok(f) = GgufFile::from_bytes(bytes) {
        for (k, _) in f.metadata() {
            let _ = f.get::<u32>(k);
            let _ = f.get::<Vec<String>>(k);
        }
        let buffer = f.data_buffer(tessera_cpu::device().buffer_type());
        for t in f.tensors() {
            let _ = f.tensor_data(&t.name);
            if let Ok(x) = f.tensor_in(&buffer, &t.name) {
                let _ = x.to_bytes();
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn flipped_bytes_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut b = sample_writer().to_bytes().unwrap();
        for (i, v) in edits {
            let at = i.index(b.len());
            b[at] ^= v | 1;
        }
        exercise(b);
    }

    #[test]
    fn overwritten_words_never_panic(at in any::<prop::sample::Index>(), word in prop_oneof![Just(0u64), Just(u64::MAX), Just(1 << 63), any::<u64>(), 0u64..64]) {
        let mut b = sample_writer().to_bytes().unwrap();
        let at = at.index(b.len() - 8);
        b[at..at + 8].copy_from_slice(&word.to_le_bytes());
        exercise(b);
    }

    #[test]
    fn truncated_and_flipped_never_panics(len in any::<prop::sample::Index>(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut b = sample_writer().to_bytes().unwrap();
        let n = len.index(b.len() + 1);
        b.truncate(n);
        if !b.is_empty() {
            let at = at.index(b.len());
            b[at] = v;
        }
        exercise(b);
    }
}
