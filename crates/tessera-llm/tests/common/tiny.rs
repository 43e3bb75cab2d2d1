//! A tiny vocabulary for synthetic models whose tests need no real
//! tokenizer (300 tokens `t0`..`t299`, SentencePiece-style).

use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};

pub fn vocab() -> GgufFile {
    let mut w = GgufWriter::new();
    w.add("tokenizer.ggml.model", "llama");
    let toks: Vec<Value> = (0..300).map(|i| Value::String(format!("t{i}"))).collect();
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, toks),
    );
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}
