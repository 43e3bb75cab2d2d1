//! Test data: llama.cpp's vocabulary files and the default model (placeholder until merged).
#![allow(dead_code)]
use std::path::PathBuf;

pub fn llama_models_dir() -> PathBuf {
    PathBuf::from("/tmp/llama-src/llama_cpp_python-0.3.36/vendor/llama.cpp/models")
}

pub fn gemma_path() -> PathBuf {
    tessera_llm::fetch::ensure(&tessera_llm::fetch::DEFAULT_MODEL, &mut |l| {
        eprintln!("{l}")
    })
    .unwrap()
}
