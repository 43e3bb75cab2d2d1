//! The Gemma 3 vocabulary (262,144 SentencePiece tokens, user-defined
//! whitespace and HTML tokens, control tokens) against reference ids made by
//! llama.cpp's `llama-tokenize` (`tests/data/gemma3-tokenizer.txt`), with all
//! combinations of add_special / parse_special, and pieces back to text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests: failing loudly is the point

mod common;

use std::sync::OnceLock;

use tessera_gguf::GgufFile;
use tessera_llm::tokenizer::{Detokenizer, Vocab};

fn vocab() -> &'static Vocab {
    static V: OnceLock<Vocab> = OnceLock::new();
    V.get_or_init(|| {
        let file = GgufFile::open(common::gemma_gguf()).expect("open the Gemma GGUF");
        Vocab::from_gguf(&file).expect("Gemma vocabulary")
    })
}

/// `(text, add_special, parse_special, ids)`
fn cases() -> Vec<(String, bool, bool, Vec<u32>)> {
    common::reference_cases(include_str!("data/gemma3-tokenizer.txt"))
        .into_iter()
        .map(|c| (c.text, c.add_special, c.parse_special, c.ids))
        .collect()
}

#[test]
fn gemma3_matches_llama_tokenize() {
    let v = vocab();
    let cases = cases();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let mut failed = Vec::new();
    for (text, add, parse, want) in &cases {
        let got = v.tokenize(text, *add, *parse);
        if &got != want {
            failed.push(format!(
                "  {text:?} add_special={add} parse_special={parse}\n    want {want:?}\n    got  {got:?}"
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} differ:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

#[test]
fn gemma3_metadata() {
    let v = vocab();
    assert_eq!(v.n_tokens(), 262_144);
    assert_eq!(v.bos(), Some(2));
    assert_eq!(v.eos(), Some(1));
    assert!(v.add_bos());
    assert!(v.is_eog(1));
    let eot = v.text_to_token("<end_of_turn>").unwrap();
    assert!(v.is_eog(eot));
    assert!(!v.is_eog(2));
}

#[test]
fn gemma3_pieces_round_trip() {
    let v = vocab();
    for (text, _, _, _) in cases() {
        // without specials in the text, the pieces are the text
        let ids = v.tokenize(&text, false, false);
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| v.token_to_piece(id, false))
            .collect();
        assert_eq!(String::from_utf8_lossy(&bytes), text, "{ids:?}");
        let mut d = Detokenizer::new(v, false);
        let mut streamed: String = ids.iter().map(|&id| d.push(id)).collect();
        streamed.push_str(&d.finish());
        assert_eq!(streamed, text);
    }
    // a byte-fallback character comes out whole, once its last byte arrives
    let ids = v.tokenize("\u{10FFFD}", false, false);
    assert!(ids.len() > 1, "{ids:?}");
    let mut d = Detokenizer::new(v, false);
    for &id in &ids[..ids.len() - 1] {
        assert_eq!(d.push(id), "");
    }
    assert_eq!(d.push(ids[ids.len() - 1]), "\u{10FFFD}");
    assert_eq!(v.token_to_piece(2, true), b"<bos>");
    assert!(v.token_to_piece(2, false).is_empty());
}
