//! llama.cpp's tokenizer test vectors (`models/ggml-vocab-*.gguf.inp/.out`,
//! tokenized with add_special = false, parse_special = false, as its
//! `test-tokenizer-0` does) must come out id for id.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests: failing loudly is the point

mod common;

use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::Vocab;

fn check(name: &str) {
    let models = common::llama_models_dir();
    let file = GgufFile::open(models.join(format!("ggml-vocab-{name}.gguf")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let vocab = Vocab::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
    let vectors = common::read_vectors(&models, name);
    let mut failed = Vec::new();
    for (text, want) in &vectors {
        let got = vocab.tokenize(text, false, false);
        if &got != want {
            failed.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{name}: {} of {} vectors differ:\n{}",
        failed.len(),
        vectors.len(),
        failed.join("\n")
    );
}

#[test]
fn llama_spm() {
    check("llama-spm");
}

#[test]
fn gpt_2() {
    check("gpt-2");
}

#[test]
fn llama_bpe() {
    check("llama-bpe");
}

#[test]
fn qwen2() {
    check("qwen2");
}

#[test]
fn qwen35() {
    check("qwen35");
}

#[test]
fn command_r() {
    check("command-r");
}

#[test]
fn falcon() {
    check("falcon");
}

#[test]
fn mpt() {
    check("mpt");
}

#[test]
fn phi_3() {
    check("phi-3");
}

#[test]
fn refact() {
    check("refact");
}

#[test]
fn starcoder() {
    check("starcoder");
}

#[test]
fn gemma_4() {
    check("gemma-4");
}

#[test]
fn deepseek_coder() {
    check("deepseek-coder");
}

#[test]
fn deepseek_llm() {
    check("deepseek-llm");
}

/// Random text from a mix of scripts, spaces, digits, punctuation and emoji.
fn random_texts(seed: u64, n: usize) -> Vec<String> {
    const POOLS: &[(u32, u32)] = &[
        (0x20, 0x7E),
        (0x09, 0x0D),
        (0xA0, 0x17F),
        (0x300, 0x36F),
        (0x391, 0x3C9),
        (0x400, 0x44F),
        (0x4E00, 0x4FFF),
        (0x3040, 0x30FF),
        (0xAC00, 0xACFF),
        (0x1780, 0x17FF),
        (0x2000, 0x206F),
        (0x1F300, 0x1F64F),
        (0xE000, 0xE010),
    ];
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    (0..n)
        .map(|_| {
            let len = next() % 40;
            (0..len)
                .filter_map(|_| {
                    let (a, b) = POOLS[(next() as usize) % POOLS.len()];
                    char::from_u32(a + next() % (b - a + 1))
                })
                .collect()
        })
        .collect()
}

/// Random text goes through tokenize and back to the same bytes.
#[test]
fn random_text_round_trips() {
    let models = common::llama_models_dir();
    for name in [
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "qwen35",
        "llama-spm",
        "deepseek-llm",
        "gemma-4",
    ] {
        let file = GgufFile::open(models.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let v = Vocab::from_gguf(&file).unwrap();
        for text in random_texts(name.len() as u64, 300) {
            let ids = v.tokenize(&text, false, false);
            let mut bytes: Vec<u8> = ids
                .iter()
                .flat_map(|&id| v.token_to_piece(id, false))
                .collect();
            if name == "llama-spm" && !text.is_empty() {
                // the space SentencePiece prefixes
                assert_eq!(bytes.first(), Some(&b' '), "{name}: {text:?}");
                bytes.remove(0);
            }
            assert_eq!(String::from_utf8_lossy(&bytes), text, "{name}: {ids:?}");
        }
    }
}

#[test]
fn bert_bge() {
    check("bert-bge");
}

/// Every vocabulary file of llama.cpp's models/ loads, or is refused as
/// unsupported (never malformed).
#[test]
fn all_vocab_files_load() {
    let models = common::llama_models_dir();
    let mut names: Vec<_> = std::fs::read_dir(&models)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("ggml-vocab-") && n.ends_with(".gguf"))
        .collect();
    names.sort();
    assert!(names.len() >= 19, "{names:?}");
    let mut report = Vec::new();
    for name in &names {
        let file = GgufFile::open(models.join(name)).unwrap();
        match Vocab::from_gguf(&file) {
            Ok(v) => report.push(format!("{name}: {} tokens", v.n_tokens())),
            Err(e @ tessera::Error::Unsupported { .. }) => report.push(format!("{name}: {e}")),
            Err(e) => panic!("{name}: {e}"),
        }
    }
    eprintln!("{}", report.join("\n"));
}
