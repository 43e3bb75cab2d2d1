//! The tokenizer API on small hand-made vocabularies: validation errors that
//! name the key, no panic on hostile data, SPM merges and byte fallback,
//! special tokens, BPE merges, the streaming detokenizer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests: failing loudly is the point

use tessera::Error;
use tessera_gguf::{GgufFile, GgufWriter, Value, ValueType};
use tessera_llm::tokenizer::{Detokenizer, TokenAttr, Vocab};

/// A small SPM vocabulary: control tokens, bytes for `\n` and `!`, merges.
fn spm_tokens() -> Vec<(&'static str, f32, i32)> {
    vec![
        ("<unk>", 0.0, 2),
        ("<s>", 0.0, 3),
        ("</s>", 0.0, 3),
        ("<0x0A>", 0.0, 6),
        ("<0x21>", 0.0, 6),
        ("\u{2581}", -1.0, 1),
        ("h", -2.0, 1),
        ("e", -2.0, 1),
        ("l", -2.0, 1),
        ("o", -2.0, 1),
        ("\u{2581}h", -3.0, 1),
        ("ll", -1.5, 1),
        ("\u{2581}hell", -0.5, 1),
        ("\u{2581}hello", -0.1, 1),
        ("he", -4.0, 1),
        ("<tag>", 0.0, 4),
        ("\u{2581}he", -2.5, 1),
        ("\u{2581}hel", -2.6, 1),
    ]
}

/// Metadata as a list: `set` replaces a key (the writer refuses duplicates).
#[derive(Clone)]
struct Kvs(Vec<(String, Value)>);

impl Kvs {
    fn set(mut self, key: &str, v: impl Into<Value>) -> Kvs {
        self.0.retain(|(k, _)| k != key);
        self.0.push((key.to_string(), v.into()));
        self
    }
    fn writer(&self) -> GgufWriter {
        let mut w = GgufWriter::new();
        for (k, v) in &self.0 {
            w.add(k, v.clone());
        }
        w
    }
}

fn writer(tokens: &[(&str, f32, i32)]) -> Kvs {
    Kvs(Vec::new())
        .set("tokenizer.ggml.model", "llama")
        .set(
            "tokenizer.ggml.tokens",
            Value::array(ValueType::String, tokens.iter().map(|t| t.0)),
        )
        .set(
            "tokenizer.ggml.scores",
            Value::array(ValueType::F32, tokens.iter().map(|t| t.1)),
        )
        .set(
            "tokenizer.ggml.token_type",
            Value::array(ValueType::I32, tokens.iter().map(|t| t.2)),
        )
}

fn load(kvs: &Kvs) -> tessera::Result<Vocab> {
    Vocab::from_gguf(&GgufFile::from_bytes(kvs.writer().to_bytes().unwrap()).unwrap())
}

fn err_text(r: tessera::Result<Vocab>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn spm_merges_bytes_and_specials() {
    let v = load(&writer(&spm_tokens())).unwrap();
    assert_eq!((v.bos(), v.eos(), v.unk()), (Some(1), Some(2), Some(0)));
    assert!(v.add_bos() && !v.add_eos());
    assert_eq!(v.n_tokens(), 18);
    // " hello" merges by score down to one token; '!' and '\n' fall back to bytes
    assert_eq!(v.tokenize("hello", false, false), [13]);
    assert_eq!(v.tokenize("hello!\n", true, false), [1, 13, 4, 3]);
    // a character with no token and no byte token is dropped, not a panic
    assert_eq!(v.tokenize("h\u{e9}", false, false), [10]);
    // control tokens in the text only with parse_special; user-defined always
    assert_eq!(v.tokenize("<s>", false, true), [1]);
    assert_ne!(v.tokenize("<s>", false, false), [1]);
    assert_eq!(v.tokenize("hello<tag>hello", false, false), [13, 15, 13]);
    assert!(v.token_attr(15).any(TokenAttr::USER_DEFINED));
    assert_eq!(v.token_to_piece(13, false), b" hello");
    assert_eq!(v.token_to_piece(3, false), b"\n");
    assert_eq!(v.token_to_piece(1, false), b"");
    assert_eq!(v.token_to_piece(1, true), b"<s>");
    assert_eq!(v.token_to_piece(999, true), b"");
    assert!(v.is_eog(2) && !v.is_eog(1));
    assert!(v.tokenize("", true, false) == [1]);
}

#[test]
fn validation_names_the_key() {
    let toks = spm_tokens();
    let w = Kvs(Vec::new()).set("tokenizer.ggml.model", "llama");
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.tokens"), "{e}");

    let w = writer(&toks).set(
        "tokenizer.ggml.scores",
        Value::array(ValueType::F32, [0.0f32; 3]),
    );
    let e = err_text(load(&w));
    assert!(
        e.contains("tokenizer.ggml.scores") && e.contains("3 entries"),
        "{e}"
    );

    let w = writer(&toks).set(
        "tokenizer.ggml.scores",
        Value::array(ValueType::String, toks.iter().map(|t| t.0)),
    );
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.scores"), "{e}");

    let w = writer(&toks).set(
        "tokenizer.ggml.token_type",
        Value::array(ValueType::F32, toks.iter().map(|t| t.1)),
    );
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.token_type"), "{e}");

    let w = writer(&toks).set(
        "tokenizer.ggml.tokens",
        Value::array(ValueType::U32, [1u32, 2]),
    );
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.tokens"), "{e}");

    let w = writer(&toks).set("tokenizer.ggml.bos_token_id", 18u32);
    let e = err_text(load(&w));
    assert!(
        e.contains("tokenizer.ggml.bos_token_id") && e.contains("out of range"),
        "{e}"
    );

    // padding (and separator, mask, FIM) out of range: dropped, as llama.cpp
    let w = writer(&toks).set("tokenizer.ggml.padding_token_id", 18u32);
    assert!(load(&w).is_ok());

    let w = writer(&toks).set("tokenizer.ggml.eos_token_id", "two");
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.eos_token_id"), "{e}");

    let w = writer(&toks).set("tokenizer.ggml.add_bos_token", 1u32);
    let e = err_text(load(&w));
    assert!(e.contains("tokenizer.ggml.add_bos_token"), "{e}");

    let w = writer(&toks).set("tokenizer.ggml.model", "t5");
    let e = err_text(load(&w));
    assert!(
        e.contains("tokenizer.ggml.model") && e.contains("t5"),
        "{e}"
    );

    let mut dup = toks.clone();
    dup.push(("h", 0.0, 1));
    let e = err_text(load(&writer(&dup)));
    assert!(e.contains("twice"), "{e}");

    let e = err_text(load(&writer(&[])));
    assert!(e.contains("tokenizer.ggml.tokens"), "{e}");

    let w = writer(&toks)
        .set("tokenizer.ggml.model", "gpt2")
        .set("tokenizer.ggml.pre", "gpt-2");
    assert!(matches!(load(&w), Err(Error::NotFound(k)) if k.contains("tokenizer.ggml.merges")));
    let w = w.set("tokenizer.ggml.pre", "no-such-pre").set(
        "tokenizer.ggml.merges",
        Value::array(ValueType::String, ["h e"]),
    );
    let e = err_text(load(&w));
    assert!(e.contains("no-such-pre"), "{e}");
}

#[test]
fn hostile_values_do_not_panic() {
    // NaN scores, odd types, byte tokens with bad text, empty texts
    let toks = vec![
        ("", f32::NAN, 1),
        ("a", f32::NAN, 1),
        ("aa", f32::NAN, 1),
        ("aaa", f32::INFINITY, 1),
        ("<0x", 0.0, 6),
        ("<0xZZ>", 0.0, 6),
        ("b", 0.0, 99),
        ("<x>", 0.0, 3),
    ];
    let v = load(&writer(&toks)).unwrap();
    assert_eq!(v.token_text(0), Some("[EMPTY_0]"));
    // the default BOS/EOS ids 1 and 2 are in range here (they are "a", "aa")
    let _ = v.tokenize("aaaaaaa b <x> \u{1F600}", true, true);
    for id in 0..10 {
        let _ = v.token_to_piece(id, true);
    }
    assert_eq!(v.token_to_piece(4, true), [0]);
    assert_eq!(v.token_to_piece(6, true), b""); // undefined type: no text
}

fn bpe_writer() -> Kvs {
    let toks = [
        "h", "e", "l", "o", "Ġ", "he", "ll", "hell", "hello", "Ġhello", "!", "<|end|>",
    ];
    let mut types = vec![1i32; toks.len()];
    types[11] = 3;
    Kvs(Vec::new())
        .set("tokenizer.ggml.model", "gpt2")
        .set("tokenizer.ggml.pre", "llama-bpe")
        .set(
            "tokenizer.ggml.tokens",
            Value::array(ValueType::String, toks),
        )
        .set(
            "tokenizer.ggml.token_type",
            Value::array(ValueType::I32, types),
        )
        .set(
            "tokenizer.ggml.merges",
            Value::array(
                ValueType::String,
                ["h e", "l l", "he ll", "hell o", "Ġ hello"],
            ),
        )
        .set("tokenizer.ggml.bos_token_id", 10u32)
        .set("tokenizer.ggml.eos_token_id", 11u32)
}

#[test]
fn bpe_ranks_and_flags() {
    let v = load(&bpe_writer()).unwrap();
    // llama-bpe: BOS added by default; "<|end|>" is end-of-generation
    assert!(v.add_bos());
    assert_eq!(v.tokenize("hello hello!", true, false), [10, 8, 9, 10]);
    assert_eq!(v.tokenize("hello<|end|>", false, true), [8, 11]);
    assert!(v.is_eog(11));
    assert_eq!(v.token_to_piece(9, false), b" hello");
}

#[test]
fn detokenizer_holds_back_partial_utf8() {
    let v = load(&writer(&spm_tokens())).unwrap();
    let mut d = Detokenizer::new(&v, false);
    assert_eq!(d.push_bytes(&[0xF0, 0x9F]), "");
    assert_eq!(d.pending(), [0xF0, 0x9F]);
    assert_eq!(d.push_bytes(&[0x98, 0x80, b'x']), "\u{1F600}x");
    // an invalid byte comes out as U+FFFD at once, the rest goes on
    assert_eq!(d.push_bytes(&[0xFF, b'y', 0xE2]), "\u{FFFD}y");
    assert_eq!(d.finish(), "\u{FFFD}");
    assert_eq!(d.push(13), " hello");
    assert_eq!(d.push(1), "");
    let mut d = Detokenizer::new(&v, true);
    assert_eq!(d.push(1), "<s>");
}

#[test]
fn detokenize_like_llama() {
    let v = load(&writer(&spm_tokens())).unwrap();
    // the prefixed space goes, unless a BOS was removed before it
    assert_eq!(v.detokenize(&[13, 13], false, false), b"hello hello");
    assert_eq!(v.detokenize(&[1, 13, 2], true, false), b" hello");
    assert_eq!(v.detokenize(&[1, 13, 2], false, true), b"<s> hello</s>");
    // BPE with clean_spaces: " !" loses its space
    let toks = ["Ġ", "!", "a", "'", "s", "Ġ'"];
    let w = Kvs(Vec::new())
        .set("tokenizer.ggml.model", "gpt2")
        .set("tokenizer.ggml.pre", "gpt-2")
        .set(
            "tokenizer.ggml.tokens",
            Value::array(ValueType::String, toks),
        )
        .set(
            "tokenizer.ggml.merges",
            Value::array(ValueType::String, ["Ġ '"]),
        );
    let v = load(&w).unwrap();
    assert_eq!(v.detokenize(&[2, 0, 1], false, false), b"a!");
    assert_eq!(v.detokenize(&[2, 5, 4], false, false), b"a's");
    assert_eq!(v.detokenize(&[2, 5, 0, 2], false, false), b"a'a");
}

/// Random hostile vocabularies (odd texts, types, scores, merges) and random
/// text: loading may fail with an error, nothing may panic.
#[test]
fn random_vocabularies_do_not_panic() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u32| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(n.max(1))) as u32
    };
    const ALPHABET: &[&str] = &[
        "a", "b", " ", "▁", "\n", "é", "Ġ", "<", ">", "<0x41>", "<0xZ", "'", "s", "1", "😀",
        "\u{300}", "<s>",
    ];
    let mut loaded = 0;
    for round in 0..300 {
        let n = 1 + next(40) as usize;
        let mut texts: Vec<String> = Vec::new();
        while texts.len() < n {
            let len = 1 + next(4);
            let t: String = (0..len)
                .map(|_| ALPHABET[next(ALPHABET.len() as u32) as usize])
                .collect();
            if !texts.contains(&t) {
                texts.push(t);
            }
        }
        let scores: Vec<f32> = (0..n)
            .map(|_| [f32::NAN, f32::INFINITY, -1.0, 0.0, -0.0, 2.5][next(6) as usize])
            .collect();
        let types: Vec<i32> = (0..n).map(|_| next(9) as i32 - 1).collect();
        let merges: Vec<String> = (0..next(30))
            .map(|_| {
                let a = &texts[next(n as u32) as usize];
                let b = &texts[next(n as u32) as usize];
                match next(4) {
                    0 => a.clone(),
                    1 => format!(" {a}"),
                    _ => format!("{a} {b}"),
                }
            })
            .collect();
        let (model, pre) = [
            ("llama", "default"),
            ("gpt2", "gpt-2"),
            ("gpt2", "llama-bpe"),
            ("gpt2", "qwen35"),
            ("gpt2", "default"),
            ("gpt2", "deepseek-llm"),
            ("gemma4", ""),
            ("bert", ""),
        ][round % 8];
        let mut kvs = Kvs(Vec::new())
            .set("tokenizer.ggml.model", model)
            .set("tokenizer.ggml.pre", pre)
            .set(
                "tokenizer.ggml.tokens",
                Value::array(ValueType::String, texts.iter().map(String::as_str)),
            )
            .set(
                "tokenizer.ggml.scores",
                Value::array(ValueType::F32, scores),
            )
            .set(
                "tokenizer.ggml.token_type",
                Value::array(ValueType::I32, types),
            )
            .set(
                "tokenizer.ggml.merges",
                Value::array(ValueType::String, merges.iter().map(String::as_str)),
            );
        if next(2) == 0 {
            kvs = kvs.set("tokenizer.ggml.bos_token_id", next(n as u32 + 2));
        }
        let Ok(v) = load(&kvs) else {
            continue;
        };
        loaded += 1;
        for _ in 0..10 {
            let len = next(12);
            let text: String = (0..len)
                .map(|_| ALPHABET[next(ALPHABET.len() as u32) as usize])
                .collect();
            for (add, parse) in [(false, false), (true, true)] {
                let ids = v.tokenize(&text, add, parse);
                assert!(ids.iter().all(|&id| (id as usize) < v.n_tokens()));
                let _ = v.detokenize(&ids, add, parse);
                let mut d = Detokenizer::new(&v, parse);
                for &id in &ids {
                    let _ = d.push(id);
                }
                let _ = d.finish();
            }
        }
        for id in 0..n as u32 + 2 {
            let _ = v.token_to_piece(id, true);
            let _ = v.is_eog(id);
        }
    }
    assert!(loaded > 100, "only {loaded} random vocabularies loaded");
}
