//! Tokenizers built from a GGUF vocabulary (`tokenizer.ggml.*`), matching
//! llama.cpp id for id.
