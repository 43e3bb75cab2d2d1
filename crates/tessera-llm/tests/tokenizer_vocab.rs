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
